#pragma once

#include <string_view>

#include "common/expected.hpp"

namespace rekindle {

/// Log verbosity, from most to least verbose.
enum class log_level { trace, debug, info, warn, error, off };

/// Parses "trace", "debug", "info", "warn", "error" or "off".
expected<log_level> parse_log_level(std::string_view text);
std::string_view to_string(log_level level) noexcept;

/// Sets up the process-wide logger: one line per event on stderr,
/// `2026-11-30T07:31:02.123 I rekindled[n0] message`, at `level` and above.
///
/// Messages are written as `what key=value ...` so they can be grepped. Call once from main();
/// libraries log through spdlog's default logger and never configure it.
void init_logging(std::string_view process_name, log_level level);

}  // namespace rekindle
