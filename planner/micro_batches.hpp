#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/expected.hpp"

/// Data parallelism over unequal ranks: how many of a step's micro-batches each rank runs. The
/// runtime calls this with measured speeds (training_task's micro_batches_per_rank); the planner
/// does the same across replicas with its predicted costs.

namespace rekindle::planner {

/// Shares `micro_batches` over ranks of relative speed `speeds[r]` (micro-batches per unit of
/// time): integer counts, each ≥ 0, that add up to `micro_batches` and minimise the step time
/// max_r count[r] / speeds[r]. Among optimal shares it gives the extra micro-batches to the
/// lowest ranks, so the result is deterministic. A rank of speed 0 gets none.
///
/// Errors: invalid_argument when `speeds` is empty, holds a negative or non-finite value, or is
/// all zero while micro_batches > 0.
[[nodiscard]] expected<std::vector<std::uint32_t>> share_micro_batches(std::span<const double> speeds,
                                                                      std::uint32_t micro_batches);

/// Relative speeds from measured times of the same work (a step or a micro-batch) per rank:
/// speed = 1 / seconds. Errors: invalid_argument for an empty list or a time that is not a
/// positive finite number.
[[nodiscard]] expected<std::vector<double>> speeds_from_times(std::span<const double> seconds);

}  // namespace rekindle::planner
