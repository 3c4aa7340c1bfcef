// rekindle-worker: one training rank. Started by its node's agent, never by hand.

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <iostream>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "actors/node_context.hpp"
#include "actors/worker.hpp"
#include "common/logging.hpp"
#include "common/memory.hpp"
#include "config/embedded.hpp"
#include "config/load.hpp"
#include "storage/snapshot_slot.hpp"
#include "training/training_task.hpp"

int main(int argc, char** argv) {
  using namespace rekindle;
  keep_large_frees_in_process();  // restores: a snapshot-sized buffer each
  CLI::App app{"rekindle-worker: one training rank, started by its node's rekindled", "rekindle-worker"};
  std::string config_path = "-", node, agent, data_dir;
  std::uint32_t local_index = 0;
  bool standby = false;
  app.add_option("--config", config_path, "The configuration ('-': the embedded default)");
  app.add_option("--node", node, "The node it runs on")->required();
  auto* index_option = app.add_option("--local-index", local_index, "Its index among the node's ranks");
  app.add_flag("--standby", standby, "Start as a warm standby; the agent gives it a local index later")->excludes(index_option);
  app.add_option("--agent", agent, "host:port of the node's daemon")->required();
  app.add_option("--data-dir", data_dir, "The cluster's data directory")->required();
  CLI11_PARSE(app, argc, argv);

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
  init_logging("worker[" + node + "/" + (standby ? std::string{"standby"} : std::to_string(local_index)) + "]",
               spec.daemon.log);
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
    slot = std::move(*opened);
  }

  caf::actor_system_config cfg;
  actors::configure_actor_system(cfg, 1);
  caf::actor_system sys{cfg};
  transport::messenger_options mo;
  mo.name = "worker " + node + "/" + (standby ? std::string{"standby"} : std::to_string(local_index));
  mo.node = node_id_->value();
  mo.token = spec.security.token;
  mo.keepalive = spec.timeouts.heartbeat;
  mo.peer_timeout = spec.timeouts.node;
  mo.max_frame_size =
      std::max<std::uint64_t>(spec.transport.max_frame_size, 2 * training::state_bytes_for(spec, 1, 0) + (1 << 20));
  mo.net_devices = spec.transport.net_devices;
  mo.tls = spec.transport.tls;
  auto b = actors::bridge::start(sys, mo);
  if (!b) {
    spdlog::error("cannot start the transport: {}", b.error().message());
    return 3;
  }
  const auto colon = agent.rfind(':');
  auto peer = (*b)->connect_blocking(agent.substr(0, colon), static_cast<std::uint16_t>(std::stoi(agent.substr(colon + 1))),
                                     std::chrono::seconds{30});
  if (!peer) {
    spdlog::error("cannot reach the agent at {}: {}", agent, peer.error().message());
    return 3;
  }
  spdlog::debug("connected to the agent");
  real_clock time;
  actors::worker_context ctx{spec,
                             *node_id_,
                             standby ? std::nullopt : std::optional<std::uint32_t>{local_index},
                             node_dir,
                             b->get(),
                             peer->id,
                             &time};
  int code = 0;
  {
    actors::worker_runtime runtime{sys, std::move(ctx), std::move(slot)};
    code = runtime.run();
  }
  (*b)->shutdown();
  return code;
}
