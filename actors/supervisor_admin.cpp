// The supervisor's answers to operators: one handler per admin request type (messages.hpp), each
// checking the request against the job as it is now. A read-only token is refused every request
// that changes the job, in one place (answer()).

#include <signal.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <set>
#include <sstream>

#include "actors/node_check.hpp"
#include "actors/supervisor_actor.hpp"
#include "common/text.hpp"
#include "common/utc.hpp"

namespace rekindle::actors {

using namespace policy;

namespace {

using json = nlohmann::json;

// "2026-11-30T14:04:31.123Z".
std::string utc_text(clock::wall_time t) {
  return rekindle::utc_text(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

// "2.5" for a factor of 2.5, "2" for 2.
std::string factor_text(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", f);
  return buf;
}

}  // namespace

template <class... Requests>
caf::message_handler supervisor_actor::admin_handlers(type_list<Requests...>) {
  return caf::message_handler{[this](const envelope& from, const Requests& r) {
    const bool read_only = from.role != static_cast<std::uint8_t>(transport::peer_role::admin);
    admin_reply reply;
    if (Requests::changes_job && read_only) {
      reply = refused(errc::permission_denied,
                      "'" + std::string{Requests::command} + "' changes the job; this token is read-only");
    } else if constexpr (std::is_same_v<Requests, admin_check>) {
      auto now = start_check(from, r);
      if (!now)
        return;  // answered when the nodes have reported
      reply = std::move(*now);
    } else {
      reply = on_admin(r);
    }
    reply.id = r.id;
    ctx_->bridge->send(from.peer, "supervisor", from.actor, reply);
  }...};
}

admin_reply supervisor_actor::answered(std::string text, std::string json_text) {
  return admin_reply{0, true, errc::internal, std::move(text), std::move(json_text)};
}

admin_reply supervisor_actor::refused(errc code, std::string why) {
  return admin_reply{0, false, code, std::move(why), {}};
}

caf::message_handler supervisor_actor::admin_behavior() { return admin_handlers(admin_requests{}); }

expected<rank_slot> supervisor_actor::placed_rank(rank_id rank) const {
  const auto& placement = policy_.placement();
  const auto it = std::find_if(placement.begin(), placement.end(), [&](const rank_slot& s) { return s.rank == rank; });
  if (it == placement.end())
    return status{errc::invalid_argument,
                  "rank " + std::to_string(rank.value()) + " is not in the job (world " +
                      std::to_string(policy_.world()) + ": ranks 0-" +
                      std::to_string(policy_.world() == 0 ? 0 : policy_.world() - 1) + ")"};
  return *it;
}

expected<node_id> supervisor_actor::node_named(const std::string& name) const {
  if (const auto n = ctx_->spec.find_node(name))
    return *n;
  std::vector<std::string> names;
  for (const auto& node : ctx_->spec.nodes)
    names.push_back(node.name);
  return status{errc::invalid_argument, "no node '" + name + "'" + did_you_mean(name, names)};
}

status supervisor_actor::training_now() const {
  if (finished_ || policy_.state() != job_state::running)
    return status{errc::failed_precondition,
                  std::string{"the job is "} + std::string{to_string(policy_.state())} + ", not training"};
  return {};
}

admin_reply supervisor_actor::on_admin(const admin_status& r) { return answered("", status_json(r.full)); }

admin_reply supervisor_actor::on_admin(const admin_loss& r) {
  if (r.points == 0 || r.points > 100000)
    return refused(errc::invalid_argument,
                   "loss: the curve takes 1 to 100000 points, not " + std::to_string(r.points));
  return answered("", loss_json(r.points));
}

std::string supervisor_actor::loss_json(std::size_t points) const {
  // Buckets of consecutive steps, each with its mean, lowest and highest loss; the steps where a
  // failure struck, so a chart can mark them.
  const std::size_t steps = std::min<std::size_t>(losses_.size(), max_step_);
  const std::size_t per = std::max<std::size_t>(1, (steps + points - 1) / points);
  json out{{"steps", steps}, {"steps_per_point", per}, {"points", json::array()}, {"failures", json::array()}};
  for (std::size_t begin = 0; begin < steps; begin += per) {
    const std::size_t end = std::min(steps, begin + per);
    double sum = 0, lo = losses_[begin], hi = losses_[begin];
    for (std::size_t i = begin; i < end; ++i) {
      sum += losses_[i];
      lo = std::min(lo, losses_[i]);
      hi = std::max(hi, losses_[i]);
    }
    out["points"].push_back({{"step", end}, {"loss", sum / static_cast<double>(end - begin)}, {"min", lo}, {"max", hi}});
  }
  for (const auto& rec : recoveries_.records())
    out["failures"].push_back({{"step", rec.failed_at_step}, {"cause", rec.cause}});
  return out.dump();
}

admin_reply supervisor_actor::on_admin(const admin_events& r) {
  // Written is enough to be read: the log's sync (seconds on a busy disk) would hold up the
  // supervisor's actor, and with it every heartbeat and request.
  (void)store_->flush_events_readable();
  auto events = store_->events_after(r.after, 1000);
  if (!events)
    return refused(events.error().code(), "the event log cannot be read: " + events.error().message());
  json out = json::array();
  for (const auto& e : *events) {
    json ej{{"seq", e.seq},
            {"time", utc_text(e.wall)},
            {"unix_s",
             static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(e.wall.time_since_epoch()).count()) /
                 1000.0},
            {"kind", e.kind},
            {"epoch", e.epoch.value()}};
    if (e.rank)
      ej["rank"] = e.rank->value();
    if (e.node && e.node->value() < ctx_->spec.nodes.size())
      ej["node"] = ctx_->spec.nodes[e.node->value()].name;
    for (const auto& [k, v] : e.fields) {
      if (k == "detail")
        ej["detail"] = v;
      else
        ej["fields"][k] = v;
    }
    out.push_back(std::move(ej));
  }
  return answered("", out.dump());
}

admin_reply supervisor_actor::on_admin(const admin_kill& r) {
  const auto slot = placed_rank(r.rank);
  if (!slot)
    return refused(slot.error());
  if (r.signal < 1 || r.signal > 64)
    return refused(errc::invalid_argument, "kill: " + std::to_string(r.signal) + " is not a signal number (1-64)");
  const auto rank = std::to_string(slot->rank.value());
  const auto sig = std::to_string(r.signal);
  injected_ranks_[slot->rank.value()] = now_ns(*ctx_->time);
  event("fault_injected", "kill rank " + rank + " with signal " + sig, slot->rank, slot->node,
        {{"fault", "kill"}, {"signal", sig}});
  to_agent(slot->node, kill_request{policy_.epoch(), slot->rank, r.signal, "operator"});
  return answered("rank " + rank + " sent signal " + sig);
}

admin_reply supervisor_actor::on_admin(const admin_drill& r) {
  if (r.kind != drill_kind::hang && r.kind != drill_kind::slow)
    return refused(errc::invalid_argument, "drill: only hang and slow are operators' drills, not " +
                                               std::string{to_string(r.kind)});
  if (ctx_->spec.job.external())
    return refused(errc::failed_precondition, std::string{to_string(r.kind)} +
                                                  " drills need the rekindle worker; this job runs job.command");
  const bool hang = r.kind == drill_kind::hang;
  const auto slot = placed_rank(r.rank);
  if (!slot)
    return refused(slot.error());
  if (!hang && !(r.factor >= 1.0 && r.factor <= 100.0))
    return refused(errc::invalid_argument,
                   "slow: FACTOR is a number from 1 (back to normal) to 100, not " + factor_text(r.factor));
  if (auto st = training_now(); !st.ok())
    return refused(st);
  const auto rank = std::to_string(slot->rank.value());
  const auto factor = factor_text(r.factor);
  const std::string what = hang              ? "hang rank " + rank
                           : r.factor == 1.0 ? "rank " + rank + " back to its normal speed"
                                             : "slow rank " + rank + " by " + factor + "x";
  if (hang)
    injected_ranks_[slot->rank.value()] = now_ns(*ctx_->time);
  event("fault_injected", what, slot->rank, slot->node,
        hang ? std::vector<std::pair<std::string, std::string>>{{"fault", "hang"}}
             : std::vector<std::pair<std::string, std::string>>{{"fault", "slow"}, {"factor", factor}});
  to_agent(slot->node, drill_request{policy_.epoch(), slot->rank, r.kind, hang ? 1.0 : r.factor});
  return answered(hang              ? "rank " + rank + " hangs before its next step; its peers wait in their collectives "
                                                   "until it is found"
              : r.factor == 1.0 ? "rank " + rank + " steps at its normal speed again"
                                : "the compute of rank " + rank + " now takes " + factor +
                                      " times as long (its collectives do not)");
}

admin_reply supervisor_actor::on_admin(const admin_fail_node& r) {
  const auto n = node_named(r.node);
  if (!n)
    return refused(n.error());
  if (!agents_.contains(*n))
    return refused(errc::failed_precondition, "node " + r.node + " is not up");
  injected_nodes_[n->value()] = now_ns(*ctx_->time);
  event("fault_injected", "fail node " + r.node, {}, *n, {{"fault", "node_down"}});
  to_agent(*n, fail_node{"operator drill"});
  return answered("node " + r.node + " fails now");
}

admin_reply supervisor_actor::on_admin(const admin_partition& r) {
  const auto a = node_named(r.node1);
  if (!a)
    return refused(a.error());
  const auto b = node_named(r.node2);
  if (!b)
    return refused(b.error());
  const bool slow = r.mbps != 0;
  const std::string what = slow ? "throttle" : "partition";
  if (*a == *b)
    return refused(errc::invalid_argument, what + ": a node has no link to itself ('" + r.node1 + "' twice)");
  const std::chrono::nanoseconds d{r.duration_ns};
  if (d < std::chrono::milliseconds{100} || d > std::chrono::hours{1})
    return refused(errc::invalid_argument, what + ": --for takes a duration from 100ms to 1h, not " + format_duration(d));
  if (slow && !(r.mbps >= 0.01 && r.mbps <= 100000))
    return refused(errc::invalid_argument, "throttle: --rate takes MB/s from 0.01 to 100000, not " + factor_text(r.mbps));
  for (const auto n : {*a, *b})
    if (!agents_.contains(n))
      return refused(errc::failed_precondition, "node " + ctx_->spec.nodes[n.value()].name + " is not up");
  if (slow) {
    event("fault_injected", "slow link " + r.node1 + " " + r.node2 + " at " + factor_text(r.mbps) + " MB/s for " + format_duration(d),
          {}, *a,
          {{"fault", "slow_link"},
           {"link", r.node1 + "," + r.node2},
           {"mbps", factor_text(r.mbps)},
           {"duration_s", std::to_string(std::chrono::duration<double>(d).count())}});
    to_agent(*a, partition_request{*b, d.count(), r.mbps * 1e6});
    to_agent(*b, partition_request{*a, d.count(), r.mbps * 1e6});
    return answered("traffic between the daemons of " + r.node1 + " and " + r.node2 + " is limited to " +
                    factor_text(r.mbps) + " MB/s each way for " + format_duration(d) +
                    " (replication, state transfers, link probes; the ranks' ring is not slowed)");
  }
  // Cut off from the supervisor's node, the other node is lost to the job: timed from now.
  const node_id far = *a == ctx_->node ? *b : *a;
  if (*a == ctx_->node || *b == ctx_->node)
    injected_nodes_[far.value()] = now_ns(*ctx_->time);
  event("fault_injected", "partition " + r.node1 + " " + r.node2 + " for " + format_duration(d), {}, far,
        {{"fault", "partition"},
         {"link", r.node1 + "," + r.node2},
         {"duration_s", std::to_string(std::chrono::duration<double>(d).count())}});
  // The far end first: once the near end cuts, nothing reaches the far one.
  to_agent(*b, partition_request{*a, d.count()});
  to_agent(*a, partition_request{*b, d.count()});
  return answered("traffic between " + r.node1 + " and " + r.node2 + " is dropped for " + format_duration(d) +
              " (control plane: heartbeats, replication, state transfers)");
}

admin_reply supervisor_actor::on_admin(const admin_pause& r) {
  if (finished_)
    return refused(errc::failed_precondition, "the job has ended (" + final_state_ + ")");
  if (r.pause && policy_.state() == job_state::paused)
    return answered("already paused");
  if (!r.pause && policy_.state() != job_state::paused)
    return refused(errc::failed_precondition,
                   std::string{"the job is "} + std::string{to_string(policy_.state())} + ", not paused");
  execute(r.pause ? policy_.pause() : policy_.resume());
  return answered(r.pause ? "paused at step " + std::to_string(max_step_) + " (the ranks wait; resume to go on)"
                      : "resumed in epoch " + std::to_string(policy_.epoch().value()));
}

admin_reply supervisor_actor::on_admin(const admin_drain& r) {
  const auto n = node_named(r.node);
  if (!n)
    return refused(n.error());
  if (*n == ctx_->node)
    return refused(errc::failed_precondition, "node " + r.node + " hosts the supervisor and cannot be drained");
  const auto world = policy_.world();
  execute(policy_.drain(*n));
  return answered("node " + r.node + " drained; world " + std::to_string(world) + " → " +
              std::to_string(policy_.world()) + " ranks");
}

admin_reply supervisor_actor::on_admin(const admin_scale& r) {
  if (r.ranks == 0 || r.ranks > 1000000)
    return refused(errc::invalid_argument,
                   "scale: RANKS is a whole number of ranks from 1 to 1000000, not " + std::to_string(r.ranks));
  if (r.ranks == policy_.world())
    return answered("the world already has " + std::to_string(r.ranks) + " ranks");
  const auto before = policy_.world();
  auto actions = policy_.scale(r.ranks);
  for (const auto& action : actions)
    if (const auto* note = std::get_if<note_event>(&action); note && note->kind == "scale_refused") {
      auto why = note->detail;
      execute(std::move(actions));
      return refused(errc::failed_precondition, std::move(why));
    }
  execute(std::move(actions));
  return answered("world " + std::to_string(before) + " → " + std::to_string(policy_.world()) +
              " ranks (the global batch stays); epoch " + std::to_string(policy_.epoch().value()));
}

admin_reply supervisor_actor::on_admin(const admin_checkpoint_now&) {
  if (ctx_->spec.checkpoint.persist_every == 0)
    return refused(errc::failed_precondition, "checkpoints on disk are off (checkpoint.persist_every = 0)");
  if (auto st = training_now(); !st.ok())
    return refused(st);
  if (const auto writing = checkpoints_.writing())
    return answered("checkpoint of step " + std::to_string(writing->value()) + " is being written");
  // The next anchor every rank holds is persisted, whatever persist_every says.
  (void)checkpoints_.request_now();
  event("checkpoint_requested", "an operator asked for a checkpoint now");
  const auto anchor = ctx_->spec.checkpoint.snapshot_every * policy::snapshots_per_anchor;
  return answered("checkpoint requested: the next anchor (a multiple of " + std::to_string(anchor) +
              " steps) is written");
}

admin_reply supervisor_actor::on_admin(const admin_stop& r) {
  execute(policy_.stop(r.reason.empty() ? "stopped by an operator" : r.reason.substr(0, 200)));
  return answered("job stopped");
}

// ---- check: the pre-flight node check again, on an operator's request ------------------------------

namespace {

constexpr auto check_deadline = std::chrono::seconds{60};
constexpr auto unscored_after_check = std::chrono::seconds{5};

std::string figure_text(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::optional<admin_reply> supervisor_actor::start_check(const envelope& from, const admin_check& r) {
  if (pending_check_ || link_check_)
    return refused(errc::failed_precondition, "check: a check is already running; try again when it has answered");
  if (!(r.slow_factor >= 1.0 && r.slow_factor <= 100.0))
    return refused(errc::invalid_argument,
                   "check: the drill's FACTOR is a number from 1 to 100, not " + factor_text(r.slow_factor));
  if (!r.slow_only.empty() && r.slow_only != "compute" && r.slow_only != "memory" && r.slow_only != "disk")
    return refused(errc::invalid_argument, "check: the drill slows 'compute', 'memory' or 'disk', not '" + r.slow_only + "'");
  if (r.nodes.size() > ctx_->spec.nodes.size())
    return refused(errc::invalid_argument, "check: " + std::to_string(r.nodes.size()) + " nodes named; the cluster has " +
                                               std::to_string(ctx_->spec.nodes.size()));
  std::set<std::uint32_t> named;
  for (const auto& name : r.nodes) {
    auto n = node_named(name);
    if (!n)
      return refused(errc::invalid_argument, "check: " + n.error().message());
    named.insert(n->value());
  }
  if (named.empty() && r.slow_factor != 1.0)
    return refused(errc::invalid_argument, "check: a drill names its nodes (--nodes)");
  std::vector<std::uint32_t> nodes;
  std::string down;
  for (std::uint32_t n = 0; n < ctx_->spec.nodes.size(); ++n) {
    if (!named.empty() && !named.contains(n))
      continue;
    if (!agents_.contains(node_id{n})) {
      if (!named.empty())
        down += (down.empty() ? "" : ", ") + ctx_->spec.nodes[n].name;
      continue;
    }
    nodes.push_back(n);
  }
  if (!down.empty())
    return refused(errc::failed_precondition, "check: not connected: " + down);
  if (nodes.empty())
    return refused(errc::failed_precondition, "check: no node is connected");
  launch_check(std::move(nodes), named.empty() ? 1.0 : r.slow_factor, r.slow_only, std::pair{from.peer, from.actor}, r.id);
  return std::nullopt;
}

void supervisor_actor::launch_check(std::vector<std::uint32_t> nodes, double slow_factor, const std::string& slow_only,
                                    std::optional<std::pair<transport::peer_id, std::string>> asker, std::uint64_t request) {
  pending_check p;
  p.asker = std::move(asker);
  p.request = request;
  p.id = ++next_check_id_;
  p.deadline = ctx_->time->now() + check_deadline;
  p.nodes = std::move(nodes);
  p.waiting.insert(p.nodes.begin(), p.nodes.end());
  for (const auto n : p.nodes)
    to_agent(node_id{n}, node_check_request{p.id, slow_factor, slow_only});
  unscored_until_ = p.deadline;
  spdlog::info("check {}: asking {} node(s){}{}", p.id, p.nodes.size(), p.asker ? "" : " (checks.every)",
               slow_factor > 1.0 ? " (drill: " + factor_text(slow_factor) + "x the work" +
                                       (slow_only.empty() ? "" : " of the " + slow_only + " check") + ")"
                                 : "");
  pending_check_ = std::move(p);
}

void supervisor_actor::on_node_check(const node_check_report& r) {
  if (r.node.value() >= ctx_->spec.nodes.size())
    return;
  auto kept = r;
  // checks.every: compute and memory, measured on cores the ranks share (and the other nodes'
  // checks, on a machine that holds several), would judge the training, not the node; they keep
  // the figures of the last check made at the start or by an operator.
  const bool periodic = pending_check_ && !pending_check_->asker && r.id == pending_check_->id;
  if (const auto before = node_checks_.find(r.node.value()); periodic && before != node_checks_.end()) {
    kept.gemm_gflops = before->second.gemm_gflops;
    kept.memory_gbps = before->second.memory_gbps;
  }
  node_checks_[r.node.value()] = kept;
  if (!finished_)
    execute(policy_.on_node_checked(r.node, figures_of(kept)));
  if (pending_check_ && !pending_check_->nodes_done && r.id == pending_check_->id) {
    pending_check_->waiting.erase(r.node.value());
    if (pending_check_->waiting.empty())
      finish_check(false);
  }
}

void supervisor_actor::finish_check(bool timed_out) {
  if (!pending_check_ || pending_check_->nodes_done)
    return;
  auto& p = *pending_check_;
  std::ostringstream text;
  text << "node  compute GFLOP/s  memory GB/s  disk MB/s  fsync ms  GPUs  verdict\n";
  json nodes = json::array();
  std::string missing;
  std::size_t failed = 0;
  std::vector<std::uint32_t> reported;
  for (const auto n : p.nodes) {
    const auto& name = ctx_->spec.nodes[n].name;
    const auto it = node_checks_.find(n);
    if (p.waiting.contains(n) || it == node_checks_.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
      text << name << "  (no report within " << check_deadline.count() << " s)\n";
      continue;
    }
    reported.push_back(n);
    const auto& c = it->second;
    const auto verdict = policy_.check_of(node_id{n});
    const bool passed = verdict && verdict->passed;
    failed += passed ? 0 : 1;
    const auto pad = [](std::string v, std::size_t w) { return v.size() >= w ? v + " " : v + std::string(w - v.size(), ' '); };
    text << pad(name, 6) << pad(figure_text(c.gemm_gflops, 2), 17) << pad(figure_text(c.memory_gbps, 2), 13)
         << pad(figure_text(c.disk_mbps, 1), 11) << pad(figure_text(c.fsync_ms, 1), 10)
         << pad(std::to_string(c.gpus) + (c.gpus_expected > 0 ? "/" + std::to_string(c.gpus_expected) : ""), 6)
         << (passed ? "passed" : "QUARANTINED: " + (verdict ? verdict->detail : c.error)) << "\n";
    nodes.push_back({{"node", name},
                     {"gemm_gflops", c.gemm_gflops},
                     {"memory_gbps", c.memory_gbps},
                     {"disk_mbps", c.disk_mbps},
                     {"fsync_ms", c.fsync_ms},
                     {"gpus", c.gpus},
                     {"gpus_expected", c.gpus_expected},
                     {"passed", passed},
                     {"check", verdict ? verdict->check : std::string{}},
                     {"detail", verdict ? verdict->detail : c.error}});
  }
  if (failed > 0)
    text << failed << " node(s) quarantined: not placed, not used as spares, until a check passes\n";
  if (timed_out)
    text << "no report from " << missing << "\n";
  json j{{"nodes", nodes}, {"quarantined", failed}};
  if (!missing.empty())
    j["missing"] = missing;
  p.nodes_done = true;
  // Progress from the steps the check slowed still arrives for a while (agents batch it).
  unscored_until_ = ctx_->time->now() + unscored_after_check;
  p.text = text.str();
  p.json = j.dump();
  link_text_.clear();
  link_json_.clear();
  if (!start_link_check(std::move(reported)))
    answer_check();
}

void supervisor_actor::answer_check() {
  if (!pending_check_)
    return;
  const auto p = std::move(*pending_check_);
  pending_check_.reset();
  if (!p.asker)
    return;
  auto j = json::parse(p.json, nullptr, false);
  if (!link_json_.empty())
    j["links"] = json::parse(link_json_, nullptr, false);
  auto reply = answered(p.text + link_text_, j.dump());
  reply.id = p.request;
  ctx_->bridge->send(p.asker->first, "supervisor", p.asker->second, reply);
}

}  // namespace rekindle::actors
