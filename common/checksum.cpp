#include "common/checksum.hpp"

#include <algorithm>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/check.hpp"

namespace rekindle {

namespace {

// 256 KiB: the chunk stays in L2 between the copy and the hash.
constexpr std::size_t chunk_bytes = 256 * 1024;

static_assert(sizeof(XXH64_state_t) <= 88, "xxh64_stream::state_ is too small for XXH64_state_t");
static_assert(alignof(XXH64_state_t) <= 8, "xxh64_stream::state_ is under-aligned for XXH64_state_t");

// Copies with stores that bypass the cache where the CPU has them: the destination is not read for
// ownership first, so the copy moves each byte once each way, as a large memcpy does.
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
#if defined(__SSE2__)
  const auto head = std::min<std::size_t>(n, (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  std::size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const auto a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const auto b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const auto c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const auto d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

XXH64_state_t* as_state(unsigned char* p) noexcept { return reinterpret_cast<XXH64_state_t*>(p); }
const XXH64_state_t* as_state(const unsigned char* p) noexcept { return reinterpret_cast<const XXH64_state_t*>(p); }

}  // namespace

std::uint64_t xxh64(std::span<const std::byte> bytes) noexcept { return XXH64(bytes.data(), bytes.size(), 0); }

xxh64_stream::xxh64_stream() noexcept {
  std::memset(state_, 0, sizeof state_);
  XXH64_reset(as_state(state_), 0);
}

void xxh64_stream::update(std::span<const std::byte> bytes) noexcept {
  XXH64_update(as_state(state_), bytes.data(), bytes.size());
}

std::uint64_t xxh64_stream::digest() const noexcept { return XXH64_digest(as_state(state_)); }

std::uint64_t snapshot_checksum(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

snapshot_checksum_stream::snapshot_checksum_stream() : state_(XXH3_createState()) {
  RK_CHECK(state_ != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

snapshot_checksum_stream::~snapshot_checksum_stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void snapshot_checksum_stream::update(std::span<const std::byte> bytes) noexcept {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

std::uint64_t snapshot_checksum_stream::digest() const noexcept {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

void copy_and_checksum(std::span<std::byte> dst, std::span<const std::byte> src, snapshot_checksum_stream& stream) noexcept {
  RK_CHECK_GE(dst.size(), src.size(), "copy_and_checksum: destination too small");
  // Each chunk is hashed first, which brings it into cache, then copied from there with stores
  // that bypass the cache: one read and one write of every byte, as for memcpy alone.
  for (std::size_t at = 0; at < src.size(); at += chunk_bytes) {
    const std::size_t n = std::min(chunk_bytes, src.size() - at);
    stream.update(src.subspan(at, n));
    stream_copy(dst.data() + at, src.data() + at, n);
  }
#if defined(__SSE2__)
  _mm_sfence();  // the streamed stores are visible before anything published after them
#endif
}

std::uint64_t copy_and_checksum(std::span<std::byte> dst, std::span<const std::byte> src) {
  snapshot_checksum_stream s;
  copy_and_checksum(dst, src, s);
  return s.digest();
}

}  // namespace rekindle
