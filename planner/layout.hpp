#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "planner/plan.hpp"
#include "planner/problem.hpp"

/// Internal to planner/ (and its tests): the structures the search evaluates many times.
///
/// A *layout* fixes everything about a plan except the layer split, the micro-batch size and
/// recomputation: the tensor degree of every stage and the placement of every replica. Replicas
/// that look the same to the cost model (same device type per stage, same links between stages)
/// form a *class*, so evaluating a layout costs O(stages × classes), not O(devices).

namespace rekindle::planner::detail {

/// Replicas with the same device type per stage and the same links between consecutive stages.
struct replica_class {
  /// Device type of each stage.
  std::vector<std::uint32_t> types;
  /// Per-device bandwidth (bytes/s) and latency (s) between stage s and s+1.
  std::vector<double> link_bandwidth;
  std::vector<double> link_latency;
  /// Replicas in the class.
  std::uint32_t count = 0;
};

/// A plan without its layer split, micro-batch size and recompute choice.
struct layout {
  /// Tensor degree per stage.
  std::vector<std::uint32_t> tensor;
  /// replicas[r][s]: the devices of stage s of replica r.
  std::vector<std::vector<placement>> replicas;
  /// The class of each replica.
  std::vector<std::uint32_t> class_of;
  std::vector<replica_class> classes;
  /// Per stage: the slowest link (bandwidth, latency) of the ring that reduces the stage's
  /// gradients across replicas.
  std::vector<double> ring_bandwidth;
  std::vector<double> ring_latency;
  /// Per stage: the device types that occur at the stage.
  std::vector<std::vector<std::uint32_t>> stage_types;
  /// Devices the layout uses.
  std::uint32_t used_devices = 0;
  /// Tensor degrees and the multiset of replicas' device types: layouts with the same signature
  /// are the same plan shape.
  std::string signature;

  [[nodiscard]] std::uint32_t pipeline() const noexcept { return static_cast<std::uint32_t>(tensor.size()); }
  [[nodiscard]] std::uint32_t data() const noexcept { return static_cast<std::uint32_t>(replicas.size()); }
};

/// Fills classes, rings and stage types of a layout whose tensor degrees and placements are set.
void finish_layout(const cluster& c, layout& l);

/// Free devices of a cluster, for placing tensor groups inside nodes.
///
/// Thread-safety: a value used by one thread.
class device_pool {
 public:
  /// Every working device of `c` is free.
  explicit device_pool(const cluster& c);

  /// Takes `count` free devices of type `type` from one node: `preferred` when it has the type and
  /// room, else the node with the fewest free devices that suffice (best fit), lowest index first.
  std::optional<placement> take(std::uint32_t type, std::uint32_t count, std::optional<std::uint32_t> preferred);
  /// Marks the devices of `p` used (they must be free). Returns false when one is not free.
  bool claim(const placement& p);
  /// Returns the devices of `p` to the pool.
  void release(const placement& p);
  /// Free devices of node `n`.
  [[nodiscard]] std::uint32_t free_on(std::uint32_t n) const { return static_cast<std::uint32_t>(free_[n].size()); }

 private:
  void reindex(std::uint32_t n, std::size_t old_free);

  const cluster* cluster_;
  /// Free device ids per node, ascending.
  std::vector<std::vector<std::uint32_t>> free_;
  /// Per type: (free count, node) of every node of the type.
  std::vector<std::set<std::pair<std::uint32_t, std::uint32_t>>> by_type_;
};

/// Places replicas with the given device type per stage (patterns[r][s]) and tensor degrees,
/// keeping a replica's consecutive stages in one node where there is room. Replicas are placed in
/// sorted pattern order, so the result depends only on the multiset of patterns. Returns nothing
/// when the groups do not fit in the nodes.
std::optional<layout> place(const cluster& c, std::span<const std::uint32_t> tensor,
                            std::span<const std::vector<std::uint32_t>> patterns);

/// The result of balancing micro-batches over classes: `high` replicas of the class run `count`
/// micro-batches, the others count − 1.
struct class_share {
  std::uint32_t count = 0;
  std::uint32_t high = 0;
};

/// A cheap evaluation of (layout, split, micro-batch size, recompute).
struct evaluation {
  /// False when the plan is impossible regardless of memory (fewer micro-batches than replicas).
  bool valid = false;
  /// Every device's memory fits.
  bool fits = false;
  double step_time = 0;
  step_breakdown breakdown;
  std::uint32_t critical_class = 0;
  std::vector<class_share> shares;
  /// The largest need / capacity over devices, and where it occurs.
  double memory_ratio = 0;
  std::uint32_t worst_stage = 0;
  std::uint32_t worst_type = 0;

  [[nodiscard]] bool feasible() const noexcept { return valid && fits; }
};

/// Forward and backward seconds of one micro-batch through one layer.
struct measured_time {
  double forward = 0;
  double backward = 0;
};

/// The time of one micro-batch of `b` sequences at tensor degree `t` from the points measured for
/// a layer (docs/PLANNER.md, "Compute"): between measured micro-batch sizes of one tensor degree,
/// linear in b; between measured tensor degrees, linear in 1/t; outside the measured range, the
/// nearest measured time scaled by the ratio of `analytic` at the two points. REQUIRES: points
/// not empty.
measured_time interpolate_points(std::span<const layer_measurement> points, std::uint32_t b, std::uint32_t t,
                                 const std::function<measured_time(std::uint32_t, std::uint32_t)>& analytic);

/// Precomputed per-layer costs of a problem, and the evaluation of layouts.
///
/// Thread-safety: immutable after construction; evaluate may run concurrently.
class cost_model {
 public:
  explicit cost_model(const problem& p);

  [[nodiscard]] const problem& target() const noexcept { return *problem_; }

  /// The time one micro-batch spends in a stage of a replica, by term.
  struct stage_time {
    double compute = 0;
    double tensor_parallel = 0;
    double sends = 0;
    [[nodiscard]] double total() const noexcept { return compute + tensor_parallel + sends; }
  };
  /// Stage `s` of class `k` of `l`, holding layers [first, first+count).
  [[nodiscard]] stage_time stage_cost(const layout& l, std::uint32_t k, std::uint32_t s, std::uint32_t first,
                                      std::uint32_t count, std::uint32_t b, bool recompute) const;

  /// Evaluates `l` with `split[s]` layers in stage s. When `counts` is given (one entry per
  /// replica) it fixes the micro-batches per replica, else they are balanced.
  [[nodiscard]] evaluation evaluate(const layout& l, std::span<const std::uint32_t> split, std::uint32_t b,
                                    bool recompute, std::span<const std::uint32_t> counts = {}) const;

  /// Turns an evaluation into a plan with placements, shares and the memory table; `counts` are
  /// the fixed micro-batches per replica the evaluation used, if any.
  [[nodiscard]] plan make_plan(const layout& l, std::span<const std::uint32_t> split, std::uint32_t b, bool recompute,
                               const evaluation& e, std::span<const std::uint32_t> counts = {}) const;

  /// Seconds of compute for one sequence through layers [first, first+count) on type `type` at
  /// tensor degree 1 (forward + backward, + forward again with recompute).
  [[nodiscard]] double compute_per_sequence(std::uint32_t type, std::uint32_t first, std::uint32_t count,
                                            bool recompute) const;
  /// Seconds of compute of one micro-batch of `b` sequences through blocks [first, first+count) on
  /// one device of `type` at tensor degree `t`: the measured points where there are some, else the
  /// analytic estimate (forward + backward, + forward again with recompute).
  [[nodiscard]] double block_compute(std::uint32_t type, std::uint32_t first, std::uint32_t count, std::uint32_t b,
                                     std::uint32_t t, bool recompute) const;
  /// The same for the output projection with the loss (forward and backward).
  [[nodiscard]] double head_compute(std::uint32_t type, std::uint32_t b, std::uint32_t t) const;
  /// Forward and backward seconds of one micro-batch through one block by the analytic estimate.
  [[nodiscard]] measured_time analytic_block(std::uint32_t type, std::uint32_t b, std::uint32_t t) const;
  /// Seconds per sequence of the whole model on one device of `type` (a lower-bound helper).
  [[nodiscard]] double model_seconds_per_sequence(std::uint32_t type, bool recompute) const;
  /// Memory one device of `type` at stage `s` of `p` needs (weights, gradients, optimizer,
  /// activations) for the given range, with `in_flight` micro-batches and `data` replicas.
  [[nodiscard]] memory_use stage_memory(std::uint32_t type, std::uint32_t s, std::uint32_t p, std::uint32_t first,
                                        std::uint32_t count, std::uint32_t t, std::uint32_t b, bool recompute,
                                        std::uint32_t in_flight, std::uint32_t data) const;
  /// Stage parameters for the range (with embeddings / output projection at the ends).
  [[nodiscard]] double stage_parameters(std::uint32_t s, std::uint32_t p, std::uint32_t count) const;

 private:
  /// Blocks of one type measured at the same points.
  struct point_group {
    std::vector<layer_measurement> points;
    /// Prefix counts over layers: how many of layers [0, i) have these points.
    std::vector<std::uint32_t> count;
  };
  struct per_type {
    /// Forward FLOPs of one block per sequence at t = 1, divided by the rate.
    double block_unit = 0;
    /// type.layer_overhead.
    double overhead = 0;
    /// Measured blocks, grouped by their points (few groups: one per distinct set of points).
    std::vector<point_group> groups;
    std::vector<layer_measurement> head_points;
    /// Prefix sums over layers at b = 1, t = 1 (compute_per_sequence): forward and backward
    /// seconds; activation bytes per sequence split into the part that tensor parallelism does
    /// not divide and the part it does.
    std::vector<double> forward, backward, act_fixed, act_scaled;
    /// Largest single-layer activation parts (the working set of a recomputed layer).
    double max_fixed = 0;
    double max_scaled = 0;
    /// Output projection forward seconds per sequence at t = 1.
    double head_forward = 0;
  };

  const problem* problem_;
  std::vector<per_type> types_;
  double layer_params_ = 0;
};

/// Shares `total` micro-batches over classes where a replica of class k running m ≥ 1
/// micro-batches finishes at fixed[k] + m·per[k]; minimises the latest finish. Returns false when
/// total < Σ count[k].
bool balance(std::span<const double> fixed, std::span<const double> per, std::span<const std::uint32_t> count,
             std::uint32_t total, std::vector<class_share>& out);

}  // namespace rekindle::planner::detail
