#include "trace/cluster.hpp"

#include <algorithm>

#include "common/check.hpp"
#include "config/load.hpp"
#include "config/spec.hpp"

namespace rekindle::trace {

cluster_shape cluster_shape::from_spec(const config::spec& s) {
  cluster_shape out;
  for (std::size_t i = 0; i < s.nodes.size(); ++i) {
    const auto& n = s.nodes[i];
    const auto width = n.devices.empty() ? s.cluster.ranks_per_node : static_cast<std::uint32_t>(n.devices.size());
    out.add_node({n.name, width, n.spare, n.domain});
  }
  return out;
}

expected<cluster_shape> cluster_shape::compact(std::uint32_t nodes, std::uint32_t ranks_per_node, std::uint32_t spares,
                                              std::uint32_t rack_size) {
  if (nodes == 0)
    return status{errc::invalid_argument, "--nodes must be at least 1"};
  if (ranks_per_node == 0 || ranks_per_node > 1024)
    return status{errc::invalid_argument,
                  "--ranks-per-node must be between 1 and 1024, got " + std::to_string(ranks_per_node)};
  if (std::uint64_t{nodes} * ranks_per_node > (std::uint64_t{1} << 24))
    return status{errc::invalid_argument, "--nodes × --ranks-per-node is " +
                                              with_commas(std::uint64_t{nodes} * ranks_per_node) +
                                              " ranks; at most 16,777,216 are supported"};
  if (spares > 65536)
    return status{errc::invalid_argument, "at most 65,536 spare nodes, got " + with_commas(spares)};
  if (rack_size > nodes)
    return status{errc::invalid_argument, "--rack-size " + with_commas(rack_size) + " is more than the " + with_commas(nodes) + " nodes"};
  cluster_shape out;
  out.rack_size_ = rack_size;
  out.nodes_.reserve(std::size_t{nodes} + spares);
  for (std::uint32_t i = 0; i < nodes; ++i)
    out.add_node({"n" + std::to_string(i), ranks_per_node, false, rack_size > 0 ? "rack" + std::to_string(i / rack_size) : ""});
  out.add_spares(spares);
  return out;
}

void cluster_shape::add_node(node n) {
  const auto index = static_cast<std::uint32_t>(nodes_.size());
  const bool fresh = by_name_.emplace(n.name, index).second;
  RK_CHECK(fresh, "node '", n.name, "' added twice");
  nodes_.push_back(std::move(n));
}

void cluster_shape::add_spares(std::uint32_t count) {
  const auto width = widest();
  std::uint32_t next = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string name;
    do
      name = "spare" + std::to_string(next++);
    while (by_name_.contains(name));
    const auto index = static_cast<std::uint32_t>(nodes_.size());
    add_node({std::move(name), width, true, rack_size_ > 0 ? "rack" + std::to_string(index / rack_size_) : ""});
  }
}

std::uint32_t cluster_shape::domains() const {
  std::unordered_map<std::string_view, int> seen;
  for (const auto& n : nodes_)
    if (!n.domain.empty())
      seen.emplace(n.domain, 0);
  return static_cast<std::uint32_t>(seen.size());
}

std::optional<std::uint32_t> cluster_shape::find(std::string_view name) const {
  auto it = by_name_.find(std::string{name});
  if (it == by_name_.end())
    return std::nullopt;
  return it->second;
}

std::uint32_t cluster_shape::world() const noexcept {
  std::uint32_t total = 0;
  for (const auto& n : nodes_)
    if (!n.spare)
      total += n.ranks;
  return total;
}

std::uint32_t cluster_shape::spares() const noexcept {
  return static_cast<std::uint32_t>(std::count_if(nodes_.begin(), nodes_.end(), [](const node& n) { return n.spare; }));
}

std::uint32_t cluster_shape::widest() const noexcept {
  std::uint32_t w = 1;
  for (const auto& n : nodes_)
    w = std::max(w, n.ranks);
  return w;
}

std::vector<std::string> cluster_shape::names() const {
  std::vector<std::string> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_)
    out.push_back(n.name);
  return out;
}

std::string cluster_shape::describe() const {
  const auto workers = static_cast<std::uint32_t>(nodes_.size()) - spares();
  std::string out = with_commas(workers) + (workers == 1 ? " node" : " nodes");
  bool uniform = true;
  std::uint32_t width = 0;
  for (const auto& n : nodes_) {
    if (n.spare)
      continue;
    if (width != 0 && n.ranks != width)
      uniform = false;
    width = n.ranks;
  }
  if (uniform && width != 0)
    out += " × " + std::to_string(width) + (width == 1 ? " rank" : " ranks");
  out += " (" + with_commas(world()) + " ranks";
  if (const auto s = spares(); s > 0)
    out += ", " + with_commas(s) + (s == 1 ? " spare" : " spares");
  if (const auto d = domains(); d > 0)
    out += ", " + with_commas(d) + (d == 1 ? " failure domain" : " failure domains");
  return out + ")";
}

expected<cluster_shape> load_cluster(const std::filesystem::path& path) {
  auto result = config::load_file(path);
  if (!result.ok())
    return status{errc::invalid_config, result.error_text()};
  return cluster_shape::from_spec(*result.value);
}

std::string with_commas(std::uint64_t n) {
  auto digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace rekindle::trace
