#pragma once

#include <string>
#include <vector>

#include "common/expected.hpp"

namespace rekindle {

/// What the NVIDIA driver reports, asked without loading CUDA's libraries.
struct gpu_probe {
  /// Devices the driver sees; 0 when there is no driver, no device, or an error.
  int devices = 0;
  /// "no CUDA device: ..." with the reason when there is none.
  std::string detail;
};

/// What the NVIDIA driver's management library (libnvidia-ml.so.1, NVML) says about one GPU.
struct gpu_health {
  /// Faults that make the device unfit to train on: uncorrected ECC errors since the driver
  /// loaded, a row remapping that failed or waits for a reset, hardware slowdown (thermal, power
  /// brake). Empty: none found.
  std::vector<std::string> faults;
  /// Why nothing (or not everything) could be read: no NVML, a call that failed. Empty: all read.
  std::string unreadable;
};

/// Reads the health of the GPU at PCI bus id `pci_bus_id` ("0000:3B:00.0"), as CUDA names it.
/// Cheap without a driver: one failed dlopen.
gpu_health read_gpu_health(const std::string& pci_bus_id);

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
