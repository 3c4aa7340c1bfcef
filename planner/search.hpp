#pragma once

#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string_view>
#include <vector>

#include "common/expected.hpp"
#include "planner/plan.hpp"
#include "planner/problem.hpp"

/// The search for the fastest plans (docs/PLANNER.md, "Search").
///
/// *Exhaustive* enumerates the whole plan space: every pipeline degree, every tensor degree per
/// stage, every multiset of replicas (a device type per stage), every layer split, micro-batch
/// size and recompute choice, with micro-batch shares balanced per replica and devices placed by
/// one placement rule. It is the reference for small clusters. *Fast* builds candidate layouts
/// from a few families (replicas of one type, identical mixed replicas, mixed leftovers), finds a
/// split for each by a min-max partition, polishes the best by local moves of layer boundaries and
/// tensor degrees, and prunes layouts whose compute lower bound cannot win.

namespace rekindle::planner {

enum class search_mode {
  /// Exhaustive when the space is small (search_options::exhaustive_limit), else fast.
  automatic,
  fast,
  exhaustive,
};
std::string_view to_string(search_mode m) noexcept;

struct search_options {
  /// Default: automatic.
  search_mode mode = search_mode::automatic;
  /// Plans returned, best first, each of a different shape (data degree, tensor degree per stage,
  /// micro-batch size, recompute). Default: 5.
  std::uint32_t top = 5;
  /// In automatic mode, the most evaluations an exhaustive search may need. Default: 200,000.
  std::uint64_t exhaustive_limit = 200'000;
  /// Ends the search early with the best plans found so far (stats.stopped tells).
  std::stop_token stop;
  /// Wall time the search may take, then it stops as if `stop` fired: every input ends in bounded
  /// time (a model of 100,000 thin layers makes every evaluation slow). Zero: no limit.
  /// Default: 60 s.
  std::chrono::milliseconds budget{60'000};
};

struct search_stats {
  /// The mode that ran.
  search_mode mode = search_mode::fast;
  /// Layouts (tensor degrees and placed replicas) considered.
  std::uint64_t layouts = 0;
  /// Plans whose cost was computed.
  std::uint64_t evaluations = 0;
  double seconds = 0;
  /// The stop token ended the search.
  bool stopped = false;
};

struct search_result {
  /// Best first; never empty.
  std::vector<plan> plans;
  search_stats stats;
};

/// Finds the fastest plans that fit.
///
/// Errors: invalid_argument for an inconsistent problem, or an exhaustive search asked for on a
/// space of more than 50 million evaluations; resource_exhausted when no plan fits,
/// with the reason (the memory the model needs against what the cluster has, or the closest plan
/// and what it lacks); aborted when stopped before any plan was found.
[[nodiscard]] expected<search_result> search(const problem& p, const search_options& options = {});

/// Evaluations an exhaustive search of `p` needs, counted up to `limit` (returns limit + 1 beyond).
[[nodiscard]] std::uint64_t exhaustive_size(const problem& p, std::uint64_t limit);

}  // namespace rekindle::planner
