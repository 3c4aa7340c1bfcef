#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/expected.hpp"
#include "kernels/backend.hpp"

#if REKINDLE_WITH_CUDA
namespace rekindle::kernels {

/// The CUDA backend on device `index`: cuda::ops driven by transformer<cuda::ops>.
[[nodiscard]] expected<std::unique_ptr<backend>> make_cuda_backend(int index, const model_shape& shape,
                                                                   std::uint32_t max_batch,
                                                                   const stage_spec& stage = {});

namespace cuda {
/// See probe_cuda().
[[nodiscard]] cuda_probe probe();
/// See check_cuda_devices() (kernels/cuda_device_check.cpp).
[[nodiscard]] expected<std::vector<cuda_device_figures>> check_devices();
}  // namespace cuda

}  // namespace rekindle::kernels
#endif
