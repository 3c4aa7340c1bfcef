#include "actors/supervisor_actor.hpp"

#include <cstdlib>
#include <ctime>
#include <deque>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "actors/job_status.hpp"
#include "actors/status_board.hpp"
#include "common/checksum.hpp"
#include "common/files.hpp"
#include "common/text.hpp"
#include "config/load.hpp"

namespace rekindle::actors {

using namespace policy;

namespace {

using json = nlohmann::json;

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

// The most bytes of the store's changes in one answer to a standby.
constexpr std::size_t replica_chunk_bytes = 1 << 20;

// What a restarted supervisor compares to notice a changed configuration: the effective
// configuration, every default filled in.
std::uint64_t config_hash(const config::spec& s) {
  const auto text = config::to_toml(s);
  return xxh64(std::as_bytes(std::span<const char>(text.data(), text.size())));
}


}  // namespace

supervisor_actor::supervisor_actor(caf::actor_config& cfg, node_context* ctx, std::unique_ptr<storage::state_store> store,
                                   std::int64_t term)
    : caf::event_based_actor(cfg),
      stages_(ctx->spec.job.stages),
      planned_shares_(ctx->spec.job.plan_shares),
      planned_world_(ctx->spec.job.plan_ranks.size()),
      stragglers_(policy::straggler_options{ctx->spec.stragglers.window, ctx->spec.stragglers.threshold, 0.9,
                                            ctx->spec.stragglers.span, 4096, ctx->spec.stragglers.confirm}),
      ctx_(ctx),
      term_(term),
      store_(std::move(store)),
      policy_(policy_config_of(ctx->spec), *ctx->time),
      checkpoints_(ctx->spec.checkpoint.persist_every, ctx->spec.checkpoint.snapshot_every, *ctx->time),
      node_addresses_(ctx->spec.nodes.size()) {}

void supervisor_actor::on_exit() {
  if (research_)
    research_->stop.request_stop();  // its thread ends at once; the future waits for it
  write_status(finished_);
  (void)status_file_.flush(background_file_writer::default_stop_wait);
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
  if (ctx_->board != nullptr)
    ctx_->board->add_event({std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count(),
                            kind, policy_.epoch().value(), rank ? std::optional{rank->value()} : std::nullopt,
                            node ? std::optional{ctx_->spec.nodes.at(node->value()).name} : std::nullopt, detail});
  if (auto r = store_->append_event(std::move(e)); !r)
    spdlog::error("the event log refused an event: {}", r.error().message());
}

void supervisor_actor::restore_recoveries() {
  // The "recovered" events of the supervisors before this one, newest kept_recoveries of them.
  constexpr std::size_t kept_recoveries = 10000;
  std::deque<policy::recovery_record> earlier;
  std::uint64_t after = 0;
  for (;;) {
    auto events = store_->events_after(after);
    if (!events) {
      spdlog::warn("the recoveries before this supervisor could not be read: {}", events.error().message());
      break;
    }
    if (events->empty())
      break;
    for (const auto& e : *events) {
      if (e.kind != "recovered")
        continue;
      if (auto r = policy::from_fields(e.fields, e.rank, e.node)) {
        earlier.push_back(std::move(*r));
        if (earlier.size() > kept_recoveries)
          earlier.pop_front();
      }
    }
    after = events->back().seq;
  }
  recoveries_.restore({earlier.begin(), earlier.end()});
}

void supervisor_actor::open_recovery(const std::string& cause, std::optional<rank_id> rank, std::optional<node_id> node,
                                     std::int64_t injected_ns) {
  if (!finished_)
    (void)recoveries_.open(cause, rank, node, max_step_, injected_ns, now_ns(*ctx_->time));
}

void supervisor_actor::execute(std::vector<policy_action> actions) {
  // With a standby, a supervisor whose lease may have run out acts no more: another may lead.
  if (!ctx_->may_lead()) {
    if (!actions.empty())
      spdlog::warn("the supervisor's lease is not known to be held: {} action(s) not carried out", actions.size());
    return;
  }
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
      ctx_->bridge->set_epoch(pe->epoch);
      addresses_.clear();
      for (auto& [r, s] : ranks_)
        s.state = "restarting";
      assigned = true;
      recoveries_.on_epoch(pe->epoch);
    } else if (auto* bu = std::get_if<assign_buddies>(&action)) {
      buddies = std::move(bu->buddy_of);
      buddies_ = buddies;
    } else if (auto* ab = std::get_if<abort_ranks>(&action)) {
      to_all_agents(abort_epoch{ab->epoch});
    } else if (auto* sp = std::get_if<spawn_ranks>(&action)) {
      for (const auto& one : sp->ranks) {
        auto& as = assigns[one.slot.node];
        as.epoch = sp->epoch;
        as.world = sp->world;
        as.ranks.push_back({one.slot.rank, one.slot.local_index, one.delay.count(), sp->new_process});
        auto& rs = ranks_[one.slot.rank];
        rs.node = one.slot.node.value();
        rs.local_index = one.slot.local_index;
        rs.restarts = policy_.restarts_of(one.slot.rank);
      }
    } else if (auto* kr = std::get_if<kill_rank>(&action)) {
      killed_as_.emplace(kr->rank.value(), "hung: the supervisor killed it");
      to_agent(kr->node, kill_request{policy_.epoch(), kr->rank, kr->signal, "hung"});
    } else if (auto* se = std::get_if<start_epoch>(&action)) {
      stragglers_.restart();  // new shares, new ranks: each window starts again
      storage::membership m;
      m.epoch = se->epoch;
      start_training st;
      st.epoch = se->epoch;
      st.world = static_cast<std::uint32_t>(se->placement.size());
      st.restore_step = se->restore_step;
      st.restore_world = se->restore_world;
      st.node_addresses = node_addresses_;
      st.micro_batches = replica_shares(shares_for_epoch(se->placement));
      st.stages = stages_;
      m.stages = stages_;
      for (const auto& s : se->sources)
        st.sources.push_back({s.old_rank, s.holder, s.where});
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
      if (recoveries_.recovering()) {
        std::string source = se->sources.empty() ? "none" : std::string{to_string(se->sources.front().where)};
        for (const auto& s : se->sources)
          if (s.where != copy_kind::local_slot)
            source = std::string{to_string(s.where)} + " on " + ctx_->spec.nodes.at(s.holder.value()).name;
        recoveries_.on_start(se->restore_step, std::move(source), now_ns(*ctx_->time));
        // A user's program reports no steps: its recovery ends when every rank's program runs.
        if (ctx_->spec.job.external())
          (void)recoveries_.on_progress(se->restore_step.value() + 1, now_ns(*ctx_->time));
      }
      // Steps reported in the old epoch do not count: the ranks start over from the restore step.
      for (auto& [r, s] : ranks_) {
        s.state = ctx_->spec.job.external() ? "running" : "restoring";
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
      event(ne->kind, ne->detail, ne->rank, ne->node, ne->fields);
      // A hung rank's recovery names what the verdict found (the kill_rank that follows keeps it).
      if (ne->kind == "rank_hung" && ne->rank)
        for (const auto& [k, v] : ne->fields)
          if (k == "verdict")
            killed_as_[ne->rank->value()] = "hung (" + v + "): the supervisor killed it";
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
    auto as = assigns.contains(n) ? assigns[n] : assign_ranks{policy_.epoch(), policy_.world(), {}, {}, {}, {}};
    as.epoch = policy_.epoch();
    as.world = policy_.world();
    for (const auto& slot : policy_.placement())
      if (slot.rank == rank_id{0})
        as.rank0_host = ctx_->spec.nodes.at(slot.node.value()).host;
    as.buddy = n;
    if (const auto b = n.value() < buddies.size() ? buddies[n.value()] : std::nullopt;
        b && !node_addresses_[b->value()].empty()) {
      as.buddy = *b;
      as.buddy_address = node_addresses_[b->value()];
    }
    ctx_->bridge->send(peer, "supervisor", "agent", as);
  }
}

caf::behavior supervisor_actor::make_behavior() {
  ctx_->bridge->expose("supervisor", this);
  ctx_->bridge->watch_peers(this);
  // Agents that connected to this daemon before the supervisor was exposed (a new leader, or
  // daemons on other hosts quicker than this one's start-up) said hello to nobody.
  for (const auto peer : ctx_->bridge->peers())
    ctx_->bridge->send(peer, "supervisor", "agent", introduce_yourself{term_});
  load_checkpoints();
  load_replanner();
  // A restarted supervisor resumes from its store: a new epoch once the nodes are back.
  auto loaded = store_->load();
  if (loaded && loaded->latest_membership && loaded->job && loaded->job->state != storage::job_state::stopped &&
      loaded->job->state != storage::job_state::failed) {
    std::vector<rank_slot> placement;
    for (const auto& m : loaded->latest_membership->ranks)
      placement.push_back({m.rank, m.node, m.local_index});
    // The split of the reloaded world (a re-plan's, when one happened).
    if (const auto& stored = loaded->latest_membership->stages; stored != stages_) {
      stages_ = stored;
      planned_shares_.clear();
      policy_.set_world_multiple(pipeline_stages());
    }
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
    restore_recoveries();
    // The restart limits count on from the restarts counted before.
    // The epochs of the reloaded world: the copies the nodes report of any of them count.
    auto since = store_->world_since();
    if (!since)
      spdlog::warn("the epochs of the reloaded world could not be read ({}): only copies of epoch {} count",
                   since.error().message(), store_->epoch().value());
    execute(policy_.recover_after_restart(store_->epoch(), std::move(placement), step_t{step}, restarts,
                                          static_cast<std::uint32_t>(loaded->total_restarts),
                                          since ? *since : std::nullopt));
    open_recovery("supervisor restarted", {}, ctx_->node);
  } else {
    put_job(storage::job_state::created, "");
    event("job_created", ctx_->spec.job.name + ": " + std::to_string(ctx_->spec.world_size()) + " ranks on " +
                             std::to_string(ctx_->spec.nodes.size()) + " nodes, " + std::to_string(ctx_->spec.job.steps) +
                             " steps");
  }
  delayed_send(this, ctx_->spec.timeouts.heartbeat, tick_atom::value);
  return caf::message_handler{
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
        if (pending_check_ && !pending_check_->nodes_done && now >= pending_check_->deadline)
          finish_check(true);
        if (link_check_ && now >= link_check_->deadline)
          end_link_round(true);
        // checks.every: the whole check again, while the job runs.
        if (const auto every = ctx_->spec.checks.every; every.count() > 0 && !finished_ &&
                                                             node_checks_.size() == ctx_->spec.nodes.size()) {
          if (!next_periodic_check_) {
            next_periodic_check_ = now + every;
          } else if (now >= *next_periodic_check_ && !pending_check_ && !link_check_) {
            next_periodic_check_ = now + every;
            std::vector<std::uint32_t> all;
            for (std::uint32_t n = 0; n < ctx_->spec.nodes.size(); ++n)
              if (agents_.contains(node_id{n}))
                all.push_back(n);
            if (!all.empty())
              launch_check(std::move(all), 1.0, {}, std::nullopt, 0);
          }
        }
        if (!finished_) {
          poll_research();
          execute(policy_.on_tick());
        }
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
        // How far the ranks got while this supervisor did not hear them (after its restart).
        max_step_ = std::max(max_step_, h.reached_step);
        recoveries_.on_reached(h.reached_step);
        event("node_joined", h.name + " at " + h.address, {}, h.node);
        if (finished_) {
          ctx_->bridge->send(from.peer, "supervisor", "agent", job_finished{final_state_, "the job has ended"});
          return;
        }
        policy_.on_epoch_seen(h.epoch);
        execute(policy_.on_node_up(h.node));
      },
      [this](const envelope& from, const replica_pull& p) {
        // A standby's replica asks for what it lacks (docs/RELIABILITY.md).
        storage::replica_position at{p.source, p.next, p.copying, p.copied};
        auto chunk = store_->changes_since(at, replica_chunk_bytes);
        if (!chunk) {
          spdlog::warn("the changes for the standby's replica could not be read: {}", chunk.error().message());
          return;
        }
        ctx_->bridge->send(from.peer, "supervisor", from.actor,
                           replica_changes{p.id, chunk->reset, std::move(chunk->batches), chunk->next.source,
                                           chunk->next.next, chunk->next.copying, chunk->next.copied});
      },
      [this](const envelope&, const node_check_report& r) { on_node_check(r); },
      [this](const envelope&, const link_report& r) { on_link_report(r); },
      [this](const envelope&, const node_heartbeat& h) {
        policy_.on_heartbeat(h.node);
        standby_ready_[h.node.value()] = h.standby_ready;
        for (const auto& p : h.positions)
          policy_.on_position(p.rank, p.epoch, p.position());
      },
      // Fenced messages (rank_ready, rank_restored, progress, rank_trouble) of older epochs never
      // arrive here: the bridge drops them.
      [this](const envelope&, const rank_ready& r) {
        addresses_[r.rank] = r.address;
        ranks_[r.rank].state = "ready";
        ranks_[r.rank].pid = r.pid;
        auto actions = policy_.on_rank_ready(r.rank, r.epoch);
        if (policy_.state() == job_state::running)
          recoveries_.on_ready(now_ns(*ctx_->time));
        execute(std::move(actions));
      },
      [this](const envelope&, const rank_restored& r) {
        ranks_[r.rank].state = "training";
        recoveries_.on_restored(r.connect_ns, r.restore_ns, r.source);
      },
      [this](const envelope&, const progress_batch& b) {
        if (b.replay) {
          // A node's record: steps trained, perhaps while no supervisor heard. It fills the losses
          // and times this supervisor does not know; it measures nothing about the ranks now.
          for (const auto& p : b.reports)
            record_loss(p, false);
          return;
        }
        for (const auto& p : b.reports) {
          auto& s = ranks_[p.rank];
          s.step = std::max(s.step, p.step.value());
          s.loss = p.loss;
          s.step_ns = p.step_ns;
          s.compute_ns = p.compute_ns;
          s.compute_cpu_ns = p.compute_cpu_ns;
          s.communication_ns = p.communication_ns;
          s.data_ns = p.data_ns;
          s.state = "training";
          measure_speed(p);
          score_straggler(p);
          if (p.snapshot_ns > 0)
            s.snapshot_ns = p.snapshot_ns;
          record_loss(p, p.rank == rank_id{0});
          recoveries_.on_reached(p.step.value());
          recoveries_.on_step(p.step.value(), p.step_ns);
          execute(policy_.on_progress(p.rank, p.epoch, p.step));
        }
        check_stragglers();
        if (recoveries_.recovering() && policy_.state() != job_state::rendezvous && !ranks_.empty()) {
          std::uint64_t slowest = ~std::uint64_t{0};
          for (const auto& slot : policy_.placement())
            slowest = std::min(slowest, ranks_[slot.rank].step);
          if (const auto* rec = recoveries_.on_progress(slowest, now_ns(*ctx_->time)))
            event("recovered", rec->summary(), rec->rank, rec->node, policy::to_fields(*rec));
        }
      },
      [this](const envelope&, const rank_completed& c) {
        ranks_[c.rank].state = "completed";
        event("rank_completed", "its program exited with status 0", c.rank, c.node);
        execute(policy_.on_rank_completed(c.rank, c.epoch));
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
      [this](const envelope&, const rank_stack& s) {
        if (s.error.empty())
          event("rank_stack", "the stack of rank " + std::to_string(s.rank.value()) + ", taken before it was killed",
                s.rank, s.node, {{"stack", s.stack}});
        else
          event("rank_stack", "the stack of rank " + std::to_string(s.rank.value()) + " could not be taken: " + s.error,
                s.rank, s.node);
      },
      [this](const envelope&, const shard_persisted& p) { on_shard_persisted(p); },
      [this](const envelope&, const holdings_reported& h) {
        spdlog::debug("node {} reported its {} copies", h.node.value(), h.copies);
        execute(policy_.on_holdings_reported(h.node));
      },
      [this](const envelope&, const snapshot_dropped& d) {
        policy_.on_snapshot_dropped({d.epoch, d.rank, d.step, d.holder, d.kind});
      },
      [this](const envelope&, const restore_failed& f) {
        execute(policy_.on_restore_failed(f.rank, f.epoch, f.old_rank, f.step, f.holder,
                                          f.kind, f.detail));
      },
      [this](const envelope&, const snapshot_held& h) {
        spdlog::trace("rank {} step {} of epoch {} held on node {} ({})", h.rank.value(), h.step.value(), h.epoch.value(),
                      h.holder.value(), to_string(h.kind));
        if (policy_.on_snapshot({h.epoch, h.rank, h.step, h.holder, h.kind})) {
          spdlog::debug("step {} committed", policy_.copies().committed()->value());
          to_all_agents(snapshot_committed{policy_.epoch(), *policy_.copies().committed()});
        }
        if (h.kind == copy_kind::local_slot && h.epoch == policy_.epoch()) {
          maybe_persist(h.step);
          auto& s = ranks_[h.rank];
          s.last_snapshot = std::max(s.last_snapshot, h.step.value());
          if (h.rank.value() == 0)
            (void)store_->set_snapshot_step(h.rank, h.step);
        }
      },
  }.or_else(admin_behavior());
}

job_status supervisor_actor::make_status(bool full) const {
  job_status j;
  j.job = ctx_->spec.job.name;
  j.state = finished_ ? final_state_ : std::string{to_string(policy_.state())};
  j.reason = policy_.reason();
  j.epoch = policy_.epoch().value();
  j.world = policy_.world();
  j.step = max_step_;
  j.total_steps = ctx_->spec.job.steps;
  if (ctx_->spec.job.external()) {
    std::string words;
    for (const auto& w : ctx_->spec.job.command)
      words += (words.empty() ? "" : " ") + w;
    j.command = std::move(words);
    j.total_steps = 0;
  }
  j.restarts = policy_.restarts();
  if (!losses_.empty() && max_step_ > 0)
    j.loss = losses_[std::min<std::size_t>(losses_.size(), max_step_) - 1];
  const double tokens_per_step = static_cast<double>(ctx_->spec.job.global_batch) * ctx_->spec.model.seq_len;
  if (!step_seconds_.empty() && max_step_ > 0) {
    const double last = step_seconds_[std::min<std::size_t>(step_seconds_.size(), max_step_) - 1];
    if (last > 0)
      j.tokens_per_s = tokens_per_step / last;
  }
  if (auto c = policy_.copies().committed())
    j.committed_step = c->value();
  j.checkpoint.directory = checkpoint_dir().string();
  j.checkpoint.persist_every = ctx_->spec.checkpoint.persist_every;
  if (const auto last = checkpoints_.last())
    j.checkpoint.last_step = last->value();
  if (const auto writing = checkpoints_.writing())
    j.checkpoint.writing_step = writing->value();
  if (!checkpoints_.error().empty())
    j.checkpoint.error = checkpoints_.error();
  j.checkpoint.persist_s = persist_s_;
  j.checkpoint.committed = persists_committed_;
  for (std::uint32_t n = 0; n < ctx_->spec.nodes.size(); ++n) {
    const auto it = standby_ready_.find(n);
    const bool up = policy_.node_up(node_id{n});
    j.nodes.push_back({ctx_->spec.nodes[n].name, up, up && it != standby_ready_.end() && it->second, "", ""});
    if (const auto verdict = policy_.check_of(node_id{n})) {
      j.nodes.back().check = verdict->passed ? "passed" : "quarantined";
      j.nodes.back().check_detail = verdict->detail;
    }
    if (const auto age = policy_.heartbeat_age(node_id{n}))
      j.nodes.back().heartbeat_age_s = std::chrono::duration<double>(*age).count();
    j.nodes.back().domain = ctx_->spec.nodes[n].domain;
    if (n < buddies_.size() && buddies_[n] && buddies_[n]->value() < ctx_->spec.nodes.size())
      j.nodes.back().buddy = ctx_->spec.nodes[buddies_[n]->value()].name;
  }
  j.balance = ctx_->spec.job.balance;
  j.micro_batches = shares_;
  for (const auto& [rank, s] : ranks_) {
    const rank_id r = rank;  // a structured binding cannot be captured (clang 14)
    const bool placed = std::any_of(policy_.placement().begin(), policy_.placement().end(),
                                    [&](const rank_slot& slot) { return slot.rank == r; });
    if (!placed)
      continue;
    rank_status_view v;
    v.rank = r.value();
    v.node = ctx_->spec.nodes.at(s.node).name;
    v.pid = s.pid;
    v.state = s.state;
    v.step = s.step;
    v.step_time_s = seconds(s.step_ns);
    v.compute_time_s = seconds(s.compute_ns);
    if (s.compute_cpu_ns > 0)
      v.compute_cpu_time_s = seconds(s.compute_cpu_ns);
    v.communication_time_s = seconds(s.communication_ns);
    v.data_time_s = seconds(s.data_ns);
    v.straggler_ratio = stragglers_.ratio(r);
    if (r.value() < shares_.size())
      v.micro_batches = shares_[r.value()];
    if (const auto p = pipeline_stages(); p > 1) {
      const auto at = config::position_in_pipeline(r.value(), p);
      v.stage = at.stage;
      v.replica = at.replica;
    }
    if (const auto it = slot_speed_.find({s.node, s.local_index}); it != slot_speed_.end())
      v.speed = it->second;
    v.snapshot_stall_s = seconds(s.snapshot_ns);
    v.last_snapshot = s.last_snapshot;
    v.restarts = s.restarts;
    j.ranks.push_back(std::move(v));
  }
  for (const auto& r : recoveries_.records()) {
    recovery_status v;
    v.epoch = r.epoch;
    v.cause = r.cause;
    v.failed_at_step = r.failed_at_step;
    v.restored_step = r.restored_step;
    v.steps_lost = r.steps_lost();
    v.source = r.source;
    v.done = r.done;
    v.detect_s = r.detect_s();
    v.respawn_s = r.respawn_s();
    v.rendezvous_s = r.rendezvous_s();
    v.restore_s = r.restore_s();
    v.first_step_s = r.first_step_s();
    v.between_s = r.between_s();
    v.total_s = r.total_s();
    v.detected_at_ns = r.detected_ns;
    v.first_step_at_ns = r.first_step_ns;
    if (r.injected_ns > 0)
      v.injected_at_ns = r.injected_ns;
    if (r.rank)
      v.rank = r.rank->value();
    if (r.node)
      v.node = ctx_->spec.nodes.at(r.node->value()).name;
    j.recoveries.push_back(std::move(v));
  }
  if (full) {
    j.losses = losses_;
    j.step_seconds = step_seconds_;
  }
  return j;
}

void supervisor_actor::record_loss(const progress_report& p, bool overwrite) {
  // Every rank reports the same loss (it is all-reduced); rank 0's counts, another's fills a
  // step rank 0's report never reached this supervisor (its node was away during a takeover).
  const auto step = p.step.value();
  // No step past the built-in job's last is trained; a program of the user's (job.command) has
  // its own number of steps, which the configuration does not know.
  if (step == 0 || (!ctx_->spec.job.external() && step > ctx_->spec.job.steps))
    return;
  if (losses_.size() < step) {
    losses_.resize(step, 0.0);
    step_seconds_.resize(step, 0.0);
  }
  if (overwrite || losses_[step - 1] == 0.0) {
    losses_[step - 1] = p.loss;
    step_seconds_[step - 1] = seconds(p.step_ns);
  }
  max_step_ = std::max(max_step_, step);
}

std::string supervisor_actor::status_json(bool full) const { return nlohmann::json(make_status(full)).dump(2); }

void supervisor_actor::write_status(bool final) {
  auto status = make_status(false);  // built once a tick: for the file and for the HTTP server
  status_file_.write(ctx_->data_dir / "status.json", nlohmann::json(status).dump(2));
  if (ctx_->board != nullptr)
    ctx_->board->publish(std::move(status), thin_losses(losses_, max_step_));
  if (final) {
    // The job's end: the last status is on disk before the report that says it ended, unless
    // the disk does not take it.
    if (!status_file_.flush(background_file_writer::default_stop_wait))
      spdlog::warn("status.json was not written within {} ms; the report is written anyway",
                   background_file_writer::default_stop_wait.count());
    (void)write_file_atomically(ctx_->data_dir / "report.json", status_json(true));
  }
}

}  // namespace rekindle::actors
