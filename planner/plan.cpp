#include "planner/plan.hpp"

namespace rekindle::planner {

std::uint32_t plan::devices() const noexcept {
  std::uint32_t n = 0;
  for (const auto& s : stages)
    n += s.tensor;
  return n * data();
}

std::string plan::shape() const {
  std::string out = "d=" + std::to_string(data()) + " p=" + std::to_string(pipeline()) + " t=";
  bool uniform = true;
  for (const auto& s : stages)
    uniform = uniform && s.tensor == stages.front().tensor;
  if (uniform && !stages.empty()) {
    out += std::to_string(stages.front().tensor);
  } else {
    out += "[";
    for (std::size_t i = 0; i < stages.size(); ++i)
      out += (i ? "," : "") + std::to_string(stages[i].tensor);
    out += "]";
  }
  out += " b=" + std::to_string(micro_batch_size);
  if (recompute)
    out += " recompute";
  return out;
}

}  // namespace rekindle::planner
