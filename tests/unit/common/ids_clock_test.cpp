#include <gtest/gtest.h>

#include <thread>
#include <type_traits>
#include <unordered_set>

#include "common/clock.hpp"
#include "common/ids.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

static_assert(!std::is_convertible_v<rank_id, node_id>, "ids of different kinds must not mix");
static_assert(!std::is_convertible_v<std::uint64_t, epoch_t>, "an id is never built implicitly");
static_assert(!std::is_convertible_v<step_t, epoch_t>);
static_assert(!std::is_convertible_v<rank_id, std::uint32_t>);

TEST(ids, compare_hash_and_advance) {
  epoch_t e{4};
  EXPECT_EQ(e.next(), epoch_t{5});
  EXPECT_LT(e, e.next());
  std::unordered_set<rank_id> ranks{rank_id{1}, rank_id{2}, rank_id{1}};
  EXPECT_EQ(ranks.size(), 2u);
  EXPECT_EQ(step_t{}.value(), 0u);
}

TEST(clock, fake_clock_moves_only_when_told) {
  fake_clock c{5s};
  const auto t0 = c.now();
  const auto w0 = c.wall_now();
  EXPECT_EQ(c.now(), t0);
  c.advance(250ms);
  EXPECT_EQ(c.now() - t0, 250ms);
  EXPECT_EQ(c.wall_now() - w0, 250ms);
}

TEST(clock, real_clock_is_monotonic) {
  real_clock c;
  const auto a = c.now();
  const auto b = c.now();
  EXPECT_LE(a, b);
  EXPECT_GT(c.wall_now().time_since_epoch(), std::chrono::hours{24 * 365 * 50});
}

TEST(clock, the_thread_cpu_time_grows_with_work_and_not_while_the_thread_sleeps) {
  // What the straggler score counts on the CPU backend (docs/RUNTIME.md, "Stragglers").
  const auto c0 = thread_cpu_time();
  std::this_thread::sleep_for(100ms);
  const auto slept = thread_cpu_time() - c0;
  EXPECT_LT(slept, 20ms) << "sleeping is not work";
  const auto c1 = thread_cpu_time();
  // Work until it has counted 20 ms, or give up after 5 s of wall time (a clock that does not grow).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  volatile double sink = 1;
  while (std::chrono::steady_clock::now() < deadline && thread_cpu_time() - c1 < 20ms)
    sink = sink * 1.0000001 + 1e-9;
  EXPECT_GE(thread_cpu_time() - c1, 20ms) << "5 s of spinning counted less than 20 ms";
  EXPECT_GE(thread_cpu_time(), c1) << "it never goes back";
}

TEST(clock_death, fake_clock_never_goes_back) {
  fake_clock c;
  EXPECT_DEATH(c.advance(-1ms), "never goes back");
}

}  // namespace
}  // namespace rekindle
