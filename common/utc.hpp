#pragma once

#include <cstdint>
#include <string>

namespace rekindle {

/// `unix_ms` (milliseconds since the Unix epoch) as UTC with milliseconds: "2026-11-30T14:04:31.123Z".
std::string utc_text(std::int64_t unix_ms);

}  // namespace rekindle
