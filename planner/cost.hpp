#pragma once

#include <cstdint>

#include "common/expected.hpp"
#include "planner/plan.hpp"
#include "planner/problem.hpp"

/// The planner's cost model (docs/PLANNER.md, "Cost model"): analytic FLOPs, parameters and
/// activation memory of a GPT-style decoder, the α-β time of collectives, and the evaluation of a
/// complete plan. Every function is pure; concurrent calls are safe.

namespace rekindle::planner {

/// Bytes of optimizer state per parameter: fp32 master weights and Adam's two moments.
inline constexpr double optimizer_bytes_per_parameter = 12;
/// Bytes of memory traffic per parameter of one Adam update: read master, m, v (12) and the
/// gradient (2), write master, m, v (12) and the 16-bit weights (2).
inline constexpr double optimizer_traffic_per_parameter = 28;

/// Parameters of one transformer block: QKV and output projections with biases, the two
/// feed-forward projections with biases, two layer norms: 4h² + 2hf + 9h + f.
[[nodiscard]] double layer_parameters(const model& m) noexcept;

/// Token and position embeddings: V·h + s·h.
[[nodiscard]] double embedding_parameters(const model& m) noexcept;

/// Parameters held by one stage with `layers` blocks: the first stage also holds the embeddings,
/// the last the final layer norm and, unless it is the first too and the embeddings are tied, the
/// output projection (V·h).
[[nodiscard]] double stage_parameters(const model& m, std::uint32_t layers, bool first, bool last) noexcept;

/// All parameters of the model (one copy).
[[nodiscard]] double model_parameters(const model& m) noexcept;

/// Forward FLOPs of one block for `b` sequences: 2·b·s·(4h² + 2hf) for the projections plus
/// 4·b·s²·h for the attention scores and their application.
[[nodiscard]] double layer_forward_flops(const model& m, std::uint32_t b) noexcept;

/// Forward FLOPs of the output projection for `b` sequences: 2·b·s·h·V.
[[nodiscard]] double head_forward_flops(const model& m, std::uint32_t b) noexcept;

/// Activation bytes one micro-batch of `b` sequences keeps per block at tensor degree `t`, with
/// 16-bit activations and no sequence parallelism: s·b·h·(10 + 24/t + 5·a·s/(h·t)).
[[nodiscard]] double layer_activation_bytes(const model& m, std::uint32_t b, std::uint32_t t) noexcept;

/// Time of a ring all-reduce of `bytes` over `n` members (α-β model): 2(n−1)/n · bytes/bandwidth
/// + 2(n−1)·latency; 0 for one member. Also the time of a reduce-scatter followed by an all-gather.
[[nodiscard]] double ring_allreduce_time(double bytes, std::uint32_t n, double bandwidth, double latency) noexcept;

/// Evaluates a complete plan: stages (layers and tensor degrees), replicas with their placements,
/// micro-batch size and recompute. When every replica's micro_batches is 0 the micro-batches are
/// shared out to minimise the step time; otherwise they must add up to global_batch /
/// micro_batch_size. Returns the plan with its prediction filled in.
///
/// Errors: invalid_argument for a malformed plan (layers not covered, a tensor degree that does not
/// divide the heads, a placement on a device that does not exist or is used twice, a stage of one
/// replica on two device types …); resource_exhausted when it does not fit in memory, naming the
/// device type, the stage and the bytes.
[[nodiscard]] expected<plan> evaluate(const problem& p, plan shape);

}  // namespace rekindle::planner
