#include "training/state.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <sstream>
#include <tuple>
#include <string>

#include "common/check.hpp"
#include "common/checksum.hpp"

namespace rekindle::training {

namespace {

constexpr std::array<char, 8> magic = {'R', 'K', 'S', 'T', 'A', 'T', 'E', '\0'};
constexpr std::array<char, 8> trailer_magic = {'R', 'K', 'S', 'T', 'E', 'N', 'D', '\0'};
constexpr std::size_t header_checksum_offset = 160;

struct field {
  std::string_view name;
  std::size_t offset;
  std::size_t size;
};

constexpr std::array<field, 26> fields = {{
    {"magic", 0, 8},
    {"version", 8, 4},
    {"header_bytes", 12, 4},
    {"layers", 16, 4},
    {"heads", 20, 4},
    {"width", 24, 4},
    {"seq_len", 28, 4},
    {"vocab", 32, 4},
    {"world_size", 36, 4},
    {"rank", 40, 4},
    {"reserved", 44, 4},
    {"param_count", 48, 8},
    {"padded_count", 56, 8},
    {"shard_begin", 64, 8},
    {"shard_end", 72, 8},
    {"step", 80, 8},
    {"seed", 88, 8},
    {"data_fingerprint", 96, 8},
    {"params_offset", 104, 8},
    {"m_offset", 112, 8},
    {"v_offset", 120, 8},
    {"total_bytes", 128, 8},
    {"trailer_offset", 136, 8},
    {"reserved2", 144, 8},
    {"reserved3", 152, 8},
    {"header_checksum", 160, 8},
}};

constexpr std::uint64_t align64(std::uint64_t x) noexcept {
  return (x + 63) / 64 * 64;
}

template <class U>
void put(std::span<std::byte> out, std::string_view name, U value) noexcept {
  // Little-endian on every platform rekindle builds for; memcpy keeps it alignment-free.
  std::memcpy(out.data() + state_field_offset(name), &value, sizeof value);
}

template <class U>
U get(std::span<const std::byte> in, std::string_view name) noexcept {
  U value;
  std::memcpy(&value, in.data() + state_field_offset(name), sizeof value);
  return value;
}

std::string hex(std::uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

status field_error(std::string_view name, const std::string& what) {
  return status{errc::data_loss,
                "field '" + std::string{name} + "' (byte offset " + std::to_string(state_field_offset(name)) + "): " + what};
}

}  // namespace

std::size_t state_field_offset(std::string_view name) {
  for (const auto& f : fields)
    if (f.name == name)
      return f.offset;
  RK_CHECK(false, "no state header field named '", name, "'");
  return 0;
}

void set_state_layout(state_header& h) noexcept {
  h.params_offset = state_header_bytes;
  h.m_offset = align64(h.params_offset + h.param_count * sizeof(float));
  h.v_offset = align64(h.m_offset + h.shard_size() * sizeof(float));
  h.trailer_offset = align64(h.v_offset + h.shard_size() * sizeof(float));
  h.total_bytes = h.trailer_offset + state_trailer_bytes;
}

void write_state_header(const state_header& h, std::span<std::byte> out) noexcept {
  std::memset(out.data(), 0, state_header_bytes);
  std::memcpy(out.data(), magic.data(), magic.size());
  put(out, "version", h.version);
  put(out, "header_bytes", static_cast<std::uint32_t>(state_header_bytes));
  put(out, "layers", h.layers);
  put(out, "heads", h.heads);
  put(out, "width", h.width);
  put(out, "seq_len", h.seq_len);
  put(out, "vocab", h.vocab);
  put(out, "world_size", h.world_size);
  put(out, "rank", h.rank);
  put(out, "param_count", h.param_count);
  put(out, "padded_count", h.padded_count);
  put(out, "shard_begin", h.shard_begin);
  put(out, "shard_end", h.shard_end);
  put(out, "step", h.step);
  put(out, "seed", h.seed);
  put(out, "data_fingerprint", h.data_fingerprint);
  put(out, "params_offset", h.params_offset);
  put(out, "m_offset", h.m_offset);
  put(out, "v_offset", h.v_offset);
  put(out, "total_bytes", h.total_bytes);
  put(out, "trailer_offset", h.trailer_offset);
  put(out, "header_checksum", xxh64(out.first(header_checksum_offset)));
}

void write_state_trailer(std::uint64_t body_checksum, std::span<std::byte> out) noexcept {
  std::memset(out.data(), 0, state_trailer_bytes);
  std::memcpy(out.data(), trailer_magic.data(), trailer_magic.size());
  std::memcpy(out.data() + 8, &body_checksum, sizeof body_checksum);
}

expected<state_view> parse_state(std::span<const std::byte> buf, body_check check) {
  if (buf.size() < state_header_bytes)
    return status{errc::data_loss, "the buffer holds " + std::to_string(buf.size()) + " bytes, fewer than the " +
                                       std::to_string(state_header_bytes) + "-byte header"};
  if (std::memcmp(buf.data(), magic.data(), magic.size()) != 0)
    return field_error("magic", "not a rekindle training state (expected \"RKSTATE\")");
  state_header h;
  h.version = get<std::uint32_t>(buf, "version");
  if (h.version != state_version)
    return field_error("version", "format version " + std::to_string(h.version) + ", this build reads version " +
                                      std::to_string(state_version));
  if (const auto hb = get<std::uint32_t>(buf, "header_bytes"); hb != state_header_bytes)
    return field_error("header_bytes", "header of " + std::to_string(hb) + " bytes, expected " +
                                           std::to_string(state_header_bytes));
  const std::uint64_t stored = get<std::uint64_t>(buf, "header_checksum");
  const std::uint64_t computed = xxh64(buf.first(header_checksum_offset));
  if (stored != computed)
    return field_error("header_checksum", "header bytes [0, " + std::to_string(header_checksum_offset) +
                                              ") hash to " + hex(computed) + " but " + hex(stored) +
                                              " is stored: the header is corrupt");
  h.layers = get<std::uint32_t>(buf, "layers");
  h.heads = get<std::uint32_t>(buf, "heads");
  h.width = get<std::uint32_t>(buf, "width");
  h.seq_len = get<std::uint32_t>(buf, "seq_len");
  h.vocab = get<std::uint32_t>(buf, "vocab");
  h.world_size = get<std::uint32_t>(buf, "world_size");
  h.rank = get<std::uint32_t>(buf, "rank");
  h.param_count = get<std::uint64_t>(buf, "param_count");
  h.padded_count = get<std::uint64_t>(buf, "padded_count");
  h.shard_begin = get<std::uint64_t>(buf, "shard_begin");
  h.shard_end = get<std::uint64_t>(buf, "shard_end");
  h.step = get<std::uint64_t>(buf, "step");
  h.seed = get<std::uint64_t>(buf, "seed");
  h.data_fingerprint = get<std::uint64_t>(buf, "data_fingerprint");
  h.params_offset = get<std::uint64_t>(buf, "params_offset");
  h.m_offset = get<std::uint64_t>(buf, "m_offset");
  h.v_offset = get<std::uint64_t>(buf, "v_offset");
  h.total_bytes = get<std::uint64_t>(buf, "total_bytes");
  h.trailer_offset = get<std::uint64_t>(buf, "trailer_offset");

  // A header that passes its checksum was written by a writer; these checks catch a writer that
  // disagrees with this reader about the layout.
  if (h.world_size == 0)
    return field_error("world_size", "is 0");
  if (h.rank >= h.world_size)
    return field_error("rank", "rank " + std::to_string(h.rank) + " is not below world_size " +
                                   std::to_string(h.world_size));
  const std::uint64_t padded = (h.param_count + h.world_size - 1) / h.world_size * h.world_size;
  if (h.padded_count != padded)
    return field_error("padded_count", std::to_string(h.padded_count) + " is not param_count " +
                                           std::to_string(h.param_count) + " rounded up to a multiple of " +
                                           std::to_string(h.world_size));
  const std::uint64_t shard = padded / h.world_size;
  if (h.shard_begin != h.rank * shard)
    return field_error("shard_begin", std::to_string(h.shard_begin) + ", rank " + std::to_string(h.rank) +
                                          "'s shard begins at " + std::to_string(h.rank * shard));
  if (h.shard_end != h.shard_begin + shard)
    return field_error("shard_end", std::to_string(h.shard_end) + ", rank " + std::to_string(h.rank) +
                                        "'s shard ends at " + std::to_string(h.shard_begin + shard));
  state_header want = h;
  set_state_layout(want);
  for (const auto& [name, have, expect] :
       {std::tuple{"params_offset", h.params_offset, want.params_offset},
        std::tuple{"m_offset", h.m_offset, want.m_offset}, std::tuple{"v_offset", h.v_offset, want.v_offset},
        std::tuple{"trailer_offset", h.trailer_offset, want.trailer_offset},
        std::tuple{"total_bytes", h.total_bytes, want.total_bytes}}) {
    if (have != expect)
      return field_error(name, std::to_string(have) + ", the layout puts it at " + std::to_string(expect));
  }
  if (buf.size() < h.total_bytes)
    return field_error("total_bytes", "the state needs " + std::to_string(h.total_bytes) +
                                          " bytes but the buffer holds " + std::to_string(buf.size()));

  state_view view;
  view.header = h;
  view.params = buf.subspan(h.params_offset, h.param_count * sizeof(float));
  view.m = buf.subspan(h.m_offset, h.shard_size() * sizeof(float));
  view.v = buf.subspan(h.v_offset, h.shard_size() * sizeof(float));
  const auto trailer = buf.subspan(h.trailer_offset, state_trailer_bytes);
  if (std::memcmp(trailer.data(), trailer_magic.data(), trailer_magic.size()) != 0)
    return status{errc::data_loss, "the trailer (byte " + std::to_string(h.trailer_offset) +
                                       ") is not \"RKSTEND\": the state is cut short or overwritten"};
  std::memcpy(&view.body_checksum, trailer.data() + 8, sizeof view.body_checksum);
  if (check == body_check::verify)
    if (const std::uint64_t got = snapshot_checksum(buf.first(h.trailer_offset)); got != view.body_checksum)
      return body_checksum_error(h, got, view.body_checksum);
  return view;
}

status body_checksum_error(const state_header& h, std::uint64_t got, std::uint64_t stored) {
  return status{errc::data_loss, "bytes [0, " + std::to_string(h.trailer_offset) + ") (header, parameters at " +
                                     std::to_string(h.params_offset) + ", optimizer moments at " +
                                     std::to_string(h.m_offset) + " and " + std::to_string(h.v_offset) +
                                     ") hash to " + hex(got) + " but the trailer (byte " +
                                     std::to_string(h.trailer_offset + 8) + ") stores " + hex(stored) +
                                     ": the data is corrupt"};
}

}  // namespace rekindle::training
