#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/expected.hpp"
#include "common/ids.hpp"
#include "storage/state_store.hpp"

/// The manifest file beside a checkpoint's shards, "ckpt-<step>.manifest.json", for tools that read
/// a checkpoint directory alone (`rekindle checkpoint list|verify|export`, a copy elsewhere). The
/// supervisor writes it when the checkpoint commits; its state store keeps the copy it restores
/// from (docs/STORAGE.md).
///
///     {"step": 40, "world_size": 4, "layout_version": 2,
///      "shards": [{"rank": 0, "file": "ckpt-000000000040-r000000.shard", "size": 812, "checksum": 99}, ...]}
namespace rekindle::storage {

/// A world larger than any job rekindle runs: the most ranks a manifest may name.
inline constexpr std::uint64_t max_manifest_world = 1u << 20;

/// "ckpt-000000000042.manifest.json".
[[nodiscard]] std::string manifest_file_name(step_t step);

/// The file's text for `m` (its step, world, layout version and shards).
[[nodiscard]] std::string manifest_file_text(const checkpoint_manifest& m);

/// Reads a manifest's text; errors (invalid_argument) start with `where` and name the field: not
/// JSON, nested deeper than 16, a field missing or not a whole number, world_size not 1 to
/// max_manifest_world, more shards than ranks, a rank not below world_size, a shard file that is
/// not a bare file name (a path could reach outside the checkpoint's directory). The result is
/// marked committed (only committed checkpoints have a manifest file).
[[nodiscard]] expected<checkpoint_manifest> parse_manifest_file(std::string_view text, const std::string& where);

/// Reads the manifest file at `file` (a regular file of at most file_limits::manifest bytes).
[[nodiscard]] expected<checkpoint_manifest> read_manifest_file(const std::filesystem::path& file);

/// Writes it into `dir` atomically (a reader sees the old file or the new one, never a part).
[[nodiscard]] status write_manifest_file(const std::filesystem::path& dir, const checkpoint_manifest& m);

}  // namespace rekindle::storage
