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
    w.full = false;
    w.above_since.reset();
  }
}

void straggler_detector::add(rank_id r, std::chrono::nanoseconds per_micro_batch, std::chrono::nanoseconds at) {
  if (per_micro_batch.count() <= 0 || options_.window == 0)
    return;
  auto& w = ranks_[r];
  w.samples.emplace_back(at.count(), per_micro_batch.count());
  const auto spans = [&](std::size_t from) { return at.count() - w.samples[from].first >= options_.span.count(); };
  // Drop the oldest while the rest still holds `window` samples over `span`.
  while (w.samples.size() > options_.window && (spans(1) || w.samples.size() > std::max(options_.max_samples, options_.window)))
    w.samples.pop_front();
  w.full = w.samples.size() >= options_.window && spans(0);
}

void straggler_detector::forget(rank_id r) { ranks_.erase(r); }

std::vector<straggler_detector::finding> straggler_detector::evaluate(std::chrono::nanoseconds now) {
  std::vector<finding> out;
  std::vector<std::pair<rank_id, std::int64_t>> medians;
  for (const auto& [r, w] : ranks_)
    if (w.full) {
      std::vector<std::int64_t> values;
      values.reserve(w.samples.size());
      for (const auto& [at, v] : w.samples)
        values.push_back(v);
      medians.emplace_back(r, median(std::move(values)));
    }
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
    if (ratio >= options_.threshold) {
      if (!w.above_since)
        w.above_since = now.count();
    } else {
      w.above_since.reset();
    }
    const bool confirmed = w.above_since && now.count() - *w.above_since >= options_.confirm.count();
    const bool slow = w.flagged ? ratio >= options_.threshold * options_.clear_fraction : confirmed;
    if (slow != w.flagged) {
      w.flagged = slow;
      out.push_back({r, slow, ratio, std::chrono::nanoseconds{m}, std::chrono::nanoseconds{fleet}});
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
