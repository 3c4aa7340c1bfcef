#include "storage/checksum.hpp"

#include <algorithm>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "common/check.hpp"

namespace rekindle::storage {

namespace {

// 256 KiB: the chunk stays in L2 between the copy and the hash.
constexpr std::size_t chunk_bytes = 256 * 1024;

static_assert(sizeof(XXH64_state_t) <= 88, "xxh64_stream::state_ is too small for XXH64_state_t");
static_assert(alignof(XXH64_state_t) <= 8, "xxh64_stream::state_ is under-aligned for XXH64_state_t");

XXH64_state_t* as_state(unsigned char* p) noexcept { return reinterpret_cast<XXH64_state_t*>(p); }
const XXH64_state_t* as_state(const unsigned char* p) noexcept { return reinterpret_cast<const XXH64_state_t*>(p); }

}  // namespace

std::uint64_t xxh64(std::span<const std::byte> bytes) noexcept {
  return XXH64(bytes.data(), bytes.size(), 0);
}

std::uint64_t copy_and_hash(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
  RK_CHECK_GE(dst.size(), src.size(), "copy_and_hash: destination too small");
  xxh64_stream h;
  for (std::size_t at = 0; at < src.size(); at += chunk_bytes) {
    const std::size_t n = std::min(chunk_bytes, src.size() - at);
    std::memcpy(dst.data() + at, src.data() + at, n);
    h.update(std::span<const std::byte>{dst.data() + at, n});
  }
  return h.digest();
}

xxh64_stream::xxh64_stream() noexcept {
  std::memset(state_, 0, sizeof state_);
  XXH64_reset(as_state(state_), 0);
}

void xxh64_stream::update(std::span<const std::byte> bytes) noexcept {
  XXH64_update(as_state(state_), bytes.data(), bytes.size());
}

std::uint64_t xxh64_stream::digest() const noexcept { return XXH64_digest(as_state(state_)); }

}  // namespace rekindle::storage
