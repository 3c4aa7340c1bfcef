#pragma once

// The pre-flight node check's measurements, taken on the node itself (policy/node_screen judges
// them against the fleet's). No CAF: the agent runs it on a thread of its own.

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "actors/messages.hpp"
#include "policy/node_screen.hpp"

namespace rekindle::config {
struct spec;
}

namespace rekindle::actors {

struct node_check_options {
  /// GEMM shape: C[m, n] = A[m, k] · B[k, n] (the job's MLP: m = micro-batch · sequence length,
  /// k = width, n = 4 · width).
  std::size_t m = 256;
  std::size_t n = 512;
  std::size_t k = 128;
  /// Bytes copied by the memory check (two buffers of this size, larger than the caches).
  std::size_t memory_bytes = 64u << 20;
  /// Where the disk check writes its file (the checkpoint directory), and how much.
  std::filesystem::path directory;
  std::uint64_t disk_bytes = 16ull << 20;
  /// GPUs the node's configuration names (devices of kind cuda).
  std::int32_t gpus_expected = 0;
  /// A drill: each measurement does this many times its work and counts it once, as on a node that
  /// much slower (1: none).
  double slow_factor = 1.0;
  /// The drill slows only this measurement ("compute", "memory" or "disk"); empty: all of them.
  std::string slow_only;
};

/// The options for node `node` of `spec` (its checkpoint directory, the model's shapes, its GPUs).
[[nodiscard]] node_check_options node_check_options_of(const config::spec& spec, std::size_t node);

/// Measures the node: a single-threaded GEMM and a memcpy per second of CPU time (the best of a
/// few rounds, so other processes on the machine do not make it look slow), a write + fsync of a
/// file in `directory` per second of wall time (the file is removed), and the GPUs the driver
/// reports. A disk that refuses the write gives `error`. Takes about half a second.
[[nodiscard]] policy::node_figures check_node(const node_check_options& options);

/// The figures as the wire carries them (node_check_report), and back: one mapping for both ends.
[[nodiscard]] node_check_report report_of(node_id node, std::uint64_t id, const policy::node_figures& f);
[[nodiscard]] policy::node_figures figures_of(const node_check_report& r);

}  // namespace rekindle::actors
