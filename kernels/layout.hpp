#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/shape.hpp"

namespace rekindle::kernels {

/// One tensor inside the flat parameter buffer.
struct tensor_info {
  /// Name such as "wte", "h0.qkv_w" or "lnf_g".
  std::string name;
  /// First float of the tensor in the flat buffer.
  std::size_t offset = 0;
  /// Rows and columns (a vector has one row).
  std::size_t rows = 0;
  std::size_t cols = 0;
  /// Whether AdamW applies weight decay: true for the embeddings and weight matrices, false for
  /// biases and layernorm gains and biases.
  bool decay = false;
  /// Standard deviation of the normal initialisation; 0 means a constant `fill`.
  float init_std = 0;
  /// The constant of a non-random tensor (1 for layernorm gains, 0 for biases).
  float fill = 0;

  [[nodiscard]] std::size_t count() const noexcept { return rows * cols; }
  [[nodiscard]] std::size_t end() const noexcept { return offset + count(); }
};

/// A run [begin, end) of the flat buffer with one weight-decay setting.
struct decay_segment {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool decay = false;
};

/// Offsets of one transformer block's tensors in the flat buffer.
struct block_offsets {
  std::size_t ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

/// Where every parameter tensor lives in the one contiguous float32 buffer.
///
/// Order: wte [V, C], wpe [T, C], then for each block l: ln1_g [C], ln1_b [C], qkv_w [3C, C],
/// qkv_b [3C], proj_w [C, C], proj_b [C], ln2_g [C], ln2_b [C], fc_w [4C, C], fc_b [4C],
/// fcproj_w [C, 4C], fcproj_b [C]; then lnf_g [C], lnf_b [C]. Weight matrices are [out, in], row
/// major. docs/MODEL.md shows the same table. Thread-safety: immutable after construction.
class param_layout {
 public:
  /// REQUIRES: shape.validate().ok().
  explicit param_layout(const model_shape& shape);

  [[nodiscard]] const model_shape& shape() const noexcept { return shape_; }
  /// Floats in the buffer: V·C + T·C + L·(12·C² + 13·C) + 2·C.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<const tensor_info> tensors() const noexcept { return tensors_; }

  [[nodiscard]] std::size_t wte() const noexcept { return 0; }
  [[nodiscard]] std::size_t wpe() const noexcept { return wpe_; }
  [[nodiscard]] const block_offsets& block(std::size_t l) const noexcept { return blocks_[l]; }
  [[nodiscard]] std::size_t lnf_g() const noexcept { return lnf_g_; }
  [[nodiscard]] std::size_t lnf_b() const noexcept { return lnf_g_ + shape_.width; }

  /// The maximal runs of equal decay setting that cover [begin, end), in order. Indices at or
  /// beyond size() (the padding of a sharded buffer) count as not decayed.
  [[nodiscard]] std::vector<decay_segment> decay_segments(std::size_t begin, std::size_t end) const;

 private:
  model_shape shape_;
  std::vector<tensor_info> tensors_;
  std::vector<block_offsets> blocks_;
  std::size_t wpe_ = 0;
  std::size_t lnf_g_ = 0;
  std::size_t size_ = 0;
};

/// The closed-form parameter count, equal to param_layout(shape).size().
[[nodiscard]] std::size_t parameter_count(const model_shape& shape) noexcept;

/// Fills `params` (param_layout::size() floats) with the initial parameters for `seed`.
///
/// Each float is a function of (seed, its index) only: normal(0, init_std) from a counter-based
/// generator for embeddings and matrices, the constant fill otherwise. REQUIRES:
/// params.size() >= layout.size(); floats beyond layout.size() are set to 0.
void init_parameters(const param_layout& layout, std::uint64_t seed, std::span<float> params);

/// splitmix64: a bijective 64-bit mixer, the counter-based random source of initialisation and
/// data sampling.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace rekindle::kernels
