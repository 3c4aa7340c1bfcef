#include "actors/supervisor_actor.hpp"

#include <cstdlib>
#include <ctime>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "common/checksum.hpp"
#include "common/text.hpp"
#include "config/load.hpp"

namespace rekindle::actors {

using namespace policy;

namespace {

using json = nlohmann::json;

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

// What a restarted supervisor compares to notice a changed configuration: the effective
// configuration, every default filled in.
std::uint64_t config_hash(const config::spec& s) {
  const auto text = config::to_toml(s);
  return xxh64(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::string kind_name(std::uint8_t kind) {
  return kind == 0 ? "local memory" : kind == 1 ? "buddy memory" : "disk";
}

void write_atomically(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
}

}  // namespace

double recovery_record::detect_s() const { return injected_ns > 0 ? seconds(detected_ns - injected_ns) : 0.0; }
double recovery_record::respawn_s() const { return ready_ns > 0 ? seconds(ready_ns - detected_ns) : 0.0; }
double recovery_record::rendezvous_s() const {
  return started_ns > 0 ? seconds(started_ns - ready_ns) + seconds(connect_ns) : 0.0;
}
double recovery_record::restore_s() const { return seconds(restore_ns); }
double recovery_record::total_s() const {
  return first_step_ns > 0 ? seconds(first_step_ns - (injected_ns > 0 ? injected_ns : detected_ns)) : 0.0;
}

supervisor_actor::supervisor_actor(caf::actor_config& cfg, node_context* ctx, std::unique_ptr<storage::state_store> store)
    : caf::event_based_actor(cfg),
      ctx_(ctx),
      store_(std::move(store)),
      policy_(policy_config_of(ctx->spec), *ctx->time),
      checkpoints_(ctx->spec.checkpoint.persist_every, ctx->spec.checkpoint.snapshot_every, *ctx->time),
      node_addresses_(ctx->spec.nodes.size()) {}

void supervisor_actor::on_exit() {
  write_status(finished_);
  if (store_)
    (void)store_->close();
}

void supervisor_actor::put_job(storage::job_state state, const std::string& reason) {
  storage::job_record job;
  job.name = ctx_->spec.job.name;
  job.config_source = ctx_->spec.source;
  job.config_hash = config_hash(ctx_->spec);
  job.state = state;
  job.reason = reason;
  job.since = ctx_->time->wall_now();
  if (auto st = store_->put_job(job); !st.ok())
    spdlog::error("the job record could not be stored: {}", st.message());
}

void supervisor_actor::event(const std::string& kind, const std::string& detail, std::optional<rank_id> rank,
                             std::optional<node_id> node, std::vector<std::pair<std::string, std::string>> fields) {
  spdlog::info("event {} epoch={}{}{} {}", kind, policy_.epoch().value(),
               rank ? " rank=" + std::to_string(rank->value()) : "",
               node ? " node=" + ctx_->spec.nodes.at(node->value()).name : "", detail);
  storage::event e;
  e.kind = kind;
  e.epoch = policy_.epoch();
  e.rank = rank;
  e.node = node;
  e.fields = std::move(fields);
  if (!detail.empty())
    e.fields.insert(e.fields.begin(), {"detail", detail});
  if (auto r = store_->append_event(std::move(e)); !r)
    spdlog::error("the event log refused an event: {}", r.error().message());
}

void supervisor_actor::open_recovery(const std::string& cause, std::optional<rank_id> rank, std::optional<node_id> node,
                                     std::int64_t injected_ns) {
  if (finished_)
    return;
  if (open_recovery_ && !recoveries_[*open_recovery_].done)
    return;  // a failure during a recovery folds into it
  recovery_record r;
  r.cause = cause;
  if (rank)
    r.rank = rank->value();
  if (node)
    r.node = node->value();
  r.failed_at_step = max_step_;
  r.injected_ns = injected_ns;
  r.detected_ns = now_ns(*ctx_->time);
  recoveries_.push_back(r);
  open_recovery_ = recoveries_.size() - 1;
}

void supervisor_actor::execute(std::vector<policy_action> actions) {
  bool assigned = false;
  const bool starts_epoch =
      std::any_of(actions.begin(), actions.end(), [](const policy_action& a) { return std::holds_alternative<persist_epoch>(a); });
  std::map<node_id, assign_ranks> assigns;
  std::vector<std::optional<node_id>> buddies;
  for (auto& action : actions) {
    if (auto* pe = std::get_if<persist_epoch>(&action)) {
      // The fence: the epoch is durable before anything announces it. A store that refuses it
      // ends the job with nothing of the new epoch sent (a restarted supervisor could otherwise
      // hand the same epoch out again).
      if (auto st = store_->put_epoch(pe->epoch); !st.ok()) {
        spdlog::error("epoch {} could not be made durable: {}", pe->epoch.value(), st.message());
        execute(policy_.fail_job("epoch " + std::to_string(pe->epoch.value()) +
                                 " could not be made durable, so it was not announced: " + st.message()));
        return;
      }
      // Shards of the old epoch's ranks may never all arrive.
      carry_out(checkpoints_.on_epoch(pe->epoch));
      ctx_->transport->set_epoch(pe->epoch);
      addresses_.clear();
      for (auto& [r, s] : ranks_)
        s.state = "restarting";
      assigned = true;
      if (open_recovery_)
        recoveries_[*open_recovery_].epoch = pe->epoch.value();
    } else if (auto* bu = std::get_if<assign_buddies>(&action)) {
      buddies = std::move(bu->buddy_of);
    } else if (auto* ab = std::get_if<abort_ranks>(&action)) {
      to_all_agents(abort_epoch{ab->epoch});
    } else if (auto* sp = std::get_if<spawn_rank>(&action)) {
      auto& as = assigns[sp->slot.node];
      as.epoch = sp->epoch;
      as.world = sp->world;
      as.ranks.push_back({sp->slot.rank, sp->slot.local_index, sp->delay.count()});
      auto& rs = ranks_[sp->slot.rank];
      rs.node = sp->slot.node.value();
      rs.local_index = sp->slot.local_index;
      rs.restarts = policy_.restarts_of(sp->slot.rank);
    } else if (auto* kr = std::get_if<kill_rank>(&action)) {
      killed_as_[kr->rank.value()] = "hung: the supervisor killed it";
      to_agent(kr->node, kill_request{policy_.epoch(), kr->rank, kr->signal, "hung"});
    } else if (auto* se = std::get_if<start_epoch>(&action)) {
      storage::membership m;
      m.epoch = se->epoch;
      start_training st;
      st.epoch = se->epoch;
      st.world = static_cast<std::uint32_t>(se->placement.size());
      st.restore_step = se->restore_step;
      st.restore_world = se->restore_world;
      st.node_addresses = node_addresses_;
      st.micro_batches = shares_for_epoch(se->placement);
      for (const auto& s : se->sources)
        st.sources.push_back({s.old_rank, s.holder, static_cast<std::uint8_t>(s.where)});
      for (const auto& slot : se->placement) {
        st.addresses.push_back(addresses_[slot.rank]);
        storage::rank_member member;
        member.rank = slot.rank;
        member.node = slot.node;
        member.local_index = slot.local_index;
        member.device = ctx_->spec.nodes.at(slot.node.value()).devices.empty()
                            ? "auto"
                            : ctx_->spec.nodes.at(slot.node.value()).devices.at(slot.local_index).to_string();
        const auto& addr = addresses_[slot.rank];
        member.address.resize(addr.size());
        std::memcpy(member.address.data(), addr.data(), addr.size());
        m.ranks.push_back(std::move(member));
      }
      std::set<node_id> nodes;
      for (const auto& slot : se->placement)
        nodes.insert(slot.node);
      for (auto n : nodes)
        if (ctx_->spec.nodes.at(n.value()).spare)
          m.spares_in_use.push_back(n);
      if (auto s = store_->put_membership(std::move(m)); !s.ok())
        spdlog::error("the membership could not be stored: {}", s.message());
      for (auto n : nodes)
        to_agent(n, st);
      if (open_recovery_) {
        auto& r = recoveries_[*open_recovery_];
        r.started_ns = now_ns(*ctx_->time);
        r.restored_step = se->restore_step.value();
        r.source = se->sources.empty() ? "none" : kind_name(static_cast<std::uint8_t>(se->sources.front().where));
        for (const auto& s : se->sources)
          if (s.where != state_source::kind::local_slot)
            r.source = kind_name(static_cast<std::uint8_t>(s.where)) + " on " + ctx_->spec.nodes.at(s.holder.value()).name;
      }
      // Steps reported in the old epoch do not count: the ranks start over from the restore step.
      for (auto& [r, s] : ranks_) {
        s.state = "restoring";
        s.step = se->restore_step.value();
      }
      max_step_ = std::max(max_step_, se->restore_step.value());
      if (started_ns_ == 0)
        started_ns_ = now_ns(*ctx_->time);
    } else if (auto* fj = std::get_if<finish_job>(&action)) {
      finished_ = true;
      // A checkpoint being written when the job ends is not committed: its manifest and the
      // shards already reported go (later ones are removed as they are reported, or at start).
      carry_out(checkpoints_.on_job_end());
      final_state_ = std::string{to_string(fj->state)};
      put_job(fj->state == job_state::failed ? storage::job_state::failed : storage::job_state::stopped,
              fj->state == job_state::completed ? "completed" : fj->reason);
      for (auto& [r, s] : ranks_)
        s.state = final_state_;
      (void)store_->flush_events();
      // The end is on disk before anyone is told of it.
      write_status(true);
      to_all_agents(job_finished{final_state_, fj->reason});
    } else if (auto* rr = std::get_if<record_restart>(&action)) {
      // Durable before the restart happens: a supervisor restarted later counts on from here.
      if (auto c = store_->record_restart(rr->rank); !c)
        spdlog::error("the restart of rank {} could not be recorded: {}", rr->rank.value(), c.error().message());
    } else if (auto* ne = std::get_if<note_event>(&action)) {
      event(ne->kind, ne->detail, ne->rank, ne->node);
      // A node the policy found silent (its own timer, before the messenger's) is a recovery
      // too when its ranks move: opened here, before the epoch it starts.
      if (ne->kind == "node_lost" && ne->node && starts_epoch) {
        std::int64_t injected = 0;
        if (auto inj = injected_nodes_.find(ne->node->value()); inj != injected_nodes_.end()) {
          injected = inj->second;
          injected_nodes_.erase(inj);
        }
        open_recovery("node " + ne->detail, {}, ne->node, injected);
      }
    }
  }
  if (!assigned)
    return;
  // Every node up learns its ranks of the new epoch (none: its workers stop) and its buddy.
  for (const auto& [n, peer] : agents_) {
    auto as = assigns.contains(n) ? assigns[n] : assign_ranks{policy_.epoch(), policy_.world(), {}, {}, {}};
    as.epoch = policy_.epoch();
    as.world = policy_.world();
    as.buddy = n;
    if (const auto b = n.value() < buddies.size() ? buddies[n.value()] : std::nullopt;
        b && !node_addresses_[b->value()].empty()) {
      as.buddy = *b;
      as.buddy_address = node_addresses_[b->value()];
    }
    ctx_->transport->send(peer, "supervisor", "agent", as);
  }
}

caf::behavior supervisor_actor::make_behavior() {
  ctx_->transport->expose("supervisor", this);
  ctx_->transport->watch_peers(this);
  load_checkpoints();
  // A restarted supervisor resumes from its store: a new epoch once the nodes are back.
  auto loaded = store_->load();
  if (loaded && loaded->latest_membership && loaded->job && loaded->job->state != storage::job_state::stopped &&
      loaded->job->state != storage::job_state::failed) {
    std::vector<rank_slot> placement;
    for (const auto& m : loaded->latest_membership->ranks)
      placement.push_back({m.rank, m.node, m.local_index});
    std::uint64_t step = 0;
    std::map<rank_id, std::uint32_t> restarts;
    for (const auto& r : loaded->ranks) {
      if (r.snapshot_step)
        step = std::max(step, r.snapshot_step->value());
      restarts[r.rank] = r.restarts;
    }
    if (loaded->job->config_hash != config_hash(ctx_->spec))
      event("config_changed", "the configuration differs from the one the job started with (" +
                                  loaded->job->config_source + "); the job resumes with the new one");
    // The restart limits count on from the restarts counted before.
    execute(policy_.recover_after_restart(store_->epoch(), std::move(placement), step_t{step}, restarts,
                                          static_cast<std::uint32_t>(loaded->total_restarts)));
    open_recovery("supervisor restarted", {}, ctx_->node);
  } else {
    put_job(storage::job_state::created, "");
    event("job_created", ctx_->spec.job.name + ": " + std::to_string(ctx_->spec.world_size()) + " ranks on " +
                             std::to_string(ctx_->spec.nodes.size()) + " nodes, " + std::to_string(ctx_->spec.job.steps) +
                             " steps");
  }
  delayed_send(this, ctx_->spec.timeouts.heartbeat, tick_atom::value);
  return {
      [this](tick_atom) {
        // This process is the supervisor's node: it is alive while this runs, whatever its
        // agent's connection does (a stalled process sees its own heartbeats late).
        if (agents_.contains(ctx_->node) || policy_.node_up(ctx_->node))
          policy_.on_heartbeat(ctx_->node);
        // A tick long after the last one: this process was not running (paused, or the machine
        // was), so the nodes' silence in the meantime says nothing about them.
        const auto now = ctx_->time->now();
        if (last_tick_ && now - *last_tick_ > ctx_->spec.timeouts.node / 2) {
          spdlog::warn("the supervisor did not run for {}; node heartbeats get a new timeout",
                       format_duration(now - *last_tick_));
          for (std::uint32_t n = 0; n < ctx_->spec.nodes.size(); ++n)
            if (agents_.contains(node_id{n}))
              policy_.on_heartbeat(node_id{n});
        }
        last_tick_ = now;
        if (!finished_)
          execute(policy_.on_tick());
        write_status(finished_);
        delayed_send(this, ctx_->spec.timeouts.heartbeat, tick_atom::value);
      },
      [this](const peer_event& e) {
        if (e.up)
          return;
        for (auto it = agents_.begin(); it != agents_.end(); ++it) {
          if (it->second != e.peer)
            continue;
          const node_id n = it->first;
          agents_.erase(it);
          if (finished_)
            return;
          if (n == ctx_->node) {
            // The agent in this very process lost its connection (the process stalled past the
            // keep-alive timeout): the node is not lost; the agent reconnects at once.
            spdlog::warn("the supervisor's own agent lost its connection ({}); waiting for it to reconnect", e.reason);
            return;
          }
          // The recovery opens with the epoch the loss starts (not when the policy's own timer
          // found the node first: then this is no news).
          execute(policy_.on_node_lost(n, e.reason));
          return;
        }
      },
      [this](const envelope& from, const node_hello& h) {
        if (h.node.value() >= ctx_->spec.nodes.size())
          return;
        agents_[h.node] = from.peer;
        node_addresses_[h.node.value()] = h.address;
        event("node_joined", h.name + " at " + h.address, {}, h.node);
        if (finished_) {
          ctx_->transport->send(from.peer, "supervisor", "agent", job_finished{final_state_, "the job has ended"});
          return;
        }
        execute(policy_.on_node_up(h.node));
      },
      [this](const envelope&, const node_heartbeat& h) {
        policy_.on_heartbeat(h.node);
        standby_ready_[h.node.value()] = h.standby_ready;
      },
      // Fenced messages (rank_ready, rank_restored, progress, rank_trouble) of older epochs never
      // arrive here: the bridge drops them.
      [this](const envelope&, const rank_ready& r) {
        addresses_[r.rank] = r.address;
        ranks_[r.rank].state = "ready";
        ranks_[r.rank].pid = r.pid;
        auto actions = policy_.on_rank_ready(r.rank, r.epoch);
        if (open_recovery_ && policy_.state() == job_state::running && recoveries_[*open_recovery_].ready_ns == 0)
          recoveries_[*open_recovery_].ready_ns = now_ns(*ctx_->time);
        execute(std::move(actions));
      },
      [this](const envelope&, const rank_restored& r) {
        ranks_[r.rank].state = "training";
        if (open_recovery_) {
          auto& rec = recoveries_[*open_recovery_];
          rec.connect_ns = std::max(rec.connect_ns, r.connect_ns);
          rec.restore_ns = std::max(rec.restore_ns, r.restore_ns);
          if (r.source != "none" && r.source != "local memory")
            rec.source = r.source;
        }
      },
      [this](const envelope&, const progress_batch& b) {
        for (const auto& p : b.reports) {
          auto& s = ranks_[p.rank];
          s.step = std::max(s.step, p.step.value());
          s.loss = p.loss;
          s.step_ns = p.step_ns;
          s.compute_ns = p.compute_ns;
          s.state = "training";
          measure_speed(p);
          if (p.snapshot_ns > 0)
            s.snapshot_ns = p.snapshot_ns;
          if (p.rank == rank_id{0} && p.step.value() > 0) {
            if (losses_.size() < p.step.value()) {
              losses_.resize(p.step.value(), 0.0);
              step_seconds_.resize(p.step.value(), 0.0);
            }
            losses_[p.step.value() - 1] = p.loss;
            step_seconds_[p.step.value() - 1] = seconds(p.step_ns);
          }
          max_step_ = std::max(max_step_, p.step.value());
          execute(policy_.on_progress(p.rank, p.epoch, p.step));
        }
        if (open_recovery_ && !recoveries_[*open_recovery_].done && policy_.state() != job_state::rendezvous) {
          auto& rec = recoveries_[*open_recovery_];
          const bool all_past = !ranks_.empty() && std::all_of(policy_.placement().begin(), policy_.placement().end(),
                                                               [&](const rank_slot& s) {
                                                                 return ranks_[s.rank].step > rec.restored_step;
                                                               });
          if (rec.started_ns > 0 && all_past) {
            rec.first_step_ns = now_ns(*ctx_->time);
            rec.done = true;
            event("recovered",
                  "detect " + format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(rec.detect_s() * 1e9)}) +
                      " · respawn " + format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(rec.respawn_s() * 1e9)}) +
                      " · rendezvous " +
                      format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(rec.rendezvous_s() * 1e9)}) +
                      " · restore " + format_duration(std::chrono::nanoseconds{rec.restore_ns}) + " (" + rec.source +
                      ", step " + std::to_string(rec.restored_step) + ") · total " +
                      format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(rec.total_s() * 1e9)}) +
                      " · lost " + std::to_string(rec.steps_lost()) + " step(s)",
                  rec.rank ? std::optional{rank_id{*rec.rank}} : std::nullopt,
                  rec.node ? std::optional{node_id{*rec.node}} : std::nullopt,
                  {{"total_s", std::to_string(rec.total_s())}, {"steps_lost", std::to_string(rec.steps_lost())}});
          }
        }
      },
      [this](const envelope&, const rank_exited& e) {
        auto it = injected_ranks_.find(e.rank.value());
        const std::int64_t injected = it != injected_ranks_.end() ? it->second : 0;
        if (it != injected_ranks_.end())
          injected_ranks_.erase(it);
        // The cause of a rank the supervisor killed is why it did, not the signal.
        std::string cause = e.detail;
        if (const auto k = killed_as_.find(e.rank.value()); k != killed_as_.end()) {
          cause = k->second;
          killed_as_.erase(k);
        }
        event("rank_exited", e.detail, e.rank, e.node, {{"signal", std::to_string(e.signal)}, {"exit_code", std::to_string(e.exit_code)}});
        if (e.epoch == policy_.epoch())
          open_recovery("rank " + std::to_string(e.rank.value()) + " " + cause, e.rank, e.node, injected);
        execute(policy_.on_rank_failed(e.rank, e.epoch, e.detail));
      },
      [this](const envelope&, const rank_trouble& t) {
        if (t.unresponsive) {
          event("rank_unresponsive", t.detail + ": killing it", t.rank, t.node);
          killed_as_.emplace(t.rank.value(), "unresponsive: the supervisor killed it");  // a hung one stays hung
          to_agent(t.node, kill_request{t.epoch, t.rank, SIGKILL, "unresponsive"});
        } else {
          execute(policy_.on_collective_error(t.rank, t.epoch, t.detail));
        }
      },
      [this](const envelope&, const shard_persisted& p) { on_shard_persisted(p); },
      [this](const envelope&, const snapshot_dropped& d) {
        policy_.on_snapshot_dropped({d.epoch, d.rank, d.step, d.holder, static_cast<state_source::kind>(std::min<std::uint8_t>(d.kind, 2))});
      },
      [this](const envelope&, const restore_failed& f) {
        execute(policy_.on_restore_failed(f.rank, f.epoch, f.old_rank, f.step, f.holder,
                                          static_cast<state_source::kind>(std::min<std::uint8_t>(f.kind, 2)), f.detail));
      },
      [this](const envelope&, const snapshot_held& h) {
        spdlog::trace("rank {} step {} of epoch {} held on node {} ({})", h.rank.value(), h.step.value(), h.epoch.value(),
                      h.holder.value(), h.kind);
        if (policy_.on_snapshot({h.epoch, h.rank, h.step, h.holder, static_cast<state_source::kind>(h.kind)})) {
          spdlog::debug("step {} committed", policy_.copies().committed()->value());
          to_all_agents(snapshot_committed{policy_.epoch(), *policy_.copies().committed()});
        }
        if (h.kind == 0 && h.epoch == policy_.epoch())
          maybe_persist(h.step);
        if (h.kind == 0 && h.epoch == policy_.epoch()) {
          auto& s = ranks_[h.rank];
          s.last_snapshot = std::max(s.last_snapshot, h.step.value());
          if (h.rank.value() == 0)
            (void)store_->set_snapshot_step(h.rank, h.step);
        }
      },
      [this](const envelope& from, const admin_request& r) {
        auto reply = admin(from, r);
        reply.id = r.id;
        ctx_->transport->send(from.peer, "supervisor", from.actor, reply);
      },
  };
}

std::string supervisor_actor::status_json(bool full) const {
  json j;
  j["job"] = ctx_->spec.job.name;
  j["state"] = finished_ ? final_state_ : std::string{to_string(policy_.state())};
  j["reason"] = policy_.reason();
  j["epoch"] = policy_.epoch().value();
  j["world"] = policy_.world();
  j["step"] = max_step_;
  j["total_steps"] = ctx_->spec.job.steps;
  j["restarts"] = policy_.restarts();
  if (!losses_.empty() && max_step_ > 0)
    j["loss"] = losses_[std::min<std::size_t>(losses_.size(), max_step_) - 1];
  const double tokens_per_step = static_cast<double>(ctx_->spec.job.global_batch) * ctx_->spec.model.seq_len;
  if (!step_seconds_.empty() && max_step_ > 0 && step_seconds_[std::min<std::size_t>(step_seconds_.size(), max_step_) - 1] > 0)
    j["tokens_per_s"] = tokens_per_step / step_seconds_[std::min<std::size_t>(step_seconds_.size(), max_step_) - 1];
  // The newest step every rank holds on enough nodes: where a failure now restores to at worst.
  if (auto c = policy_.copies().committed())
    j["committed_step"] = c->value();
  else
    j["committed_step"] = nullptr;
  // Checkpoints on disk: the newest committed, one being written, the last failure.
  j["checkpoint"] = {{"directory", checkpoint_dir().string()},
                     {"persist_every", ctx_->spec.checkpoint.persist_every},
                     {"last_step", checkpoints_.last() ? json(checkpoints_.last()->value()) : json(nullptr)},
                     {"writing_step", checkpoints_.writing() ? json(checkpoints_.writing()->value()) : json(nullptr)},
                     {"error", checkpoints_.error().empty() ? json(nullptr) : json(checkpoints_.error())}};
  j["nodes"] = json::array();
  for (std::uint32_t n = 0; n < ctx_->spec.nodes.size(); ++n) {
    const auto it = standby_ready_.find(n);
    j["nodes"].push_back({{"name", ctx_->spec.nodes[n].name},
                          {"up", policy_.node_up(node_id{n})},
                          {"standby_ready", it != standby_ready_.end() && it->second && policy_.node_up(node_id{n})}});
  }
  j["balance"] = ctx_->spec.job.balance;
  j["micro_batches"] = shares_;
  // Measured micro-batches per second of compute on the rank's slot (null before its first step).
  const auto speed_of = [&](const rank_status& s) -> json {
    const auto it = slot_speed_.find({s.node, s.local_index});
    return it == slot_speed_.end() ? json(nullptr) : json(it->second);
  };
  j["ranks"] = json::array();
  for (const auto& [r, s] : ranks_) {
    const bool placed = std::any_of(policy_.placement().begin(), policy_.placement().end(),
                                    [&](const rank_slot& slot) { return slot.rank == r; });
    if (!placed)
      continue;
    j["ranks"].push_back({{"rank", r.value()},
                          {"node", ctx_->spec.nodes.at(s.node).name},
                          {"pid", s.pid},
                          {"state", s.state},
                          {"step", s.step},
                          {"step_time_s", seconds(s.step_ns)},
                          {"compute_time_s", seconds(s.compute_ns)},
                          {"micro_batches", r.value() < shares_.size() ? json(shares_[r.value()]) : json(nullptr)},
                          {"speed", speed_of(s)},
                          {"snapshot_stall_s", seconds(s.snapshot_ns)},
                          {"last_snapshot", s.last_snapshot},
                          {"restarts", s.restarts}});
  }
  j["recoveries"] = json::array();
  for (const auto& r : recoveries_) {
    json rj{{"epoch", r.epoch},
            {"cause", r.cause},
            {"failed_at_step", r.failed_at_step},
            {"restored_step", r.restored_step},
            {"steps_lost", r.steps_lost()},
            {"source", r.source},
            {"done", r.done},
            {"detect_s", r.detect_s()},
            {"respawn_s", r.respawn_s()},
            {"rendezvous_s", r.rendezvous_s()},
            {"restore_s", r.restore_s()},
            {"total_s", r.total_s()},
            // Monotonic clock (CLOCK_MONOTONIC) readings, for tools on the same host.
            {"detected_at_ns", r.detected_ns},
            {"first_step_at_ns", r.first_step_ns}};
    if (r.injected_ns > 0)
      rj["injected_at_ns"] = r.injected_ns;
    if (r.rank)
      rj["rank"] = *r.rank;
    if (r.node)
      rj["node"] = ctx_->spec.nodes.at(*r.node).name;
    j["recoveries"].push_back(rj);
  }
  if (full) {
    j["losses"] = losses_;
    j["step_seconds"] = step_seconds_;
  }
  return j.dump(2);
}

void supervisor_actor::write_status(bool final) {
  write_atomically(ctx_->data_dir / "status.json", status_json(false));
  if (final)
    write_atomically(ctx_->data_dir / "report.json", status_json(true));
}

namespace {
// "2026-11-30T14:04:31.123Z".
std::string utc_text(clock::wall_time t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}
}  // namespace

expected<rank_slot> supervisor_actor::placed_rank(const std::string& text) const {
  const auto& placement = policy_.placement();
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    return status{errc::invalid_argument, "'" + text + "' is not a rank number"};
  const auto rank = static_cast<std::uint32_t>(std::stoul(text));
  const auto it =
      std::find_if(placement.begin(), placement.end(), [&](const rank_slot& s) { return s.rank.value() == rank; });
  if (it == placement.end())
    return status{errc::invalid_argument,
                  "rank " + text + " is not in the job (world " + std::to_string(policy_.world()) + ": ranks 0-" +
                      std::to_string(policy_.world() == 0 ? 0 : policy_.world() - 1) + ")"};
  return *it;
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
  for (const auto& rec : recoveries_)
    out["failures"].push_back({{"step", rec.failed_at_step}, {"cause", rec.cause}});
  return out.dump();
}

expected<node_id> supervisor_actor::node_named(const std::string& name) const {
  if (const auto n = ctx_->spec.find_node(name))
    return *n;
  std::vector<std::string> names;
  for (const auto& node : ctx_->spec.nodes)
    names.push_back(node.name);
  return status{errc::invalid_argument, "no node '" + name + "'" + did_you_mean(name, names)};
}

admin_reply supervisor_actor::admin(const envelope& from, const admin_request& r) {
  const bool admin_role = from.role == static_cast<std::uint8_t>(transport::peer_role::admin);
  const auto refuse = [&] {
    return admin_reply{0, 3, "'" + r.command + "' changes the job; this token is read-only", ""};
  };
  if (r.command == "status")
    return {0, 0, "", status_json(false)};
  if (r.command == "report")
    return {0, 0, "", status_json(true)};
  if (r.command == "kill") {
    if (!admin_role)
      return refuse();
    if (r.args.empty())
      return {0, 2, "usage: kill rank RANK [--signal N]", ""};
    const auto slot = placed_rank(r.args[0]);
    if (!slot)
      return {0, 2, slot.error().message(), ""};
    int sig = SIGKILL;
    if (r.args.size() > 1) {
      const auto& a = r.args[1];
      if (a.empty() || a.size() > 2 || a.find_first_not_of("0123456789") != std::string::npos || std::stoi(a) < 1 ||
          std::stoi(a) > 64)
        return {0, 2, "kill: '" + a + "' is not a signal number (1-64)", ""};
      sig = std::stoi(a);
    }
    const auto rank = std::to_string(slot->rank.value());
    injected_ranks_[slot->rank.value()] = now_ns(*ctx_->time);
    event("fault_injected", "kill rank " + rank + " with signal " + std::to_string(sig), slot->rank, slot->node,
          {{"fault", "kill"}, {"signal", std::to_string(sig)}});
    to_agent(slot->node, kill_request{policy_.epoch(), slot->rank, sig, "operator"});
    return {0, 0, "rank " + rank + " sent signal " + std::to_string(sig), ""};
  }
  if (r.command == "hang" || r.command == "slow") {
    if (!admin_role)
      return refuse();
    const bool hang = r.command == "hang";
    if (r.args.size() != (hang ? 1u : 2u))
      return {0, 2, hang ? "usage: hang rank RANK" : "usage: slow rank RANK FACTOR", ""};
    const auto slot = placed_rank(r.args[0]);
    if (!slot)
      return {0, 2, slot.error().message(), ""};
    double factor = 1.0;
    if (!hang) {
      char* end = nullptr;
      factor = std::strtod(r.args[1].c_str(), &end);
      if (r.args[1].empty() || end == nullptr || *end != '\0' || !(factor >= 1.0 && factor <= 100.0))
        return {0, 2, "slow: FACTOR is a number from 1 (back to normal) to 100, not '" + r.args[1] + "'", ""};
    }
    if (finished_ || policy_.state() != job_state::running)
      return {0, 3, std::string{"the job is "} + std::string{to_string(policy_.state())} + ", not training", ""};
    const auto rank = std::to_string(slot->rank.value());
    std::string what = hang            ? "hang rank " + rank
                       : factor == 1.0 ? "rank " + rank + " back to its normal speed"
                                       : "slow rank " + rank + " by " + r.args[1] + "x";
    if (hang)
      injected_ranks_[slot->rank.value()] = now_ns(*ctx_->time);
    event("fault_injected", what, slot->rank, slot->node,
          hang ? std::vector<std::pair<std::string, std::string>>{{"fault", "hang"}}
               : std::vector<std::pair<std::string, std::string>>{{"fault", "slow"}, {"factor", r.args[1]}});
    to_agent(slot->node, drill_request{policy_.epoch(), slot->rank, r.command, factor});
    return {0, 0,
            hang ? "rank " + rank + " hangs before its next step; its peers wait in their collectives until it is found"
            : factor == 1.0 ? "rank " + rank + " steps at its normal speed again"
                            : "the compute of rank " + rank + " now takes " + r.args[1] + " times as long (its collectives do not)",
            ""};
  }
  if (r.command == "loss") {
    // args: [POINTS] — the loss curve in at most that many buckets (default 200).
    std::size_t points = 200;
    if (!r.args.empty()) {
      const auto& a = r.args[0];
      if (a.empty() || a.size() > 6 || a.find_first_not_of("0123456789") != std::string::npos || std::stoul(a) == 0)
        return {0, 2, "usage: loss [POINTS]: '" + a + "' is not a whole number of at least 1", ""};
      points = std::stoul(a);
    }
    return {0, 0, "", loss_json(points)};
  }
  if (r.command == "fail-node") {
    if (!admin_role)
      return refuse();
    if (r.args.empty())
      return {0, 2, "usage: fail node NAME", ""};
    const auto n = node_named(r.args[0]);
    if (!n)
      return {0, 2, n.error().message(), ""};
    if (!agents_.contains(*n))
      return {0, 2, "node " + r.args[0] + " is not up", ""};
    injected_nodes_[n->value()] = now_ns(*ctx_->time);
    event("fault_injected", "fail node " + r.args[0], {}, *n, {{"fault", "node_down"}});
    to_agent(*n, fail_node{"operator drill"});
    return {0, 0, "node " + r.args[0] + " fails now", ""};
  }
  if (r.command == "partition") {
    if (!admin_role)
      return refuse();
    if (r.args.size() != 3)
      return {0, 2, "usage: partition NODE1 NODE2 [--for DURATION]", ""};
    const auto a = node_named(r.args[0]);
    if (!a)
      return {0, 2, a.error().message(), ""};
    const auto b = node_named(r.args[1]);
    if (!b)
      return {0, 2, b.error().message(), ""};
    if (*a == *b)
      return {0, 2, "partition: a node cannot be cut off from itself ('" + r.args[0] + "' twice)", ""};
    const auto d = parse_duration(r.args[2]);
    if (!d || *d < std::chrono::milliseconds{100} || *d > std::chrono::hours{1})
      return {0, 2, "partition: --for takes a duration from 100ms to 1h, not '" + r.args[2] + "'", ""};
    for (const auto n : {*a, *b})
      if (!agents_.contains(n))
        return {0, 3, "node " + ctx_->spec.nodes[n.value()].name + " is not up", ""};
    // Cut off from the supervisor's node, the other node is lost to the job: timed from now.
    if (*a == ctx_->node || *b == ctx_->node)
      injected_nodes_[(*a == ctx_->node ? *b : *a).value()] = now_ns(*ctx_->time);
    const auto what = "partition " + r.args[0] + " " + r.args[1] + " for " + format_duration(*d);
    event("fault_injected", what, {}, *a == ctx_->node ? *b : *a,
          {{"fault", "partition"},
           {"link", r.args[0] + "," + r.args[1]},
           {"duration_s", std::to_string(std::chrono::duration<double>(*d).count())}});
    // The far end first: once the near end cuts, nothing reaches the far one.
    to_agent(*b, partition_request{*a, d->count()});
    to_agent(*a, partition_request{*b, d->count()});
    return {0, 0,
            "traffic between " + r.args[0] + " and " + r.args[1] + " is dropped for " + format_duration(*d) +
                " (control plane: heartbeats, replication, state transfers)",
            ""};
  }
  if (r.command == "events") {
    // args: [after SEQ] — events after that position, oldest first, at most 1000.
    std::uint64_t after = 0;
    if (!r.args.empty()) {
      const auto& a = r.args[0];
      if (a.empty() || a.find_first_not_of("0123456789") != std::string::npos)
        return {0, 2, "usage: events [--since SEQ]: '" + a + "' is not a whole number", ""};
      after = std::stoull(a);
    }
    (void)store_->flush_events();
    auto events = store_->events_after(after, 1000);
    if (!events)
      return {0, 1, "the event log cannot be read: " + events.error().message(), ""};
    json out = json::array();
    for (const auto& e : *events) {
      json ej{{"seq", e.seq},
              {"time", utc_text(e.wall)},
              {"unix_s", static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 e.wall.time_since_epoch())
                                                 .count()) /
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
    return {0, 0, "", out.dump()};
  }
  if (r.command == "pause" || r.command == "resume") {
    if (!admin_role)
      return refuse();
    const bool pause = r.command == "pause";
    if (finished_)
      return {0, 3, "the job has ended (" + final_state_ + ")", ""};
    if (pause && policy_.state() == job_state::paused)
      return {0, 0, "already paused", ""};
    if (!pause && policy_.state() != job_state::paused)
      return {0, 3, std::string{"the job is "} + std::string{to_string(policy_.state())} + ", not paused", ""};
    execute(pause ? policy_.pause() : policy_.resume());
    return {0, 0, pause ? "paused at step " + std::to_string(max_step_) + " (the ranks wait; resume to go on)"
                        : "resumed in epoch " + std::to_string(policy_.epoch().value()),
            ""};
  }
  if (r.command == "drain") {
    if (!admin_role)
      return refuse();
    if (r.args.empty())
      return {0, 2, "usage: drain node NAME", ""};
    const auto n = node_named(r.args[0]);
    if (!n)
      return {0, 2, n.error().message(), ""};
    if (n->value() == ctx_->node.value())
      return {0, 3, "node " + r.args[0] + " hosts the supervisor and cannot be drained", ""};
    const auto world = policy_.world();
    execute(policy_.drain(*n));
    return {0, 0, "node " + r.args[0] + " drained; world " + std::to_string(world) + " → " + std::to_string(policy_.world()) + " ranks",
            ""};
  }
  if (r.command == "scale") {
    if (!admin_role)
      return refuse();
    const auto& a = r.args.empty() ? std::string{} : r.args[0];
    if (a.empty() || a.size() > 6 || a.find_first_not_of("0123456789") != std::string::npos || std::stoul(a) == 0)
      return {0, 2, "usage: scale RANKS, a whole number of ranks of at least 1 ('" + a + "' is not)", ""};
    const auto want = static_cast<std::uint32_t>(std::stoul(a));
    if (want == policy_.world())
      return {0, 0, "the world already has " + a + " ranks", ""};
    const auto before = policy_.world();
    auto actions = policy_.scale(want);
    for (const auto& action : actions)
      if (const auto* note = std::get_if<note_event>(&action); note && note->kind == "scale_refused") {
        auto why = note->detail;
        execute(std::move(actions));
        return {0, 3, std::move(why), ""};
      }
    execute(std::move(actions));
    return {0, 0, "world " + std::to_string(before) + " → " + std::to_string(policy_.world()) +
                      " ranks (the global batch stays); epoch " + std::to_string(policy_.epoch().value()),
            ""};
  }
  if (r.command == "rebalance") {
    if (!admin_role)
      return refuse();
    return rebalance(r);
  }
  if (r.command == "checkpoint-now") {
    if (!admin_role)
      return refuse();
    if (ctx_->spec.checkpoint.persist_every == 0)
      return {0, 3, "checkpoints on disk are off (checkpoint.persist_every = 0)", ""};
    if (finished_ || policy_.state() != job_state::running)
      return {0, 3, std::string{"the job is "} + std::string{to_string(policy_.state())} + ", not training", ""};
    if (const auto writing = checkpoints_.writing())
      return {0, 0, "checkpoint of step " + std::to_string(writing->value()) + " is being written", ""};
    // The next anchor every rank holds is persisted, whatever persist_every says.
    (void)checkpoints_.request_now();
    event("checkpoint_requested", "an operator asked for a checkpoint now");
    const auto anchor = ctx_->spec.checkpoint.snapshot_every * policy::snapshots_per_anchor;
    return {0, 0, "checkpoint requested: the next anchor (a multiple of " + std::to_string(anchor) + " steps) is written", ""};
  }
  if (r.command == "stop") {
    if (!admin_role)
      return refuse();
    execute(policy_.stop(r.args.empty() ? "stopped by an operator" : r.args[0]));
    return {0, 0, "job stopped", ""};
  }
  return {0, 2, "unknown command '" + r.command + "'", ""};
}

}  // namespace rekindle::actors
