#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/expected.hpp"

namespace rekindle {

/// Everything a program reads from a path it was given goes through here. The path must name a
/// regular file (a directory, a FIFO or a device such as /dev/zero is refused at once, never read
/// or waited on) of at most `max_bytes`. `what` names it in errors, which leave the path to the
/// caller: "cannot read configuration file: No such file or directory", "is a directory, not a
/// configuration file", "is 2.00 GiB; the limit for a configuration file is 16.0 MiB".
/// Codes: not_found (missing), invalid_argument (not a regular file, too large), io_error.
expected<std::string> read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes,
                                        std::string_view what);

/// Replaces the file at `path` with `text` so that a reader sees the old content or the new, never
/// a part: written to "<path>.tmp", then renamed over it. Errors: io_error naming the path.
status write_file_atomically(const std::filesystem::path& path, std::string_view text);

/// The limits of the files rekindle reads, in one place.
namespace file_limits {
inline constexpr std::uint64_t config = 16ull << 20;    // configurations, cluster and model files, plans
inline constexpr std::uint64_t token = 64ull << 10;     // token files
inline constexpr std::uint64_t trace = 1ull << 30;      // fault traces and the records they come from
inline constexpr std::uint64_t manifest = 64ull << 20;  // checkpoint manifests
inline constexpr std::uint64_t small = 4ull << 10;      // files rekindle writes itself (addresses)
}  // namespace file_limits

}  // namespace rekindle
