// The front of the NCCL communicator: the implementation is in the GPU plugin.

#include "common/gpu_plugin.hpp"
#include "transport/nccl_communicator.hpp"

namespace rekindle::transport {

namespace {

template <class Fn>
expected<Fn*> plugin_function(const char* getter) {
  const auto gpus = probe_gpus();
  if (gpus.devices == 0)
    return status{errc::unsupported, gpus.detail};
  RK_ASSIGN_OR_RETURN(void* get, gpu_plugin_symbol(getter));
  return reinterpret_cast<Fn*>(reinterpret_cast<void* (*)()>(get)());
}

}  // namespace

expected<int> cuda_device_count() {
  RK_ASSIGN_OR_RETURN(auto fn, plugin_function<expected<int>()>("rekindle_gpu_cuda_device_count"));
  return fn();
}

expected<std::vector<std::byte>> make_nccl_unique_id() {
  RK_ASSIGN_OR_RETURN(auto fn, plugin_function<expected<std::vector<std::byte>>()>("rekindle_gpu_nccl_unique_id"));
  return fn();
}

expected<std::unique_ptr<communicator>> make_nccl_communicator(int rank, int size, std::span<const std::byte> unique_id,
                                                               int device, const nccl_options& options) {
  using factory = expected<std::unique_ptr<communicator>>(int, int, std::span<const std::byte>, int, const nccl_options&);
  RK_ASSIGN_OR_RETURN(auto fn, plugin_function<factory>("rekindle_gpu_nccl_create"));
  return fn(rank, size, unique_id, device, options);
}

}  // namespace rekindle::transport
