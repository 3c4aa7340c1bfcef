#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"
#include "config/spec.hpp"

namespace rekindle::config {

/// One problem in a configuration file, with the place it was found.
struct diagnostic {
  /// The file (or source name) the problem is in.
  std::string file;
  /// 1-based position of the offending value, key or table; 0 when unknown.
  std::uint32_t line = 0;
  std::uint32_t column = 0;
  /// Dotted field path, e.g. "job.steps" or "nodes[1].name"; empty for syntax errors.
  std::string field;
  std::string message;

  /// "file:line:column: field: message".
  [[nodiscard]] std::string to_string() const;
};

/// The outcome of reading a configuration: a spec when there are no errors.
struct load_result {
  std::optional<spec> value;
  std::vector<diagnostic> errors;
  /// Accepted but worth saying, e.g. authentication disabled.
  std::vector<diagnostic> warnings;

  [[nodiscard]] bool ok() const noexcept { return value.has_value(); }
  /// All errors, one per line.
  [[nodiscard]] std::string error_text() const;
};

/// Reads and validates `text`. `source_name` names it in diagnostics; relative paths inside it
/// resolve against `base_dir`. Collects every error it can find rather than stopping at the first.
load_result parse(std::string_view text, std::string source_name, const std::filesystem::path& base_dir);

/// Reads and validates the file at `path`; relative paths inside resolve against its folder.
load_result load_file(const std::filesystem::path& path);

/// load_file as an expected: the error (errc::invalid_config) lists every diagnostic.
expected<spec> load(const std::filesystem::path& path);

/// The effective configuration as TOML, every field present with its value (defaults filled in).
/// Token contents are never printed. `parse` of the output yields an equal spec.
std::string to_toml(const spec& s);

/// Every field the loader knows, as dotted paths ("job.steps", "nodes.name").
std::vector<std::string> known_fields();

}  // namespace rekindle::config
