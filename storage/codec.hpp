#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"

/// The binary encoding of state-store values (private to storage/).
///
/// Every value is one record:
///
///   byte 0        record type (u8, a `record_type`)
///   byte 1        version of that type's payload (u8)
///   bytes 2..n-8  payload: fields in a fixed order; integers little-endian; strings and byte
///                 strings as a u32 length then the bytes; lists as a u32 count then the entries
///   bytes n-8..n  xxHash64 (seed 0) of bytes [0, n-8), little-endian
///
/// Decoding checks the size, the checksum, the type and the version before any field, then every
/// field's bounds; an error names the key, the byte offset inside the value and the field.

namespace rekindle::storage::detail {

/// What a record holds. Stored in byte 0 of every value; never renumber.
enum class record_type : std::uint8_t {
  store_format = 1,
  job = 2,
  epoch = 3,
  membership = 4,
  rank = 5,
  restarts = 6,
  checkpoint = 7,
  event = 8,
  replica_position = 9,
};

/// Bytes of a record around its payload: type, version, checksum.
inline constexpr std::size_t record_overhead = 2 + 8;

/// Builds one record.
///
/// Thread-safety: a value; one object is used by one thread at a time.
class record_writer {
 public:
  record_writer(record_type type, std::uint8_t version);

  void u8(std::uint8_t v);
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void i64(std::int64_t v);
  void str(std::string_view v);
  void bytes(std::span<const std::byte> v);

  /// Appends the checksum and returns the record. The writer is empty afterwards.
  [[nodiscard]] std::string finish();

 private:
  std::string out_;
};

/// Reads the fields of one record in order. The first failure sticks: later reads return zeros and
/// `finish()` returns the error naming the place.
///
/// Thread-safety: a value that views the record's bytes; one thread at a time, and the bytes must
/// outlive it.
class record_reader {
 public:
  /// Checks size, checksum, type and version of `value` stored at `key` (shown in errors).
  /// Errors: errc::data_loss.
  [[nodiscard]] static expected<record_reader> open(std::string_view value, std::string_view key,
                                                    record_type type, std::uint8_t max_version);

  /// The payload version stored in the record.
  [[nodiscard]] std::uint8_t version() const noexcept { return version_; }

  std::uint8_t u8(std::string_view field);
  std::uint32_t u32(std::string_view field);
  std::uint64_t u64(std::string_view field);
  std::int64_t i64(std::string_view field);
  std::string str(std::string_view field);
  std::vector<std::byte> bytes(std::string_view field);
  /// A list length whose entries take at least `min_entry_bytes` each; fails when the rest of the
  /// payload cannot hold that many, so a bad count never allocates.
  std::uint32_t count(std::string_view field, std::size_t min_entry_bytes);

  /// Fails the read at the field just read (e.g. an enum value out of range).
  void fail(std::string_view field, std::string_view what);

  [[nodiscard]] bool ok() const noexcept { return error_.ok(); }
  /// The first error, or an error when payload bytes are left over; ok otherwise.
  [[nodiscard]] status finish();

 private:
  record_reader(std::string_view payload, std::string key, std::uint8_t version)
      : payload_(payload), key_(std::move(key)), version_(version) {}
  bool need(std::size_t n, std::string_view field);

  std::string_view payload_;
  std::size_t at_ = 0;       // offset in payload_
  std::size_t last_at_ = 0;  // offset of the field read last
  std::string key_;
  std::uint8_t version_;
  status error_;
};

/// Appends `v` as 8 big-endian bytes, so keys sort in numeric order.
void put_be64(std::string& out, std::uint64_t v);
void put_be32(std::string& out, std::uint32_t v);
/// Reads 8 / 4 big-endian bytes. REQUIRES: enough bytes.
[[nodiscard]] std::uint64_t get_be64(std::string_view in) noexcept;
[[nodiscard]] std::uint32_t get_be32(std::string_view in) noexcept;

/// Writes `v` little-endian into `out[0..8)` / `out[0..4)`; reads it back.
void store_le64(std::byte* out, std::uint64_t v) noexcept;
void store_le32(std::byte* out, std::uint32_t v) noexcept;
[[nodiscard]] std::uint64_t load_le64(const std::byte* in) noexcept;
[[nodiscard]] std::uint32_t load_le32(const std::byte* in) noexcept;

/// "0x" and 16 hex digits.
[[nodiscard]] std::string hex64(std::uint64_t v);

}  // namespace rekindle::storage::detail
