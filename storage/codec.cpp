#include "storage/codec.hpp"

#include <cstdio>
#include <cstring>

#include "common/checksum.hpp"

namespace rekindle::storage::detail {

namespace {

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= std::uint64_t{static_cast<unsigned char>(in[at + static_cast<std::size_t>(i)])} << (8 * i);
  return v;
}

std::span<const std::byte> as_bytes(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

record_writer::record_writer(record_type type, std::uint8_t version) {
  out_.push_back(static_cast<char>(type));
  out_.push_back(static_cast<char>(version));
}

void record_writer::u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
void record_writer::u32(std::uint32_t v) { put_le(out_, v, 4); }
void record_writer::u64(std::uint64_t v) { put_le(out_, v, 8); }
void record_writer::i64(std::int64_t v) { put_le(out_, static_cast<std::uint64_t>(v), 8); }

void record_writer::str(std::string_view v) {
  u32(static_cast<std::uint32_t>(v.size()));
  out_.append(v);
}

void record_writer::bytes(std::span<const std::byte> v) {
  u32(static_cast<std::uint32_t>(v.size()));
  out_.append(reinterpret_cast<const char*>(v.data()), v.size());
}

std::string record_writer::finish() {
  put_le(out_, xxh64(as_bytes(out_)), 8);
  return std::exchange(out_, {});
}

expected<record_reader> record_reader::open(std::string_view value, std::string_view key, record_type type,
                                            std::uint8_t max_version) {
  const std::string where = "key '" + std::string{key} + "'";
  if (value.size() < record_overhead)
    return status{errc::data_loss, where + ": value of " + std::to_string(value.size()) +
                                       " bytes is shorter than the smallest record (" +
                                       std::to_string(record_overhead) + " bytes)"};
  const std::size_t body = value.size() - 8;
  const std::uint64_t stored = get_le(value, body, 8);
  const std::uint64_t computed = xxh64(as_bytes(value.substr(0, body)));
  if (stored != computed)
    return status{errc::data_loss, where + " byte " + std::to_string(body) + ": checksum mismatch (stored " +
                                       hex64(stored) + ", computed " + hex64(computed) + " over bytes [0, " +
                                       std::to_string(body) + "))"};
  const auto t = static_cast<std::uint8_t>(value[0]);
  if (t != static_cast<std::uint8_t>(type))
    return status{errc::data_loss, where + " byte 0: record type " + std::to_string(t) + ", expected " +
                                       std::to_string(static_cast<unsigned>(type))};
  const auto version = static_cast<std::uint8_t>(value[1]);
  if (version == 0 || version > max_version)
    return status{errc::data_loss, where + " byte 1: record version " + std::to_string(version) +
                                       " is not one this build reads (1.." + std::to_string(max_version) + ")"};
  return record_reader{value.substr(2, body - 2), std::string{key}, version};
}

bool record_reader::need(std::size_t n, std::string_view field) {
  if (!error_.ok())
    return false;
  last_at_ = at_;
  if (payload_.size() - at_ < n) {
    error_ = status{errc::data_loss, "key '" + key_ + "' byte " + std::to_string(at_ + 2) + ": field '" +
                                         std::string{field} + "' is truncated (needs " + std::to_string(n) +
                                         " bytes, " + std::to_string(payload_.size() - at_) + " left)"};
    return false;
  }
  return true;
}

std::uint8_t record_reader::u8(std::string_view field) {
  if (!need(1, field))
    return 0;
  return static_cast<std::uint8_t>(get_le(payload_, at_++, 1));
}

std::uint32_t record_reader::u32(std::string_view field) {
  if (!need(4, field))
    return 0;
  const auto v = static_cast<std::uint32_t>(get_le(payload_, at_, 4));
  at_ += 4;
  return v;
}

std::uint64_t record_reader::u64(std::string_view field) {
  if (!need(8, field))
    return 0;
  const auto v = get_le(payload_, at_, 8);
  at_ += 8;
  return v;
}

std::int64_t record_reader::i64(std::string_view field) { return static_cast<std::int64_t>(u64(field)); }

std::string record_reader::str(std::string_view field) {
  const std::size_t start = at_;
  const std::uint32_t n = u32(field);
  if (!need(n, field))
    return {};
  std::string v{payload_.substr(at_, n)};
  at_ += n;
  last_at_ = start;
  return v;
}

std::vector<std::byte> record_reader::bytes(std::string_view field) {
  const std::size_t start = at_;
  const std::uint32_t n = u32(field);
  if (!need(n, field))
    return {};
  const auto* p = reinterpret_cast<const std::byte*>(payload_.data() + at_);
  std::vector<std::byte> v{p, p + n};
  at_ += n;
  last_at_ = start;
  return v;
}

std::uint32_t record_reader::count(std::string_view field, std::size_t min_entry_bytes) {
  const std::uint32_t n = u32(field);
  if (!error_.ok())
    return 0;
  const std::size_t left = payload_.size() - at_;
  if (min_entry_bytes > 0 && n > left / min_entry_bytes) {
    error_ = status{errc::data_loss, "key '" + key_ + "' byte " + std::to_string(last_at_ + 2) + ": field '" +
                                         std::string{field} + "' counts " + std::to_string(n) +
                                         " entries but only " + std::to_string(left) + " bytes follow"};
    return 0;
  }
  return n;
}

void record_reader::fail(std::string_view field, std::string_view what) {
  if (!error_.ok())
    return;
  error_ = status{errc::data_loss, "key '" + key_ + "' byte " + std::to_string(last_at_ + 2) + ": field '" +
                                       std::string{field} + "': " + std::string{what}};
}

status record_reader::finish() {
  if (!error_.ok())
    return error_;
  if (at_ != payload_.size())
    return status{errc::data_loss, "key '" + key_ + "' byte " + std::to_string(at_ + 2) + ": " +
                                       std::to_string(payload_.size() - at_) +
                                       " unexpected bytes after the last field"};
  return {};
}

void put_be64(std::string& out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_be32(std::string& out, std::uint32_t v) {
  for (int i = 3; i >= 0; --i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_be64(std::string_view in) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i)
    v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

std::uint32_t get_be32(std::string_view in) noexcept {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i)
    v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

void store_le64(std::byte* out, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

void store_le32(std::byte* out, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

std::uint64_t load_le64(const std::byte* in) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | std::to_integer<std::uint64_t>(in[i]);
  return v;
}

std::uint32_t load_le32(const std::byte* in) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | std::to_integer<std::uint32_t>(in[i]);
  return v;
}

std::string hex64(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace rekindle::storage::detail
