#include "config/spec.hpp"

#include "common/check.hpp"

namespace rekindle::config {

std::string device_spec::to_string() const {
  switch (type) {
    case kind::auto_select: return "auto";
    case kind::cpu: return "cpu";
    case kind::cuda: return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
  }
  return "auto";
}

std::optional<node_id> spec::find_node(std::string_view name) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name)
      return node_id{static_cast<std::uint32_t>(i)};
  return std::nullopt;
}

node_id spec::supervisor_node() const {
  auto n = find_node(cluster.supervisor);
  RK_CHECK(n.has_value(), "a validated spec names its supervisor among the nodes");
  return *n;
}

std::uint32_t spec::ranks_on(node_id n) const {
  const auto& node = nodes.at(n.value());
  if (node.spare)
    return 0;
  return node.devices.empty() ? cluster.ranks_per_node : static_cast<std::uint32_t>(node.devices.size());
}

std::uint32_t spec::world_size() const {
  if (!job.plan_ranks.empty())
    return static_cast<std::uint32_t>(job.plan_ranks.size());
  std::uint32_t total = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    total += ranks_on(node_id{static_cast<std::uint32_t>(i)});
  return total;
}

std::vector<rank_placement> spec::initial_placement() const {
  std::vector<rank_placement> out;
  const auto device = [&](node_id n, std::uint32_t local) {
    const auto& devices = nodes[n.value()].devices;
    return local < devices.size() ? devices[local] : device_spec{};
  };
  if (!job.plan_ranks.empty()) {
    for (std::uint32_t r = 0; r < job.plan_ranks.size(); ++r) {
      const auto& at = job.plan_ranks[r];
      out.push_back({rank_id{r}, at.node, at.local_index, device(at.node, at.local_index)});
    }
    return out;
  }
  std::uint32_t next = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const node_id n{static_cast<std::uint32_t>(i)};
    const auto count = ranks_on(n);
    for (std::uint32_t local = 0; local < count; ++local) {
      rank_placement p;
      p.rank = rank_id{next++};
      p.node = n;
      p.local_index = local;
      p.device = device(n, local);
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace rekindle::config
