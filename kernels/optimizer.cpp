#include "kernels/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace rekindle::kernels {

double learning_rate_at(const adamw_hyper& h, std::uint64_t step) noexcept {
  if (step < h.warmup_steps)
    return h.learning_rate * static_cast<double>(step + 1) / static_cast<double>(h.warmup_steps);
  const std::uint64_t last = h.total_steps > 0 ? h.total_steps - 1 : 0;
  if (step >= last || last <= h.warmup_steps)
    return step >= last ? h.min_learning_rate : h.learning_rate;
  const double progress = static_cast<double>(step - h.warmup_steps) / static_cast<double>(last - h.warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return h.min_learning_rate + (h.learning_rate - h.min_learning_rate) * cosine;
}

adamw_step make_adamw_step(const adamw_hyper& h, std::uint64_t step, float grad_scale) noexcept {
  const double t = static_cast<double>(step + 1);
  adamw_step s;
  s.lr = static_cast<float>(learning_rate_at(h, step));
  s.beta1 = static_cast<float>(h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.epsilon = static_cast<float>(h.epsilon);
  s.weight_decay = static_cast<float>(h.weight_decay);
  s.correction1 = static_cast<float>(1.0 - std::pow(h.beta1, t));
  s.correction2 = static_cast<float>(1.0 - std::pow(h.beta2, t));
  s.grad_scale = grad_scale;
  return s;
}

double clip_factor(const adamw_hyper& h, double norm) noexcept {
  if (h.grad_clip <= 0 || !(norm > h.grad_clip))
    return 1.0;
  return h.grad_clip / norm;
}

}  // namespace rekindle::kernels
