#pragma once

#include <cstdint>

namespace rekindle::kernels {

/// AdamW hyper-parameters and the learning-rate schedule.
///
/// The schedule warms up linearly over `warmup_steps` to `learning_rate`, then follows a cosine
/// down to `min_learning_rate`, reached at the last step (`total_steps - 1`). Thread-safety: a
/// plain value.
struct adamw_hyper {
  /// Peak learning rate. Default: 3e-3.
  double learning_rate = 3e-3;
  /// Learning rate at the last step. Default: 3e-4.
  double min_learning_rate = 3e-4;
  /// Steps of linear warm-up. Default: 20.
  std::uint64_t warmup_steps = 20;
  /// Steps of the whole run; the cosine ends at step total_steps - 1. Default: 300.
  std::uint64_t total_steps = 300;
  /// Decoupled weight decay, applied to embeddings and weight matrices only. Default: 0.1.
  double weight_decay = 0.1;
  /// Default: 0.9.
  double beta1 = 0.9;
  /// Default: 0.95.
  double beta2 = 0.95;
  /// Default: 1e-8.
  double epsilon = 1e-8;
  /// Clip the gradient to this global L2 norm; 0 disables clipping. Default: 1.0.
  double grad_clip = 1.0;
};

/// The learning rate of step `step` (0-based) under `h`'s schedule.
[[nodiscard]] double learning_rate_at(const adamw_hyper& h, std::uint64_t step) noexcept;

/// The constants of one AdamW update, the same for every element.
///
/// For gradient g (after `grad_scale`), moments m, v and parameter p:
///   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
///   p = p - lr·( (m/c1) / (sqrt(v/c2) + ε) + λ·p )
/// with bias corrections c1 = 1-β1^t, c2 = 1-β2^t (t = step + 1) and λ the weight decay, 0 for
/// elements that are not decayed.
struct adamw_step {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0;
  float correction1 = 1;
  float correction2 = 1;
  /// Multiplies every gradient first: 1/micro-batches times the clipping factor.
  float grad_scale = 1;
};

/// The update constants of step `step` (0-based), with `grad_scale` applied to the gradients.
[[nodiscard]] adamw_step make_adamw_step(const adamw_hyper& h, std::uint64_t step, float grad_scale) noexcept;

/// The factor that brings a gradient of global L2 norm `norm` down to `h.grad_clip`; 1 when the
/// norm is within the limit or clipping is off.
[[nodiscard]] double clip_factor(const adamw_hyper& h, double norm) noexcept;

}  // namespace rekindle::kernels
