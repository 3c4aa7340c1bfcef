#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.hpp"

namespace rekindle::kernels {

/// Tokens are bytes: the vocabulary has 256 entries.
inline constexpr std::uint32_t vocab_size = 256;

/// The shape of the built-in decoder-only transformer.
///
/// A plain value so kernels/ need not know the configuration format; training/ fills it from
/// `config::model_spec`. Thread-safety: a plain value.
struct model_shape {
  /// Transformer blocks. Default: 4.
  std::uint32_t layers = 4;
  /// Attention heads per block; must divide width. Default: 4.
  std::uint32_t heads = 4;
  /// Embedding width (channels). Default: 128.
  std::uint32_t width = 128;
  /// Tokens per sequence (context length). Default: 64.
  std::uint32_t seq_len = 64;

  /// Channels per attention head. REQUIRES: validate().ok().
  [[nodiscard]] std::uint32_t head_dim() const noexcept { return width / heads; }

  /// Checks that every field is positive, heads divides width and the sizes fit the kernels'
  /// 32-bit indexing for batches of `max_batch` sequences.
  [[nodiscard]] status validate(std::uint32_t max_batch = 1) const;

  bool operator==(const model_shape&) const = default;
};

/// Which part of the model a `transformer` (and a backend) runs: a pipeline stage. A plain value.
struct stage_spec {
  /// The stage's first block.
  std::uint32_t first_layer = 0;
  /// Blocks of the stage; 0 means every block from first_layer on.
  std::uint32_t layers = 0;
  /// Micro-batches whose activations the stage keeps at once (a pipeline schedule runs several
  /// forwards before their backwards). Default: 1.
  std::uint32_t slots = 1;
};

/// Floating-point operations of one training step (forward and backward) per token, counted
/// analytically from the matrix products only (see docs/MODEL.md):
/// `72·L·C² + 6·V·C + 12·L·T·C`.
[[nodiscard]] double training_flops_per_token(const model_shape& shape) noexcept;

}  // namespace rekindle::kernels
