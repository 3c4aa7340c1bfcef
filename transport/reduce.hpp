#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/communicator.hpp"

namespace rekindle::transport {

/// bfloat16 <-> float32, rounding to nearest even (NaN stays NaN).
inline float bf16_to_float(std::uint16_t v) noexcept {
  const std::uint32_t bits = std::uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline std::uint16_t float_to_bf16(float f) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

/// out[i] = a[i] (op) b[i] for `count` elements of `type`. `out` may alias `a` or `b`.
/// For reduce_op::average this sums; the caller scales once at the end.
void reduce_elements(void* out, const void* a, const void* b, std::size_t count, dtype type, reduce_op op) noexcept;

/// data[i] *= factor, for the final step of an average.
void scale_elements(void* data, std::size_t count, dtype type, float factor) noexcept;

}  // namespace rekindle::transport
