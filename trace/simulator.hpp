#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

#include "common/expected.hpp"
#include "trace/cluster.hpp"
#include "trace/model.hpp"
#include "trace/trace.hpp"

namespace rekindle::trace {

/// How the job recovers. Both run through the real `actors::supervisor_policy`; they differ in
/// what the simulated agents and checkpoint actors do (docs/TRACES.md, "Policies").
enum class policy_kind : unsigned char {
  /// rekindle: survivors keep their processes, failed ranks restart in place (or on a spare),
  /// state comes from in-memory snapshots (own node, then a buddy's replica, then disk).
  in_place,
  /// The common baseline: every failure restarts every rank, and state comes from the newest
  /// checkpoint on disk, written synchronously every `checkpoint_every` steps.
  restart_all,
};
/// "in-place restart + memory snapshots" / "restart everything + disk checkpoints".
std::string_view describe(policy_kind p) noexcept;
/// "in-place" / "restart-all".
std::string_view to_string(policy_kind p) noexcept;

/// The most training steps one simulation runs (its duration over the step time), so that every
/// replay ends in bounded time: about two minutes of simulated training here.
inline constexpr double max_simulated_steps = 1e9;

/// The model policy `p` runs with in a world of `world` ranks: the restart-everything policy takes
/// its own detection and restart costs (the `restart_all_*` keys: the launcher's poll for a process
/// exit, the collective timeout for a hang or a lost node, every process started, a communicator
/// initialised that grows with the world); both read a checkpoint at most at the storage's
/// bandwidth shared by the world's ranks (`storage_bandwidth`). The one place those rules live.
model policy_model(const model& m, policy_kind p, std::uint32_t world);

/// One assumption of a policy's cost model, printed beside its results: what, and its value in
/// this world ("a node lost, found after" / "10 min").
struct assumption {
  std::string what;
  std::string value;
};
/// What one failure costs policy `p` in a world of `world` ranks under `m`, row by row; the rows
/// are the same for both policies, so they can be printed side by side.
std::vector<assumption> assumptions(const model& m, policy_kind p, std::uint32_t world);

/// Where the wall time went. Every simulated second is in exactly one of `useful` and these.
enum class lost : unsigned char {
  /// From a fault stopping training to the supervisor's new epoch.
  detection,
  /// From the new epoch to every rank registered: process start, back-off.
  restart,
  /// From the last registration to the collectives being ready.
  rendezvous,
  /// Reading the state to restore.
  restore,
  /// Training steps again that were done before, and steps cut short by a fault.
  recompute,
  /// In-memory snapshot stalls.
  snapshots,
  /// Checkpoint stalls: persists (in place), synchronous disk writes (restart everything).
  checkpoints,
  /// Step time beyond the nominal: a smaller world, or slow ranks.
  degraded,
  /// No job: it failed or stopped before the end.
  down,
};
inline constexpr std::size_t lost_count = 9;
std::string_view to_string(lost l) noexcept;

/// What one simulation found.
struct sim_result {
  policy_kind policy = policy_kind::in_place;
  /// Seconds simulated (the trace's duration, or until the job completed or failed).
  double wall = 0;
  /// Nominal step time × steps trained for the first time.
  double useful = 0;
  std::array<double, lost_count> lost_time{};
  /// Highest step the job completed.
  std::uint64_t steps = 0;
  /// Events in the trace; those that hit the job (a process, a node or link it used, its
  /// checkpoints); those whose step was never reached.
  std::uint32_t faults = 0;
  std::uint32_t hit = 0;
  std::uint32_t not_reached = 0;
  /// Epochs after the first (each a recovery round), and the policy's count of rank restarts.
  std::uint32_t recoveries = 0;
  std::uint32_t rank_restarts = 0;
  /// Restores by the slowest source among the ranks: own memory, a buddy's, disk; and restarts
  /// from step 0 after a failure.
  std::uint32_t restores_memory = 0;
  std::uint32_t restores_buddy = 0;
  std::uint32_t restores_disk = 0;
  std::uint32_t restores_scratch = 0;
  /// Checkpoints started and those that failed (a node lost or a disk full while writing).
  std::uint32_t checkpoints = 0;
  std::uint32_t checkpoints_failed = 0;
  std::uint32_t world_start = 0;
  std::uint32_t world_min = 0;
  std::uint32_t world_end = 0;
  /// The policy's notes by kind (world_shrinks, ranks_moved, rank_hung, no_snapshot, ...).
  std::map<std::string, std::uint32_t> notes;
  /// Each epoch's start: the step restored and the slowest source among the ranks (0 their own
  /// node's memory, 1 a buddy's, 2 disk; -1 from scratch).
  struct restore_record {
    std::uint64_t epoch = 0;
    std::uint64_t step = 0;
    int source = -1;
    bool operator==(const restore_record&) const = default;
  };
  std::vector<restore_record> restores;
  /// At the end: the steps every rank's slot holds, and its buddy's replicas (on the nodes that
  /// kept their memory longest), by the live custody rule; the newest committed step.
  std::vector<std::uint64_t> slot_steps;
  std::vector<std::uint64_t> replica_steps;
  std::optional<std::uint64_t> committed;
  /// The job's state at the end ("running", "completed", "failed"), and why it failed.
  std::string end_state;
  std::string reason;

  /// Useful time / wall time: the effective-training-time ratio.
  [[nodiscard]] double ratio() const noexcept { return wall > 0 ? useful / wall : 0.0; }
  [[nodiscard]] double lost_in(lost l) const noexcept { return lost_time[static_cast<std::size_t>(l)]; }
  /// Detection, restart, rendezvous, restore, recompute and down.
  [[nodiscard]] double lost_to_recovery() const noexcept;
  /// Snapshots and checkpoints.
  [[nodiscard]] double lost_to_snapshots() const noexcept;
};

/// Runs `t` against `cluster` (with `m.spares` spare nodes added) under policy `p`, with the
/// durations of `m`: a discrete-event simulation that drives the real supervisor policy with a
/// fake clock. Time 0 is the job's first step. REQUIRES: the trace's targets lie in the cluster
/// (check_targets). Fails when the model is invalid or the trace has no duration to run for.
expected<sim_result> simulate(const fault_trace& t, const cluster_shape& cluster, const model& m, policy_kind p);

}  // namespace rekindle::trace
