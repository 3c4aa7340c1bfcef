#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "planner/plan.hpp"
#include "planner/problem.hpp"

/// Plans read from a file, for `rekindle plan --evaluate`: the planner's own `--json` output, or a
/// short form written by hand (docs/PLANNER.md, "Scoring a plan of your own").

namespace rekindle::planner {

/// Limits of a plan file: what no cluster the planner accepts can need.
inline constexpr std::size_t max_plan_file_plans = 100;
inline constexpr std::size_t max_plan_file_depth = 16;

/// Reads the plans of `text` (from `source`, named in errors) against the cluster of `p`. The
/// text is either a document with a "plans" array (what `rekindle plan --json` prints; every plan
/// in it is read), or one plan object. A plan object has:
///   "stages":   [{"layers": N, "tensor": T, "first_layer": F}, ...]   first_layer optional
///   "replicas": [{"stages": [{"node": "a0", "devices": [0, 1]}, ...], "micro_batches": M}, ...]
///               devices optional (the node's lowest devices no earlier stage took), micro_batches
///               optional (0 or absent in every replica: shared out for the fastest step)
///   "micro_batch_size": B (default 1), "recompute": false (default)
/// Keys the planner writes about its prediction ("step_time", "breakdown", "memory", ...) are
/// accepted and ignored: the prediction is made again. Any other key is an error.
///
/// Errors (invalid_argument) name the source and the field ("plan.json: plans[0].replicas[2].
/// stages[1].node: unknown node 'h9' (did you mean 'h0'?)"); nothing is evaluated here.
[[nodiscard]] expected<std::vector<plan>> parse_plan_file(std::string_view text, const std::string& source,
                                                          const problem& p);

}  // namespace rekindle::planner
