#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "planner/plan.hpp"
#include "planner/problem.hpp"
#include "planner/search.hpp"

/// Re-planning after a failure (docs/PLANNER.md, "Re-plan"): a feasible plan for the devices that
/// are left, within a time budget, starting from the plan that was running.

namespace rekindle::planner {

/// A device that stopped working: one device of a node, or the whole node.
struct lost_device {
  /// Index into cluster::nodes.
  std::uint32_t node = 0;
  /// Device identifier inside the node; nothing means every device of the node.
  std::optional<std::uint32_t> device;

  bool operator==(const lost_device&) const = default;
};

/// The problem without the lost devices. Node indices and device identifiers stay the same (a
/// lost node keeps its place with no devices), so placements of the old plan still name the same
/// devices. Errors: invalid_argument for a node or device that does not exist.
[[nodiscard]] expected<problem> without(const problem& p, std::span<const lost_device> lost);

struct replan_options {
  /// Time the re-plan may take to improve on the repaired plan. When even the repaired plan does
  /// not fit, the search continues past it until a plan is found or none can exist. Default: 50ms.
  std::chrono::nanoseconds budget = std::chrono::milliseconds{50};
  /// Plans returned. Default: 1.
  std::uint32_t top = 1;
};

struct replan_result {
  /// The cluster without the lost devices. A full re-search is search(reduced): the caller may run
  /// it in the background (with a stop token) and switch when it finds something better.
  problem reduced;
  /// Best first; never empty.
  std::vector<plan> plans;
  /// How the first plan came about, e.g. "replica 3 lost node h1; its stage 2 moved to idle
  /// devices of h5; re-balanced ...".
  std::string how;
  search_stats stats;
};

/// Re-plans `current` (a plan for `p`) after `lost`:
///
/// 1. replicas that lost devices move the broken stages to idle devices of the same type (the
///    same node first), or are dropped when there are none;
/// 2. the repaired layout keeps its stages, micro-batch size and recompute choice; micro-batches
///    are shared again and the split polished;
/// 3. a local search over nearby layouts runs until `options.budget` is spent;
/// 4. when nothing so far fits (ZeRO shards grow when replicas are dropped), the fast search runs
///    on the remaining devices.
///
/// Errors: invalid_argument when the plan or the lost devices do not match `p`; resource_exhausted
/// with the reason when no plan fits the remaining devices.
[[nodiscard]] expected<replan_result> replan(const problem& p, const plan& current, std::span<const lost_device> lost,
                                             const replan_options& options = {});

}  // namespace rekindle::planner
