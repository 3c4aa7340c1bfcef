#pragma once

#include <cstddef>

#include "kernels/layout.hpp"
#include "kernels/optimizer.hpp"

namespace rekindle::kernels {

/// AdamW on parameters [begin, end) with the weight decay of each tensor the range touches.
/// `grads`, `m` and `v` hold the range's elements from index 0. Works for any `Ops` with an
/// `adamw` member (cpu_ops, cuda::ops).
template <class Ops, class T>
void apply_adamw(Ops& ops, const param_layout& layout, T* params, std::size_t begin, std::size_t end, const T* grads,
                 T* m, T* v, const adamw_step& step) {
  for (const decay_segment& seg : layout.decay_segments(begin, end)) {
    adamw_step s = step;
    if (!seg.decay)
      s.weight_decay = 0;
    const std::size_t off = seg.begin - begin;
    ops.adamw(params + seg.begin, grads + off, m + off, v + off, seg.end - seg.begin, s);
  }
}

}  // namespace rekindle::kernels
