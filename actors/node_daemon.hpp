#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "config/spec.hpp"
#include "web/http_server.hpp"

namespace rekindle::actors {

/// How `rekindled` was asked to run.
struct daemon_options {
  config::spec spec;
  /// The configuration file, or empty for the embedded default.
  std::filesystem::path config_path;
  std::string node;
  /// Overrides daemon.data_dir.
  std::optional<std::filesystem::path> data_dir;
  /// host:port of the supervisor's daemon, when it cannot be found from the configuration.
  std::string supervisor;
  /// Overrides the node's configured port.
  std::optional<std::uint16_t> port;
  /// Exit once the job has completed, failed or stopped. Default: keep running.
  bool exit_when_done = false;
};

/// Who may read a daemon's HTTP endpoints: anyone without authentication; with it, holders of the
/// read-only token (the admin token is never accepted there, so it never appears in a URL or a
/// page); with authentication and no read-only token, nobody, saying why.
[[nodiscard]] web::access http_access(const config::security_spec& s);

/// Runs a node daemon until SIGTERM or SIGINT (or the job's end with exit_when_done): the
/// transport and bridge, the agent and checkpoint actors, the supervisor on the supervisor node,
/// the snapshot slots, and the reaper of worker processes. Returns the process exit status:
/// 0 after a clean shutdown or a completed job, 1 when the job failed, 3 when it could not start.
int run_node_daemon(daemon_options options);

}  // namespace rekindle::actors
