#pragma once

#include <cstdint>

#include "common/expected.hpp"
#include "kernels/shape.hpp"

// What one device spends on one layer of the built-in model, measured with the model's own
// kernels: a transformer block, or the output projection with the loss, at a micro-batch size and
// a tensor degree (the planner's [[measured]] points, docs/PLANNER.md).
//
// At tensor degree t a device holds the Megatron-style shard of a block: the query/key/value
// projection to 3C/t channels, attention over heads/t heads, the output projection from C/t, the
// feed-forward from C to 4C/t and back; the layer norms and residuals at full width. The
// collectives between the shards are the planner's to add (its tensor-parallel term), so they are
// not part of the measurement. The output projection at degree t holds V/t of the vocabulary.

namespace rekindle::kernels {

/// Forward and backward seconds of one micro-batch through one layer: the median of the runs.
struct layer_times {
  double forward = 0;
  double backward = 0;
};

/// Which layer to time.
enum class profiled_layer : std::uint8_t { block, head };

/// Checks a point: micro_batch >= 1, tensor >= 1 dividing the heads (a block) or the vocabulary
/// (the head), runs in [1, 1000], the shape valid for the micro-batch. invalid_argument names the
/// figure.
[[nodiscard]] status check_profile_point(const model_shape& shape, profiled_layer layer, std::uint32_t micro_batch,
                                         std::uint32_t tensor, int runs);

/// Times `layer` of a model of `shape` on this machine's CPU, with the kernels a rank's training
/// step runs (cpu_ops<float>, one BLAS thread): the medians of `runs` timed passes after one
/// untimed. Errors: check_profile_point's.
[[nodiscard]] expected<layer_times> profile_cpu_layer(const model_shape& shape, profiled_layer layer,
                                                      std::uint32_t micro_batch, std::uint32_t tensor, int runs);

}  // namespace rekindle::kernels
