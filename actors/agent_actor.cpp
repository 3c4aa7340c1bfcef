#include "actors/agent_actor.hpp"

#include "actors/node_check.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/files.hpp"
#include "common/process.hpp"
#include "common/text.hpp"

namespace rekindle::actors {

namespace {

// Where this node's workers reach its daemon: the one address it listens on (node.bind, else its
// host); its host when it listens on every address. Never loopback unless configured: loopback is
// not listened on then, and transport.net_devices may leave it out.
std::string daemon_address_for_workers(const node_context& ctx) {
  const auto& node = ctx.spec.nodes.at(ctx.node.value());
  const bool any = node.bind == "0.0.0.0" || node.bind == "::";
  const auto& host = node.bind.empty() || any ? node.host : node.bind;
  return host + ":" + std::to_string(ctx.bridge->port());
}
// From a lost connection to the process's exit as the reaper sees it: a worker closes its
// endpoint a moment before it dies; a program's interpreter may take seconds to exit after it left.
constexpr std::chrono::milliseconds worker_exit_grace{50};
constexpr std::chrono::milliseconds program_exit_grace{3000};
// Progress reports kept while no supervisor is connected (about 100 bytes each).
constexpr std::size_t max_unsent_progress = 50000;
// Steps of the node's record replayed to each supervisor it connects to (one report a step).
constexpr std::size_t max_progress_history = 20000;
}  // namespace

agent_actor::agent_actor(caf::actor_config& cfg, node_context* ctx, caf::actor checkpoint)
    : caf::event_based_actor(cfg), ctx_(ctx), checkpoint_(std::move(checkpoint)) {}

template <class T>
void agent_actor::to_supervisor(const T& msg) {
  if (!ctx_->supervisor->send("agent", msg))
    spdlog::debug("agent: supervisor not connected; dropped {}", caf::deep_to_string(msg));
}

template <class T>
void agent_actor::to_worker(const worker& w, const T& msg) {
  if (w.peer)
    ctx_->bridge->send(*w.peer, "agent", "worker", msg);
}

agent_actor::worker* agent_actor::by_peer(transport::peer_id peer) {
  for (auto& [i, w] : workers_)
    if (w.peer == peer)
      return &w;
  return nullptr;
}

agent_actor::worker* agent_actor::by_rank(rank_id rank) {
  for (auto& [i, w] : workers_)
    if (w.rank == rank && w.epoch == epoch_ && !w.retiring)
      return &w;
  return nullptr;
}

void agent_actor::connect_to_supervisor() {
  if (connecting_ || ctx_->supervisor->peer() || finished_)
    return;
  const auto address = ctx_->supervisor_address();
  if (address.empty()) {
    delayed_send(this, std::chrono::milliseconds{200}, connect_atom::value);
    return;
  }
  auto to = parse_host_port(address);
  if (!to) {
    // Retried: the address may come from a file the supervisor's daemon has yet to rewrite.
    if (address != bad_address_)
      spdlog::error("agent: the supervisor's address is unusable: {}", to.error().message());
    bad_address_ = address;
    delayed_send(this, std::chrono::seconds{1}, connect_atom::value);
    return;
  }
  connecting_ = true;
  connecting_to_ = address;
  caf::actor self = this;
  ctx_->bridge->connect(to->host, to->port, [self](expected<transport::peer_info> r) {
    if (r)
      caf::anon_send(self, connect_atom::value, r->id);
    else
      caf::anon_send(self, connect_atom::value, r.error().message());
  });
}

void agent_actor::on_supervisor_up(transport::peer_id peer) {
  connecting_ = false;
  if (ctx_->with_standby() && connecting_to_ != ctx_->supervisor_address()) {
    // The leader changed while this connection was made: it goes to the new one instead.
    ctx_->bridge->close(peer);
    send(this, connect_atom::value);
    return;
  }
  ctx_->supervisor->set(peer);
  connected_to_ = connecting_to_;
  if (ctx_->with_standby())
    ctx_->bridge->follow_leader(peer);
  spdlog::info("agent connected to the supervisor node={} at {}", ctx_->node_name(), connected_to_);
  say_hello();
}

void agent_actor::say_hello() {
  to_supervisor(node_hello{ctx_->node, ctx_->node_name(), ctx_->address, static_cast<std::uint32_t>(getpid()),
                           reached_step_, std::max(epoch_, ctx_->bridge->epoch())});
  if (check_) {
    auto again = *check_;
    again.id = 0;
    to_supervisor(again);
  }
  if (!history_.empty())  // the losses it may never have heard of
    to_supervisor(progress_batch{std::max(epoch_, ctx_->bridge->epoch()), ctx_->node,
                                 std::vector<progress_report>(history_.begin(), history_.end()), true});
  flush_progress();  // what the ranks did while no supervisor heard
  caf::anon_send(checkpoint_, connect_atom::value);  // re-report what it holds
}

caf::behavior agent_actor::make_behavior() {
  ctx_->bridge->expose("agent", this);
  ctx_->bridge->watch_peers(this);
  send(this, connect_atom::value);
  delayed_send(this, ctx_->spec.timeouts.heartbeat, tick_atom::value);
  if (ctx_->spec.checks.preflight)
    start_node_check(0, 1.0);
  return {
      [this](connect_atom) { connect_to_supervisor(); },
      [this](connect_atom, transport::peer_id peer) { on_supervisor_up(peer); },
      [this](const envelope& from, const introduce_yourself& i) {
        // A supervisor that started after this agent connected to its daemon.
        if (ctx_->supervisor->peer() == from.peer) {
          spdlog::info("agent: the supervisor (term {}) asks for this node's hello", i.term);
          say_hello();
        }
      },
      [this](const leader_seen& l) {
        // etcd names another leader: the old one is left (its messages are dropped from now on)
        // and the new one hears this node's hello.
        const auto peer = ctx_->supervisor->peer();
        if (!peer || l.address == connected_to_)
          return;
        if (l.term == 0)
          spdlog::warn("agent: etcd names no supervisor now (its lease expired); leaving {}", connected_to_);
        else
          spdlog::warn("agent: the supervisor's leader is now {} at {} (term {}); leaving {}", l.node, l.address, l.term,
                       connected_to_);
        ctx_->supervisor->set(std::nullopt);
        ctx_->bridge->follow_leader(std::nullopt);
        ctx_->bridge->close(*peer);
        send(this, connect_atom::value);
      },
      [this](connect_atom, const std::string& why) {
        connecting_ = false;
        spdlog::info("agent cannot reach the supervisor yet ({}); retrying", why);
        delayed_send(this, std::chrono::milliseconds{300}, connect_atom::value);
      },
      [this](tick_atom) {
        tick();
        delayed_send(this, ctx_->spec.timeouts.heartbeat, tick_atom::value);
      },
      [this](const peer_event& e) {
        if (e.up)
          return;
        if (ctx_->supervisor->peer() == e.peer) {
          // Supervisor loss: workers keep training; reconnect and say hello again.
          spdlog::warn("agent lost the supervisor: {}", e.reason);
          ctx_->supervisor->set(std::nullopt);
          if (ctx_->with_standby())
            ctx_->bridge->follow_leader(std::nullopt);
          send(this, connect_atom::value);
          return;
        }
        if (auto* w = by_peer(e.peer)) {
          w->peer.reset();
          // Its endpoint failed (a stopped process stops answering UCX's keep-alive too): the
          // worker cannot be reached, which is what a missed heartbeat would say a little later.
          // A process that died closes its endpoint a moment before the reaper sees it exit: wait
          // that moment, so that its exit, not its silence, is what the supervisor hears.
          // A program's interpreter may take seconds to exit after it left: give it those, too.
          if (w->rank && !w->retiring && !w->reported_unresponsive && !w->leaving) {
            w->reported_unresponsive = true;
            delayed_send(this, w->external ? program_exit_grace : worker_exit_grace,
                         unreachable_atom::value, w->local_index, w->pid, e.reason);
          }
        }
      },
      [this](unreachable_atom, std::uint32_t local_index, std::int32_t pid, const std::string& reason) {
        auto it = workers_.find(local_index);
        if (it == workers_.end() || it->second.pid != pid || !it->second.rank || it->second.retiring)
          return;  // it exited meanwhile (its exit was reported) or is no longer a rank
        auto& w = it->second;
        spdlog::warn("worker unreachable local={} rank={}: {}", w.local_index, w.rank->value(), reason);
        to_supervisor(rank_trouble{w.epoch, *w.rank, ctx_->node, true,
                                                              "connection to its worker lost: " + reason});
      },
      // ---- from workers ----
      [this](const envelope& from, const worker_hello& h) {
        if (h.standby) {
          if (standby_ && standby_->pid == static_cast<std::int32_t>(h.pid)) {
            standby_->peer = from.peer;
            standby_->last_heartbeat = ctx_->time->now();
          }
          return;
        }
        auto it = workers_.find(h.local_index);
        // A program may join from a process it started (a shell that did not exec): any process
        // of its group.
        const auto pid = static_cast<std::int32_t>(h.pid);
        if (it == workers_.end() || it->second.retiring ||
            (it->second.pid != pid && !(it->second.external && ::getpgid(pid) == it->second.pid))) {
          spdlog::warn("agent: hello from unknown worker pid={} local={}", h.pid, h.local_index);
          return;
        }
        auto& w = it->second;
        if (w.external) {
          w.joined = true;
          api_seen_ = true;
          spdlog::info("agent: the program of local rank {} joined through the worker API (pid {})", w.local_index, pid);
        }
        w.peer = from.peer;
        w.last_heartbeat = ctx_->time->now();
        assign_worker(w);
      },
      // A program leaves the worker API before it exits: its connection closes, its exit decides.
      [this](const envelope& from, const rank_completed&) {
        if (auto* w = by_peer(from.peer))
          w->leaving = true;
      },
      [this](const envelope& from, const worker_heartbeat& h) {
        if (auto* w = by_peer(from.peer)) {
          w->last_heartbeat = ctx_->time->now();
          w->reported_unresponsive = false;
          w->position = h;
        }
      },
      [this](const envelope&, const rank_ready& r) { to_supervisor(r); },
      [this](const envelope&, const rank_restored& r) { to_supervisor(r); },
      [this](const envelope&, const rank_trouble& t) { to_supervisor(t); },
      [this](const envelope&, const restore_failed& f) { to_supervisor(f); },
      // A rank's step reports, batched by the rule the node's batches to the supervisor follow.
      [this](const envelope& from, const progress_batch& b) {
        if (by_peer(from.peer) == nullptr)
          return;
        if (b.reports.size() > progress_batching::max_batch) {
          spdlog::warn("agent: dropped a batch of {} step reports from a worker (at most {})", b.reports.size(),
                       progress_batching::max_batch);
          return;
        }
        const bool all_trained_before = all_local_ranks_trained();
        for (const auto& p : b.reports) {
          if (p.epoch != b.epoch)
            continue;
          if (p.epoch == epoch_) {
            if (trained_epoch_ != epoch_)
              trained_ranks_.clear();
            trained_epoch_ = epoch_;
            trained_ranks_.insert(p.rank);
            reached_step_ = std::max(reached_step_, p.step.value());
          }
          if (history_.empty() || p.epoch > history_.back().epoch || p.step > history_.back().step) {
            history_.push_back(p);
            if (history_.size() > max_progress_history)
              history_.pop_front();
          }
          progress_.push_back(p);
        }
        if (progress_.size() >= progress_batching::max_batch ||
            ctx_->time->now() - started_at_ < progress_batching::prompt_for)
          flush_progress();
        // Every rank of the node finished its first step of the epoch: the next standby starts
        // now, not at the next tick, so that a failure soon after finds it warm (and not sooner,
        // where it would slow a recovering rank's first step).
        if (!all_trained_before && all_local_ranks_trained())
          ensure_standby();
      },
      // ---- from the supervisor ----
      [this](const envelope&, const assign_ranks& a) { apply(a); },
      [this](const envelope&, const abort_epoch& a) {
        ctx_->bridge->set_epoch(a.epoch);
        if (a.epoch > epoch_)
          epoch_ = a.epoch;
        started_.reset();
        forget_stale_progress();
        for (auto& [i, w] : workers_)
          to_worker(w, a);
      },
      [this](const envelope&, const start_training& s) {
        started_ = s;
        started_at_ = ctx_->time->now();
        for (auto& [i, w] : workers_)
          if (w.epoch == s.epoch && w.rank && !w.retiring)
            to_worker(w, s);
      },
      // The node's checkpoint actor pins it in the slots and replicas (the workers only write).
      [this](const envelope&, const snapshot_committed& c) { caf::anon_send(checkpoint_, c); },
      [this](const envelope&, const persist_request& p) { caf::anon_send(checkpoint_, p); },
      [this](const envelope&, const link_probe_request& r) { caf::anon_send(checkpoint_, r); },
      [this](const envelope&, const node_check_request& r) {
        start_node_check(r.id, std::clamp(r.slow_factor, 1.0, 100.0), r.slow_only);
      },
      [this](const node_check_report& r) {
        // From the check's thread.
        spdlog::info("node check of {}: compute {:.2f} GFLOP/s, memory {:.2f} GB/s, disk {:.1f} MB/s (fsync {:.1f} ms), "
                     "{} GPU(s){}",
                     ctx_->node_name(), r.gemm_gflops, r.memory_gbps, r.disk_mbps, r.fsync_ms, r.gpus,
                     r.error.empty() ? "" : "; " + r.error);
        check_ = r;
        if (ctx_->supervisor->peer())
          to_supervisor(r);
      },
      [this](const envelope&, const kill_request& k) {
        if (auto* w = by_rank(k.rank)) {
          spdlog::warn("agent kills rank={} pid={} signal={} reason=\"{}\"", k.rank.value(), w->pid, k.signal, k.reason);
          if (k.reason == "hung" || k.reason == "unresponsive")
            kill_hung(*w, k);
          else
            ::kill(w->pid, k.signal);
        }
      },
      [this](const rank_stack& s) { to_supervisor(s); },
      [this](const envelope&, const drill_request& d) {
        if (auto* w = by_rank(d.rank)) {
          spdlog::warn("agent: fault drill on rank={} pid={}: {} (factor {})", d.rank.value(), w->pid, to_string(d.kind), d.factor);
          to_worker(*w, d);
        }
      },
      [this](const envelope&, const partition_request& p) {
        if (p.bytes_per_second > 0) {
          // A slow link: the daemons' traffic (replication, state transfers, link probes) crawls;
          // the ranks' ring is not slowed by it.
          spdlog::warn("agent: slow link drill: traffic with node {} at {:.2f} MB/s for {} ms", p.peer.value(),
                       p.bytes_per_second / 1e6, p.duration_ns / 1000000);
          ctx_->bridge->throttle(p.peer, p.bytes_per_second, std::chrono::nanoseconds{p.duration_ns});
          return;
        }
        spdlog::warn("agent: partition drill: traffic with node {} dropped for {} ms", p.peer.value(), p.duration_ns / 1000000);
        ctx_->bridge->cut_off(p.peer, std::chrono::nanoseconds{p.duration_ns});
        // The data plane crosses the cut too: this node's ranks stall their steps as long (their
        // ring reaches the other node; its ranks wait on them in turn).
        for (auto& [i, w] : workers_)
          if (w.rank && !w.retiring)
            to_worker(w, drill_request{w.epoch, *w.rank, drill_kind::stall, static_cast<double>(p.duration_ns) / 1e9});
      },
      [this](const envelope&, const fail_node& f) {
        spdlog::warn("agent: node fault drill ({}): this daemon dies now", f.reason);
        ::kill(getpid(), SIGKILL);
      },
      [this](const envelope&, const job_finished& j) {
        finished_ = true;
        spdlog::info("agent: job {} {}", j.state, j.reason);
        // For a daemon that exits when the job is done and shares no folder with the supervisor's.
        (void)write_file_atomically(ctx_->node_dir / "job.done", j.state + "\n");
        for (auto& [i, w] : workers_) {
          to_worker(w, j);
          if (w.external && !w.retiring)
            stop_worker(w, SIGTERM, "the job ended");
          w.retiring = true;
        }
        if (standby_)
          ::kill(standby_->external ? -standby_->pid : standby_->pid, SIGTERM);
        caf::anon_send(checkpoint_, j);
      },
      // ---- from the reaper thread ----
      [this](const child_exited& c) {
        if (standby_ && standby_->pid == c.pid) {
          spdlog::info("standby worker pid={} exited", c.pid);
          standby_.reset();
          return;
        }
        for (auto it = workers_.begin(); it != workers_.end(); ++it) {
          auto& w = it->second;
          if (w.pid != c.pid)
            continue;
          std::string detail;
          int code = 0, sig = 0;
          if (WIFSIGNALED(c.status)) {
            sig = WTERMSIG(c.status);
            detail = "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
          } else {
            code = WEXITSTATUS(c.status);
            detail = "exited with status " + std::to_string(code);
          }
          const bool failure = !w.retiring && !finished_ && w.rank && (sig != 0 || code != 0);
          spdlog::info("worker exited local={} pid={} rank={} {}{}", w.local_index, w.pid,
                       w.rank ? std::to_string(w.rank->value()) : "-", detail, failure ? "" : " (expected)");
          // An exit is a fact about a process: a process the current epoch counts on (its slot is
          // assigned the same rank now) ended in the current epoch, even when it died before it
          // could be told of that epoch. Stamped with the epoch it last heard of, it would be
          // dropped as old news and the epoch would wait for it until the rendezvous timeout.
          const auto a = w.rank ? assignment_.find(w.local_index) : assignment_.end();
          const epoch_t at = a != assignment_.end() && a->second.rank == *w.rank ? epoch_ : w.epoch;
          if (failure)
            to_supervisor(rank_exited{at, *w.rank, ctx_->node, code, sig, detail, c.at_ns});
          else if (w.external && w.rank && !w.retiring && !finished_)
            to_supervisor(rank_completed{at, *w.rank, ctx_->node});
          workers_.erase(it);
          return;
        }
      },
      [this](spawn_atom, std::uint32_t local_index, epoch_t epoch) {
        // A delayed restart: still wanted?
        auto a = assignment_.find(local_index);
        // A process of an older epoch that is being stopped does not hold the place.
        const auto w = workers_.find(local_index);
        if (epoch != epoch_ || a == assignment_.end() || (w != workers_.end() && !w->second.retiring) || finished_)
          return;
        spawn_worker(local_index);
      },
  };
}

void agent_actor::apply(const assign_ranks& a) {
  epoch_ = a.epoch;
  reached_step_ = 0;  // the new epoch's ranks start again from its restore step
  world_ = a.world;
  rank0_host_ = a.rank0_host;
  ctx_->bridge->set_epoch(a.epoch);
  started_.reset();
  forget_stale_progress();
  assignment_.clear();
  new_processes_ = false;
  for (const auto& r : a.ranks) {
    assignment_[r.local_index] = r;
    new_processes_ = new_processes_ || r.new_process;
  }
  if (new_processes_ && standby_) {
    spdlog::info("agent stops standby pid={}: every epoch starts new processes", standby_->pid);
    ::kill(standby_->pid, SIGKILL);
    standby_.reset();
  }
  caf::anon_send(checkpoint_, a);
  // Workers no longer wanted here leave; the others learn their rank in the new epoch. A user's
  // program that never joined through the worker API cannot learn a new rank or world: every
  // epoch starts every such program again.
  for (auto& [i, w] : workers_)
    if (w.external && !w.retiring && (!w.joined || !w.peer))
      stop_worker(w, SIGKILL, "epoch " + std::to_string(a.epoch.value()) + " starts every rank's program again");
    else if (!assignment_.contains(i) && !w.retiring)
      stop_worker(w, w.external ? SIGKILL : SIGTERM, "not assigned in epoch " + std::to_string(a.epoch.value()));
    else if (!w.retiring && assignment_.at(i).new_process)
      stop_worker(w, SIGKILL, "epoch " + std::to_string(a.epoch.value()) + " starts every rank's process again");
  for (const auto& [i, r] : assignment_) {
    auto it = workers_.find(i);
    if (it != workers_.end() && !it->second.retiring) {
      assign_worker(it->second);
      if (it->second.external)
        register_program(it->second);
    } else if (r.delay_ns > 0) {
      delayed_send(this, std::chrono::nanoseconds{r.delay_ns}, spawn_atom::value, i, a.epoch);
    } else {
      spawn_worker(i);
    }
  }
}

void agent_actor::assign_worker(worker& w) {
  auto a = assignment_.find(w.local_index);
  if (a == assignment_.end() || !w.peer)
    return;
  w.rank = a->second.rank;
  w.epoch = epoch_;
  w.world = world_;
  const auto meet = bootstrap();
  to_worker(w, worker_assignment{epoch_, a->second.rank, world_, meet.host + ":" + std::to_string(meet.port)});
  if (started_)
    to_worker(w, *started_);
}

host_port agent_actor::bootstrap() const {
  return {rank0_host_.empty() ? std::string{"127.0.0.1"} : rank0_host_,
          static_cast<std::uint16_t>(ctx_->spec.job.master_port + epoch_.value() % config::job_spec::master_port_span)};
}

void agent_actor::register_program(const worker& w) {
  // A program's data plane is its own (its process group): it is ready as soon as it runs, or
  // is told its rank.
  if (w.rank)
    to_supervisor(rank_ready{epoch_, *w.rank, ctx_->node, w.local_index, static_cast<std::uint32_t>(w.pid), {}});
}

void agent_actor::stop_worker(worker& w, int signal, const std::string& why) {
  spdlog::info("agent stops worker local={} pid={}: {}", w.local_index, w.pid, why);
  w.retiring = true;
  // A user's program may have started processes of its own (data loaders): its whole group goes.
  ::kill(w.external ? -w.pid : w.pid, signal);
}

void agent_actor::spawn_worker(std::uint32_t local_index) {
  if (standby_ && standby_->peer && !new_processes_) {
    // Promote the warm standby: it only has to open the slot and the communicator (a program's
    // standby has imported its framework and built its model).
    worker w = *standby_;
    standby_.reset();
    w.local_index = local_index;
    w.last_heartbeat = ctx_->time->now();
    w.joined = w.external;
    auto& placed = workers_[local_index] = w;
    spdlog::info("agent activates standby pid={} as local rank {} epoch={}", placed.pid, local_index, epoch_.value());
    to_worker(placed, worker_activate{local_index});
    assign_worker(placed);
    if (placed.external)
      register_program(placed);
    return;
  }
  if (ctx_->spec.job.external()) {
    spawn_program(local_index);
    return;
  }
  const auto pid = fork_worker(local_index);
  if (pid < 0)
    return;
  worker w;
  w.local_index = local_index;
  w.pid = pid;
  w.last_heartbeat = ctx_->time->now();
  workers_[local_index] = w;
  spdlog::info("agent started worker local={} pid={} epoch={}", local_index, pid, epoch_.value());
}

bool agent_actor::all_local_ranks_trained() const {
  return trained_epoch_ == epoch_ && std::all_of(assignment_.begin(), assignment_.end(), [&](const auto& a) {
           return trained_ranks_.contains(a.second.rank);
         });
}

void agent_actor::ensure_standby() {
  // Not while an epoch starts: a new process competes for the cores the recovering ranks need.
  // The next standby comes once the epoch trains. A user's program gets one once a program of
  // the job joined through the worker API (one that never does could not be activated).
  const bool external = ctx_->spec.job.external();
  if (standby_ || new_processes_ || finished_ || epoch_.value() == 0 || trained_epoch_ != epoch_ ||
      (external && !api_seen_))
    return;
  const auto pid = external ? start_program(std::nullopt) : fork_worker(std::nullopt);
  if (pid < 0)
    return;
  worker w;
  w.local_index = ~0u;
  w.pid = pid;
  w.external = external;
  standby_ = w;
}

void agent_actor::spawn_program(std::uint32_t local_index) {
  const auto a = assignment_.find(local_index);
  if (a == assignment_.end())
    return;
  const auto pid = start_program(local_index);
  if (pid < 0)
    return;
  const auto rank = a->second.rank;
  worker w;
  w.local_index = local_index;
  w.external = true;
  w.rank = rank;
  w.epoch = epoch_;
  w.world = world_;
  w.last_heartbeat = ctx_->time->now();
  w.pid = pid;
  spdlog::info("agent started the program of rank {} local={} pid={} epoch={}", rank.value(), local_index, pid,
               epoch_.value());
  // Started is as registered as a program without the API gets.
  register_program(workers_[local_index] = w);
}

std::int32_t agent_actor::start_program(std::optional<std::uint32_t> local_index) {
  const auto& job = ctx_->spec.job;
  const std::optional<rank_assignment> a =
      local_index ? std::optional{assignment_.at(*local_index)} : std::optional<rank_assignment>{};
  const auto fail = [&](const std::string& why) {
    if (!a) {
      spdlog::warn("agent cannot start a standby of the program: {}", why);
      return -1;
    }
    spdlog::error("agent cannot start the program of rank {}: {}", a->rank.value(), why);
    to_supervisor(rank_exited{epoch_, a->rank, ctx_->node, 127, 0, "job.command could not be started: " + why,
                              now_ns(*ctx_->time)});
    return -1;
  };
  auto program = find_program(job.command.front(), job.workdir);
  if (!program)
    return fail(program.error().message());
  std::vector<std::string> argv = job.command;
  argv.front() = program->string();
  child_options o;
  o.log = ctx_->node_dir / (a ? "rank-" + std::to_string(a->rank.value()) + ".log" : std::string{"rank-standby.log"});
  o.workdir = job.workdir;
  if (a) {
    // The torchrun environment of this rank in this epoch. A standby has none yet: it learns its
    // rank from the worker API when it is activated.
    const auto meet = bootstrap();
    o.env = {{"RANK", std::to_string(a->rank.value())},
             {"LOCAL_RANK", std::to_string(*local_index)},
             {"WORLD_SIZE", std::to_string(world_)},
             {"MASTER_ADDR", meet.host},
             {"MASTER_PORT", std::to_string(meet.port)},
             {"TORCHELASTIC_RESTART_COUNT", std::to_string(epoch_.value() - 1)},
             {"REKINDLE_EPOCH", std::to_string(epoch_.value())}};
  } else {
    o.env = {{"REKINDLE_STANDBY", "1"}};
  }
  o.env.insert(o.env.end(),
               {{"LOCAL_WORLD_SIZE", std::to_string(assignment_.size())},
                {"GROUP_RANK", std::to_string(ctx_->node.value())},
                {"TORCHELASTIC_RUN_ID", job.name},
                {"REKINDLE_NODE", ctx_->node_name()},
                {"REKINDLE_JOB", job.name},
                // What the worker API (api/rekindle.h) joins with.
                {"REKINDLE_AGENT", daemon_address_for_workers(*ctx_)},
                {"REKINDLE_CONFIG", std::filesystem::absolute(ctx_->config_path).string()},
                {"REKINDLE_DATA_DIR", std::filesystem::absolute(ctx_->data_dir).string()}});
  // `import rekindle` finds the package built next to this daemon, ahead of the program's path
  // (job.env's PYTHONPATH, else the daemon's).
  const auto python = ctx_->worker_binary.parent_path().parent_path() / "python";
  const char* inherited = std::getenv("PYTHONPATH");
  std::string python_path = inherited ? inherited : "";
  for (const auto& [name, value] : job.env)
    if (name == "PYTHONPATH")
      python_path = value;
    else
      o.env.emplace_back(name, value);
  if (std::filesystem::is_directory(python))
    python_path = python.string() + (python_path.empty() ? "" : ":" + python_path);
  if (!python_path.empty())
    o.env.emplace_back("PYTHONPATH", python_path);
  auto pid = spawn_child(argv, o);
  if (!pid)
    return fail(pid.error().message());
  if (!a)
    spdlog::info("agent started a standby of the program pid={}", *pid);
  return *pid;
}

std::int32_t agent_actor::fork_worker(std::optional<std::uint32_t> local_index) {
  const auto log = ctx_->node_dir / (local_index ? "worker-" + std::to_string(*local_index) + ".log"
                                                 : std::string{"worker-standby.log"});
  std::vector<std::string> args{ctx_->worker_binary.string(),
                                "--node",
                                ctx_->node_name(),
                                "--agent",
                                daemon_address_for_workers(*ctx_),
                                "--data-dir",
                                ctx_->data_dir.string(),
                                "--config",
                                ctx_->config_path.empty() ? std::string{"-"} : ctx_->config_path.string()};
  if (local_index) {
    args.push_back("--local-index");
    args.push_back(std::to_string(*local_index));
  } else {
    args.push_back("--standby");
  }
  auto pid = spawn_child(args, {.log = log});
  if (!pid) {
    spdlog::error("agent cannot start a worker: {}", pid.error().message());
    return -1;
  }
  return *pid;
}

void agent_actor::forget_stale_progress() {
  // A batch holds one epoch's reports: those of an older one would be dropped as stale anyway.
  std::erase_if(progress_, [&](const progress_report& p) { return p.epoch < epoch_; });
}

void agent_actor::flush_progress() {
  if (progress_.empty())
    return;
  if (!ctx_->supervisor->peer()) {
    // Nobody to tell (a supervisor restarting, a standby taking over): the reports wait for the
    // next one, the newest kept, so it learns the losses of the steps trained meanwhile.
    if (progress_.size() > max_unsent_progress)
      progress_.erase(progress_.begin(), progress_.end() - static_cast<std::ptrdiff_t>(max_unsent_progress));
    return;
  }
  to_supervisor(progress_batch{epoch_, ctx_->node, std::move(progress_)});
  progress_.clear();
}

std::vector<rank_position> agent_actor::positions() const {
  std::vector<rank_position> out;
  for (const auto& [i, w] : workers_)
    if (w.rank && w.epoch == epoch_ && w.position && w.position->epoch == epoch_)
      out.push_back({*w.rank, epoch_, w.position->seq, w.position->kind, w.position->phase, w.position->for_ns,
                     w.position->p2p_kind, w.position->p2p_phase, w.position->p2p_peer, w.position->p2p_for_ns});
  return out;
}

namespace {
// Threads started by agents that have not ended.
std::atomic<int> agent_threads{0};
}  // namespace

bool wait_for_agent_threads(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (agent_threads.load() > 0) {
    if (std::chrono::steady_clock::now() >= until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return true;
}

void agent_actor::kill_hung(const worker& w, const kill_request& k) {
  // The stack comes from outside the process (eu-stack attaches with ptrace), so a rank stuck in
  // a kernel or a syscall shows where; the kill follows whether or not it could be taken.
  ++agent_threads;
  std::thread([self = caf::actor_cast<caf::actor>(this), pid = w.pid, k, node = ctx_->node]() mutable {
    name_this_thread("rk-stack");
    auto stack = capture_stack(pid, std::chrono::seconds{5});
    ::kill(pid, k.signal);
    rank_stack out{k.epoch, k.rank, node, {}, {}};
    if (stack)
      out.stack = std::move(*stack);
    else
      out.error = stack.error().message();
    caf::anon_send(self, std::move(out));
    self = caf::actor{};  // released before the daemon may take its actor system down
    --agent_threads;
  }).detach();
}

void agent_actor::start_node_check(std::uint64_t id, double slow_factor, const std::string& slow_only) {
  auto options = node_check_options_of(ctx_->spec, ctx_->node.value());
  options.slow_factor = slow_factor;
  options.slow_only = slow_only;
  ++agent_threads;
  std::thread([self = caf::actor_cast<caf::actor>(this), options, id, node = ctx_->node]() mutable {
    name_this_thread("rk-node-check");
    caf::anon_send(self, report_of(node, id, check_node(options)));
    self = caf::actor{};  // released before the daemon may take its actor system down
    --agent_threads;
  }).detach();
}

void agent_actor::tick() {
  flush_progress();
  ensure_standby();
  if (ctx_->supervisor->peer())
    to_supervisor(node_heartbeat{ctx_->node, ++heartbeat_seq_, standby_ && standby_->peer, positions()});
  const auto now = ctx_->time->now();
  // A tick long after the last one: this process was not running (paused, or the machine was);
  // the workers' silence in the meantime says nothing about them.
  if (last_tick_ && now - *last_tick_ > ctx_->spec.timeouts.node / 2) {
    spdlog::warn("agent did not run for {}; worker heartbeats get a new timeout", format_duration(now - *last_tick_));
    for (auto& [i, w] : workers_)
      w.last_heartbeat = std::max(w.last_heartbeat, now);
  }
  last_tick_ = now;
  for (auto& [i, w] : workers_) {
    // A ranked worker without a connection lost it: its heartbeats age like a silent one's. A
    // user's program has heartbeats once it joined through the worker API.
    if (!w.rank || w.retiring || w.reported_unresponsive || (w.external && (!w.joined || w.leaving)))
      continue;
    if (now - w.last_heartbeat > ctx_->spec.timeouts.node) {
      w.reported_unresponsive = true;
      const auto silent = format_duration(now - w.last_heartbeat);
      spdlog::warn("worker unresponsive local={} rank={} silent for {}", i, w.rank->value(), silent);
      to_supervisor(rank_trouble{w.epoch, *w.rank, ctx_->node, true,
                                                            "no heartbeat for " + silent});
    }
  }
}

}  // namespace rekindle::actors
