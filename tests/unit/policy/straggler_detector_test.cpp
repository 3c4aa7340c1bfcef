#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "policy/straggler_detector.hpp"

namespace rekindle::policy {
namespace {

using namespace std::chrono_literals;

// A fleet of `n` ranks whose steps take 10 ms per micro-batch times noise: uniform ±20%, and one
// step in twenty twice as long (a page fault, a noisy neighbour). `slow` scales one rank.
struct fleet {
  std::mt19937_64 rng{42};
  std::uint32_t n;
  std::map<std::uint32_t, double> slow;

  explicit fleet(std::uint32_t ranks) : n(ranks) {}

  // One step of every rank; returns the findings of the evaluation after it.
  std::vector<straggler_detector::finding> step(straggler_detector& d) {
    std::uniform_real_distribution<double> noise{0.8, 1.2};
    std::uniform_int_distribution<int> spike{0, 19};
    for (std::uint32_t r = 0; r < n; ++r) {
      double ms = 10.0 * noise(rng) * (spike(rng) == 0 ? 2.0 : 1.0);
      if (auto it = slow.find(r); it != slow.end())
        ms *= it->second;
      d.add(rank_id{r}, std::chrono::nanoseconds{static_cast<std::int64_t>(ms * 1e6)});
    }
    return d.evaluate();
  }
};

TEST(straggler_detector, a_healthy_noisy_fleet_raises_no_alarm) {
  straggler_detector d;
  fleet f{8};
  for (int s = 0; s < 20000; ++s)
    ASSERT_TRUE(f.step(d).empty()) << "false alarm at step " << s;
  for (std::uint32_t r = 0; r < 8; ++r)
    EXPECT_FALSE(d.flagged(rank_id{r}));
}

TEST(straggler_detector, with_a_span_a_burst_of_noise_on_one_rank_is_a_minority_of_its_window) {
  // Steps of 3 ms (fake clock), a window of 20 steps and 2 s: one rank loses its core for 400 ms
  // (every step 3x as long), which fills a 20-step window but not a 2 s one.
  for (const auto span : {0ns, std::chrono::nanoseconds{2s}}) {
    straggler_detector d{straggler_options{.window = 20, .threshold = 1.25, .clear_fraction = 0.9, .span = span}};
    std::chrono::nanoseconds now{0};
    bool alarm = false;
    bool scored = false;
    for (int s = 0; s < 3000; ++s) {
      now += 3ms;
      const bool burst = now >= 4s && now < 4400ms;
      for (std::uint32_t r = 0; r < 4; ++r)
        d.add(rank_id{r}, r == 1 && burst ? 9ms : 3ms, now);
      for (const auto& x : d.evaluate())
        alarm = alarm || x.straggler;
      scored = scored || d.ratio(rank_id{0}).has_value();
      if (span > 0ns && now < 2s) {
        ASSERT_FALSE(d.ratio(rank_id{0})) << "scored before its window spans 2 s";
      }
    }
    EXPECT_TRUE(scored);
    EXPECT_EQ(alarm, span == 0ns) << "span " << span.count();
  }
  // A rank that stays slow is still named, once it is slow for most of the span.
  straggler_detector d{straggler_options{.window = 20, .threshold = 1.25, .clear_fraction = 0.9, .span = 2s}};
  std::chrono::nanoseconds now{0};
  std::optional<std::chrono::nanoseconds> named;
  for (int s = 0; s < 3000 && !named; ++s) {
    now += 3ms;
    for (std::uint32_t r = 0; r < 4; ++r)
      d.add(rank_id{r}, r == 2 && now >= 4s ? std::chrono::nanoseconds{3900us} : 3ms, now);
    for (const auto& x : d.evaluate())
      if (x.straggler && x.rank == rank_id{2})
        named = now - 4s;
  }
  ASSERT_TRUE(named);
  EXPECT_LE(*named, 1100ms);
}

TEST(straggler_detector, with_confirm_a_spell_of_noise_shorter_than_it_is_no_alarm_and_a_slow_rank_is_named_after_it) {
  // Steps of 3 ms (fake clock), windows of 20 steps and 2 s, confirm 5 s. Rank 1 is 1.5x slow
  // from 4 s to 8 s (a spell of noise: its ratio stays above the threshold for about 3 s); rank 3
  // is 1.3x slow from 20 s on (a slow device).
  straggler_detector d{straggler_options{
      .window = 20, .threshold = 1.25, .clear_fraction = 0.9, .span = 2s, .max_samples = 4096, .confirm = 5s}};
  std::chrono::nanoseconds now{0};
  std::optional<std::chrono::nanoseconds> rank3_named;
  bool rank1_named = false;
  bool rank1_above = false;
  while (now < 40s) {
    now += 3ms;
    for (std::uint32_t r = 0; r < 4; ++r) {
      auto ms = 3000us;
      if (r == 1 && now >= 4s && now < 8s)
        ms = 4500us;
      if (r == 3 && now >= 20s)
        ms = 3900us;
      d.add(rank_id{r}, ms, now);
    }
    for (const auto& x : d.evaluate(now)) {
      rank1_named = rank1_named || (x.straggler && x.rank == rank_id{1});
      if (x.straggler && x.rank == rank_id{3} && !rank3_named)
        rank3_named = now - 20s;
    }
    rank1_above = rank1_above || d.ratio(rank_id{1}).value_or(0) >= 1.25;
  }
  EXPECT_TRUE(rank1_above) << "the spell raised rank 1's ratio over the threshold";
  EXPECT_FALSE(rank1_named) << "but not for 5 s";
  ASSERT_TRUE(rank3_named) << "a rank that stays slow is named";
  EXPECT_GE(*rank3_named, 5s);
  EXPECT_LE(*rank3_named, 6200ms) << "once most of its window is slow, plus confirm";
}

TEST(straggler_detector, a_rank_slowed_1_3x_or_2x_is_named_within_a_window_and_cleared_when_it_recovers) {
  for (const double factor : {1.3, 2.0}) {
    straggler_detector d;
    fleet f{4};
    for (int s = 0; s < 100; ++s)
      ASSERT_TRUE(f.step(d).empty());
    f.slow[2] = factor;
    int found_after = -1;
    straggler_detector::finding found;
    for (int s = 1; s <= 40 && found_after < 0; ++s)
      for (const auto& x : f.step(d))
        if (x.straggler) {
          found_after = s;
          found = x;
        }
    ASSERT_GT(found_after, 0) << factor;
    EXPECT_LE(found_after, 20) << "a window's median turns once half its steps are slow";
    EXPECT_EQ(found.rank, rank_id{2});
    EXPECT_GE(found.ratio, 1.25) << factor;
    EXPECT_LE(found.ratio, factor + 0.15) << factor;
    EXPECT_NEAR(static_cast<double>(found.fleet_median.count()) / 1e6, 10.0, 1.0);
    EXPECT_TRUE(d.flagged(rank_id{2}));
    EXPECT_FALSE(d.flagged(rank_id{1}));
    // Stays flagged while slow: no flapping.
    for (int s = 0; s < 200; ++s)
      ASSERT_TRUE(f.step(d).empty()) << factor;
    ASSERT_TRUE(d.ratio(rank_id{2}).has_value());
    EXPECT_NEAR(*d.ratio(rank_id{2}), factor, 0.3 * factor) << "once the window holds only slow steps";
    f.slow.erase(2);
    bool cleared = false;
    for (int s = 0; s < 40 && !cleared; ++s)
      for (const auto& x : f.step(d))
        cleared = cleared || (x.rank == rank_id{2} && !x.straggler);
    EXPECT_TRUE(cleared) << factor;
    EXPECT_FALSE(d.flagged(rank_id{2}));
  }
}

TEST(straggler_detector, too_few_ranks_or_steps_are_not_scored) {
  straggler_detector d;
  for (int s = 0; s < 100; ++s) {
    d.add(rank_id{0}, 10ms);
    d.add(rank_id{1}, 40ms);
  }
  EXPECT_TRUE(d.evaluate().empty()) << "with two ranks neither is the odd one out";
  for (int s = 0; s < 19; ++s)
    d.add(rank_id{2}, 10ms);
  EXPECT_TRUE(d.evaluate().empty()) << "rank 2's window is not full";
  d.add(rank_id{2}, 10ms);
  const auto x = d.evaluate();
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].rank, rank_id{1});
  EXPECT_DOUBLE_EQ(x[0].ratio, 4.0);
  // A new epoch empties the windows but keeps the flag; a rank that left is forgotten.
  d.restart();
  EXPECT_TRUE(d.flagged(rank_id{1}));
  EXPECT_TRUE(d.evaluate().empty());
  d.forget(rank_id{1});
  EXPECT_FALSE(d.flagged(rank_id{1}));
}

}  // namespace
}  // namespace rekindle::policy
