#pragma once

#include <cstdint>
#include <span>

#include "common/expected.hpp"
#include "kernels/layout.hpp"

namespace rekindle::kernels {

/// Checks a forward/backward call's arguments: `params_size` covers the layout, tokens and
/// targets hold the same whole number of sequences (at most `max_batch`) of bytes (0..255).
/// Returns the number of sequences.
[[nodiscard]] expected<std::uint32_t> check_model_batch(const param_layout& layout, std::uint32_t max_batch,
                                                        std::size_t params_size,
                                                        std::span<const std::int32_t> tokens,
                                                        std::span<const std::int32_t> targets);

}  // namespace rekindle::kernels
