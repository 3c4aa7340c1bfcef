#pragma once

// Which rank computes slower than the others, scored from the compute time of each step it
// reports: robust to noise (each rank's median over a window of steps, against the median of all
// ranks' medians), flagged once the window is full and the ratio stays above a threshold.

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "common/ids.hpp"

namespace rekindle::policy {

struct straggler_options {
  /// Steps in each rank's window; a rank is scored once its window is full.
  std::size_t window = 20;
  /// A rank whose median is at least this many times the fleet's is a straggler.
  double threshold = 1.25;
  /// A straggler is cleared once its ratio falls below threshold × this (hysteresis).
  double clear_fraction = 0.9;
  /// The window also spans at least this much time (the samples' `at`): with short steps it holds
  /// more of them, at most max_samples, so that a burst of noise is a minority of it.
  std::chrono::nanoseconds span{0};
  std::size_t max_samples = 4096;
  /// A rank is flagged once its ratio has stayed at or above the threshold in every evaluation for
  /// this long (the evaluations' `now`): a rank that is slow stays slow, noise comes and goes.
  std::chrono::nanoseconds confirm{0};
};

class straggler_detector {
 public:
  explicit straggler_detector(straggler_options o = {}) : options_(o) {}

  /// A new epoch: every window starts empty; flags stay (a slow node stays slow).
  void restart();
  /// Rank r's compute time for one micro-batch in its latest step, reported at `at` (any clock's
  /// time since its epoch; only differences count).
  void add(rank_id r, std::chrono::nanoseconds per_micro_batch, std::chrono::nanoseconds at = {});
  /// Forgets rank r (it left the job).
  void forget(rank_id r);

  struct finding {
    rank_id rank;
    /// True: newly flagged a straggler; false: no longer one.
    bool straggler = false;
    double ratio = 0;
    std::chrono::nanoseconds rank_median{0};
    std::chrono::nanoseconds fleet_median{0};
  };
  /// Scores every rank with a full window at time `now` (the clock of add's `at`); returns the
  /// changes since the last call. Needs at least three scored ranks (with two, neither is the odd
  /// one out).
  std::vector<finding> evaluate(std::chrono::nanoseconds now = {});

  [[nodiscard]] bool flagged(rank_id r) const;
  /// The latest ratio of rank r, once scored.
  [[nodiscard]] std::optional<double> ratio(rank_id r) const;

 private:
  struct rank_window {
    /// (at, ns), oldest first.
    std::deque<std::pair<std::int64_t, std::int64_t>> samples;
    bool full = false;
    bool flagged = false;
    std::optional<double> ratio;
    /// Since when its ratio has been at or above the threshold, in every evaluation.
    std::optional<std::int64_t> above_since;
  };
  straggler_options options_;
  std::map<rank_id, rank_window> ranks_;
};

}  // namespace rekindle::policy
