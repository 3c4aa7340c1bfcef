#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rekindle::storage {

/// xxHash64 (seed 0) of `bytes`: the checksum of every record, slot half and shard file.
[[nodiscard]] std::uint64_t xxh64(std::span<const std::byte> bytes) noexcept;

/// Copies `src` to the front of `dst` in cache-sized chunks, hashing each chunk while it is still
/// in cache, so copying and checksumming cost one pass over memory. Returns the xxHash64 of `src`.
/// REQUIRES: dst.size() >= src.size().
[[nodiscard]] std::uint64_t copy_and_hash(std::span<std::byte> dst, std::span<const std::byte> src) noexcept;

/// An xxHash64 computed piece by piece; equal to xxh64() of the concatenated pieces.
///
/// Thread-safety: a value; one object is used by one thread at a time.
class xxh64_stream {
 public:
  xxh64_stream() noexcept;
  void update(std::span<const std::byte> bytes) noexcept;
  [[nodiscard]] std::uint64_t digest() const noexcept;

 private:
  // Storage for XXH64_state_t (88 bytes in xxHash 0.8), kept opaque so users need no xxhash.h.
  alignas(8) unsigned char state_[88];
};

}  // namespace rekindle::storage
