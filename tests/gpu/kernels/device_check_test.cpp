// The GPU part of the node check on a real GPU: every device's cuBLAS GEMM and the driver's
// health. Prints, for scripts/gpu-check, one line per device:
//   GPUNODE cuda:<index> <GFLOP/s> <faults or "none"> | <what was not readable, or "all read">
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/gpu_plugin.hpp"
#include "kernels/backend.hpp"

namespace rekindle::kernels {
namespace {

TEST(cuda_device_check, every_gpu_reaches_a_plausible_gemm_rate_and_its_health_is_read) {
  const cuda_probe probe = probe_cuda();
  if (probe.device_count == 0)
    GTEST_SKIP() << probe.detail;
  auto devices = check_cuda_devices();
  ASSERT_TRUE(devices.has_value()) << devices.error();
  ASSERT_EQ(static_cast<int>(devices->size()), probe.device_count);
  for (const auto& d : *devices) {
    EXPECT_TRUE(d.error.empty()) << "cuda:" << d.index << ": " << d.error;
    EXPECT_FALSE(d.pci_bus_id.empty()) << d.index;
    // FP32 GEMM of 4096 a side: more than 1 TFLOP/s on any datacenter GPU of the last decade, and
    // less than a PFLOP/s (a figure beyond it is a timing error).
    EXPECT_GT(d.gemm_gflops, 1000.0) << d.name;
    EXPECT_LT(d.gemm_gflops, 1e6) << d.name;
    const auto health = read_gpu_health(d.pci_bus_id);
    std::string faults;
    for (const auto& f : health.faults)
      faults += (faults.empty() ? "" : "; ") + f;
    std::printf("GPUNODE cuda:%d %.0f %s | %s\n", d.index, d.gemm_gflops, faults.empty() ? "none" : faults.c_str(),
                health.unreadable.empty() ? "all read" : health.unreadable.c_str());
    std::printf("device: %s (%s)\n", d.name.c_str(), d.pci_bus_id.c_str());
  }
}

}  // namespace
}  // namespace rekindle::kernels
