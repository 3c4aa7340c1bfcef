#include "config/device_presets.hpp"

namespace rekindle::config {

namespace {

constexpr double tera = 1e12;
constexpr double giga = 1e9;

// Sources, one datasheet per entry, are listed in docs/PLANNER.md ("Device presets").
constexpr device_preset presets[] = {
    {"v100", "NVIDIA V100 SXM2 32GB", 0, 125 * tera, 32 * giga, 900 * giga, 150 * giga},
    {"t4", "NVIDIA T4", 0, 65 * tera, 16 * giga, 320 * giga, 16 * giga},
    {"a10", "NVIDIA A10", 125 * tera, 125 * tera, 24 * giga, 600 * giga, 32 * giga},
    {"a100-40gb", "NVIDIA A100 SXM4 40GB", 312 * tera, 312 * tera, 40 * giga, 1555 * giga, 300 * giga},
    {"a100-80gb", "NVIDIA A100 SXM4 80GB", 312 * tera, 312 * tera, 80 * giga, 2039 * giga, 300 * giga},
    {"l4", "NVIDIA L4", 121 * tera, 121 * tera, 24 * giga, 300 * giga, 32 * giga},
    {"l40s", "NVIDIA L40S", 362.05 * tera, 362.05 * tera, 48 * giga, 864 * giga, 32 * giga},
    {"h100-pcie", "NVIDIA H100 PCIe 80GB", 756 * tera, 756 * tera, 80 * giga, 2000 * giga, 64 * giga},
    {"h100-sxm", "NVIDIA H100 SXM5 80GB", 989 * tera, 989 * tera, 80 * giga, 3350 * giga, 450 * giga},
    {"h200", "NVIDIA H200 SXM 141GB", 989 * tera, 989 * tera, 141 * giga, 4800 * giga, 450 * giga},
    {"mi250x", "AMD Instinct MI250X (both dies)", 383 * tera, 383 * tera, 128 * giga, 3276.8 * giga, 400 * giga},
    {"mi300x", "AMD Instinct MI300X", 1307.4 * tera, 1307.4 * tera, 192 * giga, 5300 * giga, 448 * giga},
};

}  // namespace

std::span<const device_preset> device_presets() noexcept { return presets; }

const device_preset* find_device_preset(std::string_view name) noexcept {
  for (const auto& p : presets)
    if (p.name == name)
      return &p;
  return nullptr;
}

}  // namespace rekindle::config
