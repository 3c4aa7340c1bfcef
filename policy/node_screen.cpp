#include "policy/node_screen.hpp"

#include <algorithm>
#include <cstdio>

namespace rekindle::policy {

namespace {

std::string fixed(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

struct figure {
  const char* check;
  const char* unit;
  double node_figures::*value;
  double screen_limits::*limit;
};

constexpr figure figures[] = {
    {"compute", "GFLOP/s", &node_figures::gemm_gflops, &screen_limits::compute},
    {"memory", "GB/s", &node_figures::memory_gbps, &screen_limits::memory},
    {"disk", "MB/s", &node_figures::disk_mbps, &screen_limits::disk},
};

}  // namespace

double median_of(std::vector<double> values) {
  if (values.empty())
    return 0;
  const auto mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1)
    return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

node_verdict judge_node(const node_figures& node, std::span<const node_figures> fleet, const screen_limits& limits) {
  node_verdict v;
  const auto fail = [&](const std::string& check, const std::string& detail) {
    if (!v.passed)
      return;
    v.passed = false;
    v.check = check;
    v.detail = detail;
  };
  // A check that could not run fails the node only when it ran on another node: when it fails on
  // every node (a checkpoint directory nobody can write), the cluster is at fault, not the node,
  // and the job goes on as it would without the check.
  const bool ran_elsewhere =
      std::any_of(fleet.begin(), fleet.end(), [](const node_figures& other) { return other.error.empty(); });
  if (!node.error.empty() && ran_elsewhere)
    fail("error", node.error);
  if (node.gpus < node.gpus_expected)
    fail("gpu", "gpu: the driver reports " + std::to_string(node.gpus) + " of the " +
                    std::to_string(node.gpus_expected) + " GPUs the configuration names" +
                    (node.gpu_detail.empty() ? "" : " (" + node.gpu_detail + ")"));
  if (!node.gpu_faults.empty())
    fail("gpu", "gpu: " + node.gpu_faults);
  if (node.gpu_gflops > 0) {
    // The slowest GPU against the fleet's (nodes with GPUs) and against the rate expected of it.
    std::vector<double> values;
    for (const auto& other : fleet)
      if (other.gpu_gflops > 0)
        values.push_back(other.gpu_gflops);
    const double median = median_of(std::move(values));
    v.fields.emplace_back("gpu_gflops", fixed(node.gpu_gflops));
    v.fields.emplace_back("gpu_gflops_median", fixed(median));
    const double expected = limits.gpu_expected_gflops;
    if (median > 0 && node.gpu_gflops < limits.gpu * median)
      fail("gpu", "gpu: GEMM " + fixed(node.gpu_gflops) + " GFLOP/s on the slowest GPU is " +
                      fixed(node.gpu_gflops / median) + "x the fleet median " + fixed(median) + " GFLOP/s, under " +
                      fixed(limits.gpu) + "x");
    if (expected > 0 && node.gpu_gflops < limits.gpu * expected)
      fail("gpu", "gpu: GEMM " + fixed(node.gpu_gflops) + " GFLOP/s on the slowest GPU is " +
                      fixed(node.gpu_gflops / expected) + "x the expected " + fixed(expected) +
                      " GFLOP/s (checks.gpu_gflops), under " + fixed(limits.gpu) + "x");
  }
  std::string passed_detail;
  for (const auto& f : figures) {
    std::vector<double> values;
    for (const auto& other : fleet)
      if (other.error.empty())
        values.push_back(other.*f.value);
    const double median = median_of(std::move(values));
    const double mine = node.*f.value;
    const double ratio = median > 0 ? mine / median : 1.0;
    v.fields.emplace_back(f.check, fixed(mine));
    v.fields.emplace_back(std::string{f.check} + "_median", fixed(median));
    if (node.error.empty() && ratio < limits.*f.limit)
      fail(f.check, std::string{f.check} + " " + fixed(mine) + " " + f.unit + " is " + fixed(ratio) +
                        "x the fleet median " + fixed(median) + " " + f.unit + ", under " + fixed(limits.*f.limit) + "x");
    passed_detail += (passed_detail.empty() ? "" : ", ") + std::string{f.check} + " " + fixed(mine) + " " + f.unit;
  }
  v.fields.emplace_back("fsync_ms", fixed(node.fsync_ms));
  v.fields.emplace_back("gpus", std::to_string(node.gpus));
  if (v.passed && !node.error.empty())
    v.detail = node.error + " (on every node checked: not held against this one)";
  else if (v.passed)
    v.detail = passed_detail + ", fsync " + fixed(node.fsync_ms) + " ms" +
               (node.gpus_expected > 0 || node.gpus > 0 ? ", " + std::to_string(node.gpus) + " GPUs" : "") +
               (node.gpu_gflops > 0 ? ", GPU GEMM " + fixed(node.gpu_gflops) + " GFLOP/s (slowest)" : "");
  else
    v.fields.emplace_back("failed", v.check);
  return v;
}

}  // namespace rekindle::policy
