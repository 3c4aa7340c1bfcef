#include "common/gpu_plugin.hpp"

#include <gtest/gtest.h>

namespace rekindle {
namespace {

TEST(gpu_health, a_device_nvml_cannot_find_is_unreadable_not_faulty) {
  // Without the driver's management library (this machine) or with it (a GPU machine), a bus id
  // no device has says why nothing was read, and holds no fault against anything.
  const auto h = read_gpu_health("0000:FF:1F.7");
  EXPECT_TRUE(h.faults.empty());
  EXPECT_NE(h.unreadable.find("not readable"), std::string::npos) << h.unreadable;
}

TEST(gpu_probe, the_driver_s_answer_has_a_reason_when_there_is_no_gpu) {
  const auto p = probe_gpus();
  if (p.devices == 0) {
    EXPECT_NE(p.detail.find("no CUDA device"), std::string::npos) << p.detail;
  } else {
    EXPECT_GT(p.devices, 0);
  }
}

}  // namespace
}  // namespace rekindle
