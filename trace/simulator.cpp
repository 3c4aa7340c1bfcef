// The discrete-event simulator: the real supervisor policy, simulated agents and checkpoint
// actors, modelled durations. docs/TRACES.md ("Simulator") describes the model.

#include "trace/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <variant>

#include "policy/checkpoint_coordinator.hpp"
#include "policy/supervisor_policy.hpp"
#include "common/check.hpp"
#include "common/clock.hpp"
#include "common/text.hpp"
#include "trace/custody_model.hpp"

namespace rekindle::trace {

namespace {

using policy::policy_action;
using policy::state_source;
using policy::supervisor_policy;

constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

std::int64_t seconds_to_ns(double s) {
  const double ns = s * 1e9;
  if (ns >= 9.0e18)
    return never;
  return static_cast<std::int64_t>(std::llround(ns));
}

std::int64_t add(std::int64_t t, std::int64_t d) { return (t == never || d == never || t > never - d) ? never : t + d; }

enum class ev_type : unsigned char {
  fault,
  node_return,
  stall_end,
  slow_end,
  tick,
  ranks_ready,
  training_start,
  collective_timeout,
  exit_seen,
};

struct queued {
  std::int64_t at = 0;
  std::uint64_t seq = 0;
  ev_type type = ev_type::tick;
  std::uint32_t a = 0;
  std::uint64_t b = 0;
  bool operator>(const queued& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

// Where the job is, for the accounting of wall time (each phase's time goes to one category):
//
//   training ──(1) a fault stops it──► stalled ──(2) the policy starts an epoch──► restarting
//     ▲  ▲                               │                                           │
//     │  └──(3) a short hang or cut link ends                     (4) every rank registered
//     │                                                                              ▼
//     └───────────────────(5) rendezvous and restore done─────────────────── rendezvous
//   training, rendezvous ─(2) an epoch (a scale, a fault during recovery)─► restarting
//   any ─(6) the policy ends the job─► done (completed) or down (failed, stopped)
//
// stalled: detection; restarting: restart; rendezvous: rendezvous, then restore; down: down.
enum class phase : unsigned char { training, stalled, restarting, rendezvous, done, down };
enum class segment : unsigned char { compute, snapshot, persist, checkpoint };

// A checkpoint being written to disk.
struct write_record {
  std::uint64_t step = 0;
  std::int64_t start = 0;
  std::int64_t done = 0;
  bool corrupt = false;
};

// What the policy was told a node holds (custody_model): sync() reports the difference.
struct told {
  std::vector<policy::copy_tag> slot;
  std::vector<policy::copy_tag> window;
  /// The node told to hold `window`: the node's buddy in the epoch that started last.
  node_id window_holder{~std::uint32_t{0}};
  /// The node's ranks in that epoch (the window's copies are of each of them).
  std::vector<rank_id> ranks;
};

// Replicas a node holds of ranks it no longer guards (their node has another buddy, or they moved
// to another node): they go when the pin passes all of them (policy::outdated_by, the rule of
// replica_window::pin).
struct stale_replicas {
  node_id holder;
  std::vector<rank_id> ranks;
  std::vector<policy::copy_tag> copies;
};

struct interval {
  std::uint32_t node = 0;
  std::uint32_t peer = 0;
  std::int64_t start = 0;
  std::int64_t end = never;
  double factor = 1.0;
};

struct node_state {
  bool up = true;
  std::int64_t back_at = never;
  /// Processes alive, by local slot index.
  std::vector<std::uint8_t> alive;
};

// Why training stopped, while it waits.
struct stall_state {
  bool active = false;
  enum class cause : unsigned char { fault, hang, link } why = cause::fault;
  std::uint32_t rank = 0;
  bool collective_failed = false;
};

class simulator {
 public:
  simulator(const fault_trace& t, cluster_shape cluster, const model& m, policy_kind p, std::int64_t horizon)
      : trace_(t),
        cluster_(std::move(cluster)),
        m_(m),
        kind_(p),
        policy_(policy_config_of(cluster_, m, p), clock_),
        horizon_(horizon),
        custody_(m.snapshot_every),
        coordinator_(p == policy_kind::in_place ? m.persist_every : 0, m.snapshot_every, clock_) {
    nodes_.resize(cluster_.nodes().size());
    const auto widest = cluster_.widest();  // a walk over the nodes: once, not once a node
    for (std::size_t n = 0; n < nodes_.size(); ++n)
      nodes_[n].alive.assign(std::max<std::uint32_t>(cluster_.nodes()[n].ranks, widest), 0);
    in_placement_.assign(nodes_.size(), 0);
    memory_lost_.assign(nodes_.size(), 0);
    buddy_holders_.assign(nodes_.size(), node_id{~std::uint32_t{0}});
    previous_buddies_ = buddy_holders_;
    world0_ = cluster_.world();
    // Resolve every target once.
    target_node_.assign(t.events.size(), 0);
    target_peer_.assign(t.events.size(), 0);
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const auto& e = t.events[i];
      if (e.target.kind != fault_target::type::rank)
        target_node_[i] = cluster_.find(e.target.node).value_or(0);
      if (e.target.kind == fault_target::type::link)
        target_peer_[i] = cluster_.find(e.target.peer).value_or(0);
    }
    result_.policy = p;
    result_.faults = static_cast<std::uint32_t>(t.events.size());
  }

  sim_result run() {
    start();
    for (std::size_t i = 0; i < trace_.events.size(); ++i) {
      if (trace_.events[i].at)
        push(seconds_to_ns(*trace_.events[i].at), ev_type::fault, static_cast<std::uint32_t>(i));
      else
        step_events_.push_back(i);
    }
    while (phase_ != phase::done && phase_ != phase::down) {
      // Train up to the next event (or the end); a step-triggered fault may come first.
      advance_training(queue_.empty() ? horizon_ : std::min(queue_.top().at, horizon_));
      if (phase_ == phase::done || queue_.empty() || queue_.top().at > horizon_)
        break;
      const auto next = queue_.top();
      queue_.pop();
      set_time(next.at);
      handle(next);
    }
    finish();
    return std::move(result_);
  }

 private:
  using node_id = rekindle::node_id;

  static policy::policy_config policy_config_of(const cluster_shape& c, const model& m, policy_kind p) {
    policy::policy_config pc;
    pc.restart_all = p == policy_kind::restart_all;
    for (const auto& n : c.nodes())
      pc.nodes.push_back({n.name, n.spare ? 0u : n.ranks, n.spare, n.domain});
    pc.buddy_across_domains = m.buddy_across_domains != 0;
    pc.total_steps = m.steps > 0 ? m.steps : std::numeric_limits<std::uint64_t>::max() / 2;
    pc.snapshot_every = m.snapshot_every;
    pc.hang_timeout = m.hang_timeout;
    pc.collective_timeout = m.collective_timeout;
    pc.node_timeout = m.node_timeout;
    pc.rendezvous_timeout = m.rendezvous_timeout;
    pc.max_restarts = m.max_restarts > 0 ? m.max_restarts : std::numeric_limits<std::uint32_t>::max();
    pc.max_restarts_per_rank = m.max_restarts_per_rank > 0 ? m.max_restarts_per_rank : std::numeric_limits<std::uint32_t>::max();
    pc.backoff = m.backoff;
    pc.backoff_max = m.backoff_max;
    return pc;
  }

  // ---- time and queue ------------------------------------------------------------------------

  void set_time(std::int64_t t) {
    RK_CHECK_GE(t, now_);
    clock_.advance(std::chrono::nanoseconds{t - now_});
    now_ = t;
  }

  void push(std::int64_t at, ev_type type, std::uint32_t a = 0, std::uint64_t b = 0) {
    if (at == never || at > horizon_)
      return;
    queue_.push(queued{at, seq_++, type, a, b});
  }

  void tick_at(std::int64_t t) { push(add(t, m_.tick.count()), ev_type::tick); }

  // ---- accounting ----------------------------------------------------------------------------

  void credit(lost l, std::int64_t ns) { result_.lost_time[static_cast<std::size_t>(l)] += static_cast<double>(ns) * 1e-9; }

  void set_phase(phase p) {
    const auto spent = now_ - phase_since_;
    switch (phase_) {
      case phase::stalled: credit(lost::detection, spent); break;
      case phase::restarting: credit(lost::restart, spent); break;
      case phase::rendezvous: {
        const auto rv = std::min(now_, rendezvous_end_) - phase_since_;
        credit(lost::rendezvous, std::max<std::int64_t>(rv, 0));
        credit(lost::restore, spent - std::max<std::int64_t>(rv, 0));
        break;
      }
      case phase::down: credit(lost::down, spent); break;
      case phase::training:
      case phase::done: break;
    }
    phase_ = p;
    phase_since_ = now_;
  }

  // ---- training ------------------------------------------------------------------------------

  [[nodiscard]] std::int64_t step_duration() const {
    // A slow rank stretches the compute part of the step; the step waits for the slowest rank.
    const double slowed = 1.0 - m_.compute_share + m_.compute_share * slow_factor_;
    const double ns = static_cast<double>(m_.step_time.count()) * (static_cast<double>(world0_) / std::max<std::uint32_t>(world_, 1)) *
                      slowed;
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(ns)));
  }

  void start_segment(segment s, std::int64_t length) {
    seg_ = s;
    seg_start_ = now_training_;
    seg_end_ = add(seg_start_, length);
  }

  [[nodiscard]] std::int64_t write_time() const {
    return seconds_to_ns(static_cast<double>(m_.state_size) / m_.persist_bandwidth);
  }

  void begin_training() {
    set_phase(phase::training);
    now_training_ = now_;
    start_segment(segment::compute, step_duration());
    // A cut link between two of the job's nodes fails the first collective.
    for (std::uint32_t i = 0; i < links_.size(); ++i) {
      const auto& l = links_[i];
      if (l.end > now_ && in_placement_[l.node] && in_placement_[l.peer]) {
        stall(stall_state::cause::link, 0);
        push(add(now_, m_.collective_timeout.count()), ev_type::collective_timeout, 0, stall_token_);
        tick_at(add(now_, m_.hang_timeout.count()));
        break;
      }
    }
  }

  // Completes every segment that ends by `until`. Stops early at a step that triggers an
  // at_step fault (queued at that moment) and at the job's last step.
  void advance_training(std::int64_t until) {
    while (phase_ == phase::training && seg_end_ <= until) {
      const auto t = seg_end_;
      const auto length = seg_end_ - seg_start_;
      now_training_ = t;
      switch (seg_) {
        case segment::compute: {
          ++step_;
          if (step_ > high_water_) {
            const auto nominal = m_.step_time.count();
            result_.useful += static_cast<double>(nominal) * 1e-9;
            credit(lost::degraded, length - nominal);
            high_water_ = step_;
          } else {
            credit(lost::recompute, length);
          }
          if (m_.steps > 0 && step_ >= m_.steps) {
            set_time(t);
            sync();
            if (phase_ == phase::done)
              return;
          }
          bool triggered = false;
          while (next_step_event_ < step_events_.size() &&
                 *trace_.events[step_events_[next_step_event_]].at_step <= high_water_) {
            push_front_fault(t, static_cast<std::uint32_t>(step_events_[next_step_event_++]));
            triggered = true;
          }
          // A snapshot the slot rule skips costs no stall (the worker exports nothing); the rule
          // sees the replicas (and so the commits) that arrived by now.
          if (kind_ == policy_kind::in_place && step_ % m_.snapshot_every == 0 && snapshot_written(t))
            start_segment(segment::snapshot, m_.snapshot_stall.count());
          else if (kind_ == policy_kind::restart_all && step_ % m_.checkpoint_every == 0)
            start_segment(segment::checkpoint, write_time());
          else
            start_segment(segment::compute, step_duration());
          if (triggered)
            return;
          break;
        }
        case segment::snapshot: {
          credit(lost::snapshots, length);
          if (snapshot_published(t) && m_.persist_stall.count() > 0) {
            start_segment(segment::persist, m_.persist_stall.count());
            break;
          }
          start_segment(segment::compute, step_duration());
          break;
        }
        case segment::persist:
          credit(lost::checkpoints, length);
          start_segment(segment::compute, step_duration());
          break;
        case segment::checkpoint:
          credit(lost::checkpoints, length);
          // The baseline's synchronous checkpoint commits when no node was lost and no disk was
          // full while it was written.
          ++result_.checkpoints;
          if (node_lost_within(seg_start_, t) || disk_full_within(seg_start_, t))
            ++result_.checkpoints_failed;
          else
            policy_.on_checkpoint_committed(step_t{step_}, world_);
          start_segment(segment::compute, step_duration());
          break;
      }
    }
  }

  void push_front_fault(std::int64_t t, std::uint32_t index) {
    // Ahead of anything else at the same time: the fault happens as the step completes.
    queue_.push(queued{t, front_seq_++, ev_type::fault, index, 0});
  }

  // ---- snapshots and checkpoints, by the rules of a live job ----------------------------------

  [[nodiscard]] std::int64_t replicate_time() const {
    return seconds_to_ns(static_cast<double>(m_.state_size) / m_.buddy_bandwidth);
  }

  // Whether the snapshot of step_, due at t, is written (else the slot rule skips it).
  bool snapshot_written(std::int64_t t) {
    custody_.deliver(t, [&](std::int64_t from, std::int64_t to) { return node_lost_within(from, to); });
    return custody_.would_write(step_t{step_});
  }

  // The snapshot of step_ is published at t by every rank (the slot rule chose each node's half):
  // its replicas set off, and a checkpoint begins when one is due. Returns whether one began.
  bool snapshot_published(std::int64_t t) {
    finish_persist(t);
    custody_.deliver(t, [&](std::int64_t from, std::int64_t to) { return node_lost_within(from, to); });
    custody_.publish(step_t{step_}, t, add(t, replicate_time()));
    const auto e = policy_.epoch();
    const auto due = coordinator_.on_slot_report_all(step_t{step_}, e, world_);
    if (!due || !custody_.every_slot_holds(*due))
      return false;
    (void)coordinator_.begin(*due, e, world_);
    coordinator_.begun();
    persisting_ = write_record{step_, t, add(t, write_time())};
    ++result_.checkpoints;
    return true;
  }

  // The checkpoint being written, once its write is done by `now`: committed when no node of the
  // job was lost and no disk of the job was full meanwhile (and it was not damaged).
  void finish_persist(std::int64_t now) {
    if (!persisting_ || persisting_->done > now)
      return;
    const auto p = *persisting_;
    persisting_.reset();
    const bool lost = node_lost_within(p.start, p.done);
    const bool full = disk_full_within(p.start, p.done);
    for (auto& a : coordinator_.on_every_shard(!lost && !full && !p.corrupt, "a node of the job",
                                               lost ? "node lost" : full ? "disk full" : "damaged")) {
      if (std::holds_alternative<policy::commit_checkpoint>(a)) {
        policy_.on_checkpoint_committed(step_t{p.step}, world_);
        (void)coordinator_.committed();
      } else if (std::holds_alternative<policy::drop_checkpoint>(a)) {
        ++result_.checkpoints_failed;
      }
    }
  }

  // Training stops at now_: the partial segment is lost work.
  void interrupt() {
    if (phase_ != phase::training)
      return;
    const auto partial = now_ - seg_start_;
    switch (seg_) {
      case segment::compute: credit(lost::recompute, partial); break;
      case segment::snapshot: credit(lost::snapshots, partial); break;
      case segment::persist: credit(lost::checkpoints, partial); break;
      case segment::checkpoint:
        credit(lost::checkpoints, partial);
        ++result_.checkpoints;
        ++result_.checkpoints_failed;
        break;
    }
    set_phase(phase::stalled);
  }

  void stall(stall_state::cause why, std::uint32_t rank) {
    interrupt();
    // The ranks' last progress is now: the policy measures their silence from here.
    sync();
    ++stall_token_;
    stall_ = stall_state{true, why, rank, false};
  }

  void resume() {
    if (phase_ != phase::stalled)
      return;
    stall_.active = false;
    set_phase(phase::training);
    now_training_ = now_;
    start_segment(segment::compute, step_duration());
  }

  void recompute_slow_factor() {
    double f = 1.0;
    for (const auto& s : slow_)
      if (s.start <= now_ && s.end > now_ && in_placement_[s.node])
        f = std::max(f, s.factor);
    slow_factor_ = f;
  }

  // ---- reports to the policy -----------------------------------------------------------------

  [[nodiscard]] bool node_lost_within(std::int64_t from, std::int64_t to) const {
    auto it = std::lower_bound(job_node_losses_.begin(), job_node_losses_.end(), from);
    return it != job_node_losses_.end() && *it <= to;
  }

  [[nodiscard]] bool disk_full_within(std::int64_t from, std::int64_t to) const {
    return std::any_of(disk_full_.begin(), disk_full_.end(),
                       [&](const interval& d) { return in_placement_[d.node] && d.start <= to && d.end > from; });
  }

  // The holder of each node's buddy replicas, by node, as the policy assigned them; none (an id
  // past the nodes) for a node without a buddy.
  void set_buddies(const std::vector<std::optional<node_id>>& buddy_of) {
    buddy_holders_.assign(nodes_.size(), node_id{~std::uint32_t{0}});
    for (std::size_t n = 0; n < nodes_.size() && n < buddy_of.size(); ++n)
      if (buddy_of[n])
        buddy_holders_[n] = *buddy_of[n];
  }

  // Tells the policy what each node holds now that it was not told yet, and what it no longer
  // holds: exactly the held and dropped reports of a live job's checkpoint actors, in bulk, one
  // call per copy for every node that changed alike.
  void report_copies() {
    told_.resize(nodes_.size());
    if (custody_.version() == reported_version_ && !told_changed_) {
      drop_stale();
      return;
    }
    reported_version_ = custody_.version();
    told_changed_ = false;
    const auto in = [](const std::vector<policy::copy_tag>& v, const policy::copy_tag& x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    // The nodes of a cohort were told alike, as a rule: the change from what a node was told is
    // worked out once for each distinct thing told, and the nodes told alike share its set.
    struct change {
      std::vector<policy::copy_tag> slot, window;  // what was told
      std::uint32_t set = 0;
    };
    std::vector<change> changes;
    change_sets_.clear();
    set_of_node_.assign(nodes_.size(), ~std::uint32_t{0});
    replica_holder_of_node_.assign(nodes_.size(), node_id{~std::uint32_t{0}});
    std::vector<std::pair<policy::copy_tag, bool>> gone, come;
    for (const auto& c : custody_.cohorts()) {
      changes.clear();
      for (auto n : c.nodes) {
        auto& t = told_[n];
        if (t.window_holder.value() >= nodes_.size())
          t.window_holder = buddy_holders_[n];
        auto it = std::find_if(changes.begin(), changes.end(),
                               [&](const change& x) { return x.slot == t.slot && x.window == t.window; });
        if (it == changes.end()) {
          gone.clear();
          come.clear();
          for (const bool replica : {false, true}) {
            const auto& now = replica ? c.window : c.slot;
            const auto& before = replica ? t.window : t.slot;
            for (const auto& tag : before)
              if (!in(now, tag))
                gone.emplace_back(tag, replica);
            for (const auto& tag : now)
              if (!in(before, tag))
                come.emplace_back(tag, replica);
          }
          // Dropped before held, each in the order of the copies: the order of a live job's
          // reports does not matter to the outcome, and one order for every node keeps it so.
          std::sort(gone.begin(), gone.end());
          std::sort(come.begin(), come.end());
          std::uint32_t set = ~std::uint32_t{0};
          if (!gone.empty() || !come.empty()) {
            set = static_cast<std::uint32_t>(change_sets_.size());
            auto& list = change_sets_.emplace_back();
            for (const auto* part : {&gone, &come})
              for (const auto& [tag, replica] : *part)
                list.push_back(policy::copy_change{tag.epoch, tag.step,
                                                   replica ? copy_kind::buddy_replica : copy_kind::local_slot,
                                                   part == &come});
          }
          changes.push_back(change{t.slot, t.window, set});
          it = std::prev(changes.end());
        }
        set_of_node_[n] = it->set;
        replica_holder_of_node_[n] = t.window_holder;
        t.slot = c.slot;
        t.window = c.window;
      }
    }
    // Each node's ranks' copies: on the node itself (its slots) or its buddy (the replicas).
    if (!change_sets_.empty())
      (void)policy_.on_copies_changed_all({change_sets_, set_of_node_, replica_holder_of_node_});
    drop_stale();
  }

  // Replicas of ranks a node no longer guards go once the pin passes them (their ranks may run
  // elsewhere now): one report per old buddy for all its ranks and copies.
  void drop_stale() {
    std::vector<policy::copy_change> copies;
    std::erase_if(stale_, [&](const stale_replicas& x) {
      if (!policy::outdated_by(x.copies, custody_.pin()))
        return false;
      copies.clear();
      for (const auto& c : x.copies)
        copies.push_back(policy::copy_change{c.epoch, c.step, copy_kind::buddy_replica, false});
      policy_.on_snapshots_dropped(x.ranks, copies, x.holder);
      return true;
    });
  }

  // Tells the policy what happened since the last report: progress, snapshots, replicas and
  // checkpoints. Reported lazily, before every event the policy sees.
  void sync() {
    if (policy_.state() != policy::job_state::running)
      return;
    const auto e = policy_.epoch();
    if ((phase_ == phase::training || phase_ == phase::stalled) && step_ > reported_progress_) {
      reported_progress_ = step_;
      apply(policy_.on_progress_all(e, step_t{step_}));
      if (phase_ == phase::done)
        return;
    }
    if (kind_ == policy_kind::in_place) {
      finish_persist(now_);
      custody_.deliver(now_, [&](std::int64_t from, std::int64_t to) { return node_lost_within(from, to); });
      report_copies();
    }
    if (prune_pending_) {
      prune_pending_ = false;
      policy_.prune_snapshots();
    }
  }

  // ---- the policy's actions ------------------------------------------------------------------

  void apply(std::vector<policy_action> actions) {
    // The spawns of the last epoch the actions start, where they lie (tens of thousands at a time).
    const policy::spawn_ranks* spawns = nullptr;
    auto action_epoch = policy_.epoch();
    for (auto& a : actions) {
      std::visit(
          [&](auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, policy::note_event>) {
              ++result_.notes[x.kind];
            } else if constexpr (std::is_same_v<T, policy::persist_epoch>) {
              // One call can start several epochs (two nodes found lost by one tick): only the
              // last one's processes are spawned.
              spawns = nullptr;
              on_new_epoch();
              action_epoch = x.epoch;
            } else if constexpr (std::is_same_v<T, policy::assign_buddies>) {
              set_buddies(x.buddy_of);
            } else if constexpr (std::is_same_v<T, policy::spawn_ranks>) {
              spawns = &x;
            } else if constexpr (std::is_same_v<T, policy::kill_rank>) {
              kill(x.rank, x.node, action_epoch);
            } else if constexpr (std::is_same_v<T, policy::start_epoch>) {
              if (spawns != nullptr) {
                schedule_ready(*spawns);
                spawns = nullptr;
              }
              on_start(x);
            } else if constexpr (std::is_same_v<T, policy::finish_job>) {
              on_finish(x);
            }
          },
          a);
    }
    if (spawns != nullptr)
      schedule_ready(*spawns);
    if (applying_)
      return;
    applying_ = true;
    while (!failures_.empty()) {
      auto f = std::move(failures_.front());
      failures_.pop_front();
      apply(policy_.on_rank_failed(f.rank, f.epoch, f.why));
    }
    applying_ = false;
  }

  void on_new_epoch() {
    interrupt();
    if (phase_ != phase::done && phase_ != phase::down)
      set_phase(phase::restarting);
    if (started_)
      ++result_.recoveries;
    stall_.active = false;
    ++stall_token_;
    // A checkpoint still being written belonged to the old world: given up on.
    finish_persist(now_);
    if (persisting_) {
      persisting_.reset();
      ++result_.checkpoints_failed;
    }
    (void)coordinator_.on_epoch(policy_.epoch());
  }

  void schedule_ready(const policy::spawn_ranks& spawns) {
    if (spawns.ranks.empty())
      return;
    const auto epoch = spawns.epoch;
    std::fill(in_placement_.begin(), in_placement_.end(), 0);
    std::vector<rank_id> ready;
    ready.reserve(spawns.ranks.size());
    std::int64_t last = now_;
    bool all = true;
    for (const auto& s : spawns.ranks) {
      const auto n = s.slot.node.value();
      if (n >= nodes_.size())
        continue;
      in_placement_[n] = 1;
      auto& node = nodes_[n];
      if (!node.up) {
        all = false;
        continue;
      }
      if (s.slot.local_index >= node.alive.size())
        node.alive.resize(s.slot.local_index + 1, 0);
      // The restart-all policy starts every process anew (spawn_ranks::new_process).
      const bool survivor = node.alive[s.slot.local_index] != 0 && !spawns.new_process;
      const auto start = !started_ || survivor ? 0 : m_.process_start.count();
      const auto at = add(add(now_, s.delay.count()), start);
      node.alive[s.slot.local_index] = 1;
      ready.push_back(s.slot.rank);
      last = std::max(last, at);
    }
    world_ = static_cast<std::uint32_t>(spawns.ranks.size());
    recompute_slow_factor();
    ready_ranks_ = std::move(ready);
    ready_epoch_ = epoch.value();
    if (!started_) {
      // Time 0 is the first step: the first rendezvous takes no time.
      apply(policy_.on_ranks_ready(ready_ranks_, epoch));
      return;
    }
    if (!ready_ranks_.empty())
      push(last, ev_type::ranks_ready, 0, epoch.value());
    const auto deadline = add(now_, m_.rendezvous_timeout.count());
    if (!all || last >= deadline)
      tick_at(deadline);
  }

  // The slot of rank r in the current placement (which is in rank order).
  const policy::rank_slot* slot_of(rank_id r) const {
    const auto& placement = policy_.placement();
    if (r.value() < placement.size() && placement[r.value()].rank == r)
      return &placement[r.value()];
    for (const auto& s : placement)
      if (s.rank == r)
        return &s;
    return nullptr;
  }

  void kill(rank_id r, node_id n, epoch_t e) {
    if (n.value() >= nodes_.size())
      return;
    const auto* slot = slot_of(r);
    if (slot == nullptr || slot->node != n)
      return;
    auto& alive = nodes_[n.value()].alive;
    if (slot->local_index >= alive.size() || !alive[slot->local_index])
      return;
    alive[slot->local_index] = 0;
    interrupt();
    failures_.push_back({r, e, "killed by the supervisor"});
  }

  void on_start(const policy::start_epoch& s) {
    world_ = static_cast<std::uint32_t>(s.placement.size());
    std::fill(in_placement_.begin(), in_placement_.end(), 0);
    for (const auto& slot : s.placement)
      if (slot.node.value() < in_placement_.size())
        in_placement_[slot.node.value()] = 1;
    recompute_slow_factor();
    result_.world_min = std::min(result_.world_min, world_);
    // The slowest source gates the restore: every rank must have its state.
    auto worst = copy_kind::local_slot;
    for (const auto& src : s.sources)
      worst = std::max(worst, src.where);
    std::int64_t restore = 0;
    if (s.sources.empty()) {
      if (started_ && high_water_ > 0)
        ++result_.restores_scratch;
    } else {
      const double bytes = static_cast<double>(m_.state_size) * s.restore_world / std::max<std::uint32_t>(world_, 1);
      const double bandwidth = worst == copy_kind::local_slot      ? m_.memory_bandwidth
                               : worst == copy_kind::buddy_replica ? m_.buddy_bandwidth
                                                                           : m_.disk_bandwidth;
      restore = seconds_to_ns(bytes / bandwidth);
      if (started_)
        ++(worst == copy_kind::local_slot      ? result_.restores_memory
           : worst == copy_kind::buddy_replica ? result_.restores_buddy
                                                       : result_.restores_disk);
    }
    result_.restores.push_back({s.epoch.value(), s.restore_step.value(),
                                s.sources.empty() ? -1 : static_cast<int>(worst)});
    step_ = s.restore_step.value();
    reported_progress_ = step_;
    if (kind_ == policy_kind::in_place)
      begin_custody(s);
    // A new world: once it has a complete snapshot, the older worlds are out of reach of any
    // restore but one that finds the new world's copies lost too; keeping them costs 7 MB each
    // at 16,384 ranks, and every node loss walks them. sync() prunes them then.
    if (s.restore_world != world_)
      prune_pending_ = true;
    if (!started_) {
      started_ = true;
      begin_training();
      return;
    }
    set_phase(phase::rendezvous);
    rendezvous_end_ = add(now_, m_.rendezvous.count());
    push(add(rendezvous_end_, restore), ev_type::training_start, 0, s.epoch.value());
  }

  // The nodes' slots and windows enter the epoch `s` starts: those whose memory or buddy is new
  // start empty.
  void begin_custody(const policy::start_epoch& s) {
    std::vector<std::uint8_t> kept(nodes_.size(), 0), same_buddy(nodes_.size(), 0);
    for (std::uint32_t n = 0; n < nodes_.size(); ++n) {
      kept[n] = memory_lost_[n] == 0;
      const auto b = buddy_holders_[n].value();
      same_buddy[n] = b < nodes_.size() && buddy_holders_[n] == previous_buddies_[n] && memory_lost_[b] == 0;
    }
    // The same ranks in the same order (a new world otherwise), and on the same slots (an in-place
    // restart, the rule): then no node's ranks changed.
    bool same_ranks = s.placement.size() == previous_placement_.size();
    bool same_placement = same_ranks;
    for (std::size_t i = 0; same_ranks && i < s.placement.size(); ++i) {
      same_ranks = s.placement[i].rank == previous_placement_[i].rank;
      same_placement = same_placement && s.placement[i] == previous_placement_[i];
    }
    retire_windows(s, same_placement);
    custody_.begin_epoch(s.epoch, s.restore_step, !same_ranks, in_placement_, kept, same_buddy);
    if (!same_placement)
      previous_placement_ = s.placement;
    previous_buddies_ = buddy_holders_;
    for (std::uint32_t n = 0; n < nodes_.size(); ++n)
      if (in_placement_[n] != 0)
        memory_lost_[n] = 0;
    set_multi_node();
  }

  // The replicas told held for a node whose buddy or ranks change with epoch `s` stay where they
  // are, on ranks their holder no longer guards (stale_); the node's window starts anew.
  // `same_placement`: every rank on the slot it had in the epoch before, so each node's ranks are
  // the ones it was told of (not worked out again).
  void retire_windows(const policy::start_epoch& s, bool same_placement) {
    told_.resize(nodes_.size());
    told_changed_ = true;
    // Each node's ranks, in rank order: offsets into one list.
    std::vector<std::uint32_t> first;
    std::vector<rank_id> ranks;
    if (!same_placement) {
      first.assign(nodes_.size() + 1, 0);
      for (const auto& slot : s.placement)
        if (slot.node.value() < nodes_.size())
          ++first[slot.node.value() + 1];
      for (std::size_t n = 0; n < nodes_.size(); ++n)
        first[n + 1] += first[n];
      ranks.resize(first.back());
      auto fill = first;
      for (const auto& slot : s.placement)
        if (slot.node.value() < nodes_.size())
          ranks[fill[slot.node.value()]++] = slot.rank;
    }
    for (std::uint32_t n = 0; n < nodes_.size(); ++n) {
      auto& t = told_[n];
      const bool placed = in_placement_[n] != 0;
      const node_id holder = placed ? buddy_holders_[n] : node_id{~std::uint32_t{0}};
      const std::span<const rank_id> mine =
          same_placement ? std::span<const rank_id>{t.ranks} : std::span<const rank_id>{ranks.data() + first[n], first[n + 1] - first[n]};
      const bool same_ranks = same_placement || std::equal(mine.begin(), mine.end(), t.ranks.begin(), t.ranks.end());
      if (!t.window.empty() && (!placed || holder != t.window_holder || !same_ranks)) {
        if (t.window_holder.value() < nodes_.size())
          stale_.push_back({t.window_holder, t.ranks, std::move(t.window)});
        t.window.clear();
      }
      t.window_holder = holder;
      if (!same_ranks)
        t.ranks.assign(mine.begin(), mine.end());
    }
  }

  void set_multi_node() {
    std::uint32_t up = 0;
    for (std::uint32_t n = 0; n < nodes_.size() && up < 2; ++n)
      up += policy_.node_up(node_id{n}) ? 1 : 0;
    custody_.set_multi_node(up >= 2);
  }

  void on_finish(const policy::finish_job& f) {
    interrupt();
    if (f.state == policy::job_state::completed) {
      set_phase(phase::done);
    } else {
      set_phase(phase::down);
      result_.reason = f.reason;
    }
  }

  // ---- events --------------------------------------------------------------------------------

  void start() {
    result_.world_start = world0_;
    result_.world_min = world0_;
    std::vector<node_id> all;
    for (std::uint32_t n = 0; n < nodes_.size(); ++n)
      all.push_back(node_id{n});
    phase_ = phase::restarting;
    apply(policy_.on_nodes_up(all));
    if (phase_ != phase::training) {
      // No rank could be placed (a cluster of spares only): the job never runs.
      set_phase(phase::down);
      if (result_.reason.empty())
        result_.reason = policy_.reason().empty() ? "the job did not start" : policy_.reason();
    }
  }

  void handle(const queued& q) {
    switch (q.type) {
      case ev_type::fault: fault(q.a); break;
      case ev_type::node_return: node_return(q.a, static_cast<std::int64_t>(q.b)); break;
      case ev_type::stall_end:
        if (q.b == stall_token_ && stall_.active && !stall_.collective_failed)
          resume();
        break;
      case ev_type::slow_end: recompute_slow_factor(); break;
      case ev_type::tick: tick(); break;
      case ev_type::ranks_ready: ranks_ready(q.b); break;
      case ev_type::training_start:
        if (policy_.epoch().value() == q.b && policy_.state() == policy::job_state::running && phase_ == phase::rendezvous)
          begin_training();
        break;
      case ev_type::exit_seen:
        while (!unseen_exits_.empty() && unseen_exits_.front().first <= now_) {
          failures_.push_back(std::move(unseen_exits_.front().second));
          unseen_exits_.pop_front();
        }
        apply({});
        break;
      case ev_type::collective_timeout:
        if (q.b == stall_token_ && stall_.active && policy_.state() == policy::job_state::running) {
          stall_.collective_failed = true;
          sync();
          // Every rank waiting on the stuck one reports its timed-out collective; the stuck one
          // stays silent, so the policy finds it a quarter of the hang timeout later and kills
          // only it. A cut link stalls everyone alike: all report, and the policy starts over.
          const auto e = policy_.epoch();
          const bool one_stuck = stall_.why == stall_state::cause::hang && world_ > 1;
          const auto placement = policy_.placement();
          for (const auto& slot : placement) {
            if (one_stuck && slot.rank.value() == stall_.rank)
              continue;
            apply(policy_.on_collective_error(slot.rank, e, "collective timed out"));
            if (policy_.epoch() != e || policy_.state() != policy::job_state::running)
              break;
          }
          tick_at(add(now_, m_.hang_timeout.count() / 4));
          tick_at(add(now_, m_.hang_timeout.count()));
        }
        break;
    }
  }

  void tick() {
    if (now_ == last_tick_)
      return;
    last_tick_ = now_;
    sync();
    for (std::uint32_t n = 0; n < nodes_.size(); ++n)
      if (nodes_[n].up && policy_.node_up(node_id{n}))
        policy_.on_heartbeat(node_id{n});
    apply(policy_.on_tick());
  }

  void ranks_ready(std::uint64_t epoch) {
    if (policy_.epoch().value() != epoch || policy_.state() != policy::job_state::rendezvous || ready_epoch_ != epoch)
      return;
    // Ranks whose node died while they started never register.
    std::vector<rank_id> ready;
    ready.reserve(ready_ranks_.size());
    for (auto r : ready_ranks_) {
      const auto* slot = slot_of(r);
      if (slot == nullptr)
        continue;
      const auto& node = nodes_[slot->node.value()];
      if (node.up && slot->local_index < node.alive.size() && node.alive[slot->local_index])
        ready.push_back(r);
    }
    apply(policy_.on_ranks_ready(ready, epoch_t{epoch}));
  }

  // The slot of rank r of the current world, if it exists and its process is alive.
  const policy::rank_slot* live_rank(std::uint32_t r) const {
    const auto* slot = slot_of(rank_id{r});
    if (slot == nullptr)
      return nullptr;
    const auto& node = nodes_[slot->node.value()];
    if (!node.up || slot->local_index >= node.alive.size() || !node.alive[slot->local_index])
      return nullptr;
    return slot;
  }

  [[nodiscard]] bool job_active() const {
    const auto s = policy_.state();
    return s == policy::job_state::running || s == policy::job_state::rendezvous;
  }

  void fault(std::uint32_t index) {
    const auto& f = trace_.events[index];
    if (!job_active())
      return;
    // Faults the policy hears of at once, or whose detection runs from the last progress, need
    // it up to date now; for node faults the detecting tick brings it up to date, which gives
    // the same decisions (the policy forgets a lost node's copies when it notices the loss).
    const bool node_fault = f.kind == fault_kind::node_down || f.kind == fault_kind::slow || f.kind == fault_kind::disk_full ||
                            f.kind == fault_kind::corrupt_checkpoint ||
                            (f.kind == fault_kind::partition && f.target.kind == fault_target::type::node);
    if (!node_fault)
      sync();
    if (!job_active())
      return;
    const auto e = policy_.epoch();
    bool hit = false;
    switch (f.kind) {
      case fault_kind::kill:
      case fault_kind::crash: {
        const auto queued_failures = failures_.size();
        const std::string why = f.kind == fault_kind::kill ? "killed by signal " + std::to_string(f.signal)
                                                           : "exited with code " + std::to_string(f.exit_code);
        if (f.target.kind == fault_target::type::rank) {
          if (const auto* slot = live_rank(f.target.rank)) {
            nodes_[slot->node.value()].alive[slot->local_index] = 0;
            failures_.push_back({slot->rank, e, why});
            hit = true;
          }
        } else {
          const auto n = target_node_[index];
          for (const auto& slot : policy_.placement()) {
            auto& node = nodes_[n];
            if (slot.node.value() == n && node.up && slot.local_index < node.alive.size() && node.alive[slot.local_index]) {
              node.alive[slot.local_index] = 0;
              failures_.push_back({slot.rank, e, why});
              hit = true;
            }
          }
        }
        if (hit) {
          interrupt();
          if (const auto delay = exit_detection(); delay > 0) {
            // Training stops now (the others wait in the collective); the launcher sees the exit
            // at its next poll.
            for (auto i = queued_failures; i < failures_.size(); ++i)
              unseen_exits_.emplace_back(add(now_, delay), std::move(failures_[i]));
            failures_.erase(failures_.begin() + static_cast<std::ptrdiff_t>(queued_failures), failures_.end());
            push(add(now_, delay), ev_type::exit_seen);
          }
          apply({});
        }
        break;
      }
      case fault_kind::hang:
        if (phase_ == phase::training && live_rank(f.target.rank) != nullptr) {
          hit = true;
          stall(stall_state::cause::hang, f.target.rank);
          push(add(now_, m_.collective_timeout.count()), ev_type::collective_timeout, 0, stall_token_);
          tick_at(add(now_, m_.hang_timeout.count()));
          if (f.duration && seconds_to_ns(*f.duration) < m_.collective_timeout.count())
            push(add(now_, seconds_to_ns(*f.duration)), ev_type::stall_end, 0, stall_token_);
        }
        break;
      case fault_kind::slow: {
        std::uint32_t n = target_node_[index];
        if (f.target.kind == fault_target::type::rank) {
          const auto& placement = policy_.placement();
          if (f.target.rank >= placement.size())
            break;
          n = placement[f.target.rank].node.value();
        }
        const auto end = f.duration ? add(now_, seconds_to_ns(*f.duration)) : never;
        slow_.push_back({n, 0, now_, end, f.factor});
        hit = in_placement_[n] != 0;
        recompute_slow_factor();
        push(end, ev_type::slow_end);
        break;
      }
      case fault_kind::node_down:
        hit = node_fails(target_node_[index], f.repair ? add(now_, seconds_to_ns(*f.repair)) : never);
        break;
      case fault_kind::partition:
        if (f.target.kind == fault_target::type::node) {
          hit = node_fails(target_node_[index], f.duration ? add(now_, seconds_to_ns(*f.duration)) : never);
        } else {
          const auto a = target_node_[index];
          const auto b = target_peer_[index];
          const auto end = f.duration ? add(now_, seconds_to_ns(*f.duration)) : never;
          links_.push_back({a, b, now_, end, 1.0});
          hit = in_placement_[a] && in_placement_[b];
          if (hit && phase_ == phase::training) {
            stall(stall_state::cause::link, 0);
            push(add(now_, m_.collective_timeout.count()), ev_type::collective_timeout, 0, stall_token_);
            tick_at(add(now_, m_.hang_timeout.count()));
            push(end, ev_type::stall_end, 0, stall_token_);
          }
        }
        break;
      case fault_kind::disk_full: {
        const auto n = target_node_[index];
        disk_full_.push_back({n, 0, now_, f.duration ? add(now_, seconds_to_ns(*f.duration)) : never, 1.0});
        hit = in_placement_[n] != 0;
        break;
      }
      case fault_kind::corrupt_checkpoint: {
        // The newest checkpoint on disk is damaged: a restore would find it out and fall back, so
        // restores no longer count on it. One still being written fails its commit.
        if (kind_ == policy_kind::in_place)
          finish_persist(now_);
        const auto& committed = policy_.copies().checkpoints();
        if (!committed.empty()) {
          policy_.forget_checkpoint(committed.rbegin()->first);
          hit = true;
        } else if (persisting_ && !persisting_->corrupt) {
          persisting_->corrupt = true;
          hit = true;
        }
        break;
      }
      case fault_kind::collective_error:
        if (phase_ == phase::training && live_rank(f.target.rank) != nullptr) {
          hit = true;
          stall(stall_state::cause::fault, f.target.rank);
          apply(policy_.on_collective_error(rank_id{f.target.rank}, e, "collective error"));
          tick_at(add(now_, m_.hang_timeout.count()));
        }
        break;
    }
    if (hit)
      ++result_.hit;
  }

  // A node stops (down, or cut off) until `back`; returns whether it held the job's ranks.
  bool node_fails(std::uint32_t n, std::int64_t back) {
    auto& node = nodes_[n];
    if (!node.up) {
      if (back > node.back_at || back == never) {
        node.back_at = back;
        push(back, ev_type::node_return, n, static_cast<std::uint64_t>(back));
      }
      return false;
    }
    // Its last heartbeat is now; the supervisor notices after node_timeout. Its memory is gone.
    policy_.on_heartbeat(node_id{n});
    node.up = false;
    memory_lost_[n] = 1;
    node.back_at = back;
    std::fill(node.alive.begin(), node.alive.end(), 0);
    const bool used = in_placement_[n] != 0;
    if (used) {
      job_node_losses_.push_back(now_);
      interrupt();
    }
    tick_at(add(now_, m_.node_timeout.count()));
    push(back, ev_type::node_return, n, static_cast<std::uint64_t>(back));
    return used;
  }

  void node_return(std::uint32_t n, std::int64_t back) {
    auto& node = nodes_[n];
    if (node.up || node.back_at != back)
      return;
    node.up = true;
    node.back_at = never;
    std::fill(node.alive.begin(), node.alive.end(), 0);
    if (!job_active())
      return;
    apply(policy_.on_node_up(node_id{n}));
    regrow();
  }

  void regrow() {
    if (!job_active() || static_cast<double>(policy_.world()) >= m_.regrow_below * world0_)
      return;
    std::uint64_t capacity = 0;
    const auto widest = cluster_.widest();
    for (std::uint32_t n = 0; n < nodes_.size(); ++n)
      if (policy_.node_up(node_id{n}))
        capacity += cluster_.nodes()[n].spare ? widest : cluster_.nodes()[n].ranks;
    const auto target = static_cast<std::uint32_t>(std::min<std::uint64_t>(capacity, world0_));
    if (target <= policy_.world())
      return;
    ++result_.notes["regrow"];
    sync();
    if (!job_active())
      return;
    apply(policy_.scale(target));
  }

  void finish() {
    if (phase_ == phase::done) {
      wrap_up(now_);
      return;
    }
    set_time(std::max(now_, horizon_));
    if (phase_ == phase::training) {
      // The segment in progress at the end.
      const auto partial = now_ - seg_start_;
      switch (seg_) {
        case segment::compute:
          if (step_ + 1 > high_water_)
            result_.useful += static_cast<double>(partial) * 1e-9;
          else
            credit(lost::recompute, partial);
          break;
        case segment::snapshot: credit(lost::snapshots, partial); break;
        case segment::persist:
        case segment::checkpoint: credit(lost::checkpoints, partial); break;
      }
    } else {
      set_phase(phase_);
    }
    wrap_up(now_);
  }

  void wrap_up(std::int64_t end) {
    // The policy learns what the nodes hold at the end (its committed step is in the result).
    if (kind_ == policy_kind::in_place && policy_.state() == policy::job_state::running) {
      finish_persist(now_);
      custody_.deliver(now_, [&](std::int64_t from, std::int64_t to) { return node_lost_within(from, to); });
      report_copies();
    }
    result_.slot_steps.clear();
    for (auto s : custody_.slot_steps())
      result_.slot_steps.push_back(s.value());
    for (auto s : custody_.replica_steps())
      result_.replica_steps.push_back(s.value());
    if (const auto c = policy_.copies().committed())
      result_.committed = c->value();
    result_.wall = static_cast<double>(end) * 1e-9;
    result_.steps = high_water_;
    result_.rank_restarts = policy_.restarts();
    result_.world_end = policy_.world();
    result_.end_state = std::string{policy::to_string(policy_.state())};
    if (result_.reason.empty())
      result_.reason = policy_.reason();
    for (std::size_t i = next_step_event_; i < step_events_.size(); ++i)
      ++result_.not_reached;
  }

  struct rank_failure {
    rank_id rank;
    epoch_t epoch;
    std::string why;
  };

  // How long a process's exit takes to reach the policy: at once for the in-place policy (the
  // agent's waitpid), the launcher's poll for restart-everything.
  [[nodiscard]] std::int64_t exit_detection() const {
    return kind_ == policy_kind::restart_all ? m_.restart_all_exit_detection.count() : 0;
  }
  // Exits not yet seen, with the time they are.
  std::deque<std::pair<std::int64_t, rank_failure>> unseen_exits_;

  const fault_trace& trace_;
  cluster_shape cluster_;
  const model& m_;
  policy_kind kind_;
  fake_clock clock_;
  supervisor_policy policy_;
  std::int64_t horizon_;
  std::int64_t now_ = 0;
  std::priority_queue<queued, std::vector<queued>, std::greater<>> queue_;
  // Events queued for the same time run in the order queued; step-triggered faults first.
  std::uint64_t seq_ = std::uint64_t{1} << 40;
  std::uint64_t front_seq_ = 1;
  std::int64_t last_tick_ = -1;

  std::vector<node_state> nodes_;
  std::vector<std::uint8_t> in_placement_;
  std::vector<node_id> buddy_holders_;
  // report_copies' sets of changes and each node's (kept between calls for their capacity).
  std::vector<std::vector<policy::copy_change>> change_sets_;
  std::vector<std::uint32_t> set_of_node_;
  std::vector<node_id> replica_holder_of_node_;
  std::vector<node_id> previous_buddies_;
  std::vector<policy::rank_slot> previous_placement_;
  /// By node: its memory (slots, replicas) was lost since it last ran ranks.
  std::vector<std::uint8_t> memory_lost_;
  std::uint32_t world0_ = 0;
  std::uint32_t world_ = 0;
  std::vector<std::uint32_t> target_node_;
  std::vector<std::uint32_t> target_peer_;

  phase phase_ = phase::restarting;
  std::int64_t phase_since_ = 0;
  std::int64_t rendezvous_end_ = 0;
  bool started_ = false;
  bool prune_pending_ = false;

  segment seg_ = segment::compute;
  std::int64_t seg_start_ = 0;
  std::int64_t seg_end_ = never;
  std::int64_t now_training_ = 0;
  std::uint64_t step_ = 0;
  std::uint64_t high_water_ = 0;
  double slow_factor_ = 1.0;
  stall_state stall_;
  std::uint64_t stall_token_ = 0;

  custody_model custody_;
  std::vector<told> told_;
  std::vector<stale_replicas> stale_;
  /// custody_.version() when the policy was last told, and whether told_ changed since.
  std::uint64_t reported_version_ = ~std::uint64_t{0};
  bool told_changed_ = false;
  policy::checkpoint_coordinator coordinator_;
  std::optional<write_record> persisting_;
  std::uint64_t reported_progress_ = 0;
  std::vector<std::int64_t> job_node_losses_;
  std::vector<interval> slow_;
  std::vector<interval> links_;
  std::vector<interval> disk_full_;

  std::vector<rank_id> ready_ranks_;
  std::uint64_t ready_epoch_ = 0;
  std::vector<std::size_t> step_events_;
  std::size_t next_step_event_ = 0;
  std::deque<rank_failure> failures_;
  bool applying_ = false;

  sim_result result_;
};

}  // namespace

std::string_view describe(policy_kind p) noexcept {
  return p == policy_kind::in_place ? "in-place restart + memory snapshots" : "restart everything + disk checkpoints";
}

std::string_view to_string(policy_kind p) noexcept { return p == policy_kind::in_place ? "in-place" : "restart-all"; }

std::string_view to_string(lost l) noexcept {
  switch (l) {
    case lost::detection: return "detection";
    case lost::restart: return "restart";
    case lost::rendezvous: return "rendezvous";
    case lost::restore: return "restore";
    case lost::recompute: return "recompute";
    case lost::snapshots: return "snapshots";
    case lost::checkpoints: return "checkpoints";
    case lost::degraded: return "degraded";
    case lost::down: return "down";
  }
  return "unknown";
}

double sim_result::lost_to_recovery() const noexcept {
  return lost_in(lost::detection) + lost_in(lost::restart) + lost_in(lost::rendezvous) + lost_in(lost::restore) +
         lost_in(lost::recompute) + lost_in(lost::down);
}

double sim_result::lost_to_snapshots() const noexcept { return lost_in(lost::snapshots) + lost_in(lost::checkpoints); }

model policy_model(const model& m, policy_kind p, std::uint32_t world) {
  model out = m;
  const double ranks = std::max<std::uint32_t>(world, 1);
  out.disk_bandwidth = std::min(m.disk_bandwidth, m.storage_bandwidth / ranks);
  if (p == policy_kind::restart_all) {
    // No supervisor watches the nodes: a lost node, like a hang, is found when the survivors'
    // collective times out; every process starts anew, and the fresh job's communicator is
    // initialised from a store every rank contacts.
    out.node_timeout = m.restart_all_hang_detection;
    out.collective_timeout = m.restart_all_hang_detection;
    out.hang_timeout = m.restart_all_hang_detection;
    out.process_start = m.restart_all_process_start;
    // The launcher waits for its processes to start before it counts the rendezvous's time.
    out.rendezvous_timeout = m.restart_all_process_start + m.rendezvous_timeout;
    out.rendezvous = m.restart_all_rendezvous + std::chrono::nanoseconds{static_cast<std::int64_t>(
                                                    std::llround(static_cast<double>(m.restart_all_rendezvous_per_rank.count()) * ranks))};
  }
  return out;
}

std::vector<assumption> assumptions(const model& m, policy_kind p, std::uint32_t world) {
  const auto pm = policy_model(m, p, world);
  const auto d = [](std::chrono::nanoseconds x) { return format_duration(x); };
  const auto read = [&](double bandwidth) {
    return d(std::chrono::nanoseconds{seconds_to_ns(static_cast<double>(pm.state_size) / bandwidth)});
  };
  const bool ra = p == policy_kind::restart_all;
  std::vector<assumption> out;
  out.push_back({"a process exit, found after", ra ? d(m.restart_all_exit_detection) + " (the launcher's poll)" : "at once (waitpid)"});
  out.push_back({"a lost node, found after", d(pm.node_timeout) + (ra ? " (the collective timeout)" : " (heartbeats)")});
  // The policy's rule for a silent rank: the others' collectives time out, then a quarter of the
  // hang timeout without progress.
  out.push_back({"a hang, found after", d(pm.collective_timeout + pm.hang_timeout / 4)});
  out.push_back({"processes started", (ra ? std::string{"every rank's, "} : std::string{"the failed ranks', "}) + d(pm.process_start)});
  std::string rendezvous = d(pm.rendezvous);
  if (ra)
    rendezvous += " (" + d(m.restart_all_rendezvous) + " + " + d(m.restart_all_rendezvous_per_rank) + " × " + with_commas(world) + " ranks)";
  out.push_back({"communicator ready after", rendezvous});
  if (!ra)
    out.push_back({"state read from memory / a buddy", read(pm.memory_bandwidth) + " / " + read(pm.buddy_bandwidth)});
  out.push_back({"state read from disk", read(pm.disk_bandwidth) + " (" + format_bytes(pm.disk_bandwidth) + "/s per rank)"});
  if (ra)
    out.push_back({"checkpoint stall", d(std::chrono::nanoseconds{seconds_to_ns(static_cast<double>(pm.state_size) / pm.persist_bandwidth)}) +
                                           " every " + with_commas(pm.checkpoint_every) + " steps"});
  else
    out.push_back({"snapshot stall", d(pm.snapshot_stall) + " every " + with_commas(pm.snapshot_every) + " steps"});
  return out;
}

expected<sim_result> simulate(const fault_trace& t, const cluster_shape& cluster, const model& given, policy_kind p) {
  if (auto st = validate(given); !st.ok())
    return st;
  const auto m = policy_model(given, p, cluster.world());
  if (cluster.world() == 0)
    return status{errc::invalid_argument, "the cluster has no ranks to train with"};
  std::int64_t horizon = 0;
  if (m.horizon.count() > 0) {
    horizon = m.horizon.count();
  } else if (t.header.duration) {
    horizon = seconds_to_ns(*t.header.duration);
  } else {
    std::optional<double> last;
    for (const auto& e : t.events)
      if (e.at)
        last = *e.at;
    if (last)
      horizon = seconds_to_ns(*last + 3600.0);
    else if (m.steps > 0)
      horizon = seconds_to_ns(100.0 * 365 * 86400);
    else
      return status{errc::invalid_argument,
                    "the trace has no duration and no timed events: set the header's duration, or the model's horizon or steps"};
  }
  // Simulated training costs ~100 ns a step: a bound on the steps bounds every replay's time
  // (a trace covers at most max_trace_seconds, but a step may be as short as a nanosecond).
  const double steps = static_cast<double>(horizon) / static_cast<double>(m.step_time.count());
  if (steps > max_simulated_steps && (m.steps == 0 || static_cast<double>(m.steps) > max_simulated_steps))
    return status{errc::out_of_range, "step_time: " + duration_to_string(m.step_time) + " steps over " +
                                          format_duration(std::chrono::nanoseconds{horizon}) + " are " +
                                          std::to_string(static_cast<std::uint64_t>(steps)) + " steps; a simulation runs at most " +
                                          with_commas(static_cast<std::uint64_t>(max_simulated_steps)) +
                                          " (a longer step_time, a shorter horizon or steps)"};
  auto c = cluster;
  c.add_spares(m.spares);
  simulator sim{t, std::move(c), m, p, horizon};
  return sim.run();
}

}  // namespace rekindle::trace
