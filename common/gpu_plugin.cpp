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

}  // namespace

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
