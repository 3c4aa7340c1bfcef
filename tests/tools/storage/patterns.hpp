#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

/// Contents that are functions of their position, shared by storage_tool (which writes them) and
/// the tests that read them back after killing it: any torn, stale or mixed read shows.

namespace rekindle::testing {

/// The 8-byte word `index` of the contents keyed by `key`.
inline std::uint64_t pattern_word(std::uint64_t key, std::uint64_t index) noexcept {
  std::uint64_t z = key * 0x9e3779b97f4a7c15ull + index * 0xbf58476d1ce4e5b9ull + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline void fill_pattern(std::uint64_t key, std::span<std::byte> out) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const std::uint64_t w = pattern_word(key, i / 8);
    std::memcpy(out.data() + i, &w, 8);
  }
  if (i < out.size()) {
    const std::uint64_t w = pattern_word(key, i / 8);
    std::memcpy(out.data() + i, &w, out.size() - i);
  }
}

inline bool pattern_matches(std::uint64_t key, std::span<const std::byte> in) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= in.size(); i += 8) {
    const std::uint64_t w = pattern_word(key, i / 8);
    if (std::memcmp(in.data() + i, &w, 8) != 0)
      return false;
  }
  if (i < in.size()) {
    const std::uint64_t w = pattern_word(key, i / 8);
    return std::memcmp(in.data() + i, &w, in.size() - i) == 0;
  }
  return true;
}

/// A snapshot's length varies with its step, between a quarter of `max_bytes` and all of it.
inline std::size_t snapshot_length(std::uint64_t step, std::size_t max_bytes) noexcept {
  const std::size_t low = max_bytes / 4 == 0 ? 1 : max_bytes / 4;
  return low + static_cast<std::size_t>(pattern_word(step, ~0ull) % (max_bytes - low + 1));
}

inline void fill_snapshot(std::uint64_t step, std::span<std::byte> out) noexcept { fill_pattern(step, out); }

/// True when `data` is exactly the snapshot of `step`: its length and every byte.
inline bool snapshot_matches(std::uint64_t step, std::span<const std::byte> data, std::size_t max_bytes) noexcept {
  return data.size() == snapshot_length(step, max_bytes) && pattern_matches(step, data);
}

inline void fill_shard(std::uint64_t step, std::uint32_t rank, std::span<std::byte> out) noexcept {
  fill_pattern((step << 20) ^ rank ^ 0x5a5a000000000000ull, out);
}

inline bool shard_matches(std::uint64_t step, std::uint32_t rank, std::span<const std::byte> in) noexcept {
  return pattern_matches((step << 20) ^ rank ^ 0x5a5a000000000000ull, in);
}

/// The fields of event number `seq`.
inline std::vector<std::pair<std::string, std::string>> event_fields(std::uint64_t seq) {
  return {{"i", std::to_string(seq)}, {"tag", "t" + std::to_string(seq * 3)}};
}

}  // namespace rekindle::testing
