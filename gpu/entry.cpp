// The GPU plugin's entry points. Each exported C function returns the address of one C++
// function; the loader (common/gpu_plugin.hpp) casts it back. Both sides are built from the same
// headers by the same compiler.

#include <span>
#include <vector>

#include "kernels/cuda_backend.hpp"
#include "transport/nccl_communicator.hpp"

namespace rekindle::transport::detail {
expected<int> plugin_cuda_device_count();
expected<std::vector<std::byte>> plugin_nccl_unique_id();
expected<std::unique_ptr<communicator>> plugin_nccl_create(int rank, int size, std::span<const std::byte> unique_id,
                                                            int device, const nccl_options& options);
}  // namespace rekindle::transport::detail

#define RK_EXPORT extern "C" __attribute__((visibility("default")))

RK_EXPORT void* rekindle_gpu_cuda_probe() { return reinterpret_cast<void*>(&rekindle::kernels::cuda::probe); }
RK_EXPORT void* rekindle_gpu_check_devices() { return reinterpret_cast<void*>(&rekindle::kernels::cuda::check_devices); }
RK_EXPORT void* rekindle_gpu_make_cuda_backend() { return reinterpret_cast<void*>(&rekindle::kernels::make_cuda_backend); }
RK_EXPORT void* rekindle_gpu_cuda_device_count() {
  return reinterpret_cast<void*>(&rekindle::transport::detail::plugin_cuda_device_count);
}
RK_EXPORT void* rekindle_gpu_nccl_unique_id() {
  return reinterpret_cast<void*>(&rekindle::transport::detail::plugin_nccl_unique_id);
}
RK_EXPORT void* rekindle_gpu_nccl_create() { return reinterpret_cast<void*>(&rekindle::transport::detail::plugin_nccl_create); }
