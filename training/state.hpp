#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/expected.hpp"

namespace rekindle::training {

/// The exported training state of one rank: one contiguous byte buffer.
///
/// Layout (integers little-endian, floats IEEE float32):
///
///   bytes [0, 256)        header (fields below; unused bytes are zero)
///   params_offset = 256   the full parameter replica, param_count floats
///   m_offset              AdamW first moments of the rank's shard, shard_end − shard_begin floats
///   v_offset              AdamW second moments of the shard, as many floats
///   trailer_offset        trailer (64 bytes): magic "RKSTEND\0", then the snapshot_checksum
///                         (common/checksum.hpp) of bytes [0, trailer_offset)
///
/// Sections start at multiples of 64 bytes; the padding between them is zero. The header ends with
/// an xxHash64 of its first 160 bytes; it holds only what is known before the export (the layout),
/// so an export writes the buffer front to back in one pass, hashing each piece while it is in
/// cache: the trailer's checksum and the checksum of the whole buffer (which export_state returns
/// and the snapshot slot publishes) come out of that same pass. The data cursor is the step:
/// batches are a pure function of (seed, step, micro-batch index).
///
/// | offset | field | | offset | field |
/// |---|---|---|---|---|
/// | 0 | magic "RKSTATE\0" | | 80 | step |
/// | 8 | version (u32, 2) | | 88 | seed |
/// | 12 | header_bytes (u32, 256) | | 96 | data_fingerprint |
/// | 16 | layers | | 104 | params_offset |
/// | 20 | heads | | 112 | m_offset |
/// | 24 | width | | 120 | v_offset |
/// | 28 | seq_len | | 128 | total_bytes |
/// | 32 | vocab | | 136 | trailer_offset |
/// | 36 | world_size | | 144 | reserved (0) |
/// | 40 | rank | | 152 | reserved (0) |
/// | 44 | reserved (0) | | 160 | header_checksum |
/// | 48 | param_count (u64) | | | |
/// | 56 | padded_count | | | |
/// | 64 | shard_begin | | | |
/// | 72 | shard_end | | | |
struct state_header {
  std::uint32_t version = 2;
  std::uint32_t layers = 0;
  std::uint32_t heads = 0;
  std::uint32_t width = 0;
  std::uint32_t seq_len = 0;
  std::uint32_t vocab = 0;
  std::uint32_t world_size = 0;
  std::uint32_t rank = 0;
  /// Floats of the model (unpadded).
  std::uint64_t param_count = 0;
  /// param_count rounded up to a multiple of world_size: the ZeRO-1 sharded length.
  std::uint64_t padded_count = 0;
  /// The rank's shard [shard_begin, shard_end) of the padded buffer.
  std::uint64_t shard_begin = 0;
  std::uint64_t shard_end = 0;
  /// Optimizer steps applied so far.
  std::uint64_t step = 0;
  std::uint64_t seed = 0;
  /// xxHash64 of the training data.
  std::uint64_t data_fingerprint = 0;
  std::uint64_t params_offset = 0;
  std::uint64_t m_offset = 0;
  std::uint64_t v_offset = 0;
  std::uint64_t trailer_offset = 0;
  std::uint64_t total_bytes = 0;

  [[nodiscard]] std::uint64_t shard_size() const noexcept { return shard_end - shard_begin; }
};

/// Size of the header in bytes.
inline constexpr std::size_t state_header_bytes = 256;
/// The format version this build writes and reads.
inline constexpr std::uint32_t state_version = 2;
/// Size of the trailer in bytes.
inline constexpr std::size_t state_trailer_bytes = 64;

/// Fills in the section offsets and total_bytes of `h` from param_count and the shard range.
void set_state_layout(state_header& h) noexcept;

/// Writes `h` (with its header checksum) into the first state_header_bytes of `out`.
/// REQUIRES: out.size() >= state_header_bytes.
void write_state_header(const state_header& h, std::span<std::byte> out) noexcept;
/// Writes the trailer with `body_checksum` (the snapshot_checksum of the bytes before it) into the
/// first state_trailer_bytes of `out`. REQUIRES: out.size() >= state_trailer_bytes.
void write_state_trailer(std::uint64_t body_checksum, std::span<std::byte> out) noexcept;

/// A checked state buffer: its header and its three sections.
struct state_view {
  state_header header;
  std::span<const std::byte> params;
  std::span<const std::byte> m;
  std::span<const std::byte> v;
  /// The trailer's snapshot_checksum of bytes [0, trailer_offset).
  std::uint64_t body_checksum = 0;
};

/// Whether parse_state hashes the bytes before the trailer.
enum class body_check : std::uint8_t {
  verify,    ///< against the trailer's checksum
  deferred,  ///< not: the caller hashes them while it copies them (body_checksum to compare)
};

/// Checks a state buffer and returns its parts. Errors (errc::data_loss) name the field and its
/// byte offset, or the byte range: a short buffer, a wrong magic or version, a header that fails
/// its checksum, sizes or shard ranges that contradict each other, a trailer that is not one, and
/// (with body_check::verify) bytes that fail the trailer's checksum.
[[nodiscard]] expected<state_view> parse_state(std::span<const std::byte> buffer,
                                               body_check check = body_check::verify);

/// The error parse_state gives for a body that hashes to `got`; for a reader that checks it
/// itself (body_check::deferred).
[[nodiscard]] status body_checksum_error(const state_header& h, std::uint64_t got, std::uint64_t stored);

/// The byte offset of a header field by name ("width" → 24), for messages and tests.
/// REQUIRES: `field` is one of the header's fields.
[[nodiscard]] std::size_t state_field_offset(std::string_view field);

}  // namespace rekindle::training
