#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/problem.hpp"

/// Generated problems for checking the fast search against the exhaustive one (docs/PLANNER.md,
/// "Quality"). The same seed gives the same problems on every machine.

namespace rekindle::planner {

/// One generated problem.
struct reference_case {
  /// e.g. "case 7: 3 nodes (4 x-a, 2 x-b, 1 x-b), 4 layers h=2048".
  std::string name;
  problem target;
};

/// `count` small problems whose exhaustive search needs at most `limit` evaluations: two or
/// three nodes of 1, 2 or 4 devices of two device types (rates, memories and links drawn from
/// realistic ranges), a network with a default bandwidth and sometimes a faster group, and a model
/// of 2–6 layers whose size makes memory tight in some of them.
std::vector<reference_case> reference_cases(std::uint32_t count, std::uint64_t seed, std::uint64_t limit);

}  // namespace rekindle::planner
