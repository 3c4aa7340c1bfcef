#pragma once

#include <span>
#include <string_view>

namespace rekindle::config {

/// Datasheet figures of one accelerator, for the planner's cluster files.
///
/// Every figure is the vendor's DENSE rate (never the "with sparsity" one); docs/PLANNER.md names
/// the datasheet of each. Thread-safety: immutable data.
struct device_preset {
  /// The name a cluster file uses, e.g. "a100-80gb".
  std::string_view name;
  /// The product, e.g. "NVIDIA A100 SXM4 80GB".
  std::string_view product;
  /// Dense bf16 tensor rate in FLOP/s; 0 when the device has no bf16 matrix units.
  double bf16_flops;
  /// Dense fp16 tensor rate in FLOP/s.
  double fp16_flops;
  /// Device memory in bytes (datasheet GB, 10^9 bytes).
  double memory;
  /// Device memory bandwidth in bytes/s.
  double memory_bandwidth;
  /// Device-to-device bandwidth inside a node, per direction, in bytes/s (half the datasheet's
  /// bidirectional NVLink / Infinity Fabric / PCIe figure).
  double link_bandwidth;
};

/// Every preset, in a fixed order.
std::span<const device_preset> device_presets() noexcept;

/// The preset called `name` (exact match), or null.
const device_preset* find_device_preset(std::string_view name) noexcept;

}  // namespace rekindle::config
