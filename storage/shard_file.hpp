#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"
#include "common/ids.hpp"

/// Checkpoint shard files: one file per rank and step, written durably and read back verified.
///
/// File format (little-endian; docs/STORAGE.md, "Shard files"):
///
/// | offset | field |
/// |---|---|
/// | 0 | magic "RKSHARD\0" |
/// | 8 | version (u32, 2) |
/// | 12 | header_bytes (u32, 64) |
/// | 16 | step (u64) |
/// | 24 | rank (u32) |
/// | 28 | reserved (u32, 0) |
/// | 32 | payload length (u64) |
/// | 40 | payload checksum (u64): snapshot_checksum, XXH3-64 (common/checksum.hpp) |
/// | 48 | reserved (u64, 0) |
/// | 56 | xxHash64 of bytes [0, 56) |
/// | 64 | payload (length bytes); the file ends right after it |
///
/// Durability protocol of `write_shard` (a crash at any point leaves either no file named NAME or
/// a complete, synced one; a `.tmp` leftover is removed by `collect_garbage`):
///   1. Create NAME.tmp in the directory (truncating a leftover) and write a zeroed header.
///   2. Write the payload, hashing it on the way (unless its checksum is known); then write the
///      real header at offset 0.
///      Sync point `after_write`.
///   3. fsync the file. Sync point `after_fsync`.
///   4. rename NAME.tmp to NAME. Sync point `after_rename`.
///   5. fsync the directory, so the rename itself survives a power loss.
/// A failure in steps 1–4 removes NAME.tmp and returns the error; one in step 5 (or a hook error
/// at `after_rename`) leaves the complete NAME in place and returns the error, and the caller
/// does not commit a manifest naming it.
///
/// Thread-safety: the functions keep no state. Writes of distinct names and reads may run
/// concurrently, in threads or processes; `collect_garbage` must not run while a shard is being
/// written into the same directory (it would remove the write's NAME.tmp).

namespace rekindle::storage {

/// Where `write_shard` calls `shard_file_hooks::at`.
enum class shard_sync_point : std::uint8_t {
  /// The whole file is written, not yet synced (step 2).
  after_write,
  /// The file is synced, still named NAME.tmp (step 3).
  after_fsync,
  /// NAME.tmp is renamed to NAME, the directory not yet synced (step 4).
  after_rename,
};

/// "after_write", "after_fsync" or "after_rename".
[[nodiscard]] std::string_view to_string(shard_sync_point p) noexcept;
/// Parses the names `to_string` returns.
[[nodiscard]] expected<shard_sync_point> parse_shard_sync_point(std::string_view text);

/// Failure injection for tests: fault tests stop or kill a writer at a sync point, unit tests make
/// a write fail as a full disk would. Production code passes no hooks.
///
/// Thread-safety: called on the thread that runs `write_shard`.
class shard_file_hooks {
 public:
  virtual ~shard_file_hooks() = default;
  /// Called when a write reaches `point`; `file` is the file as it is named at that point. A
  /// non-ok status fails the write there. Default: ok.
  [[nodiscard]] virtual status at(shard_sync_point point, const std::filesystem::path& file);
  /// Called before each write(2) of `size` bytes at `offset` of NAME.tmp. A non-zero errno (ENOSPC,
  /// EIO, ...) makes that write fail with it after writing `partial` of the bytes (a short write).
  /// Default: 0.
  [[nodiscard]] virtual int before_write(std::uint64_t offset, std::size_t size, std::size_t& partial);
};

/// What a shard file's header says.
struct shard_info {
  step_t step;
  rank_id rank;
  /// Payload bytes.
  std::uint64_t size = 0;
  /// snapshot_checksum of the payload.
  std::uint64_t checksum = 0;

  bool operator==(const shard_info&) const = default;
};

/// What a reader expects of a shard (from its checkpoint manifest); unset fields are not checked.
struct shard_expectation {
  std::optional<step_t> step;
  std::optional<rank_id> rank;
  std::optional<std::uint64_t> size;
  std::optional<std::uint64_t> checksum;
};

struct shard_write_options {
  /// Failure injection; must outlive the call. Default: none.
  shard_file_hooks* hooks = nullptr;
  /// The payload's known checksum (a snapshot's). When set, a payload that hashes differently
  /// while it is written (its memory changed underneath) fails with aborted and leaves no file.
  std::optional<std::uint64_t> expected_checksum;
  /// The payload's checksum, computed as it was copied into memory that nothing else writes: the
  /// payload is then not hashed again (one pass over the bytes less). Default: none.
  std::optional<std::uint64_t> known_checksum;
};

/// Bytes of a shard file's header.
inline constexpr std::size_t shard_header_bytes = 64;

/// The file name of the shard of `rank` at `step`: "ckpt-000000000042-r000003.shard".
[[nodiscard]] std::string shard_file_name(step_t step, rank_id rank);

/// Writes `payload` durably as `dir`/`name` (the protocol above). `name` must be a plain file name
/// ending in ".shard"; an existing NAME is replaced. Errors: invalid_argument (bad name),
/// resource_exhausted (ENOSPC, EFBIG, EDQUOT), permission_denied (EACCES, EPERM, EROFS),
/// not_found (no directory), io_error, aborted (expected_checksum differs), or a hook's status.
/// Every error names the file, the step of the protocol and the byte offset of a failed write.
[[nodiscard]] expected<shard_info> write_shard(const std::filesystem::path& dir, std::string_view name, step_t step,
                                               rank_id rank, std::span<const std::byte> payload,
                                               const shard_write_options& options = {});

/// Checks a shard file completely (header, size, payload checksum) without keeping the payload.
/// Errors: not_found, permission_denied, io_error, and data_loss naming the file and what is wrong:
/// "truncated at byte N", "wrong magic", "header checksum mismatch", "payload checksum mismatch",
/// "N extra bytes", or a field that differs from `expect`.
[[nodiscard]] expected<shard_info> verify_shard(const std::filesystem::path& file, const shard_expectation& expect = {});

/// Reads and verifies a shard file, returning its payload in `payload` (resized; untouched on
/// error). Errors: as verify_shard.
[[nodiscard]] expected<shard_info> read_shard(const std::filesystem::path& file, std::vector<std::byte>& payload,
                                              const shard_expectation& expect = {});

/// What `collect_garbage` removed.
struct shard_gc_report {
  /// File names removed, sorted.
  std::vector<std::string> removed;
  std::uint64_t bytes = 0;
};

/// Removes from `dir` every "*.tmp" file and every "*.shard" file not in `referenced` (file names
/// of the shards that committed or in-progress manifests name). Other files are left alone.
/// REQUIRES: no shard is being written into `dir` meanwhile. Errors: not_found, io_error, ...
[[nodiscard]] expected<shard_gc_report> collect_garbage(const std::filesystem::path& dir,
                                                        const std::set<std::string>& referenced);

}  // namespace rekindle::storage
