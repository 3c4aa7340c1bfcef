#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/text.hpp"
#include "config/load.hpp"

/// The deployment planner's two input files (docs/PLANNER.md): a cluster file that describes the
/// hardware (device types, nodes, network) and a model file that describes the training job
/// (transformer shape, batch, precision, optional measurements). Both are read with the same
/// error quality as the job configuration: every problem with file:line:column and field.

namespace rekindle::config {

/// A place in a source file, kept so checks that need both files can point at it.
struct source_place {
  std::string file;
  std::uint32_t line = 0;
  std::uint32_t column = 0;

  /// A diagnostic at this place.
  [[nodiscard]] diagnostic at(std::string field, std::string message) const;
  bool operator==(const source_place&) const = default;
};

/// One kind of accelerator, from a preset and/or explicit fields ([types.NAME]).
struct plan_device_type {
  /// The table key, e.g. "a100" for [types.a100].
  std::string name;
  /// The preset it starts from; empty when every figure is given.
  std::string preset;
  /// Dense bf16 matrix rate, FLOP/s; 0 when not supported.
  double bf16_flops = 0;
  /// Dense fp16 matrix rate, FLOP/s; 0 when not supported.
  double fp16_flops = 0;
  /// Device memory in bytes.
  double memory = 0;
  /// Device memory bandwidth in bytes/s.
  double memory_bandwidth = 0;
  /// Device-to-device bandwidth inside a node, per direction, in bytes/s.
  double link_bandwidth = 0;
  /// Latency of one message between devices of a node, seconds. Default: 5us.
  double link_latency = 5e-6;
  /// Fraction of the peak rate that a transformer layer's matrix products reach. Default: 0.5.
  double efficiency = 0.5;
  /// Memory kept free per device (runtime context, fragmentation), bytes. Default: 1GiB.
  double reserved_memory = 1024.0 * 1024 * 1024;
  /// Fixed seconds of one layer's forward pass beyond its FLOPs (the backward pays twice it).
  /// Default: 20us.
  double layer_overhead = 20e-6;
  /// The [types.NAME] table.
  source_place place;

  bool operator==(const plan_device_type&) const = default;
};

/// One machine. A [[nodes]] entry with `count = N` expands into N of these named NAME0 … NAME(N-1).
struct plan_node {
  std::string name;
  /// Device type name (a key of [types]).
  std::string type;
  /// Devices in the node. Default: 8.
  std::uint32_t devices = 8;
  /// Bandwidth of the node's network interface, shared by its devices that communicate with other
  /// nodes at once, bytes/s per direction; 0 gives each device the network's per-device figure.
  /// Default: 0.
  double nic_bandwidth = 0;
  /// The [[nodes]] entry it came from, and that entry's `name` (the base of expanded names).
  std::string entry_name;
  source_place place;

  bool operator==(const plan_node&) const = default;
};

/// Nodes that share a faster (or slower) network than the default ([[network.groups]]).
struct plan_network_group {
  std::string name;
  /// Node names; an entry's base name stands for every node it expanded into.
  std::vector<std::string> nodes;
  /// Per-device bandwidth between two nodes of the group, bytes/s per direction.
  double bandwidth = 0;
  source_place place;

  bool operator==(const plan_network_group&) const = default;
};

/// The bandwidth between two particular nodes ([[network.links]]); overrides groups and default.
struct plan_network_link {
  std::string a;
  std::string b;
  double bandwidth = 0;
  source_place place;

  bool operator==(const plan_network_link&) const = default;
};

struct plan_network {
  /// Per-device bandwidth between two nodes, bytes/s per direction. Default: 25GB/s (200 Gb/s).
  double bandwidth = 25e9;
  /// Latency of one message between nodes, seconds. Default: 10us.
  double latency = 10e-6;
  std::vector<plan_network_group> groups;
  std::vector<plan_network_link> links;

  bool operator==(const plan_network&) const = default;
};

/// A validated cluster file.
struct plan_cluster_spec {
  std::string source;
  /// Default: the file's stem.
  std::string name;
  std::vector<plan_device_type> types;
  /// Nodes after `count` expansion, in file order.
  std::vector<plan_node> nodes;
  plan_network network;

  /// Index of the type called `name`, or -1.
  [[nodiscard]] int find_type(std::string_view name) const;
  /// Index of the node called `name`, or -1.
  [[nodiscard]] int find_node(std::string_view name) const;
  bool operator==(const plan_cluster_spec&) const = default;
};

/// Number format of weights, activations and gradients (the optimizer keeps fp32 state).
enum class plan_precision { bf16, fp16 };
std::string_view to_string(plan_precision p) noexcept;

/// Whether a plan may recompute activations in the backward pass instead of storing them.
enum class recompute_policy {
  /// The planner tries both and keeps the faster plan that fits.
  auto_select,
  never,
  always,
};
std::string_view to_string(recompute_policy p) noexcept;

/// What a [[measured]] entry measured.
enum class plan_layer_kind : std::uint8_t {
  /// A transformer block (the default).
  block,
  /// The output projection with the loss, on the last stage.
  head,
};

/// A measured layer cost on one device type ([[measured]]); replaces the analytic estimate.
struct plan_measurement {
  /// Device type name (a key of [types] in the cluster file).
  std::string type;
  plan_layer_kind kind = plan_layer_kind::block;
  /// Layer indices it applies to; empty means every layer.
  std::vector<std::uint32_t> layers;
  /// Sequences per micro-batch and tensor degree of the measurement. Default: 1 and 1.
  std::uint32_t micro_batch = 1;
  std::uint32_t tensor = 1;
  /// Forward and backward time of one micro-batch through one layer, seconds.
  double forward = 0;
  double backward = 0;
  /// Activation memory one micro-batch keeps per layer, bytes; absent keeps the estimate.
  std::optional<double> activation_memory;
  /// The [[measured]] entry and its `type` value.
  source_place place;
  source_place type_place;

  bool operator==(const plan_measurement&) const = default;
};

/// A validated model file.
struct plan_model_spec {
  std::string source;
  /// Default: the file's stem.
  std::string name;
  std::uint32_t layers = 0;
  std::uint32_t hidden = 0;
  std::uint32_t heads = 0;
  /// Width of the feed-forward block. Default: 4 × hidden.
  std::uint32_t ffn_hidden = 0;
  std::uint32_t seq_len = 0;
  std::uint32_t vocab = 0;
  /// The output projection shares the embedding matrix. Default: true.
  bool tied_embeddings = true;
  /// Default: bf16.
  plan_precision precision = plan_precision::bf16;
  /// Sequences per optimizer step.
  std::uint32_t global_batch = 0;
  /// Micro-batch sizes (sequences) the planner may choose; each divides global_batch.
  /// Default: every divisor of global_batch up to 16.
  std::vector<std::uint32_t> micro_batch_sizes;
  /// Default: auto.
  recompute_policy recompute = recompute_policy::auto_select;
  /// ZeRO stage: 0 keeps the whole optimizer state on every replica, 1 shards it. Default: 1.
  std::uint32_t zero = 1;
  /// Gradients kept and reduced in fp32 (4 bytes, as mixed-precision trainers keep their main
  /// gradients) rather than at the model's 16-bit precision. Default: true.
  bool fp32_gradients = true;
  /// Memory a plan adds to each device's need for the allocator's fragmentation, as a fraction of
  /// it. Default: 0.1.
  double memory_margin = 0.1;
  std::vector<plan_measurement> measured;
  /// The [model] table, for checks against the cluster file.
  source_place place;

  bool operator==(const plan_model_spec&) const = default;
};

/// A parsed file: the value when there are no errors, else every error found.
template <class T>
struct file_result {
  std::optional<T> value;
  std::vector<diagnostic> errors;

  [[nodiscard]] bool ok() const noexcept { return value.has_value(); }
  /// Every error, one per line.
  [[nodiscard]] std::string error_text() const { return join_lines(errors); }
};

/// Reads a cluster file's text; `source_name` names it in diagnostics.
file_result<plan_cluster_spec> parse_plan_cluster(std::string_view text, std::string source_name);
/// Reads the cluster file at `path`.
file_result<plan_cluster_spec> load_plan_cluster(const std::filesystem::path& path);

/// Reads a model file's text; `source_name` names it in diagnostics.
file_result<plan_model_spec> parse_plan_model(std::string_view text, std::string source_name);
/// Reads the model file at `path`.
file_result<plan_model_spec> load_plan_model(const std::filesystem::path& path);

/// Checks what needs both files: measured entries name device types of the cluster, and every
/// device type that a node uses has a rate for the model's precision. Empty when all is well.
std::vector<diagnostic> check_plan_files(const plan_cluster_spec& cluster, const plan_model_spec& model);

}  // namespace rekindle::config
