#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/bytes.hpp"

namespace rekindle::transport {

/// Wire format of a frame: a header carried as the UCX active-message header, and a payload
/// carried as its data (eager for small payloads, rendezvous and zero-copy for large ones).
///
/// Header, little-endian:
///
///     offset size field
///          0    4 magic "RKND" (0x444e4b52)
///          4    1 version (1)
///          5    1 flags (0)
///          6    2 type
///          8    8 epoch
///         16    4 source node
///         20    4 destination node
///         24    8 payload length
///         32    8 checksum: XXH3-64 of the header (this field zeroed) followed by the payload
///         40    1 source actor name length (at most 64)
///         41    1 destination actor name length (at most 64)
///         42    2 reserved (0)
///         44    n source actor name, then destination actor name
inline constexpr std::uint32_t frame_magic = 0x444e4b52;
inline constexpr std::uint8_t frame_version = 1;
inline constexpr std::size_t frame_fixed_size = 44;
inline constexpr std::size_t max_actor_name = 64;
inline constexpr std::size_t max_header_size = frame_fixed_size + 2 * max_actor_name;

/// Frame types at and above this value belong to the transport itself (handshake, keep-alive).
inline constexpr std::uint16_t first_reserved_type = 0xf000;

/// Everything about a frame except its payload.
struct frame_header {
  std::uint16_t type = 0;
  std::uint8_t flags = 0;
  std::uint64_t epoch = 0;
  std::uint32_t src_node = 0;
  std::uint32_t dst_node = 0;
  std::string src_actor;
  std::string dst_actor;
  /// Filled in by encode_header and decode_header.
  std::uint64_t payload_length = 0;
  std::uint64_t checksum = 0;

  bool operator==(const frame_header&) const = default;
};

/// A message between processes.
struct frame {
  frame_header header;
  shared_bytes payload;
};

/// Why a received frame was dropped. Each has a counter in the messenger's statistics.
enum class drop_reason : std::uint8_t {
  none = 0,
  /// Fewer bytes than the fixed header, or the names run past the end, or trailing bytes.
  truncated,
  /// The first four bytes are not "RKND".
  bad_magic,
  /// A version this build does not speak.
  bad_version,
  /// Reserved bits set or a name longer than 64 bytes.
  bad_header,
  /// The payload is larger than the configured maximum frame size.
  oversize,
  /// The payload length differs from the header's.
  bad_length,
  /// The checksum does not match header and payload.
  bad_checksum,
  /// The sender has not completed the token handshake.
  unauthenticated,
  /// The frame's epoch is older than the receiver's.
  stale_epoch,
  /// The sender's node is cut off from this process (a partition drill).
  partitioned,
};
inline constexpr std::size_t drop_reason_count = 11;
std::string_view to_string(drop_reason r) noexcept;

/// Serialises `h` for `payload`, setting h.payload_length and h.checksum.
/// REQUIRES: actor names of at most 64 bytes.
std::vector<std::byte> encode_header(frame_header& h, std::span<const std::byte> payload);

/// Parses a header of at most max_header_size bytes. On success fills `out` and returns
/// drop_reason::none; `detail` then stays empty, else it names the offending byte offset.
drop_reason decode_header(std::span<const std::byte> bytes, std::uint64_t max_payload, frame_header& out,
                          std::string* detail = nullptr);

/// Checks the payload against a decoded header: its length, then the checksum.
drop_reason check_payload(const frame_header& h, std::span<const std::byte> payload);

/// The checksum encode_header would write for `h` and `payload`.
std::uint64_t frame_checksum(const frame_header& h, std::span<const std::byte> payload);

}  // namespace rekindle::transport
