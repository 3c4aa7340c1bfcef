#pragma once

#include <string>

#include "common/expected.hpp"

namespace rekindle {

/// What the NVIDIA driver reports, asked without loading CUDA's libraries.
struct gpu_probe {
  /// Devices the driver sees; 0 when there is no driver, no device, or an error.
  int devices = 0;
  /// "no CUDA device: ..." with the reason when there is none.
  std::string detail;
};

/// Asks the driver (libcuda.so.1, through cuInit and cuDeviceGetCount) how many GPUs there are.
/// Cheap on a machine without a driver: one failed dlopen.
gpu_probe probe_gpus();

/// The GPU backends (CUDA kernels, NCCL) live in a plugin, librekindle_gpu.so, because linking
/// CUDA's libraries costs every process about half a second and 200 MB before main() even on
/// machines without a GPU. This returns the address of `symbol` in the plugin, loading it on the
/// first call: from $REKINDLE_GPU_PLUGIN, beside the executable, in ../lib from it, or where the
/// build put it. Errors: unsupported (no plugin in this build or none found), not_found (no
/// such symbol). Callers check probe_gpus() first.
///
/// Thread-safety: safe to call from any thread.
expected<void*> gpu_plugin_symbol(const char* symbol);

}  // namespace rekindle
