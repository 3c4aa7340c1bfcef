// rekindle-worker: one training rank. Started by its node's agent, never by hand.

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <iostream>

#include "actors/worker.hpp"
#include "common/logging.hpp"
#include "common/memory.hpp"
#include "kernels/blas_core.hpp"
#include "config/embedded.hpp"
#include "apps/common/cli.hpp"
#include "config/load.hpp"
#include "storage/snapshot_slot.hpp"

int main(int argc, char** argv) {
  using namespace rekindle;
  // OpenBLAS kernels that suit the CPU: may run the program again with OPENBLAS_CORETYPE set.
  const auto blas = kernels::ensure_blas_core(argv);
  keep_large_frees_in_process();  // restores: a snapshot-sized buffer each
  CLI::App app{"rekindle-worker: one training rank, started by its node's rekindled", "rekindle-worker"};
  std::string config_path = "-", node, agent, data_dir;
  std::uint32_t local_index = 0;
  bool standby = false;
  app.add_option("--config", config_path, "The configuration ('-': the embedded default)");
  app.add_option("--node", node, "The node it runs on")->required();
  auto* index_option = app.add_option("--local-index", local_index, "Its index among the node's ranks")
                           ->check(apps::whole_number(0, 65535));
  app.add_flag("--standby", standby, "Start as a warm standby; the agent gives it a local index later")->excludes(index_option);
  app.add_option("--agent", agent, "host:port of the node's daemon")->required();
  app.add_option("--data-dir", data_dir, "The cluster's data directory")->required();
  if (const auto done = apps::parse_command_line(app, argc, argv, "rekindle-worker", 2))
    return *done;

  const auto loaded = config_path == "-" ? config::parse(config::embedded_default_text(),
                                                         std::string{config::embedded_default_name}, {})
                                         : config::load_file(config_path);
  if (!loaded.ok()) {
    std::cerr << "rekindle-worker: " << loaded.error_text() << "\n";
    return 2;
  }
  const auto& spec = *loaded.value;
  if (!standby && index_option->count() == 0) {
    std::cerr << "rekindle-worker: --local-index N or --standby is required\n";
    return 2;
  }
  set_log_node(node);
  init_logging("worker[" + node + "/" + (standby ? std::string{"standby"} : std::to_string(local_index)) + "]",
               spec.daemon.log, spec.daemon.log_format);
  spdlog::info("{}", blas.describe());
  if (!blas.warning.empty())
    spdlog::warn("{}", blas.warning);
  const auto node_id_ = spec.find_node(node);
  if (!node_id_) {
    spdlog::error("node '{}' is not in {}", node, spec.source);
    return 2;
  }
  spdlog::debug("worker starting pid={}", getpid());
  const auto node_dir = std::filesystem::path{data_dir} / node;
  std::optional<storage::snapshot_slot> slot;
  if (!standby) {
    auto opened = storage::snapshot_slot::open(storage::snapshot_slot::name_for(node_dir, spec.job.name, local_index));
    if (!opened) {
      spdlog::error("cannot open the snapshot slot: {}", opened.error().message());
      return 3;
    }
    opened->touch_pages();  // before training, not in the first snapshots' steps
    slot = std::move(*opened);
  }

  const auto label = "worker " + node + "/" + (standby ? std::string{"standby"} : std::to_string(local_index));
  auto process = actors::rank_process::connect(spec, *node_id_, label, agent);
  if (!process) {
    spdlog::error("{}", process.error().message());
    return 3;
  }
  spdlog::debug("connected to the agent");
  real_clock time;
  actors::worker_context ctx{spec,
                             *node_id_,
                             standby ? std::nullopt : std::optional<std::uint32_t>{local_index},
                             node_dir,
                             (*process)->bridge(),
                             (*process)->agent(),
                             &time};
  int code = 0;
  {
    actors::worker_runtime runtime{(*process)->system(), std::move(ctx), std::move(slot)};
    code = runtime.run();
  }
  return code;
}
