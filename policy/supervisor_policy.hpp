#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/clock.hpp"
#include "common/expected.hpp"
#include "common/collective_position.hpp"
#include "common/ids.hpp"
#include "config/fwd.hpp"
#include "policy/hang_verdict.hpp"
#include "policy/node_screen.hpp"
#include "policy/snapshot_registry.hpp"

namespace rekindle::policy {

/// What the policy needs to know about the cluster and the job; built from config::spec.
struct policy_config {
  struct node {
    std::string name;
    /// Ranks it runs in the initial placement (0 for a spare).
    std::uint32_t ranks = 0;
    bool spare = false;
    /// Its failure domain (rack, switch, power feed); "" is a domain of its own.
    std::string domain;
  };
  std::vector<node> nodes;
  /// The ranks of the first world, when the job places them (job.plan): rank r runs on
  /// initial[r]. Empty: each node's `ranks` in node order.
  std::vector<rank_slot> initial;
  /// Whether a node's buddy is chosen in another failure domain (buddies()). Off: the next
  /// usable node in node order, whatever its domain (to see what the rule is worth).
  bool buddy_across_domains = true;
  /// Optimizer steps of the job.
  std::uint64_t total_steps = 0;
  /// The world is a whole number of these ranks (a pipeline's stages): a world that shrinks
  /// leaves the ranks past the last whole multiple idle, and scale refuses other sizes.
  std::uint32_t world_multiple = 1;
  /// Steps between in-memory snapshots.
  std::uint64_t snapshot_every = 1;
  /// The restart-all policy (recovery.policy): every new epoch starts every rank's process anew
  /// (spawn_ranks::new_process) and restores the newest committed checkpoint on disk, never a
  /// copy in memory.
  bool restart_all = false;
  std::chrono::nanoseconds hang_timeout = std::chrono::seconds{10};
  /// Deadline of a rank's collective calls. When set, a rank whose peers report their
  /// collectives failing while it reports nothing and makes no progress for this long plus a
  /// quarter of the hang timeout is the stuck one: only it is killed, and no rank is killed as
  /// hung before its peers could report. 0: unknown (ranks are found by the hang timeout alone).
  std::chrono::nanoseconds collective_timeout = std::chrono::nanoseconds::zero();
  std::chrono::nanoseconds node_timeout = std::chrono::seconds{1};
  std::chrono::nanoseconds rendezvous_timeout = std::chrono::seconds{30};
  std::uint32_t max_restarts_per_rank = 5;
  std::uint32_t max_restarts = 50;
  std::chrono::nanoseconds backoff = std::chrono::milliseconds{100};
  std::chrono::nanoseconds backoff_max = std::chrono::seconds{5};
  /// Whether ranks report their steps and end at the job's last (the rekindle worker). A user's
  /// program (job.command) reports steps only once it joined through the worker API, and its own
  /// loop decides its last: no rank is found hung by its silence, and the job completes when every
  /// rank's program exits with status 0 (on_rank_completed) instead of at job.steps.
  bool reports_progress = true;
  /// Whether a node must pass its pre-flight check (on_node_checked) before it is placed or used
  /// as a spare. Off: nodes are placed once up, and only a check an operator asks for quarantines.
  bool preflight = false;
  /// Each figure of a node's check against the fleet's median.
  screen_limits screen;
};

/// The policy's view of a validated cluster and job configuration.
[[nodiscard]] policy_config policy_config_of(const config::spec& spec);

/// The job's lifecycle, as the supervisor drives it.
///
///                   (1) all worker nodes up
///   waiting_for_nodes ──────────────────────► rendezvous(e)
///                                               │  ▲   │
///                          (2) all ranks ready  │  │   │ (3) rendezvous timeout ──┐
///                                               ▼  │   ▼                          │
///                                           running(e) ─(5) rank failed / (6) node lost / (7) command
///                                               │        ──────► rendezvous(e+1): epoch bumped,
///                                               │                 aborts sent, ranks respawned
///                          (4) every rank at    │
///                              the last step    ▼
///                                           completed
///   any ─(8) restart limit, no ranks left, a rank that cannot be placed─► failed(reason)
///   any ─(9) stop command─► stopped
///   paused: (10) pause from running, (11) resume back to rendezvous(e+1)
enum class job_state : std::uint8_t {
  waiting_for_nodes,
  rendezvous,
  running,
  paused,
  completed,
  failed,
  stopped,
};
std::string_view to_string(job_state s) noexcept;

// ---- what the policy asks the supervisor actor to do -------------------------------------------

/// Make the new epoch durable (a synced write) before anything announces it.
struct persist_epoch {
  epoch_t epoch;
};
/// Tell every agent: abort the collectives of epochs older than `epoch`, keep the processes.
struct abort_ranks {
  epoch_t epoch;
};
/// Which node keeps the replicas of each node's snapshots from `epoch` on, by node id: the next
/// node in node order that is up and not drained (none for a node that is down or drained itself,
/// or when no other node is usable).
struct assign_buddies {
  epoch_t epoch;
  std::vector<std::optional<node_id>> buddy_of;
};
/// Start a worker process for `slot` in `epoch`, after `delay` (restart back-off): one rank of a
/// spawn_ranks.
struct spawn_rank {
  epoch_t epoch;
  rank_slot slot;
  std::uint32_t world = 0;
  std::chrono::nanoseconds delay{};
  /// Start a new process even where one of the previous epoch lives (which is stopped): the
  /// restart-all policy. False: a live process joins the new epoch.
  bool new_process = false;
};
/// Start a worker process for every rank of the world of `epoch`, each after its own delay: the
/// spawn_rank of each, in one action (a new epoch of 65,536 ranks writes 24 bytes a rank, not
/// a policy_action each).
struct spawn_ranks {
  epoch_t epoch;
  std::uint32_t world = 0;
  /// As spawn_rank::new_process, for every rank.
  bool new_process = false;
  struct one {
    rank_slot slot;
    std::chrono::nanoseconds delay{};
  };
  std::vector<one> ranks;
  [[nodiscard]] spawn_rank at(std::size_t i) const { return {epoch, ranks[i].slot, world, ranks[i].delay, new_process}; }
  /// Every rank's spawn_rank, in order.
  [[nodiscard]] std::vector<spawn_rank> each() const {
    std::vector<spawn_rank> out;
    out.reserve(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i)
      out.push_back(at(i));
    return out;
  }
};
/// A restart of `rank` was counted (toward max_restarts_per_rank and max_restarts): make it durable,
/// so that a restarted supervisor counts on from there.
struct record_restart {
  rank_id rank;
};
/// Stop a worker process (a hung rank, a rank leaving its node, the end of the job).
struct kill_rank {
  rank_id rank;
  node_id node;
  int signal = 9;
};
/// Every rank of `epoch` registered: start training from `restore_step` (0: from scratch).
struct start_epoch {
  epoch_t epoch;
  std::vector<rank_slot> placement;
  step_t restore_step;
  /// World size whose state is restored (differs from placement.size() after a resize).
  std::uint32_t restore_world = 0;
  /// For each rank of the restored world, where its state is.
  std::vector<state_source> sources;
};
/// The job ended; `reason` says why for failed and stopped.
struct finish_job {
  job_state state;
  std::string reason;
};
/// Something worth recording in the event log and showing an operator.
struct note_event {
  std::string kind;
  std::string detail;
  std::optional<rank_id> rank;
  std::optional<node_id> node;
  /// Named values stored with the event (a hang's verdict: the collective, who waited, who not).
  std::vector<std::pair<std::string, std::string>> fields;
};

using policy_action = std::variant<persist_epoch, abort_ranks, assign_buddies, spawn_ranks, kill_rank, start_epoch,
                                   finish_job, note_event, record_restart>;

/// A new plan for the world without a lost node, when no node is free to take over its ranks.
struct replanned {
  /// Rank r of the new world runs on placement[r]; ranks numbered from 0.
  std::vector<rank_slot> placement;
  /// Stages of the new plan: the world is a whole number of pipelines of this many ranks.
  std::uint32_t world_multiple = 1;
  /// What changed, for the event log.
  std::string note;
};
/// Asked for a re-plan of `placement` without node `lost` (already down); an error keeps the rule
/// without a plan (whole pipelines of the same split) and is said in the note.
using replanner = std::function<expected<replanned>(const std::vector<rank_slot>& placement, node_id lost)>;

/// The supervisor's decisions, without CAF, without I/O, with an injected clock.
///
/// The supervisor actor feeds it events (nodes and ranks coming and going, progress, timer ticks,
/// operator commands) and carries out the actions it returns, in order. The discrete-event
/// simulator feeds it the same events against modelled time. Every decision that changes the
/// membership bumps the epoch; messages of older epochs are the caller's to drop (see
/// `accepts`).
///
/// Thread-safety: none; one owner (the supervisor actor, or the simulator).
class supervisor_policy {
 public:
  supervisor_policy(policy_config config, const clock& time);

  [[nodiscard]] job_state state() const noexcept { return state_; }
  [[nodiscard]] epoch_t epoch() const noexcept { return epoch_; }
  [[nodiscard]] const std::vector<rank_slot>& placement() const noexcept { return placement_; }
  [[nodiscard]] std::uint32_t world() const noexcept { return static_cast<std::uint32_t>(placement_.size()); }
  /// Newest step every rank reported (0 before any).
  [[nodiscard]] step_t step() const noexcept { return step_; }
  [[nodiscard]] std::uint32_t restarts() const noexcept { return restarts_; }
  [[nodiscard]] std::uint32_t restarts_of(rank_id r) const;
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  [[nodiscard]] bool node_up(node_id n) const;
  /// How long since node `n`'s agent was last heard from (a heartbeat or its coming up); nullopt
  /// while it is down.
  [[nodiscard]] std::optional<clock::duration> heartbeat_age(node_id n) const;
  /// True when a message stamped `e` belongs to the current epoch.
  [[nodiscard]] bool accepts(epoch_t e) const noexcept { return e == epoch_; }

  // ---- events ------------------------------------------------------------------------------
  /// (1) A node's agent connected (or reconnected).
  std::vector<policy_action> on_node_up(node_id n);
  /// Node `n` has reported every copy it holds. A restarted supervisor starts the reloaded job's
  /// next epoch only once every node of its placement is up and has reported: a restore point
  /// chosen before would miss steps the nodes hold in memory and fall back to an older one.
  std::vector<policy_action> on_holdings_reported(node_id n);
  /// A node has seen epoch `e`. A supervisor that took over from a replica a little behind (or
  /// restarted from a store older than the nodes) starts its next epoch past `e`, so the nodes'
  /// fence never drops its messages as stale. Only while waiting for the nodes.
  void on_epoch_seen(epoch_t e);
  /// (6) A node's agent is gone (missed heartbeats, endpoint error, drained).
  std::vector<policy_action> on_node_lost(node_id n, const std::string& why);
  /// A heartbeat from a node's agent.
  void on_heartbeat(node_id n);
  /// Node `n` measured `figures` in its check (before it joins, or when an operator asks). Once the
  /// job has left waiting_for_nodes the node is judged at once against the fleet's latest figures;
  /// before, every node is judged when the nodes of the placement have all reported. A node that
  /// fails is quarantined: never placed, never a spare, never a buddy; its ranks move to a spare or
  /// the world shrinks. A quarantined node that passes a later check is released, unless the
  /// link check quarantined it: only a link check releases that (release()).
  std::vector<policy_action> on_node_checked(node_id n, const node_figures& figures);
  /// Quarantines node `n` for a reason found outside its check (`check`: what found it, e.g.
  /// "straggler" or "link"; `why` with the figures): as a failed check, its ranks move to a spare
  /// or the world shrinks, and it is released by a check that passes.
  std::vector<policy_action> quarantine(node_id n, const std::string& check, const std::string& why,
                                        std::vector<std::pair<std::string, std::string>> fields = {});
  /// Releases node `n` when `check` quarantined it (`why`: what it passed since); nothing otherwise.
  std::vector<policy_action> release(node_id n, const std::string& check, const std::string& why);
  /// Whether a spare could take a node's ranks now.
  [[nodiscard]] bool spare_available() const { return free_spare(placement_).has_value(); }
  /// Why node `n` is quarantined (the failed check with its figures), or nullopt.
  [[nodiscard]] std::optional<std::string> quarantined(node_id n) const;
  /// The verdict of node n's latest check (nullopt before its first).
  [[nodiscard]] std::optional<node_verdict> check_of(node_id n) const;
  /// (2) A rank registered for an epoch.
  std::vector<policy_action> on_rank_ready(rank_id r, epoch_t e);
  /// A node holds a copy of a rank's state (reported after each snapshot and replication).
  /// Returns true when this report commits a newer step of the current world: every rank holds it
  /// on enough live nodes (two when two or more nodes are up, for a buddy replica; else one).
  /// The nodes pin the committed step (see snapshot_committed).
  bool on_snapshot(const snapshot_report& r);
  /// A node no longer holds a copy it reported: restores stop counting on it.
  void on_snapshot_dropped(const snapshot_report& r);
  /// on_snapshot_dropped for each rank of `ranks` and each of `copies`, all held by `holder`
  /// (snapshot_registry::on_dropped_ranks).
  void on_snapshots_dropped(std::span<const rank_id> ranks, std::span<const copy_change> copies, node_id holder) {
    copies_.on_dropped_ranks(ranks, copies, holder);
  }
  /// The record of copies and checkpoints (committed step, checkpoints on disk, restore choice).
  [[nodiscard]] const snapshot_registry& copies() const noexcept { return copies_; }
  /// A checkpoint of `step` for a world of `world` ranks is committed on disk: a restore may use
  /// it when no newer step survives in memory.
  void on_checkpoint_committed(step_t step, std::uint32_t world) { copies_.on_checkpoint_committed(step, world); }
  /// The checkpoint of `step` is gone (retention) or unreadable: restores no longer count on it.
  void forget_checkpoint(step_t step) { copies_.forget_checkpoint(step); }
  /// (5) Rank `r` could not read the copy of `old_rank`'s state at `step` held by `holder` as
  /// `where`, named in the start of epoch `e`: that copy is forgotten and a new epoch chooses the
  /// restore point again (an older step, another copy, or step 0).
  std::vector<policy_action> on_restore_failed(rank_id r, epoch_t e, rank_id old_rank, step_t step, node_id holder,
                                               copy_kind where, const std::string& why);
  /// (5) A rank's process ended, or its collectives failed, or it was found hung.
  std::vector<policy_action> on_rank_failed(rank_id r, epoch_t e, const std::string& why);
  /// Rank r's program exited with status 0 in epoch e (a job without progress reports): once every
  /// rank of the placement has, the job is completed.
  std::vector<policy_action> on_rank_completed(rank_id r, epoch_t e);
  /// A rank's collective failed (a timeout or a peer error): a symptom; the rank that caused it
  /// is found by its exit, its missed heartbeats, or (with a collective timeout) by being the one
  /// that is silent and makes no progress while its peers wait. If none is found within the hang
  /// timeout, every rank starts over in a new epoch.
  std::vector<policy_action> on_collective_error(rank_id r, epoch_t e, const std::string& why);
  /// A rank finished a step.
  std::vector<policy_action> on_progress(rank_id r, epoch_t e, step_t s);
  /// Rank r of epoch e reported where it is in its collectives (with its node's heartbeat): what a
  /// hang's verdict is built from.
  void on_position(rank_id r, epoch_t e, const collective_position& at);
  /// Periodic: finds hung ranks, lost nodes and overdue rendezvous (3).
  std::vector<policy_action> on_tick();

  // ---- the same events in bulk, for the discrete-event simulator at thousands of ranks -------
  // Each has exactly the effect of the per-rank calls it names, made in placement order, but takes
  // one pass over the placement instead of one per rank (on_rank_ready and on_progress each scan
  // the whole placement, so a rank-by-rank rendezvous of 16,384 ranks costs 2^28 steps).

  /// (1) The agents of every node in `nodes` connected: on_node_up for each in turn.
  std::vector<policy_action> on_nodes_up(std::span<const node_id> nodes);
  /// (2) Every rank in `ranks` registered for epoch `e`: on_rank_ready for each in turn.
  std::vector<policy_action> on_ranks_ready(std::span<const rank_id> ranks, epoch_t e);
  /// Every rank of the placement finished step `s` of epoch `e`: on_progress for each in turn.
  std::vector<policy_action> on_progress_all(epoch_t e, step_t s);
  /// The copies of the ranks of the placement change as `c` says (snapshot_registry::
  /// on_changed_all): on_snapshot_dropped and on_snapshot for each change in turn and each rank
  /// of a node whose set names it, in one pass. Returns true when it commits a newer step.
  bool on_copies_changed_all(const copy_changes& c);

  /// Forgets the copies of world generations a restore is unlikely to need (snapshot_registry::prune).
  std::size_t prune_snapshots() { return copies_.prune(); }

  // ---- operator commands (7, 9, 10, 11) -----------------------------------------------------
  std::vector<policy_action> pause();
  std::vector<policy_action> resume();
  std::vector<policy_action> stop(const std::string& why);
  /// (8) Ends the job as failed for a reason outside the policy (its state could not be stored).
  std::vector<policy_action> fail_job(const std::string& why);
  /// Moves the ranks of `n` elsewhere (a spare, or a smaller world) and stops using it.
  std::vector<policy_action> drain(node_id n);
  /// Resizes the data-parallel world to `world` ranks (at most the ranks the nodes can hold).
  std::vector<policy_action> scale(std::uint32_t world);
  /// A lost node whose ranks no free node can take asks `r` for a new plan (job.plan with the
  /// planner's files) instead of shrinking the world to whole pipelines of the same split.
  void set_replanner(replanner r) { replanner_ = std::move(r); }
  /// With a planned placement and a re-plan upwards set: a node of the plan that comes back (up,
  /// checked or released, and running no rank of the world) (or a
  /// paused job that resumes) while another of the plan's nodes is still down and the world is
  /// smaller than the plan's asks `r` for a plan over the nodes up now. A plan it gives (the
  /// caller judged it faster than the world running and took its split and shares) starts a new
  /// epoch in its placement, its stages the world's multiple; nullopt keeps the world.
  void set_upward_replanner(std::function<std::optional<replanned>()> r) { upward_ = std::move(r); }
  /// A better plan for the same nodes than the one in force (the full re-search after a re-plan):
  /// a new epoch in its placement, its stages as the world's multiple, restored from the newest
  /// snapshot; `why` is the event's text (kind replanned). Nothing unless the job is training.
  std::vector<policy_action> adopt_plan(const replanned& plan, const std::string& why);
  /// With a planned placement (policy_config::initial, job.plan): once the world is smaller than
  /// the plan's (a node was lost and the world re-planned or shrunk) and every node the plan
  /// places is placeable again (a repaired node came back, passed its check or was released),
  /// the job returns to the plan in a new epoch: the plan's placement, its stages as the world's
  /// multiple (a paused job, when it resumes). `restored` is called first, so that the supervisor
  /// takes the plan's split and shares again. Unset: no return (the world grows only by `scale`).
  void set_plan_return(std::function<void()> restored) { plan_restored_ = std::move(restored); }
  /// The stages of a pipeline now (a reloaded world's split): the world is a whole number of them.
  void set_world_multiple(std::uint32_t m) { config_.world_multiple = std::max<std::uint32_t>(m, 1); }
  [[nodiscard]] std::uint32_t world_multiple() const noexcept { return config_.world_multiple; }
  /// Starts a new epoch with the same ranks on the same slots, no process restarted: every rank
  /// registers again and restores the newest snapshot all of them hold. How a change that the
  /// ranks take only at an epoch's start (their micro-batch shares) reaches a running job.
  /// Nothing happens unless the job is training.
  std::vector<policy_action> restart_epoch(const std::string& why);
  /// After the supervisor's own restart (or a takeover): the reloaded epoch, placement and restart
  /// counts (by rank, and of the whole job: the limits count on from them); starts a new epoch once
  /// the nodes return. A node of the placement that has not returned `node_timeout` after the
  /// first one did is lost: its ranks move to a spare, or the world shrinks. The copies the nodes
  /// report again count for the reloaded world when written in an epoch from `world_since` (the
  /// first epoch that numbered the ranks as the reloaded placement does) to `last_epoch`.
  std::vector<policy_action> recover_after_restart(epoch_t last_epoch, std::vector<rank_slot> placement, step_t step,
                                                   const std::map<rank_id, std::uint32_t>& restarts = {},
                                                   std::uint32_t total_restarts = 0,
                                                   std::optional<epoch_t> world_since = std::nullopt);

 private:
  struct rank_state {
    std::optional<epoch_t> ready_epoch;
    step_t step;
    clock::time_point last_progress;
    std::uint32_t restarts = 0;
    /// Failures since the rank last trained `snapshot_every` steps past an epoch's start: what
    /// the restart back-off grows with (a crash loop waits longer, a failure after hours of
    /// training does not).
    std::uint32_t quick_failures = 0;
    /// The latest collective position reported in epoch position_epoch.
    std::optional<collective_position> position;
    epoch_t position_epoch;
  };
  /// The records of the ranks, by rank id: a flat table, not a tree, as every recovery of a
  /// simulated world of 16,384 ranks walks it several times.
  class rank_table {
   public:
    [[nodiscard]] rank_state* find(rank_id r) noexcept {
      return r.value() < present_.size() && present_[r.value()] ? &states_[r.value()] : nullptr;
    }
    [[nodiscard]] const rank_state* find(rank_id r) const noexcept {
      return r.value() < present_.size() && present_[r.value()] ? &states_[r.value()] : nullptr;
    }
    [[nodiscard]] bool contains(rank_id r) const noexcept { return find(r) != nullptr; }
    /// The record of `r`, made fresh when it has none. REQUIRES: r < max_rank_id.
    rank_state& operator[](rank_id r) {
      if (r.value() < present_.size() && present_[r.value()])
        return states_[r.value()];
      return add(r);
    }
    /// Keeps the records of the ranks of `placement` (fresh ones for those without), drops every
    /// other, and calls f(rank_state&) for each kept one, in placement order.
    template <class F>
    void keep_only(std::span<const rank_slot> placement, F&& f) {
      keep_.assign(present_.size(), 0);
      for (const auto& s : placement)
        if (s.rank.value() < keep_.size())
          keep_[s.rank.value()] = 1;
      for (std::size_t i = 0; i < present_.size(); ++i)
        present_[i] = present_[i] && keep_[i];
      for (const auto& s : placement)
        f((*this)[s.rank]);
    }
    /// f(rank_id, rank_state&) for every record, in rank order.
    template <class F>
    void for_each(F&& f) {
      for (std::size_t i = 0; i < present_.size(); ++i)
        if (present_[i])
          f(rank_id{static_cast<std::uint32_t>(i)}, states_[i]);
    }
    /// Rank ids of a configuration are far below this (planner and config bound the devices).
    static constexpr std::uint32_t max_rank_id = 1u << 22;

   private:
    /// A fresh record of `r`, which has none.
    rank_state& add(rank_id r);
    std::vector<rank_state> states_;
    std::vector<std::uint8_t> present_;
    /// keep_only's marks (kept for its capacity).
    std::vector<std::uint8_t> keep_;
  };
  /// Records that rank state `r` registered in epoch `e` (and counts it).
  void mark_ready(rank_state& r, epoch_t e);
  /// Ranks that registered in epoch ready_counted_.
  std::uint32_t ready_ = 0;
  epoch_t ready_counted_;
  struct node_state {
    bool up = false;
    /// Every copy of a rank state it holds has been reported since it came up.
    bool reported = false;
    bool drained = false;
    clock::time_point last_heartbeat;
    /// Its latest check, and the verdict on it (once judged).
    std::optional<node_figures> figures;
    std::optional<node_verdict> verdict;
  };

  // The note of rank r declared hung, `why`, with the verdict of every rank's collective position.
  /// The note for hung rank `s`; `survey` is every rank's position summed up, made on the first
  /// call of a tick and kept for the others (a whole stalled world is judged in one pass).
  struct hang_survey {
    hang_verdict verdict;
    /// verdict.fields(), made once: every hung rank's note has them, with its own sentence.
    std::vector<std::pair<std::string, std::string>> fields;
  };
  note_event hung_note(const rank_slot& s, const std::string& why, std::optional<hang_survey>& survey);
  // Starts epoch e+1 with `placement`, respawning `respawn` (with back-off) and restoring the
  // state of `restore_world` ranks.
  void new_epoch(std::vector<policy_action>& out, std::vector<rank_slot> placement, const std::set<rank_id>& respawn,
                 const std::string& why);
  std::vector<rank_slot> initial_placement() const;
  void maybe_leave_waiting(std::vector<policy_action>& out);
  /// A node that can take `ranks` ranks of a lost node: a spare that is up, placeable and holds no
  /// rank of `placement`, else a worker node in the same state (repaired, its ranks moved away:
  /// it is back in the pool) with room for them. The spare in another failure domain than
  /// `lost` comes first, so the moved ranks do not share the lost node's rack.
  std::optional<node_id> free_spare(const std::vector<rank_slot>& placement, std::uint32_t ranks = 1,
                                    std::optional<node_id> lost = std::nullopt) const;
  /// Up, not drained, not quarantined and (with preflight) checked: may hold ranks and replicas.
  [[nodiscard]] bool placeable(std::size_t n) const;
  /// Judges node n's latest figures against the fleet's and records the verdict, with its event
  /// (node_released when it passes after `was_quarantined`); true when it is quarantined.
  bool judge(std::vector<policy_action>& out, std::size_t n, bool was_quarantined);
  /// Moves the ranks of quarantined node n elsewhere in a new epoch, when it holds any and the job
  /// trains.
  void move_off_quarantined(std::vector<policy_action>& out, node_id n);
  /// The placement without node `n` (lost or drained), one rule for both: its ranks on a free
  /// spare with their rank numbers (`moved`), or with no spare the others renumbered from 0 (the
  /// world shrinks); `note` says which.
  struct placement_change {
    std::vector<rank_slot> placement;
    std::set<rank_id> moved;
    note_event note;
  };
  [[nodiscard]] placement_change placement_without(node_id n) { return placement_without(n, placement_); }
  /// The same, from `placement` instead of the current one. With a replanner and no free node,
  /// the re-plan's placement (and its stages become the world's multiple).
  [[nodiscard]] placement_change placement_without(node_id n, const std::vector<rank_slot>& placement);
  replanner replanner_;
  /// Whether the job may return to its planned placement (set_plan_return): the world is smaller
  /// than the plan's and every node the plan places is placeable.
  [[nodiscard]] bool plan_is_back() const;
  /// Starts a new epoch in the planned placement and stages; `why` begins the event.
  void return_to_plan(std::vector<policy_action>& out, const std::string& why, std::optional<node_id> node);
  /// return_to_plan while training, when plan_is_back(), else replan_up; `back` is the node that
  /// came back.
  void maybe_return_to_plan(std::vector<policy_action>& out, node_id back);
  std::function<std::optional<replanned>()> upward_;
  /// The re-plan upwards (set_upward_replanner), when the world is smaller than the plan's and
  /// `node` (if any) is one of the plan's nodes; true when it started a new epoch.
  bool replan_up(std::vector<policy_action>& out, const std::string& why, std::optional<node_id> node);
  std::function<void()> plan_restored_;
  /// The planned placement's stages (the world's multiple before any re-plan).
  std::uint32_t plan_multiple_ = 1;
  [[nodiscard]] std::vector<std::optional<node_id>> buddies() const;
  void fail(std::vector<policy_action>& out, const std::string& why);
  void maybe_start(std::vector<policy_action>& out);
  std::chrono::nanoseconds backoff_for(std::uint32_t restarts) const;

  policy_config config_;
  const clock& clock_;
  job_state state_ = job_state::waiting_for_nodes;
  epoch_t epoch_{0};
  std::vector<rank_slot> placement_;
  rank_table ranks_;
  /// Ranks whose program exited with status 0 in this epoch.
  std::set<rank_id> completed_;
  std::vector<node_state> nodes_;
  step_t step_;
  /// Step the current epoch started from.
  step_t start_step_;
  /// Where the ranks' states are: copies in memory and checkpoints on disk.
  snapshot_registry copies_;
  clock::time_point rendezvous_since_;
  /// After a restart: when the first node of the reloaded placement came back.
  std::optional<clock::time_point> first_return_;
  std::optional<clock::time_point> collective_error_since_;
  /// Ranks of this epoch that reported a failed collective: they wait, they are not stuck.
  std::set<rank_id> collective_waiters_;
  std::uint32_t restarts_ = 0;
  std::string reason_;
};

}  // namespace rekindle::policy
