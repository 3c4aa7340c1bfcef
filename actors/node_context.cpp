#include "actors/node_context.hpp"

#include <algorithm>
#include <fstream>

#include "actors/messages.hpp"
#include "common/files.hpp"
#include "common/text.hpp"
#include "storage/snapshot_slot.hpp"
#include "training/training_task.hpp"

namespace rekindle::actors {

void configure_actor_system(caf::actor_system_config& cfg, std::size_t threads) {
  register_message_types(cfg);
  register_bridge_types(cfg);
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", std::max<std::size_t>(threads, 1));
  cfg.set("logger.console", caf::atom("none"));
}

transport::messenger_options messenger_options_for(const config::spec& spec, node_id node, std::string name) {
  transport::messenger_options mo;
  mo.name = std::move(name);
  mo.node = node.value();
  mo.token = spec.security.token;
  mo.keepalive = spec.timeouts.keepalive();
  mo.peer_timeout = spec.timeouts.node;
  mo.max_frame_size =
      std::max<std::uint64_t>(spec.transport.max_frame_size, 2 * training::snapshot_capacity(spec) + (1 << 20));
  mo.net_devices = spec.transport.net_devices;
  mo.tls = spec.transport.tls;
  mo.spin = spec.transport.spin;
  return mo;
}

std::string node_context::slot_name(std::uint32_t local_index) const {
  return storage::snapshot_slot::name_for(node_dir, spec.job.name, local_index);
}

std::uint32_t node_context::max_local_ranks() const {
  const auto own = spec.ranks_on(node);
  if (own > 0)
    return own;
  std::uint32_t widest = 1;
  for (std::uint32_t n = 0; n < spec.nodes.size(); ++n)
    widest = std::max(widest, spec.ranks_on(node_id{n}));
  return widest;
}

std::string node_context::supervisor_address() const {
  if (with_standby())
    return leader.address();
  if (!supervisor_override.empty())
    return supervisor_override;
  const auto& sup = spec.nodes.at(spec.supervisor_node().value());
  if (sup.port != 0)
    return sup.host + ":" + std::to_string(sup.port);
  const auto written = read_file_bounded(data_dir / "supervisor.addr", file_limits::small, "address file");
  return written ? std::string{trim(*written)} : std::string{};
}

}  // namespace rekindle::actors
