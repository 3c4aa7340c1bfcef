#include "planner/problem.hpp"

#include <cmath>

#include <algorithm>

namespace rekindle::planner {

namespace {

std::uint64_t pair_key(std::uint32_t a, std::uint32_t b) {
  if (a > b)
    std::swap(a, b);
  return (std::uint64_t{a} << 32) | b;
}

}  // namespace

std::uint32_t network::add_group(double bandwidth) {
  groups_.push_back(bandwidth);
  return static_cast<std::uint32_t>(groups_.size() - 1);
}

void network::set_link(std::uint32_t a, std::uint32_t b, double bandwidth) { links_[pair_key(a, b)] = bandwidth; }

double network::bandwidth(const std::vector<node>& nodes, std::uint32_t a, std::uint32_t b) const {
  if (!links_.empty())
    if (auto it = links_.find(pair_key(a, b)); it != links_.end())
      return it->second;
  const auto ga = nodes[a].group;
  if (ga != node::no_group && ga == nodes[b].group)
    return groups_[ga];
  return default_;
}

std::uint32_t cluster::device_count() const noexcept {
  std::uint32_t n = 0;
  for (const auto& x : nodes)
    n += static_cast<std::uint32_t>(x.devices.size());
  return n;
}

std::uint32_t cluster::device_count(std::uint32_t t) const noexcept {
  std::uint32_t n = 0;
  for (const auto& x : nodes)
    if (x.type == t)
      n += static_cast<std::uint32_t>(x.devices.size());
  return n;
}

int cluster::find_node(std::string_view n) const noexcept {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == n)
      return static_cast<int>(i);
  return -1;
}

expected<problem> make_problem(const config::plan_cluster_spec& c, const config::plan_model_spec& m) {
  if (auto errors = config::check_plan_files(c, m); !errors.empty()) {
    std::string text;
    for (const auto& e : errors)
      text += (text.empty() ? "" : "\n") + e.to_string();
    return status{errc::invalid_config, std::move(text)};
  }
  problem p;
  auto& hw = p.hardware;
  hw.name = c.name;
  for (const auto& t : c.types) {
    device_type d;
    d.name = t.name;
    d.flops = m.precision == config::plan_precision::bf16 ? t.bf16_flops : t.fp16_flops;
    d.efficiency = t.efficiency;
    d.memory = t.memory;
    d.reserved_memory = t.reserved_memory;
    d.memory_bandwidth = t.memory_bandwidth;
    d.link_bandwidth = t.link_bandwidth;
    d.link_latency = t.link_latency;
    d.layer_overhead = t.layer_overhead;
    hw.types.push_back(std::move(d));
  }
  hw.net = network{c.network.bandwidth, c.network.latency};
  for (const auto& n : c.nodes) {
    node x;
    x.name = n.name;
    x.type = static_cast<std::uint32_t>(c.find_type(n.type));
    for (std::uint32_t i = 0; i < n.devices; ++i)
      x.devices.push_back(i);
    x.nic_bandwidth = n.nic_bandwidth;
    hw.nodes.push_back(std::move(x));
  }
  for (const auto& g : c.network.groups) {
    const auto index = hw.net.add_group(g.bandwidth);
    for (const auto& name : g.nodes)
      hw.nodes[static_cast<std::size_t>(hw.find_node(name))].group = index;
  }
  for (const auto& l : c.network.links)
    hw.net.set_link(static_cast<std::uint32_t>(hw.find_node(l.a)), static_cast<std::uint32_t>(hw.find_node(l.b)),
                    l.bandwidth);

  auto& w = p.workload;
  w.name = m.name;
  w.layers = m.layers;
  w.hidden = m.hidden;
  w.heads = m.heads;
  w.ffn_hidden = m.ffn_hidden;
  w.seq_len = m.seq_len;
  w.vocab = m.vocab;
  w.tied_embeddings = m.tied_embeddings;
  w.value_bytes = 2;
  w.global_batch = m.global_batch;
  w.micro_batch_sizes = m.micro_batch_sizes;
  w.recompute = m.recompute;
  w.zero = m.zero == 1;
  w.gradient_bytes = m.fp32_gradients ? 4 : w.value_bytes;
  w.memory_margin = m.memory_margin;
  w.measured.assign(hw.types.size(), {});
  w.measured_head.assign(hw.types.size(), {});
  for (const auto& x : m.measured) {
    const auto t = static_cast<std::size_t>(c.find_type(x.type));
    const layer_measurement lm{x.micro_batch, x.tensor, x.forward, x.backward,
                               x.activation_memory ? *x.activation_memory : -1.0};
    if (x.kind == config::plan_layer_kind::head) {
      w.measured_head[t].push_back(lm);
      continue;
    }
    auto& per_layer = w.measured[t];
    if (per_layer.empty())
      per_layer.assign(w.layers, {});
    if (x.layers.empty())
      for (auto& points : per_layer)
        points.push_back(lm);
    else
      for (auto l : x.layers)
        per_layer[l].push_back(lm);
  }
  RK_RETURN_IF_ERROR(validate(p));
  return p;
}

status validate(const problem& p) {
  const auto bad = [](std::string what) { return status{errc::invalid_argument, std::move(what)}; };
  const auto& hw = p.hardware;
  if (hw.types.empty() || hw.nodes.empty())
    return bad("the cluster has no device types or no nodes");
  for (const auto& t : hw.types) {
    if (!(t.flops > 0) || !(t.efficiency > 0 && t.efficiency <= 1) || !(t.memory > 0) || !(t.memory_bandwidth > 0) ||
        !(t.link_bandwidth > 0) || !(t.link_latency >= 0) || !(t.reserved_memory >= 0))
      return bad("device type '" + t.name + "' needs positive rate, memory and bandwidths and an efficiency in (0, 1]");
  }
  for (const auto& n : hw.nodes) {
    if (n.type >= hw.types.size())
      return bad("node '" + n.name + "' refers to a device type that does not exist");
    if (n.group != node::no_group && n.group >= hw.net.group_count())
      return bad("node '" + n.name + "' refers to a network group that does not exist");
  }
  const auto& w = p.workload;
  if (w.layers == 0 || w.hidden == 0 || w.heads == 0 || w.ffn_hidden == 0 || w.seq_len == 0 || w.vocab == 0 ||
      w.global_batch == 0)
    return bad("the model needs positive layers, hidden, heads, ffn_hidden, seq_len, vocab and global_batch");
  if (w.hidden % w.heads != 0)
    return bad("hidden (" + std::to_string(w.hidden) + ") must be a multiple of heads (" + std::to_string(w.heads) + ")");
  if (w.micro_batch_sizes.empty())
    return bad("the model lists no micro-batch sizes");
  for (auto b : w.micro_batch_sizes)
    if (b == 0 || w.global_batch % b != 0)
      return bad("micro-batch size " + std::to_string(b) + " does not divide the global batch " +
                 std::to_string(w.global_batch));
  if (!std::is_sorted(w.micro_batch_sizes.begin(), w.micro_batch_sizes.end()))
    return bad("micro-batch sizes must be ascending");
  if (!(w.gradient_bytes > 0) || !(w.memory_margin >= 0 && w.memory_margin <= 1))
    return bad("the model needs positive gradient bytes and a memory margin in [0, 1]");
  if (!w.measured.empty() && w.measured.size() != hw.types.size())
    return bad("measurements must have one entry per device type");
  if (!w.measured_head.empty() && w.measured_head.size() != hw.types.size())
    return bad("output projection measurements must have one entry per device type");
  const auto good = [](const layer_measurement& x) {
    return x.micro_batch > 0 && x.tensor > 0 && x.forward > 0 && x.backward > 0 && std::isfinite(x.forward) &&
           std::isfinite(x.backward);
  };
  for (const auto& per_layer : w.measured) {
    if (!per_layer.empty() && per_layer.size() != w.layers)
      return bad("a device type's measurements must have one entry per layer");
    for (const auto& points : per_layer)
      if (!std::all_of(points.begin(), points.end(), good))
        return bad("a measurement needs a positive micro-batch, tensor degree and finite positive times");
  }
  for (const auto& points : w.measured_head)
    if (!std::all_of(points.begin(), points.end(), good))
      return bad("a measurement needs a positive micro-batch, tensor degree and finite positive times");
  for (const auto& t : hw.types)
    if (!(t.layer_overhead >= 0) || !std::isfinite(t.layer_overhead))
      return bad("device type '" + t.name + "' needs a layer_overhead of 0 or more");
  return {};
}

}  // namespace rekindle::planner
