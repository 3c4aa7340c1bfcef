#include "transport/frame.hpp"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <bit>
#include <cstring>

#include "common/check.hpp"

namespace rekindle::transport {

namespace {

template <class T>
void put(std::byte* at, T v) {
  static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");
  std::memcpy(at, &v, sizeof v);
}

template <class T>
T get(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// Writes the header with a zero checksum; returns its bytes.
std::vector<std::byte> serialize(const frame_header& h) {
  RK_CHECK_LE(h.src_actor.size(), max_actor_name);
  RK_CHECK_LE(h.dst_actor.size(), max_actor_name);
  std::vector<std::byte> out(frame_fixed_size + h.src_actor.size() + h.dst_actor.size());
  std::byte* p = out.data();
  put<std::uint32_t>(p + 0, frame_magic);
  put<std::uint8_t>(p + 4, frame_version);
  put<std::uint8_t>(p + 5, h.flags);
  put<std::uint16_t>(p + 6, h.type);
  put<std::uint64_t>(p + 8, h.epoch);
  put<std::uint32_t>(p + 16, h.src_node);
  put<std::uint32_t>(p + 20, h.dst_node);
  put<std::uint64_t>(p + 24, h.payload_length);
  put<std::uint64_t>(p + 32, 0);
  put<std::uint8_t>(p + 40, static_cast<std::uint8_t>(h.src_actor.size()));
  put<std::uint8_t>(p + 41, static_cast<std::uint8_t>(h.dst_actor.size()));
  put<std::uint16_t>(p + 42, 0);
  std::memcpy(p + frame_fixed_size, h.src_actor.data(), h.src_actor.size());
  std::memcpy(p + frame_fixed_size + h.src_actor.size(), h.dst_actor.data(), h.dst_actor.size());
  return out;
}

std::uint64_t checksum_of(std::span<const std::byte> header_zeroed, std::span<const std::byte> payload) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, header_zeroed.data(), header_zeroed.size());
  if (!payload.empty())
    XXH3_64bits_update(&state, payload.data(), payload.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace

std::string_view to_string(drop_reason r) noexcept {
  switch (r) {
    case drop_reason::none: return "none";
    case drop_reason::truncated: return "truncated";
    case drop_reason::bad_magic: return "bad_magic";
    case drop_reason::bad_version: return "bad_version";
    case drop_reason::bad_header: return "bad_header";
    case drop_reason::oversize: return "oversize";
    case drop_reason::bad_length: return "bad_length";
    case drop_reason::bad_checksum: return "bad_checksum";
    case drop_reason::unauthenticated: return "unauthenticated";
    case drop_reason::stale_epoch: return "stale_epoch";
    case drop_reason::partitioned: return "partitioned";
  }
  return "unknown";
}

std::vector<std::byte> encode_header(frame_header& h, std::span<const std::byte> payload) {
  h.payload_length = payload.size();
  auto bytes = serialize(h);
  h.checksum = checksum_of(bytes, payload);
  put<std::uint64_t>(bytes.data() + 32, h.checksum);
  return bytes;
}

std::uint64_t frame_checksum(const frame_header& h, std::span<const std::byte> payload) {
  return checksum_of(serialize(h), payload);
}

drop_reason decode_header(std::span<const std::byte> bytes, std::uint64_t max_payload, frame_header& out,
                          std::string* detail) {
  const auto fail = [&](drop_reason r, std::string why) {
    if (detail != nullptr)
      *detail = std::move(why);
    return r;
  };
  if (bytes.size() < 4)
    return fail(drop_reason::truncated, "header of " + std::to_string(bytes.size()) + " bytes ends before the magic");
  const std::byte* p = bytes.data();
  if (get<std::uint32_t>(p) != frame_magic)
    return fail(drop_reason::bad_magic, "byte 0: magic is not RKND");
  if (bytes.size() < frame_fixed_size)
    return fail(drop_reason::truncated, "header of " + std::to_string(bytes.size()) + " bytes is shorter than the " +
                                            std::to_string(frame_fixed_size) + "-byte fixed part");
  if (get<std::uint8_t>(p + 4) != frame_version)
    return fail(drop_reason::bad_version,
                "byte 4: version " + std::to_string(get<std::uint8_t>(p + 4)) + ", this build speaks " +
                    std::to_string(frame_version));
  if (get<std::uint16_t>(p + 42) != 0)
    return fail(drop_reason::bad_header, "byte 42: reserved field is not zero");
  const std::size_t src_len = get<std::uint8_t>(p + 40);
  const std::size_t dst_len = get<std::uint8_t>(p + 41);
  if (src_len > max_actor_name || dst_len > max_actor_name)
    return fail(drop_reason::bad_header, "byte 40: actor name longer than 64 bytes");
  if (bytes.size() != frame_fixed_size + src_len + dst_len)
    return fail(bytes.size() < frame_fixed_size + src_len + dst_len ? drop_reason::truncated : drop_reason::bad_header,
                "header holds " + std::to_string(bytes.size()) + " bytes, its names need " +
                    std::to_string(frame_fixed_size + src_len + dst_len));
  const auto payload_length = get<std::uint64_t>(p + 24);
  if (payload_length > max_payload)
    return fail(drop_reason::oversize, "byte 24: payload of " + std::to_string(payload_length) +
                                           " bytes exceeds the limit of " + std::to_string(max_payload));
  out.flags = get<std::uint8_t>(p + 5);
  out.type = get<std::uint16_t>(p + 6);
  out.epoch = get<std::uint64_t>(p + 8);
  out.src_node = get<std::uint32_t>(p + 16);
  out.dst_node = get<std::uint32_t>(p + 20);
  out.payload_length = payload_length;
  out.checksum = get<std::uint64_t>(p + 32);
  const char* names = reinterpret_cast<const char*>(p + frame_fixed_size);
  out.src_actor.assign(names, src_len);
  out.dst_actor.assign(names + src_len, dst_len);
  return drop_reason::none;
}

drop_reason check_payload(const frame_header& h, std::span<const std::byte> payload) {
  if (payload.size() != h.payload_length)
    return drop_reason::bad_length;
  if (frame_checksum(h, payload) != h.checksum)
    return drop_reason::bad_checksum;
  return drop_reason::none;
}

}  // namespace rekindle::transport
