#include "kernels/backend.hpp"

#include <string>

#include "kernels/batch_check.hpp"
#include "kernels/cuda_backend.hpp"

namespace rekindle::kernels {

std::string_view to_string(device_kind k) noexcept {
  return k == device_kind::cpu ? "cpu" : "cuda";
}

expected<std::uint32_t> check_model_batch(const param_layout& layout, std::uint32_t max_batch,
                                          std::size_t params_size, std::span<const std::int32_t> tokens,
                                          std::span<const std::int32_t> targets) {
  const std::size_t seq = layout.shape().seq_len;
  if (params_size < layout.size())
    return status{errc::invalid_argument, "parameter buffer holds " + std::to_string(params_size) +
                                              " floats, the model needs " + std::to_string(layout.size())};
  if (tokens.size() != targets.size())
    return status{errc::invalid_argument, "tokens (" + std::to_string(tokens.size()) + ") and targets (" +
                                              std::to_string(targets.size()) + ") differ in length"};
  if (tokens.empty() || tokens.size() % seq != 0)
    return status{errc::invalid_argument, "a batch holds whole sequences of " + std::to_string(seq) +
                                              " tokens, got " + std::to_string(tokens.size())};
  const std::size_t batch = tokens.size() / seq;
  if (batch > max_batch)
    return status{errc::invalid_argument, "batch of " + std::to_string(batch) +
                                              " sequences exceeds the backend's maximum of " +
                                              std::to_string(max_batch)};
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= static_cast<std::int32_t>(vocab_size) || targets[i] < 0 ||
        targets[i] >= static_cast<std::int32_t>(vocab_size))
      return status{errc::invalid_argument, "token " + std::to_string(i) + " is outside the byte vocabulary"};
  }
  return static_cast<std::uint32_t>(batch);
}

cuda_probe probe_cuda() {
#if REKINDLE_WITH_CUDA
  return cuda::probe();
#else
  return cuda_probe{0, "no CUDA device: this build has no CUDA support (REKINDLE_WITH_CUDA is off)"};
#endif
}

expected<std::unique_ptr<backend>> make_backend(const backend_options& options) {
  using kind = device_request::kind;
  if (options.device.type == kind::cpu)
    return make_cpu_backend(options.shape, options.max_batch);
  const cuda_probe probe = probe_cuda();
  if (probe.device_count == 0) {
    if (options.device.type == kind::cuda)
      return status{errc::unsupported, "a CUDA device was requested but there is none: " + probe.detail};
    return make_cpu_backend(options.shape, options.max_batch);
  }
  const int index = options.device.index < 0 ? 0 : options.device.index;
  if (index >= probe.device_count) {
    if (options.device.type == kind::cuda)
      return status{errc::out_of_range, "CUDA device " + std::to_string(index) + " requested, the machine has " +
                                            std::to_string(probe.device_count)};
    return make_cpu_backend(options.shape, options.max_batch);
  }
#if REKINDLE_WITH_CUDA
  return make_cuda_backend(index, options.shape, options.max_batch);
#else
  return make_cpu_backend(options.shape, options.max_batch);
#endif
}

}  // namespace rekindle::kernels
