#pragma once

// Shared by the benchmarks that train the built-in model at a given size of training state.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/layout.hpp"

namespace rekindle::bench {

/// The transformer shape whose training state (fp32 parameters and two AdamW moments: 12 bytes a
/// parameter) comes closest to a target: two layers, widths in steps of 64, a head per 64.
struct model_choice {
  std::uint32_t width = 0;
  std::uint32_t layers = 2;
  std::uint32_t heads = 0;
  std::uint32_t seq_len = 32;
  std::uint64_t params = 0;
  [[nodiscard]] double state_bytes() const { return 12.0 * static_cast<double>(params); }
};

inline model_choice choose_model(double bytes) {
  model_choice best;
  double best_gap = -1;
  for (std::uint32_t w = 64; w <= 4096; w += 64) {
    model_choice m;
    m.width = w;
    m.heads = w / 64;
    m.params = kernels::parameter_count(
        kernels::model_shape{.layers = m.layers, .heads = m.heads, .width = m.width, .seq_len = m.seq_len});
    const double gap = std::abs(m.state_bytes() - bytes);
    if (best_gap < 0 || gap < best_gap) {
      best = m;
      best_gap = gap;
    }
  }
  return best;
}

inline double median(std::vector<double> v) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace rekindle::bench
