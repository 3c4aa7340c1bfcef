#include "kernels/layout.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/check.hpp"

namespace rekindle::kernels {

namespace {

// Standard deviation of the embeddings and weight matrices.
constexpr float base_std = 0.02f;

// A uniform double in (0, 1) from 53 random bits, never 0 so log() is finite.
double unit_open(std::uint64_t bits) noexcept {
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// A standard normal for (seed, index): Box-Muller on two counter-based uniforms.
double normal_at(std::uint64_t seed, std::uint64_t index) noexcept {
  const std::uint64_t key = splitmix64(seed ^ splitmix64(index));
  const double u1 = unit_open(splitmix64(key));
  const double u2 = unit_open(splitmix64(key + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

param_layout::param_layout(const model_shape& shape) : shape_(shape) {
  RK_CHECK(shape.validate().ok(), shape.validate().to_string());
  const std::size_t C = shape.width;
  const std::size_t V = vocab_size;
  const std::size_t T = shape.seq_len;
  // Residual projections start smaller so the residual stream's variance does not grow with depth.
  const float residual_std = base_std / std::sqrt(2.0f * static_cast<float>(shape.layers));
  std::size_t offset = 0;
  const auto add = [&](std::string name, std::size_t rows, std::size_t cols, bool decay, float init_std,
                       float fill) {
    tensors_.push_back(tensor_info{std::move(name), offset, rows, cols, decay, init_std, fill});
    offset += rows * cols;
    return tensors_.back().offset;
  };
  add("wte", V, C, true, base_std, 0);
  wpe_ = add("wpe", T, C, true, base_std, 0);
  for (std::size_t l = 0; l < shape.layers; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    block_offsets b{};
    b.ln1_g = add(p + "ln1_g", 1, C, false, 0, 1);
    b.ln1_b = add(p + "ln1_b", 1, C, false, 0, 0);
    b.qkv_w = add(p + "qkv_w", 3 * C, C, true, base_std, 0);
    b.qkv_b = add(p + "qkv_b", 1, 3 * C, false, 0, 0);
    b.proj_w = add(p + "proj_w", C, C, true, residual_std, 0);
    b.proj_b = add(p + "proj_b", 1, C, false, 0, 0);
    b.ln2_g = add(p + "ln2_g", 1, C, false, 0, 1);
    b.ln2_b = add(p + "ln2_b", 1, C, false, 0, 0);
    b.fc_w = add(p + "fc_w", 4 * C, C, true, base_std, 0);
    b.fc_b = add(p + "fc_b", 1, 4 * C, false, 0, 0);
    b.fcproj_w = add(p + "fcproj_w", C, 4 * C, true, residual_std, 0);
    b.fcproj_b = add(p + "fcproj_b", 1, C, false, 0, 0);
    blocks_.push_back(b);
  }
  lnf_g_ = add("lnf_g", 1, C, false, 0, 1);
  add("lnf_b", 1, C, false, 0, 0);
  size_ = offset;
  RK_CHECK_EQ(size_, parameter_count(shape));
}

std::vector<decay_segment> param_layout::decay_segments(std::size_t begin, std::size_t end) const {
  std::vector<decay_segment> out;
  const auto push = [&out](std::size_t b, std::size_t e, bool decay) {
    if (b >= e)
      return;
    if (!out.empty() && out.back().decay == decay && out.back().end == b)
      out.back().end = e;
    else
      out.push_back(decay_segment{b, e, decay});
  };
  for (const auto& t : tensors_)
    push(std::max(begin, t.offset), std::min(end, t.end()), t.decay);
  push(std::max(begin, size_), end, false);
  return out;
}

std::size_t parameter_count(const model_shape& s) noexcept {
  const std::size_t C = s.width;
  return std::size_t{vocab_size} * C + std::size_t{s.seq_len} * C + std::size_t{s.layers} * (12 * C * C + 13 * C) +
         2 * C;
}

void init_parameters(const param_layout& layout, std::uint64_t seed, std::span<float> params) {
  RK_CHECK_GE(params.size(), layout.size());
  for (const auto& t : layout.tensors()) {
    float* p = params.data() + t.offset;
    if (t.init_std == 0) {
      std::fill(p, p + t.count(), t.fill);
      continue;
    }
    for (std::size_t i = 0; i < t.count(); ++i)
      p[i] = static_cast<float>(t.init_std * normal_at(seed, t.offset + i));
  }
  std::fill(params.begin() + static_cast<std::ptrdiff_t>(layout.size()), params.end(), 0.0f);
}

}  // namespace rekindle::kernels
