#include <gtest/gtest.h>

#include <vector>

#include "policy/node_screen.hpp"

namespace rekindle::policy {
namespace {

node_figures figures(double gflops, double gbps, double mbps) {
  node_figures f;
  f.gemm_gflops = gflops;
  f.memory_gbps = gbps;
  f.disk_mbps = mbps;
  f.fsync_ms = 4;
  return f;
}

std::string field(const node_verdict& v, const std::string& name) {
  for (const auto& [k, value] : v.fields)
    if (k == name)
      return value;
  return "(none)";
}

TEST(node_screen, the_median_of_odd_even_and_empty_sets) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({}), 0);
}

TEST(node_screen, a_noisy_healthy_fleet_passes) {
  const std::vector<node_figures> fleet{figures(30, 10, 400), figures(27, 8, 250), figures(33, 11, 600),
                                        figures(29, 9, 300)};
  for (const auto& n : fleet) {
    const auto v = judge_node(n, fleet, {});
    EXPECT_TRUE(v.passed) << v.detail;
    EXPECT_TRUE(v.check.empty());
    EXPECT_NE(v.detail.find("GFLOP/s"), std::string::npos);
  }
}

TEST(node_screen, a_node_30_percent_slow_fails_compute_with_its_figures_and_the_median) {
  std::vector<node_figures> fleet{figures(30, 10, 400), figures(30, 10, 400), figures(30, 10, 400), figures(20, 10, 400)};
  const auto v = judge_node(fleet[3], fleet, {0.8, 0.5, 0.25});
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.check, "compute");
  EXPECT_NE(v.detail.find("compute 20.00 GFLOP/s is 0.67x the fleet median 30.00 GFLOP/s"), std::string::npos)
      << v.detail;
  EXPECT_EQ(field(v, "compute_median"), "30.00");
  EXPECT_EQ(field(v, "failed"), "compute");
  // The default limit (0.5, room for a machine shared with other work) lets 0.67x pass and 0.4x
  // fail; 0.6x of memory does not fail at 0.4.
  EXPECT_TRUE(judge_node(fleet[3], fleet, {}).passed);
  fleet[3] = figures(12, 10, 400);
  EXPECT_EQ(judge_node(fleet[3], fleet, {}).check, "compute");
  fleet[3] = figures(30, 6, 400);
  EXPECT_TRUE(judge_node(fleet[3], fleet, {}).passed);
}

TEST(node_screen, memory_and_disk_have_their_own_limits) {
  std::vector<node_figures> fleet{figures(30, 10, 400), figures(30, 10, 400), figures(30, 3, 400)};
  auto v = judge_node(fleet[2], fleet, {});
  EXPECT_EQ(v.check, "memory");
  fleet[2] = figures(30, 10, 60);
  v = judge_node(fleet[2], fleet, {});
  EXPECT_EQ(v.check, "disk");
  EXPECT_NE(v.detail.find("MB/s"), std::string::npos);
}

TEST(node_screen, a_fleet_of_one_passes_unless_gpus_are_missing_and_an_error_counts_when_another_node_ran) {
  auto alone = figures(1, 1, 1);
  EXPECT_TRUE(judge_node(alone, std::vector<node_figures>{alone}, {}).passed);
  alone.error = "disk: cannot write /ckpt/.node-check-1: No space left on device";
  auto v = judge_node(alone, std::vector<node_figures>{alone}, {});
  EXPECT_TRUE(v.passed) << "failing on every node, it is the cluster's problem";
  EXPECT_NE(v.detail.find("not held against this one"), std::string::npos) << v.detail;
  v = judge_node(alone, std::vector<node_figures>{alone, figures(1, 1, 1)}, {});
  EXPECT_FALSE(v.passed) << "another node could write";
  EXPECT_EQ(v.check, "error");
  EXPECT_EQ(v.detail, alone.error);
  auto gpu = figures(1, 1, 1);
  gpu.gpus = 3;
  gpu.gpus_expected = 4;
  gpu.gpu_detail = "one fell off the bus";
  v = judge_node(gpu, std::vector<node_figures>{gpu}, {});
  EXPECT_EQ(v.check, "gpu");
  EXPECT_NE(v.detail.find("3 of the 4 GPUs"), std::string::npos) << v.detail;
}

node_figures gpu_node(double gpu_gflops) {
  auto f = figures(30, 10, 400);
  f.gpus = f.gpus_expected = 8;
  f.gpu_gflops = gpu_gflops;
  return f;
}

TEST(node_screen, a_node_whose_slowest_gpu_lags_the_fleet_or_its_expected_rate_fails_gpu) {
  std::vector<node_figures> fleet{gpu_node(50000), gpu_node(51000), gpu_node(49000), gpu_node(35000)};
  auto v = judge_node(fleet[3], fleet, {});
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.check, "gpu");
  EXPECT_NE(v.detail.find("GEMM 35000.00 GFLOP/s on the slowest GPU is 0.71x the fleet median 49500.00 GFLOP/s, under 0.80x"),
            std::string::npos)
      << v.detail;
  EXPECT_EQ(field(v, "gpu_gflops_median"), "49500.00");
  EXPECT_TRUE(judge_node(fleet[0], fleet, {}).passed);
  EXPECT_NE(judge_node(fleet[0], fleet, {}).detail.find("GPU GEMM 50000.00 GFLOP/s (slowest)"), std::string::npos);
  // A fleet slow alike passes against its own median, not against the rate expected of the part.
  const std::vector<node_figures> slow_fleet{gpu_node(30000), gpu_node(31000), gpu_node(29000)};
  EXPECT_TRUE(judge_node(slow_fleet[0], slow_fleet, {}).passed);
  screen_limits expecting;
  expecting.gpu_expected_gflops = 50000;
  v = judge_node(slow_fleet[0], slow_fleet, expecting);
  EXPECT_EQ(v.check, "gpu");
  EXPECT_NE(v.detail.find("0.60x the expected 50000.00 GFLOP/s (checks.gpu_gflops), under 0.80x"), std::string::npos)
      << v.detail;
  // Nodes without GPUs neither count in the GPU median nor are judged on it.
  fleet.push_back(figures(30, 10, 400));
  EXPECT_TRUE(judge_node(fleet.back(), fleet, {}).passed);
  EXPECT_FALSE(judge_node(fleet[3], fleet, {}).passed);
}

TEST(node_screen, a_gpu_the_driver_reports_faulty_fails_gpu_whatever_its_speed) {
  auto bad = gpu_node(50000);
  bad.gpu_faults = "cuda:3: 2 uncorrected ECC error(s) since the driver loaded";
  const std::vector<node_figures> fleet{gpu_node(50000), gpu_node(50000), bad};
  const auto v = judge_node(bad, fleet, {});
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.check, "gpu");
  EXPECT_EQ(v.detail, "gpu: cuda:3: 2 uncorrected ECC error(s) since the driver loaded");
}

TEST(node_screen, a_node_whose_check_failed_does_not_pull_the_median_down) {
  auto broken = figures(0, 0, 0);
  broken.error = "disk: cannot create";
  const std::vector<node_figures> fleet{figures(30, 10, 400), figures(29, 10, 400), broken, figures(31, 10, 400)};
  EXPECT_TRUE(judge_node(fleet[0], fleet, {}).passed);
  EXPECT_EQ(field(judge_node(fleet[0], fleet, {}), "compute_median"), "30.00");
}

}  // namespace
}  // namespace rekindle::policy
