#include "common/gpu_plugin.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <vector>

namespace rekindle {

namespace {

namespace fs = std::filesystem;

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown error";
}

// NVML's C interface, declared here so that no CUDA header is needed (nvml.h): the return codes
// are ints (0 success, 3 not supported) and a device is an opaque pointer.
using nvml_device = void*;
constexpr int nvml_success = 0;
constexpr int nvml_not_supported = 3;
constexpr int nvml_uncorrected = 1;  // nvmlMemoryErrorType_t
constexpr int nvml_volatile = 0;     // nvmlEccCounterType_t: since the driver loaded
constexpr unsigned long long nvml_hw_slowdown = 0x08, nvml_hw_thermal = 0x40, nvml_hw_power_brake = 0x80;

}  // namespace

gpu_health read_gpu_health(const std::string& pci_bus_id) {
  gpu_health h;
  // Loaded once and kept, initialised once: NVML counts its users.
  static void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    h.unreadable = "the driver's error state is not readable: libnvidia-ml.so.1 cannot be loaded";
    return h;
  }
  using init_fn = int (*)();
  using string_fn = const char* (*)(int);
  using handle_fn = int (*)(const char*, nvml_device*);
  using ecc_fn = int (*)(nvml_device, int, int, unsigned long long*);
  using remap_fn = int (*)(nvml_device, unsigned*, unsigned*, unsigned*, unsigned*);
  using reasons_fn = int (*)(nvml_device, unsigned long long*);
  const auto init = reinterpret_cast<init_fn>(dlsym(nvml, "nvmlInit_v2"));
  const auto text = reinterpret_cast<string_fn>(dlsym(nvml, "nvmlErrorString"));
  const auto handle = reinterpret_cast<handle_fn>(dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2"));
  const auto ecc = reinterpret_cast<ecc_fn>(dlsym(nvml, "nvmlDeviceGetTotalEccErrors"));
  const auto remap = reinterpret_cast<remap_fn>(dlsym(nvml, "nvmlDeviceGetRemappedRows"));
  const auto reasons = reinterpret_cast<reasons_fn>(dlsym(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  if (init == nullptr || text == nullptr || handle == nullptr) {
    h.unreadable = "the driver's error state is not readable: libnvidia-ml.so.1 lacks nvmlInit_v2";
    return h;
  }
  static const int initialised = init();
  if (initialised != nvml_success) {
    h.unreadable = std::string{"the driver's error state is not readable: nvmlInit: "} + text(initialised);
    return h;
  }
  nvml_device device = nullptr;
  if (const int r = handle(pci_bus_id.c_str(), &device); r != nvml_success) {
    h.unreadable = "the driver's error state is not readable: no NVML device at " + pci_bus_id + ": " + text(r);
    return h;
  }
  std::vector<std::string> unread;
  const auto note = [&](const char* what, int r) {
    if (r != nvml_success && r != nvml_not_supported)  // not supported: no ECC, no remapping (fine)
      unread.push_back(std::string{what} + ": " + text(r));
  };
  if (ecc != nullptr) {
    unsigned long long count = 0;
    const int r = ecc(device, nvml_uncorrected, nvml_volatile, &count);
    note("ECC", r);
    if (r == nvml_success && count > 0)
      h.faults.push_back(std::to_string(count) + " uncorrected ECC error(s) since the driver loaded");
  }
  if (remap != nullptr) {
    unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
    const int r = remap(device, &corrected, &uncorrected, &pending, &failed);
    note("row remapping", r);
    if (r == nvml_success && failed != 0)
      h.faults.push_back("a row remapping failed (the memory has a fault it cannot hide)");
    if (r == nvml_success && pending != 0)
      h.faults.push_back("a row remapping waits for a GPU reset");
  }
  if (reasons != nullptr) {
    unsigned long long mask = 0;
    const int r = reasons(device, &mask);
    note("clock reasons", r);
    if (r == nvml_success && (mask & nvml_hw_thermal) != 0)
      h.faults.push_back("hardware thermal slowdown");
    else if (r == nvml_success && (mask & nvml_hw_power_brake) != 0)
      h.faults.push_back("hardware power brake slowdown");
    else if (r == nvml_success && (mask & nvml_hw_slowdown) != 0)
      h.faults.push_back("hardware slowdown");
  }
  for (const auto& u : unread)
    h.unreadable += (h.unreadable.empty() ? "not readable: " : ", ") + u;
  return h;
}

gpu_probe probe_gpus() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr)
    return {0, "no CUDA device: no NVIDIA driver (libcuda.so.1 cannot be loaded: " + dl_error() + ")"};
  using init_fn = int (*)(unsigned);
  using count_fn = int (*)(int*);
  auto init = reinterpret_cast<init_fn>(dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<count_fn>(dlsym(driver, "cuDeviceGetCount"));
  gpu_probe p;
  if (init == nullptr || count == nullptr) {
    p.detail = "no CUDA device: libcuda.so.1 lacks cuInit or cuDeviceGetCount";
  } else if (const int r = init(0); r != 0) {
    p.detail = "no CUDA device: cuInit returned " + std::to_string(r);
  } else if (const int c = count(&p.devices); c != 0 || p.devices <= 0) {
    p.devices = 0;
    p.detail = c != 0 ? "no CUDA device: cuDeviceGetCount returned " + std::to_string(c)
                      : "no CUDA device: the driver reports 0 devices";
  }
  // The driver stays loaded: the plugin will need it.
  return p;
}

expected<void*> gpu_plugin_symbol(const char* symbol) {
#ifndef REKINDLE_GPU_PLUGIN_PATH
  (void)symbol;
  return status{errc::unsupported, "this build has no GPU backends (configure with REKINDLE_WITH_CUDA=ON on a machine "
                                   "with nvcc and NCCL)"};
#else
  static std::once_flag once;
  static void* handle = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<fs::path> candidates;
    if (const char* env = std::getenv("REKINDLE_GPU_PLUGIN"); env != nullptr && *env != '\0')
      candidates.emplace_back(env);
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back(exe.parent_path() / "librekindle_gpu.so");
      candidates.push_back(exe.parent_path().parent_path() / "lib" / "librekindle_gpu.so");
    }
    candidates.emplace_back(REKINDLE_GPU_PLUGIN_PATH);
    for (const auto& c : candidates) {
      if (!fs::exists(c, ec))
        continue;
      handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr)
        return;
      failure += (failure.empty() ? "" : "; ") + c.string() + ": " + dl_error();
    }
    if (failure.empty())
      failure = "librekindle_gpu.so not found (set REKINDLE_GPU_PLUGIN to its path)";
  });
  if (handle == nullptr)
    return status{errc::unsupported, "the GPU plugin cannot be loaded: " + failure};
  void* s = dlsym(handle, symbol);
  if (s == nullptr)
    return status{errc::not_found, std::string{"the GPU plugin has no symbol "} + symbol};
  return s;
#endif
}

}  // namespace rekindle
