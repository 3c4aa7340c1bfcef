// rekindled: the node daemon. One per node; the one on the configured supervisor node also runs
// the supervisor.

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <cstdio>
#include <iostream>

#include "actors/node_daemon.hpp"
#include "apps/common/cli.hpp"
#include "common/logging.hpp"
#include "common/memory.hpp"
#include "kernels/blas_core.hpp"
#include "config/embedded.hpp"
#include "config/load.hpp"

namespace {

/// Exit codes scripts can rely on.
enum exit_code : int {
  exit_ok = 0,
  exit_job_failed = 1,
  exit_bad_config = 2,  // also a wrong command line
  exit_cannot_start = 3,
};

rekindle::config::load_result load(const std::string& path) {
  using namespace rekindle;
  return path.empty() || path == "-"
             ? config::parse(config::embedded_default_text(), std::string{config::embedded_default_name}, {})
             : config::load_file(path);
}

bool report(const rekindle::config::load_result& result) {
  for (const auto& w : result.warnings)
    std::cerr << "warning: " << w.to_string() << "\n";
  if (result.ok())
    return true;
  std::cerr << "rekindled: " << result.errors.size() << " error" << (result.errors.size() == 1 ? "" : "s")
            << " in the configuration; nothing was started\n";
  for (const auto& e : result.errors)
    std::cerr << "  " << e.to_string() << "\n";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rekindle;
  // OpenBLAS kernels that suit the CPU: may run the program again with OPENBLAS_CORETYPE set.
  const auto blas = kernels::ensure_blas_core(argv);
  keep_large_frees_in_process();  // replicas and restores: a snapshot-sized buffer each
  // Everything a daemon and its workers write (state store, checkpoint shards, snapshot slots,
  // logs, the supervisor's address) is the job owner's alone.
  ::umask(077);
  CLI::App app{"rekindled: the rekindle node daemon (one per node; the supervisor node's also runs the supervisor)",
               "rekindled"};
  app.set_version_flag("--version", std::string{"rekindled "} + REKINDLE_VERSION);
  std::string check_path, config_path, node, data_dir, supervisor, log_level, log_format;
  int port = -1;
  int http_port = -1;
  bool exit_when_done = false;
  auto* check = app.add_option("--check-config", check_path,
                               "Validate a configuration file and print the effective configuration with every default "
                               "filled in, or every error with file:line:column; '-' checks the embedded default");
  app.add_option("--config", config_path, "The cluster and job configuration (default: the embedded local.toml)");
  app.add_option("--node", node, "This daemon's node name from the configuration")->excludes(check);
  app.add_option("--data-dir", data_dir, "Overrides daemon.data_dir (state, snapshots, logs under <dir>/<node>)");
  app.add_option("--supervisor", supervisor, "host:port of the supervisor's daemon when the configuration has no port for it");
  app.add_option("--port", port, "Overrides the node's configured port (0: any free port)")
      ->check(apps::whole_number(0, 65535));
  app.add_option("--http-port", http_port, "Overrides daemon.http_port: /metrics and the status page (0: any free port)")
      ->check(apps::whole_number(0, 65535));
  app.add_option("--log", log_level, "Log level: trace, debug, info, warn, error, off (default: daemon.log)");
  app.add_option("--log-format", log_format,
                 "Log lines as 'text' for people or 'json' (one object per line) for log shippers (default: "
                 "daemon.log_format)");
  app.add_flag("--exit-when-done", exit_when_done, "Exit once the job has completed, failed or stopped");
  if (const auto done = apps::parse_command_line(app, argc, argv, "rekindled", exit_bad_config))
    return *done;
  if (!supervisor.empty()) {
    if (auto to = parse_host_port(supervisor); !to) {
      std::cerr << "rekindled: --supervisor: " << to.error().message() << "\n";
      return exit_bad_config;
    }
  }

  if (check->count() > 0) {
    const auto result = load(check_path);
    if (!report(result))
      return exit_bad_config;
    std::cout << config::to_toml(*result.value);
    return exit_ok;
  }
  if (node.empty()) {
    std::cerr << "rekindled: --node NAME is required to run a daemon (or --check-config FILE to validate one)\n";
    return exit_bad_config;
  }
  const auto result = load(config_path);
  if (!report(result))
    return exit_bad_config;
  auto level = result.value->daemon.log;
  if (!log_level.empty()) {
    auto l = parse_log_level(log_level);
    if (!l) {
      std::cerr << "rekindled: --log: " << l.error().message() << "\n";
      return exit_bad_config;
    }
    level = *l;
  }
  auto format = result.value->daemon.log_format;
  if (!log_format.empty()) {
    auto f = parse_log_format(log_format);
    if (!f) {
      std::cerr << "rekindled: --log-format: " << f.error().message() << "\n";
      return exit_bad_config;
    }
    format = *f;
  }
  set_log_node(node);
  init_logging("rekindled[" + node + "]", level, format);
  spdlog::info("{}", blas.describe());
  if (!blas.warning.empty())
    spdlog::warn("{}", blas.warning);
  if (!result.value->find_node(node)) {
    std::cerr << "rekindled: node '" << node << "' is not in " << result.value->source << "\n";
    return exit_bad_config;
  }
  actors::daemon_options o;
  o.spec = *result.value;
  if (http_port >= 0)
    o.spec.daemon.http_port = static_cast<std::uint16_t>(http_port);
  if (!config_path.empty() && config_path != "-")
    o.config_path = std::filesystem::absolute(config_path);
  o.node = node;
  if (!data_dir.empty())
    o.data_dir = data_dir;
  o.supervisor = supervisor;
  if (port >= 0)
    o.port = static_cast<std::uint16_t>(port);
  o.exit_when_done = exit_when_done;
  return actors::run_node_daemon(std::move(o));
}
