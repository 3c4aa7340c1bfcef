#include "kernels/shape.hpp"

#include <limits>
#include <string>

namespace rekindle::kernels {

status model_shape::validate(std::uint32_t max_batch) const {
  const auto fail = [](std::string what) { return status{errc::invalid_argument, "model shape: " + std::move(what)}; };
  if (layers == 0)
    return fail("layers must be at least 1");
  if (heads == 0)
    return fail("heads must be at least 1");
  if (width == 0)
    return fail("width must be at least 1");
  if (seq_len < 1)
    return fail("seq_len must be at least 1");
  if (width % heads != 0)
    return fail("width (" + std::to_string(width) + ") must be a multiple of heads (" + std::to_string(heads) + ")");
  if (max_batch == 0)
    return fail("a batch holds at least one sequence");
  // The largest activation is [batch, heads, seq_len, seq_len] or [batch * seq_len, 4 * width];
  // kernels index them with 32-bit integers.
  constexpr std::uint64_t limit = std::numeric_limits<std::int32_t>::max();
  const std::uint64_t rows = std::uint64_t{max_batch} * seq_len;
  const std::uint64_t att = rows * heads * seq_len;
  const std::uint64_t wide = rows * 4 * width;
  const std::uint64_t logits = rows * vocab_size;
  if (att > limit || wide > limit || logits > limit)
    return fail("activations of " + std::to_string(max_batch) + " sequences exceed 2^31 elements");
  return {};
}

double training_flops_per_token(const model_shape& s) noexcept {
  const double L = s.layers;
  const double C = s.width;
  const double T = s.seq_len;
  const double V = vocab_size;
  // Forward: 2 FLOPs per multiply-add. Per layer 12·C² weights (qkv 3C², projection C², MLP 8C²),
  // attention scores and mixing 2·T·C each; the tied output projection V·C. Backward is twice the
  // forward (gradients of inputs and of weights).
  const double forward = 2.0 * (12.0 * L * C * C + V * C) + 4.0 * L * T * C;
  return 3.0 * forward;
}

}  // namespace rekindle::kernels
