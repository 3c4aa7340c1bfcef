#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "planner/layout.hpp"
#include "planner/search.hpp"

/// Internal to planner/: the machinery the search and the re-plan share. It evaluates candidates,
/// keeps the best distinct ones, finds and polishes layer splits, and remembers the closest plan
/// that did not fit so that "no plan" comes with a reason.

namespace rekindle::planner::detail {

/// A layout with its split, micro-batch size, recompute choice and evaluation.
struct candidate {
  std::shared_ptr<const layout> where;
  std::vector<std::uint32_t> split;
  std::uint32_t micro_batch = 1;
  bool recompute = false;
  evaluation result;

  /// The plan shape: data degree, tensor degree per stage, micro-batch size, recompute. The
  /// ranking keeps the best candidate of each shape.
  [[nodiscard]] std::string key() const;
  /// Ranks candidates: feasible ones by step time, then the others by how far over memory.
  [[nodiscard]] double score() const noexcept;
};

/// Why no plan of `p` can exist whatever its layout, from a bound that needs no search: the
/// weights, gradients and optimizer state of the model against the usable memory of every device
/// together. Empty when the bound allows a plan. Checked before a search, so that an obviously
/// infeasible model (20,000 layers on 32 devices) is refused at once rather than after the search.
[[nodiscard]] std::string memory_shortfall(const problem& p);

/// Evaluates and ranks candidates for one problem.
///
/// Thread-safety: one finder per search; not shared.
class finder {
 public:
  /// Returns the `top` best distinct candidates (and ranks at least 8 to seed local searches).
  finder(const problem& p, std::uint32_t top, std::stop_token stop);

  [[nodiscard]] const cost_model& costs() const noexcept { return costs_; }
  [[nodiscard]] const problem& target() const noexcept { return costs_.target(); }
  /// Micro-batch sizes and recompute choices to try, from the model.
  [[nodiscard]] const std::vector<std::uint32_t>& micro_batch_sizes() const noexcept { return sizes_; }
  [[nodiscard]] const std::vector<bool>& recompute_choices() const noexcept { return recompute_; }
  /// Tensor degrees a stage may have: powers of two dividing the heads, at most the largest node.
  [[nodiscard]] const std::vector<std::uint32_t>& tensor_degrees() const noexcept { return tensor_; }

  /// Evaluates, counts, remembers a near miss, and offers a feasible result to the ranking.
  evaluation evaluate(const std::shared_ptr<const layout>& l, std::span<const std::uint32_t> split, std::uint32_t b,
                      bool recompute);
  /// A good split for `l`: the smallest bottleneck stage time (each class relative to its own
  /// speed) that fits in memory, by bisection over a greedy partition. Nothing when no split fits.
  [[nodiscard]] std::optional<std::vector<std::uint32_t>> quick_split(const layout& l, std::uint32_t b,
                                                                      bool recompute) const;
  /// The split whose most loaded device is least over its memory: a starting point when no
  /// split fits (the local search then looks for a layout where one does).
  [[nodiscard]] std::vector<std::uint32_t> memory_split(const layout& l, std::uint32_t b, bool recompute) const;
  /// Moves one layer at a time from one stage to another while the step time improves.
  candidate polish(candidate c);
  /// Offers a feasible candidate to the ranking.
  void offer(const candidate& c);
  /// The best step time seen so far (infinity when none).
  [[nodiscard]] double best_time() const noexcept;
  /// The worst step time in a full ranking (infinity until full).
  [[nodiscard]] double cutoff() const noexcept;

  /// Lower bound on the step time of any plan on `l`: the compute of the global batch spread over
  /// its devices at their full rate.
  [[nodiscard]] double lower_bound(const layout& l, bool recompute) const;

  /// Stop at `deadline` as if the stop token had been triggered.
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }
  void clear_deadline() { deadline_.reset(); stats_.stopped = false; }
  /// True once the stop token fired or the deadline passed (and stays true).
  [[nodiscard]] bool stopped();
  [[nodiscard]] search_stats& stats() noexcept { return stats_; }
  /// The ranked candidates, best first.
  [[nodiscard]] const std::vector<candidate>& ranking() const noexcept { return top_; }
  /// Plans of the ranking, best first.
  [[nodiscard]] std::vector<plan> plans() const;
  /// Why nothing fits: a memory bound, or the closest plan and what it lacks.
  [[nodiscard]] std::string no_plan_reason() const;

 private:
  cost_model costs_;
  std::uint32_t top_count_;
  std::uint32_t wanted_;
  std::stop_token stop_;
  std::vector<std::uint32_t> sizes_;
  std::vector<bool> recompute_;
  std::vector<std::uint32_t> tensor_;
  std::vector<candidate> top_;
  search_stats stats_;
  std::optional<candidate> closest_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

/// Layer counts of `p` stages as even as possible (the first stages get the remainder).
std::vector<std::uint32_t> even_split(std::uint32_t layers, std::uint32_t p);

/// The fast search (search.hpp): candidate layouts, quick splits, polish, local search.
void run_fast(finder& f);

/// Layouts the local search has evaluated, shared between its starts: the best candidate found on
/// each (nothing where none was valid), so that a later start passes through a layout an earlier
/// one evaluated without evaluating it again (a layout two moves away is often reachable only
/// through one evaluated before).
using explored_layouts = std::map<std::string, std::optional<candidate>>;

/// The local search over layouts from `start` (search.hpp, "Fast", step 4).
void improve_layout(finder& f, candidate start, explored_layouts& explored);

}  // namespace rekindle::planner::detail
