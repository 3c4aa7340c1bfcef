#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "planner/plan.hpp"
#include "planner/problem.hpp"

/// Plans read from a file, for `rekindle plan --evaluate`: the planner's own `--json` output, or a
/// short form written by hand (docs/PLANNER.md, "Scoring a plan of your own").

namespace rekindle::planner {

/// Reads the plans of `text` (from `source`, named in errors) against the cluster and model of `p`:
/// config::read_plan_file (its format and errors) with the nodes' working devices, as plans.
/// Nothing is evaluated here; the prediction is made again by evaluate().
[[nodiscard]] expected<std::vector<plan>> parse_plan_file(std::string_view text, const std::string& source,
                                                          const problem& p);

}  // namespace rekindle::planner
