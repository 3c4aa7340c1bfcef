#include "common/clock.hpp"

#include <time.h>

#include "common/check.hpp"

namespace rekindle {

namespace {
// 2026-01-01T00:00:00Z in seconds since the Unix epoch.
constexpr std::int64_t fake_wall_origin_s = 1767225600;
}  // namespace

clock::time_point real_clock::now() const noexcept {
  return std::chrono::time_point_cast<duration>(std::chrono::steady_clock::now());
}

clock::wall_time real_clock::wall_now() const noexcept {
  return std::chrono::time_point_cast<duration>(std::chrono::system_clock::now());
}

fake_clock::fake_clock(duration start) noexcept : ticks_(start.count()) {}

clock::time_point fake_clock::now() const noexcept {
  return time_point{duration{ticks_.load(std::memory_order_acquire)}};
}

clock::wall_time fake_clock::wall_now() const noexcept {
  return wall_time{std::chrono::seconds{fake_wall_origin_s} + duration{ticks_.load(std::memory_order_acquire)}};
}

void fake_clock::advance(duration d) noexcept {
  RK_CHECK(d.count() >= 0, "a clock never goes back");
  ticks_.fetch_add(d.count(), std::memory_order_acq_rel);
}

std::chrono::nanoseconds thread_cpu_time() noexcept {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::chrono::seconds{t.tv_sec} + std::chrono::nanoseconds{t.tv_nsec};
}

}  // namespace rekindle
