#include "planner/micro_batches.hpp"

#include <cmath>
#include <queue>
#include <string>

namespace rekindle::planner {

expected<std::vector<std::uint32_t>> share_micro_batches(std::span<const double> speeds, std::uint32_t micro_batches) {
  if (speeds.empty())
    return status{errc::invalid_argument, "no ranks to share micro-batches over"};
  double total = 0;
  for (std::size_t r = 0; r < speeds.size(); ++r) {
    if (!std::isfinite(speeds[r]) || speeds[r] < 0)
      return status{errc::invalid_argument,
                    "rank " + std::to_string(r) + " has speed " + std::to_string(speeds[r]) +
                        "; speeds must be finite and not negative"};
    total += speeds[r];
  }
  std::vector<std::uint32_t> counts(speeds.size(), 0);
  if (micro_batches == 0)
    return counts;
  if (total <= 0)
    return status{errc::invalid_argument, "every rank has speed 0; at least one must run micro-batches"};
  // The optimum is the M smallest values of {k / speed[r] : k ≥ 1}. Every value at most M / Σs is
  // among them, so start from floor(M · s_r / Σs) and add the rest one at a time.
  std::uint64_t given = 0;
  for (std::size_t r = 0; r < speeds.size(); ++r) {
    counts[r] = static_cast<std::uint32_t>(std::floor(static_cast<double>(micro_batches) * speeds[r] / total));
    given += counts[r];
  }
  // Rounding can only overshoot by a hair; take back from the slowest finish if it did.
  while (given > micro_batches) {
    std::size_t worst = 0;
    double latest = -1;
    for (std::size_t r = 0; r < speeds.size(); ++r)
      if (counts[r] > 0 && counts[r] / speeds[r] > latest) {
        latest = counts[r] / speeds[r];
        worst = r;
      }
    counts[worst] -= 1;
    --given;
  }
  // Next finish time of each rank; the lowest rank wins ties.
  using entry = std::pair<double, std::size_t>;
  const auto later = [](const entry& a, const entry& b) { return a.first > b.first || (a.first == b.first && a.second > b.second); };
  std::priority_queue<entry, std::vector<entry>, decltype(later)> next(later);
  for (std::size_t r = 0; r < speeds.size(); ++r)
    if (speeds[r] > 0)
      next.emplace((counts[r] + 1) / speeds[r], r);
  for (; given < micro_batches; ++given) {
    const auto [finish, r] = next.top();
    next.pop();
    counts[r] += 1;
    next.emplace((counts[r] + 1) / speeds[r], r);
  }
  return counts;
}

expected<std::vector<double>> speeds_from_times(std::span<const double> seconds) {
  if (seconds.empty())
    return status{errc::invalid_argument, "no measured times"};
  std::vector<double> speeds;
  for (std::size_t r = 0; r < seconds.size(); ++r) {
    if (!std::isfinite(seconds[r]) || seconds[r] <= 0)
      return status{errc::invalid_argument, "rank " + std::to_string(r) + " has time " + std::to_string(seconds[r]) +
                                                "; times must be positive and finite"};
    speeds.push_back(1 / seconds[r]);
  }
  return speeds;
}

}  // namespace rekindle::planner
