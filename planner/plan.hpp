#pragma once

#include <cstdint>
#include <string>
#include <vector>

/// A deployment plan: how a model is split over a cluster, and what the cost model predicts for it.

namespace rekindle::planner {

/// One pipeline stage, the same in every replica: a contiguous range of layers and a tensor degree.
struct stage {
  std::uint32_t first_layer = 0;
  std::uint32_t layers = 0;
  /// Tensor-parallel degree: the stage's devices per replica, all in one node.
  std::uint32_t tensor = 1;

  bool operator==(const stage&) const = default;
};

/// The devices that run one stage of one replica: `tensor` devices of one node.
struct placement {
  /// Index into cluster::nodes.
  std::uint32_t node = 0;
  /// Device identifiers inside the node.
  std::vector<std::uint32_t> devices;

  bool operator==(const placement&) const = default;
};

/// One data-parallel replica: a whole pipeline, one placement per stage.
struct replica {
  std::vector<placement> stages;
  /// Micro-batches this replica runs per step (its share of the global batch).
  std::uint32_t micro_batches = 0;

  bool operator==(const replica&) const = default;
};

/// The predicted step time, split into terms that add up to it (docs/PLANNER.md, "Cost model").
struct step_breakdown {
  /// Matrix work of the slowest replica's bottleneck stage over all its micro-batches.
  double compute = 0;
  /// Tensor-parallel all-reduces of that stage.
  double tensor_parallel = 0;
  /// Activations and their gradients sent between that stage and its neighbours.
  double pipeline_p2p = 0;
  /// Pipeline fill and drain: the other stages' time for one micro-batch.
  double bubble = 0;
  /// Gradient reduction and parameter gathering across replicas, at the slowest link of a ring.
  double data_parallel = 0;
  /// The optimizer update of the device with the most state per memory bandwidth.
  double optimizer = 0;

  [[nodiscard]] double total() const noexcept {
    return compute + tensor_parallel + pipeline_p2p + bubble + data_parallel + optimizer;
  }
};

/// What one device of a stage holds, for the device type at that stage (the most loaded replica).
struct memory_use {
  std::uint32_t stage = 0;
  /// Index into cluster::types.
  std::uint32_t type = 0;
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  /// Pipeline send and receive buffers: an activation and a gradient per neighbouring stage.
  double buffers = 0;
  /// The allocator's fragmentation: model::memory_margin of the rest.
  double margin = 0;
  /// Memory a plan may use on this type: memory − reserved.
  double capacity = 0;

  [[nodiscard]] double total() const noexcept { return weights + gradients + optimizer + activations + buffers + margin; }
};

/// A complete plan with its prediction.
struct plan {
  std::vector<stage> stages;
  std::vector<replica> replicas;
  /// Sequences per micro-batch.
  std::uint32_t micro_batch_size = 1;
  /// Micro-batches per step over all replicas: global_batch / micro_batch_size.
  std::uint32_t micro_batches = 0;
  /// Activations are recomputed in the backward pass instead of stored.
  bool recompute = false;

  /// Predicted seconds per optimizer step; equals breakdown.total().
  double step_time = 0;
  step_breakdown breakdown;
  /// The replica whose pipeline finishes last.
  std::uint32_t critical_replica = 0;
  /// One entry per (stage, device type) that occurs.
  std::vector<memory_use> memory;
  /// Working devices the plan leaves idle.
  std::uint32_t idle_devices = 0;

  [[nodiscard]] std::uint32_t data() const noexcept { return static_cast<std::uint32_t>(replicas.size()); }
  [[nodiscard]] std::uint32_t pipeline() const noexcept { return static_cast<std::uint32_t>(stages.size()); }
  /// Devices the plan uses.
  [[nodiscard]] std::uint32_t devices() const noexcept;
  /// "d=2 p=2 t=[4,2] b=2 recompute" and so on: the shape without the placement.
  [[nodiscard]] std::string shape() const;
};

}  // namespace rekindle::planner
