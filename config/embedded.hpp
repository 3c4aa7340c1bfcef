#pragma once

#include <string_view>

namespace rekindle::config {

/// The text of config/examples/local.toml, built into the binaries: the default configuration of
/// `scripts/demo` and of daemons started without `--config`.
std::string_view embedded_default_text() noexcept;

/// The name diagnostics use for the embedded configuration.
inline constexpr std::string_view embedded_default_name = "<embedded config/examples/local.toml>";

}  // namespace rekindle::config
