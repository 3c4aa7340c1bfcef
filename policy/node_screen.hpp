#pragma once

// The pre-flight node check's verdict: a node's measured figures against the fleet's medians.
// Pure: the figures come from the nodes (actors/node_check), the verdict goes to the supervisor
// policy, which keeps a failed node out of the job (quarantine).

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace rekindle::policy {

/// What a node's check measured (actors/node_check.hpp says how).
struct node_figures {
  /// Single-threaded GEMM of the job's shapes, per second of CPU time.
  double gemm_gflops = 0;
  /// memcpy of a buffer larger than the caches, per second of CPU time.
  double memory_gbps = 0;
  /// Writing a file to the checkpoint directory and fsyncing it, per second of wall time.
  double disk_mbps = 0;
  /// The fsync alone.
  double fsync_ms = 0;
  /// GPUs the driver reports, and those the node's configuration names.
  std::int32_t gpus = 0;
  std::int32_t gpus_expected = 0;
  /// Why the driver reports none, when it does not; else the devices and what was not readable.
  std::string gpu_detail;
  /// The slowest GPU's cuBLAS GEMM rate (GFLOP/s of device time); 0 when no GPU was measured.
  double gpu_gflops = 0;
  /// What the driver says is wrong with a GPU (uncorrected ECC errors, a failed or pending row
  /// remapping, hardware slowdown) or a device error while it was measured; empty when nothing.
  std::string gpu_faults;
  /// A check that could not run (the disk refused the write): the node fails.
  std::string error;
};

/// The least fraction of the fleet's median each figure may reach.
struct screen_limits {
  double compute = 0.5;
  double memory = 0.4;
  double disk = 0.2;
  /// The slowest GPU's GEMM rate: this fraction of the fleet's median (over nodes with GPUs) and
  /// of `gpu_expected_gflops` when that is above 0.
  double gpu = 0.8;
  double gpu_expected_gflops = 0;
};

/// A node's verdict.
struct node_verdict {
  bool passed = true;
  /// The first check that failed: "compute", "memory", "disk", "gpu" or "error"; empty when passed.
  std::string check;
  /// What failed, with the figures ("compute 5.10 GFLOP/s is 0.42x the fleet median 12.20 GFLOP/s,
  /// under 0.70x"), or the node's figures when it passed.
  std::string detail;
  /// The figures and the medians, named, for the event log.
  std::vector<std::pair<std::string, std::string>> fields;
};

/// Judges `node` against the median of each figure over `fleet` (the latest figures of every node
/// checked, `node` among them). A fleet of one has only its own median: the node passes unless its
/// GPUs are missing. A check that could not run (`error`) fails the node only when it ran on
/// another node of the fleet: failing on every node, it is the cluster's problem, not the node's.
[[nodiscard]] node_verdict judge_node(const node_figures& node, std::span<const node_figures> fleet,
                                      const screen_limits& limits);

/// The median of `values` (the mean of the middle two for an even count; 0 for none).
[[nodiscard]] double median_of(std::vector<double> values);

}  // namespace rekindle::policy
