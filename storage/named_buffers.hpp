#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/expected.hpp"

namespace rekindle::storage {

/// One named buffer of a rank's state, as the worker API snapshots it (a tensor's bytes, the
/// RNG state, a small record of the rest).
struct named_buffer {
  std::string_view name;
  std::span<const std::byte> bytes;
};

/// Limits every reader and writer of the layout checks.
inline constexpr std::size_t max_named_buffers = 1 << 20;
inline constexpr std::size_t max_buffer_name = 1024;

/// The layout of a snapshot taken through the worker API (little-endian; docs/STORAGE.md, "Named
/// buffers"):
///
///   bytes [0, 8)     magic "RKNAMED1"
///   bytes [8, 12)    count of buffers
///   bytes [12, 16)   reserved (0)
///   bytes [16, 24)   total length of the layout
///   then one entry per buffer: offset u64, size u64, name length u32, reserved u32, the name's
///   bytes, zero-padded to 8; then each buffer's bytes at its offset, aligned to 64.
///
/// Bytes `named_buffers` lay out in; errors: invalid_argument (an empty, over-long or repeated
/// name, too many buffers), naming the buffer.
[[nodiscard]] expected<std::uint64_t> named_buffers_size(std::span<const named_buffer> buffers);

/// Lays `buffers` out at the front of `dst` in one pass that copies and hashes: returns the
/// layout's length and its snapshot_checksum. Errors: as named_buffers_size, and
/// resource_exhausted when `dst` is smaller than the layout (saying both sizes).
[[nodiscard]] expected<std::pair<std::uint64_t, std::uint64_t>> write_named_buffers(
    std::span<std::byte> dst, std::span<const named_buffer> buffers);

/// Reads a layout: views into `bytes`, in the order written. Errors: data_loss naming the field
/// and its byte offset (not this layout, a count, name or range out of bounds, a repeated name).
[[nodiscard]] expected<std::vector<named_buffer>> read_named_buffers(std::span<const std::byte> bytes);

}  // namespace rekindle::storage
