#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rekindle {

/// xxHash64 (seed 0): the checksum of records and file headers.
[[nodiscard]] std::uint64_t xxh64(std::span<const std::byte> bytes) noexcept;

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

/// The checksum of snapshot bytes (XXH3, 64 bits): a rank's exported state, a slot half, a replica,
/// a state sent for a restore, a checkpoint shard's payload. Chosen for speed on the training path:
/// on this project's machines it hashes cached data at 3-4 times the rate of xxHash64, so copying
/// and hashing together run at about memcpy speed.
[[nodiscard]] std::uint64_t snapshot_checksum(std::span<const std::byte> bytes) noexcept;

/// snapshot_checksum computed piece by piece: equal to it of the concatenated pieces.
///
/// Thread-safety: a value; one object is used by one thread at a time. Not copyable (it holds the
/// hash state, about 600 bytes, on the heap).
class snapshot_checksum_stream {
 public:
  snapshot_checksum_stream();
  ~snapshot_checksum_stream();
  snapshot_checksum_stream(const snapshot_checksum_stream&) = delete;
  snapshot_checksum_stream& operator=(const snapshot_checksum_stream&) = delete;
  void update(std::span<const std::byte> bytes) noexcept;
  /// The checksum of everything so far; more may follow.
  [[nodiscard]] std::uint64_t digest() const noexcept;

 private:
  void* state_;  // XXH3_state_t, 64-byte aligned
};

/// Copies `src` to the front of `dst` in cache-sized chunks, hashing each chunk while it is in
/// cache, so copying and checksumming cost one pass over memory: `stream` takes the bytes. The
/// copy's stores bypass the cache (where the CPU has them), as a large memcpy's do. REQUIRES:
/// dst.size() >= src.size(); `src` does not change meanwhile (the bytes hashed are those copied).
void copy_and_checksum(std::span<std::byte> dst, std::span<const std::byte> src, snapshot_checksum_stream& stream) noexcept;
/// The same for one buffer: returns snapshot_checksum(src).
[[nodiscard]] std::uint64_t copy_and_checksum(std::span<std::byte> dst, std::span<const std::byte> src);

}  // namespace rekindle
