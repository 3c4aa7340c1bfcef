#include "transport/reduce.hpp"

#include <algorithm>

namespace rekindle::transport {

namespace {

template <class Op>
void reduce_f32(float* out, const float* a, const float* b, std::size_t n, Op op) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = op(a[i], b[i]);
}

template <class Op>
void reduce_bf16(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n, Op op) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = float_to_bf16(op(bf16_to_float(a[i]), bf16_to_float(b[i])));
}

struct add {
  float operator()(float x, float y) const noexcept { return x + y; }
};
struct maximum {
  // NaN wins, so a NaN anywhere is visible everywhere.
  float operator()(float x, float y) const noexcept { return (x != x || x > y) ? x : y; }
};

}  // namespace

void reduce_elements(void* out, const void* a, const void* b, std::size_t count, dtype type, reduce_op op) noexcept {
  if (type == dtype::f32) {
    auto* o = static_cast<float*>(out);
    const auto* x = static_cast<const float*>(a);
    const auto* y = static_cast<const float*>(b);
    if (op == reduce_op::max)
      reduce_f32(o, x, y, count, maximum{});
    else
      reduce_f32(o, x, y, count, add{});
  } else {
    auto* o = static_cast<std::uint16_t*>(out);
    const auto* x = static_cast<const std::uint16_t*>(a);
    const auto* y = static_cast<const std::uint16_t*>(b);
    if (op == reduce_op::max)
      reduce_bf16(o, x, y, count, maximum{});
    else
      reduce_bf16(o, x, y, count, add{});
  }
}

void scale_elements(void* data, std::size_t count, dtype type, float factor) noexcept {
  if (type == dtype::f32) {
    auto* d = static_cast<float*>(data);
    for (std::size_t i = 0; i < count; ++i)
      d[i] *= factor;
  } else {
    auto* d = static_cast<std::uint16_t*>(data);
    for (std::size_t i = 0; i < count; ++i)
      d[i] = float_to_bf16(bf16_to_float(d[i]) * factor);
  }
}

}  // namespace rekindle::transport
