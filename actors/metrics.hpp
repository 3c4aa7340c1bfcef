#pragma once

#include <cstdint>
#include <string>

#include "actors/job_status.hpp"
#include "transport/messenger.hpp"

namespace rekindle::actors {

/// What a daemon knows of itself, for /metrics.
struct daemon_figures {
  std::string node;
  /// "supervisor" on the daemon that runs the job's supervisor now, else "node".
  std::string role = "node";
  /// The newest epoch this daemon's bridge has seen.
  std::uint64_t epoch = 0;
  double uptime_s = 0;
  transport::messenger_stats transport;
  std::uint64_t stale_delivered = 0;
  std::uint64_t not_from_leader = 0;
  std::uint64_t refused = 0;
  std::uint64_t undeliverable = 0;
};

/// The kind of a recovery, from its cause, for a label of few values: "rank_exit", "rank_hang",
/// "node_lost", "supervisor_restart" or "other".
[[nodiscard]] std::string recovery_kind(const recovery_status& r);

/// The upper bounds of the recovery phase histograms, in seconds.
[[nodiscard]] const std::vector<double>& recovery_buckets();

/// The daemon's metrics in Prometheus' text format; with `job` (the supervisor's daemon), the job's
/// too. Every name is listed in docs/RUNTIME.md ("Metrics").
[[nodiscard]] std::string render_metrics(const daemon_figures& d, const job_status* job);

}  // namespace rekindle::actors
