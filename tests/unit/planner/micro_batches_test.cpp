#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "planner/micro_batches.hpp"

namespace rekindle::planner {
namespace {

double step_time(const std::vector<std::uint32_t>& counts, const std::vector<double>& speeds) {
  double worst = 0;
  for (std::size_t r = 0; r < counts.size(); ++r)
    if (counts[r] > 0)
      worst = std::max(worst, counts[r] / speeds[r]);
  return worst;
}

// The smallest step time over every way of sharing m micro-batches (brute force).
double best_time(const std::vector<double>& speeds, std::uint32_t m) {
  double best = 1e300;
  std::vector<std::uint32_t> counts(speeds.size(), 0);
  const auto recurse = [&](auto&& self, std::size_t r, std::uint32_t left) -> void {
    if (r + 1 == speeds.size()) {
      counts[r] = left;
      if (left > 0 && speeds[r] == 0)
        return;
      best = std::min(best, step_time(counts, speeds));
      return;
    }
    for (std::uint32_t c = 0; c <= left; ++c) {
      if (c > 0 && speeds[r] == 0)
        break;
      counts[r] = c;
      self(self, r + 1, left - c);
    }
  };
  recurse(recurse, 0, m);
  return best;
}

TEST(planner_micro_batches, equal_speeds_split_evenly_with_the_extra_on_low_ranks) {
  auto r = share_micro_batches(std::vector<double>{1, 1, 1, 1}, 10);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (std::vector<std::uint32_t>{3, 3, 2, 2}));
}

TEST(planner_micro_batches, proportional_to_speed) {
  auto r = share_micro_batches(std::vector<double>{3, 1}, 8);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (std::vector<std::uint32_t>{6, 2}));
  // An H100 next to two A100s (989 vs 312 TFLOP/s): 16 micro-batches.
  auto mixed = share_micro_batches(std::vector<double>{989, 312, 312}, 16);
  ASSERT_TRUE(mixed.has_value());
  EXPECT_EQ(std::accumulate(mixed->begin(), mixed->end(), 0u), 16u);
  EXPECT_EQ(*mixed, (std::vector<std::uint32_t>{10, 3, 3}));
}

TEST(planner_micro_batches, matches_brute_force) {
  const std::vector<std::vector<double>> cases = {
      {1, 2}, {0.5, 1.5, 3}, {1, 1, 2, 3}, {2.5, 0.7, 1.3}, {1, 0, 2}, {7, 7, 7}, {0.1, 10},
  };
  for (const auto& speeds : cases)
    for (std::uint32_t m = 0; m <= 12; ++m) {
      auto r = share_micro_batches(speeds, m);
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(std::accumulate(r->begin(), r->end(), 0u), m);
      EXPECT_NEAR(step_time(*r, speeds), best_time(speeds, m), 1e-12) << "m=" << m << " speeds[0]=" << speeds[0];
      // The same as handing out micro-batches one at a time to the rank that would finish it
      // first, lowest rank on ties.
      std::vector<std::uint32_t> greedy(speeds.size(), 0);
      for (std::uint32_t i = 0; i < m; ++i) {
        std::size_t pick = speeds.size();
        for (std::size_t k = 0; k < speeds.size(); ++k)
          if (speeds[k] > 0 && (pick == speeds.size() || (greedy[k] + 1) / speeds[k] < (greedy[pick] + 1) / speeds[pick]))
            pick = k;
        greedy[pick] += 1;
      }
      EXPECT_EQ(*r, greedy) << "m=" << m;
    }
}

TEST(planner_micro_batches, zero_speed_ranks_get_none) {
  auto r = share_micro_batches(std::vector<double>{0, 2, 0, 1}, 9);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (std::vector<std::uint32_t>{0, 6, 0, 3}));
  auto none = share_micro_batches(std::vector<double>{0, 0}, 0);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(*none, (std::vector<std::uint32_t>{0, 0}));
}

TEST(planner_micro_batches, many_ranks) {
  std::vector<double> speeds;
  for (int r = 0; r < 4096; ++r)
    speeds.push_back(r % 4 == 0 ? 3.17 : 1.0);
  auto r = share_micro_batches(speeds, 10000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::accumulate(r->begin(), r->end(), 0u), 10000u);
  // 1024 fast ranks at 3.17 and 3072 at 1: the step takes about 10000 / (1024·3.17 + 3072) units.
  const double ideal = 10000 / (1024 * 3.17 + 3072);
  EXPECT_LE(step_time(*r, speeds), ideal + 1.0);
  EXPECT_GE(step_time(*r, speeds), ideal);
}

TEST(planner_micro_batches, bad_input) {
  EXPECT_EQ(share_micro_batches(std::vector<double>{}, 4).error().code(), errc::invalid_argument);
  EXPECT_EQ(share_micro_batches(std::vector<double>{1, -1}, 4).error().code(), errc::invalid_argument);
  EXPECT_EQ(share_micro_batches(std::vector<double>{1, NAN}, 4).error().code(), errc::invalid_argument);
  auto zero = share_micro_batches(std::vector<double>{0, 0}, 4);
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(zero.error().message().find("every rank has speed 0"), std::string::npos);
}

TEST(planner_micro_batches, speeds_from_measured_times) {
  auto s = speeds_from_times(std::vector<double>{0.2, 0.4});
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ((*s)[0], 5);
  EXPECT_DOUBLE_EQ((*s)[1], 2.5);
  auto shares = share_micro_batches(*s, 12);
  ASSERT_TRUE(shares.has_value());
  EXPECT_EQ(*shares, (std::vector<std::uint32_t>{8, 4}));
  EXPECT_FALSE(speeds_from_times(std::vector<double>{0.2, 0}).has_value());
  EXPECT_FALSE(speeds_from_times(std::vector<double>{}).has_value());
}

}  // namespace
}  // namespace rekindle::planner
