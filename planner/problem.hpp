#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/expected.hpp"
#include "config/planner_files.hpp"

/// The planner's view of its inputs: a cluster of typed devices with a network, and a model with
/// its training settings, in SI units. Built from the two files (config/planner_files.hpp) or in
/// code (tests, benchmarks). docs/PLANNER.md describes the cost model that uses them.

namespace rekindle::planner {

/// One kind of accelerator, with its rate for the model's precision.
struct device_type {
  std::string name;
  /// Dense peak rate at the model's precision, FLOP/s.
  double flops = 0;
  /// Fraction of `flops` a transformer layer reaches.
  double efficiency = 0.5;
  /// Device memory, bytes.
  double memory = 0;
  /// Memory a plan leaves free, bytes.
  double reserved_memory = 0;
  /// Device memory bandwidth, bytes/s.
  double memory_bandwidth = 0;
  /// Device-to-device bandwidth inside a node, per direction, bytes/s.
  double link_bandwidth = 0;
  /// Latency of one message inside a node, seconds.
  double link_latency = 5e-6;
  /// Fixed time of one layer's forward pass beyond its FLOPs at rate(): kernel launches and the
  /// small products a layer also runs; the backward pass pays twice it. With it, a layer's
  /// efficiency falls as its work per device shrinks (small micro-batches, high tensor degrees)
  /// instead of staying at `efficiency`, the planner's estimate where nothing was measured.
  double layer_overhead = 0;

  /// The rate a layer reaches: flops × efficiency.
  [[nodiscard]] double rate() const noexcept { return flops * efficiency; }
  /// Memory a plan may use: memory − reserved_memory.
  [[nodiscard]] double usable_memory() const noexcept { return memory - reserved_memory; }
};

/// One machine. Its devices are interchangeable; a tensor-parallel group stays inside one node.
struct node {
  std::string name;
  /// Index into cluster::types.
  std::uint32_t type = 0;
  /// Identifiers (0-based indices inside the node) of the devices that work; a lost device is
  /// missing from this list.
  std::vector<std::uint32_t> devices;
  /// Index of the node's network group, or no_group.
  std::uint32_t group = no_group;
  /// The node's network interface, bytes/s per direction, shared by its devices that talk to other
  /// nodes at once; 0: each device has the network's per-device bandwidth.
  double nic_bandwidth = 0;

  static constexpr std::uint32_t no_group = 0xffffffffu;
};

/// Per-device bandwidth and latency between nodes: a default, per-group figures and per-pair links.
///
/// Thread-safety: immutable after construction; concurrent reads are safe.
class network {
 public:
  network() = default;
  /// `default_bandwidth` in bytes/s per device and direction; `latency` in seconds.
  network(double default_bandwidth, double latency) : default_(default_bandwidth), latency_(latency) {}

  /// Adds a group; returns its index. Nodes join it through node::group.
  std::uint32_t add_group(double bandwidth);
  /// Sets the bandwidth between nodes `a` and `b` (indices), overriding groups and default.
  void set_link(std::uint32_t a, std::uint32_t b, double bandwidth);

  /// Bandwidth between two different nodes.
  [[nodiscard]] double bandwidth(const std::vector<node>& nodes, std::uint32_t a, std::uint32_t b) const;
  [[nodiscard]] double latency() const noexcept { return latency_; }
  [[nodiscard]] double default_bandwidth() const noexcept { return default_; }
  [[nodiscard]] double group_bandwidth(std::uint32_t g) const { return groups_.at(g); }
  [[nodiscard]] std::size_t group_count() const noexcept { return groups_.size(); }

 private:
  double default_ = 25e9;
  double latency_ = 10e-6;
  std::vector<double> groups_;
  std::unordered_map<std::uint64_t, double> links_;
};

/// A cluster: device types, nodes and the network between them.
struct cluster {
  std::string name;
  std::vector<device_type> types;
  std::vector<node> nodes;
  network net;

  /// Working devices over all nodes.
  [[nodiscard]] std::uint32_t device_count() const noexcept;
  /// Working devices of type `t`.
  [[nodiscard]] std::uint32_t device_count(std::uint32_t t) const noexcept;
  /// Index of the node called `name`, or -1.
  [[nodiscard]] int find_node(std::string_view name) const noexcept;
};

/// A measured cost of one micro-batch through one layer on one device type, at one micro-batch
/// size and one tensor degree. The cost model interpolates between the points measured for a
/// layer and scales by the analytic estimate outside them (docs/PLANNER.md, "Compute").
struct layer_measurement {
  std::uint32_t micro_batch = 1;
  std::uint32_t tensor = 1;
  /// Seconds for one micro-batch.
  double forward = 0;
  double backward = 0;
  /// Activation bytes one micro-batch keeps at this tensor degree; negative keeps the estimate.
  double activation = -1;
};

/// A GPT-style decoder and how it is trained.
struct model {
  std::string name;
  std::uint32_t layers = 0;
  std::uint32_t hidden = 0;
  std::uint32_t heads = 0;
  std::uint32_t ffn_hidden = 0;
  std::uint32_t seq_len = 0;
  std::uint32_t vocab = 0;
  bool tied_embeddings = true;
  /// Bytes of one weight, activation or gradient value (2 for bf16 and fp16).
  double value_bytes = 2;
  std::uint32_t global_batch = 0;
  /// Candidate micro-batch sizes, ascending; each divides global_batch.
  std::vector<std::uint32_t> micro_batch_sizes;
  config::recompute_policy recompute = config::recompute_policy::auto_select;
  /// Shard the optimizer state over data-parallel replicas (ZeRO-1).
  bool zero = true;
  /// Bytes of a gradient as it is accumulated and reduced: 4 (fp32 main gradients, as
  /// mixed-precision trainers keep them) or value_bytes.
  double gradient_bytes = 4;
  /// A device's need grows by this fraction for the allocator's fragmentation.
  double memory_margin = 0.1;
  /// measured[type][layer]: the points measured for that block on that type (the type's list is
  /// empty, or a layer's, where nothing was measured).
  std::vector<std::vector<std::vector<layer_measurement>>> measured;
  /// measured_head[type]: the points measured for the output projection with the loss.
  std::vector<std::vector<layer_measurement>> measured_head;
};

/// What the planner plans for: a cluster and a model.
struct problem {
  cluster hardware;
  model workload;
};

/// Builds the problem from the two validated files. Errors (errc::invalid_config): what needs both
/// files (config::check_plan_files), one diagnostic per line.
[[nodiscard]] expected<problem> make_problem(const config::plan_cluster_spec& cluster,
                                             const config::plan_model_spec& model);

/// Checks a problem built in code: positive figures, heads dividing hidden, micro-batch sizes
/// dividing the global batch, measurements sized to the cluster.
[[nodiscard]] status validate(const problem& p);

}  // namespace rekindle::planner
