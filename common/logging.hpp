#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/expected.hpp"

namespace rekindle {

/// Log verbosity, from most to least verbose.
enum class log_level { trace, debug, info, warn, error, off };
/// How a log line is written: for people, or as one JSON object per line for log shippers.
enum class log_format { text, json };

/// Parses "trace", "debug", "info", "warn", "error" or "off".
expected<log_level> parse_log_level(std::string_view text);
std::string_view to_string(log_level level) noexcept;
/// Parses "text" or "json".
expected<log_format> parse_log_format(std::string_view text);
std::string_view to_string(log_format format) noexcept;

/// What every line of this process names besides its message: the node, the rank (a rank's
/// process, once it knows it) and the job epoch it has seen (set by the bridge as it moves on).
void set_log_node(std::string_view node);
void set_log_rank(std::optional<std::uint32_t> rank);
void set_log_epoch(std::uint64_t epoch) noexcept;

/// Sets up the process-wide logger on stderr, at `level` and above. As text:
///
///     2026-11-30T07:31:02.123Z I rekindled[n0] node=n0 epoch=3 message
///
/// (rank=R after the node in a rank's process). As JSON, one object per line:
///
///     {"time":"2026-11-30T07:31:02.123Z","level":"info","process":"rekindled[n0]","node":"n0",
///      "rank":null,"epoch":3,"message":"..."}
///
/// Times are UTC. Messages are written as `what key=value ...` so they can be grepped. Call once
/// from main(); libraries log through spdlog's default logger and never configure it.
void init_logging(std::string_view process_name, log_level level, log_format format = log_format::text);

/// One line as init_logging's sink writes it (without the newline), for tests and tools.
/// `time_ms`: milliseconds since the Unix epoch.
std::string format_log_line(log_format format, std::int64_t time_ms, log_level level, std::string_view process,
                            std::string_view message);

}  // namespace rekindle
