#pragma once

#include <atomic>
#include <chrono>

namespace rekindle {

/// A source of time. Decision logic takes a `clock&` so tests drive it with `fake_clock`.
///
/// `now()` is monotonic and measures durations and deadlines; `wall_now()` is calendar time for
/// event timestamps shown to people. Thread-safety: implementations are safe to call from any
/// thread.
class clock {
 public:
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;
  using wall_time = std::chrono::time_point<std::chrono::system_clock, duration>;

  virtual ~clock() = default;
  [[nodiscard]] virtual time_point now() const noexcept = 0;
  [[nodiscard]] virtual wall_time wall_now() const noexcept = 0;
};

/// The machine's clocks (steady_clock and system_clock).
class real_clock final : public clock {
 public:
  [[nodiscard]] time_point now() const noexcept override;
  [[nodiscard]] wall_time wall_now() const noexcept override;
};

/// A clock that moves only when told. Both readings advance together.
///
/// Thread-safety: `advance` and the readings may be called concurrently.
class fake_clock final : public clock {
 public:
  /// Starts at steady time `start` and wall time 2026-01-01T00:00:00Z plus `start`.
  explicit fake_clock(duration start = duration::zero()) noexcept;

  [[nodiscard]] time_point now() const noexcept override;
  [[nodiscard]] wall_time wall_now() const noexcept override;
  /// Moves both readings forward by `d`. REQUIRES: d >= 0.
  void advance(duration d) noexcept;

 private:
  std::atomic<std::int64_t> ticks_;
};

/// CPU time the calling thread has used so far (CLOCK_THREAD_CPUTIME_ID): work a thread did, which
/// does not grow while the machine runs other threads instead. Only differences count.
[[nodiscard]] std::chrono::nanoseconds thread_cpu_time() noexcept;

/// Seconds as a double, for reports.
inline double to_seconds(clock::duration d) noexcept {
  return std::chrono::duration<double>(d).count();
}

}  // namespace rekindle
