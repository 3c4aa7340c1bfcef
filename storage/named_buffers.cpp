#include "storage/named_buffers.hpp"

#include <cstring>
#include <set>
#include <string>

#include "common/checksum.hpp"

namespace rekindle::storage {

namespace {

constexpr char magic[8] = {'R', 'K', 'N', 'A', 'M', 'E', 'D', '1'};
constexpr std::uint64_t prefix_bytes = 24;
constexpr std::uint64_t entry_fixed = 24;
constexpr std::uint64_t data_align = 64;

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

template <class T>
void put(std::vector<std::byte>& out, std::size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}

template <class T>
T get(std::span<const std::byte> in, std::uint64_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

struct layout {
  std::vector<std::byte> directory;  // padded to data_align
  std::vector<std::uint64_t> offsets;
  std::uint64_t total = 0;
};

expected<layout> plan(std::span<const named_buffer> buffers) {
  if (buffers.size() > max_named_buffers)
    return status{errc::invalid_argument, std::to_string(buffers.size()) + " buffers: at most " +
                                              std::to_string(max_named_buffers) + " fit a snapshot"};
  std::set<std::string_view> names;
  std::uint64_t dir = prefix_bytes;
  for (const auto& b : buffers) {
    if (b.name.empty())
      return status{errc::invalid_argument, "a buffer has an empty name"};
    if (b.name.size() > max_buffer_name)
      return status{errc::invalid_argument, "the buffer name '" + std::string{b.name.substr(0, 64)} + "...' is longer than " +
                                                std::to_string(max_buffer_name) + " bytes"};
    if (!names.insert(b.name).second)
      return status{errc::invalid_argument, "the buffer name '" + std::string{b.name} + "' is given twice"};
    dir += entry_fixed + round_up(b.name.size(), 8);
  }
  layout l;
  l.directory.assign(round_up(dir, data_align), std::byte{0});
  std::memcpy(l.directory.data(), magic, sizeof magic);
  put<std::uint32_t>(l.directory, 8, static_cast<std::uint32_t>(buffers.size()));
  std::uint64_t at = prefix_bytes;
  std::uint64_t data = l.directory.size();
  for (const auto& b : buffers) {
    l.offsets.push_back(data);
    put<std::uint64_t>(l.directory, at, data);
    put<std::uint64_t>(l.directory, at + 8, b.bytes.size());
    put<std::uint32_t>(l.directory, at + 16, static_cast<std::uint32_t>(b.name.size()));
    std::memcpy(l.directory.data() + at + entry_fixed, b.name.data(), b.name.size());
    at += entry_fixed + round_up(b.name.size(), 8);
    data = round_up(data + b.bytes.size(), data_align);
  }
  l.total = buffers.empty() ? l.directory.size() : l.offsets.back() + buffers.back().bytes.size();
  put<std::uint64_t>(l.directory, 16, l.total);
  return l;
}

}  // namespace

expected<std::uint64_t> named_buffers_size(std::span<const named_buffer> buffers) {
  auto l = plan(buffers);
  if (!l)
    return l.error();
  return l->total;
}

expected<std::pair<std::uint64_t, std::uint64_t>> write_named_buffers(std::span<std::byte> dst,
                                                                      std::span<const named_buffer> buffers) {
  auto l = plan(buffers);
  if (!l)
    return l.error();
  if (l->total > dst.size())
    return status{errc::resource_exhausted, "the state takes " + std::to_string(l->total) + " bytes; the slot holds " +
                                                std::to_string(dst.size())};
  snapshot_checksum_stream sum;
  copy_and_checksum(dst, l->directory, sum);
  std::uint64_t end = l->directory.size();
  static constexpr std::byte zeros[data_align] = {};
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto gap = l->offsets[i] - end;  // alignment padding: zeros, hashed like the rest
    if (gap > 0) {
      std::memset(dst.data() + end, 0, gap);
      sum.update(std::span{zeros, gap});
    }
    copy_and_checksum(dst.subspan(l->offsets[i]), buffers[i].bytes, sum);
    end = l->offsets[i] + buffers[i].bytes.size();
  }
  return std::pair{l->total, sum.digest()};
}

expected<std::vector<named_buffer>> read_named_buffers(std::span<const std::byte> bytes) {
  const auto bad = [](std::uint64_t offset, const std::string& what) {
    return status{errc::data_loss, "named buffers, byte " + std::to_string(offset) + ": " + what};
  };
  if (bytes.size() < prefix_bytes || std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    return bad(0, "not a snapshot of named buffers (no RKNAMED1 magic)");
  const auto count = get<std::uint32_t>(bytes, 8);
  if (count > max_named_buffers)
    return bad(8, "count " + std::to_string(count) + " is over " + std::to_string(max_named_buffers));
  const auto total = get<std::uint64_t>(bytes, 16);
  if (total > bytes.size())
    return bad(16, "length " + std::to_string(total) + " is over the " + std::to_string(bytes.size()) + " bytes there");
  std::vector<named_buffer> out;
  out.reserve(count);
  std::set<std::string_view> names;
  std::uint64_t at = prefix_bytes;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (at + entry_fixed > total)
      return bad(at, "entry " + std::to_string(i) + " runs past the end");
    const auto offset = get<std::uint64_t>(bytes, at);
    const auto size = get<std::uint64_t>(bytes, at + 8);
    const auto name_len = get<std::uint32_t>(bytes, at + 16);
    if (name_len == 0 || name_len > max_buffer_name || at + entry_fixed + name_len > total)
      return bad(at + 16, "entry " + std::to_string(i) + ": name length " + std::to_string(name_len) + " is out of range");
    const std::string_view name{reinterpret_cast<const char*>(bytes.data() + at + entry_fixed), name_len};
    if (offset > total || size > total - offset)
      return bad(at, "buffer '" + std::string{name} + "': bytes [" + std::to_string(offset) + ", +" + std::to_string(size) +
                         ") are outside the layout's " + std::to_string(total));
    if (!names.insert(name).second)
      return bad(at + entry_fixed, "buffer '" + std::string{name} + "' appears twice");
    out.push_back({name, bytes.subspan(offset, size)});
    at += entry_fixed + round_up(name_len, 8);
  }
  return out;
}

}  // namespace rekindle::storage
