#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <algorithm>
#include <optional>
#include <utility>
#include <string>
#include <vector>
#include <memory>
#include <mutex>

#include "actors/job_status.hpp"

namespace rekindle::actors {

/// One event of the job's log as the status page shows it.
struct event_view {
  /// Milliseconds since the Unix epoch.
  std::int64_t unix_ms = 0;
  std::string kind;
  std::uint64_t epoch = 0;
  std::optional<std::uint32_t> rank;
  std::optional<std::string> node;
  std::string detail;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(event_view, unix_ms, kind, epoch, rank, node, detail)

/// At most `max_points` (step, loss) pairs of the first `steps` losses (index = step - 1), evenly
/// spaced, with the newest always last.
using loss_curve = std::vector<std::pair<std::uint64_t, double>>;
inline loss_curve thin_losses(const std::vector<double>& losses, std::uint64_t steps, std::size_t max_points = 2000) {
  loss_curve out;
  const std::size_t n = std::min<std::size_t>(losses.size(), steps);
  if (n == 0 || max_points == 0)
    return out;
  const std::size_t stride = n <= max_points ? 1 : (n + max_points - 1) / max_points;
  for (std::size_t i = 0; i < n; i += stride)
    out.emplace_back(i + 1, losses[i]);
  if ((n - 1) % stride != 0)
    out.emplace_back(n, losses[n - 1]);
  return out;
}

/// The job's latest status, published by the supervisor at each tick and read by the daemon's HTTP
/// server from its own threads (/metrics, the status page).
class status_board {
 public:
  /// `s` without every step's loss (see thin_losses for the curve).
  void publish(job_status s, loss_curve curve) {
    auto next = std::make_shared<const job_status>(std::move(s));
    auto next_curve = std::make_shared<const loss_curve>(std::move(curve));
    std::lock_guard lock{m_};
    latest_ = std::move(next);
    curve_ = std::move(next_curve);
    at_ = std::chrono::steady_clock::now();
  }
  /// An event the supervisor logged; the newest `kept_events` are kept.
  void add_event(event_view e) {
    std::lock_guard lock{m_};
    events_.push_back(std::move(e));
    while (events_.size() > kept_events)
      events_.pop_front();
  }
  /// The loss curve published with the latest status (empty before the first).
  [[nodiscard]] std::shared_ptr<const loss_curve> curve() const {
    std::lock_guard lock{m_};
    return curve_ ? curve_ : std::make_shared<const loss_curve>();
  }
  [[nodiscard]] std::vector<event_view> events() const {
    std::lock_guard lock{m_};
    return {events_.begin(), events_.end()};
  }
  static constexpr std::size_t kept_events = 200;

  /// The latest status when it was published within `max_age` (a supervisor that stopped, or
  /// handed over to a standby, publishes no more); else null.
  [[nodiscard]] std::shared_ptr<const job_status> latest(std::chrono::steady_clock::duration max_age) const {
    std::lock_guard lock{m_};
    if (!latest_ || std::chrono::steady_clock::now() - at_ > max_age)
      return nullptr;
    return latest_;
  }

 private:
  mutable std::mutex m_;
  std::shared_ptr<const job_status> latest_;
  std::shared_ptr<const loss_curve> curve_;
  std::chrono::steady_clock::time_point at_;
  std::deque<event_view> events_;
};

}  // namespace rekindle::actors
