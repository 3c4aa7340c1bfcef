#include "policy/straggler_detector.hpp"

#include <algorithm>

namespace rekindle::policy {

namespace {

std::int64_t median(std::vector<std::int64_t> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1)
    return *mid;
  const auto below = *std::max_element(v.begin(), mid);
  return below + (*mid - below) / 2;
}

}  // namespace

void straggler_detector::restart() {
  for (auto& [r, w] : ranks_) {
    w.samples.clear();
    w.next = 0;
    w.full = false;
  }
}

void straggler_detector::add(rank_id r, std::chrono::nanoseconds per_micro_batch) {
  if (per_micro_batch.count() <= 0 || options_.window == 0)
    return;
  auto& w = ranks_[r];
  if (w.samples.size() < options_.window) {
    w.samples.push_back(per_micro_batch.count());
  } else {
    w.samples[w.next] = per_micro_batch.count();
  }
  w.next = (w.next + 1) % options_.window;
  w.full = w.samples.size() == options_.window;
}

void straggler_detector::forget(rank_id r) { ranks_.erase(r); }

std::vector<straggler_detector::finding> straggler_detector::evaluate() {
  std::vector<finding> out;
  std::vector<std::pair<rank_id, std::int64_t>> medians;
  for (const auto& [r, w] : ranks_)
    if (w.full)
      medians.emplace_back(r, median(w.samples));
  if (medians.size() < 3)
    return out;
  std::vector<std::int64_t> all;
  all.reserve(medians.size());
  for (const auto& [r, m] : medians)
    all.push_back(m);
  const auto fleet = median(all);
  if (fleet <= 0)
    return out;
  for (const auto& [r, m] : medians) {
    auto& w = ranks_[r];
    const double ratio = static_cast<double>(m) / static_cast<double>(fleet);
    w.ratio = ratio;
    const bool now = w.flagged ? ratio >= options_.threshold * options_.clear_fraction : ratio >= options_.threshold;
    if (now != w.flagged) {
      w.flagged = now;
      out.push_back({r, now, ratio, std::chrono::nanoseconds{m}, std::chrono::nanoseconds{fleet}});
    }
  }
  return out;
}

bool straggler_detector::flagged(rank_id r) const {
  const auto it = ranks_.find(r);
  return it != ranks_.end() && it->second.flagged;
}

std::optional<double> straggler_detector::ratio(rank_id r) const {
  const auto it = ranks_.find(r);
  return it == ranks_.end() ? std::nullopt : it->second.ratio;
}

}  // namespace rekindle::policy
