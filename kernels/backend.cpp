#include "kernels/backend.hpp"

#include <string>

#include "kernels/batch_check.hpp"
#include "common/gpu_plugin.hpp"

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

namespace {

// The CUDA backend lives in the GPU plugin (see common/gpu_plugin.hpp): its functions by name.
template <class Fn>
expected<Fn*> plugin_function(const char* getter) {
  RK_ASSIGN_OR_RETURN(void* get, gpu_plugin_symbol(getter));
  return reinterpret_cast<Fn*>(reinterpret_cast<void* (*)()>(get)());
}

}  // namespace

cuda_probe probe_cuda() {
  const auto gpus = probe_gpus();
  if (gpus.devices == 0)
    return cuda_probe{0, gpus.detail};
  auto probe = plugin_function<cuda_probe()>("rekindle_gpu_cuda_probe");
  if (!probe)
    return cuda_probe{0, "no usable CUDA device: " + probe.error().message()};
  return (*probe)();
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
  using factory = expected<std::unique_ptr<backend>>(int, const model_shape&, std::uint32_t);
  auto make = plugin_function<factory>("rekindle_gpu_make_cuda_backend");
  if (!make) {
    if (options.device.type == kind::cuda)
      return make.error();
    return make_cpu_backend(options.shape, options.max_batch);
  }
  return (*make)(index, options.shape, options.max_batch);
}

}  // namespace rekindle::kernels
