#pragma once

// Private to config/: reads TOML tables key by key and reports every problem with its place.
// Included only by config/*.cpp (toml++ is a private dependency of rekindle::config).

#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/load.hpp"

namespace rekindle::config::detail {

/// Collects the diagnostics of one source.
///
/// Thread-safety: one context per parse; not shared.
class diagnostics {
 public:
  explicit diagnostics(std::string file) : file_(std::move(file)) {}

  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] diagnostic make(const toml::source_region& where, std::string field, std::string message) const;
  void error(const toml::source_region& where, std::string field, std::string message);
  [[nodiscard]] bool has_errors() const noexcept { return !errors_.empty(); }
  /// Every error, sorted by place.
  [[nodiscard]] std::vector<diagnostic> take_sorted();

 private:
  std::string file_;
  std::vector<diagnostic> errors_;
};

/// A region at line 1, column 1: the place of things that are missing from a file.
toml::source_region file_start();

/// The field a syntax error at `line` (1-based) of `text` belongs to, as the readers name fields
/// ("model.layers", "nodes[2].count"): the key written on that line under the table header above
/// it, or the header itself when the error is in one; empty when the line holds neither (the
/// error is then named by its place alone). Bounded: only the text up to the line is scanned.
std::string field_at_line(std::string_view text, std::size_t line);

/// The diagnostic of a TOML syntax error: its place, the field of that line, and toml++'s reason.
diagnostic syntax_error(std::string_view text, const std::string& file, const toml::parse_error& e);

/// "a table", "an integer", ... for messages.
std::string_view type_name(toml::node_type t);

/// Shortest text of a double that reads back the same.
std::string number_text(double v);

/// Parses "25GB/s", "200Gb/s", "1.5TB/s", "900GiB/s" into bytes per second.
expected<double> parse_bandwidth(std::string_view text);

/// Reads the keys of one table, remembers which were asked for, and reports the rest as unknown
/// with a "did you mean" among the known ones.
///
/// Thread-safety: a value used by one parse.
class table_reader {
 public:
  /// `path` prefixes fields in messages ("model", "nodes[2]", "types.a100"); `region` is where the
  /// table starts, or the file start when it is absent (`tbl` null).
  table_reader(diagnostics& diag, const toml::table* tbl, std::string path, toml::source_region region);

  [[nodiscard]] std::string field(std::string_view key) const;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const toml::table* table() const noexcept { return tbl_; }

  /// The node of `key`, marking the key as known.
  const toml::node* get(std::string_view key);
  /// Marks `key` as known without reading it.
  void allow(std::string_view key);
  /// Where `key`'s value is, or the table when the key is absent.
  [[nodiscard]] toml::source_region where(std::string_view key) const;
  /// Where the table starts.
  [[nodiscard]] const toml::source_region& region() const noexcept { return region_; }
  [[nodiscard]] bool has(std::string_view key) const;

  void error(std::string_view key, std::string message);
  /// Reports that a required key is missing, at the table.
  void missing(std::string_view key, std::string hint = {});

  std::optional<std::int64_t> integer(std::string_view key, std::int64_t min, std::int64_t max);
  std::optional<double> number(std::string_view key, double min, double max);
  std::optional<bool> boolean(std::string_view key);
  std::optional<std::string> string(std::string_view key);
  /// A size: a byte count or a string such as "80GB" or "16GiB".
  std::optional<double> size(std::string_view key, double min, double max);
  /// A bandwidth string such as "25GB/s" or "200Gb/s", in bytes per second.
  std::optional<double> bandwidth(std::string_view key, double min, double max);
  /// A duration string such as "5us" or "3.1ms", in seconds.
  std::optional<double> duration(std::string_view key, double min, double max);
  /// An array of strings; every element's type is checked.
  std::optional<std::vector<std::string>> string_array(std::string_view key);
  /// An array of integers in [min, max].
  std::optional<std::vector<std::int64_t>> integer_array(std::string_view key, std::int64_t min, std::int64_t max);
  /// One of `choices`; anything else is reported with the choices and a "did you mean".
  std::optional<std::string> choice(std::string_view key, const std::vector<std::string>& choices);

  /// Reports every key of the table that nobody asked for.
  void finish();

 private:
  void type_error(std::string_view key, const toml::node& n, std::string_view wanted);
  void range_error(std::string_view key, const std::string& got, const std::string& min, const std::string& max);

  diagnostics& diag_;
  const toml::table* tbl_;
  std::string path_;
  toml::source_region region_;
  std::vector<std::string> keys_;
};

/// The table under `key` of `parent`, reporting a value of another type to `sink` (anything with
/// `error(region, field, message)`, such as `diagnostics`). Null when absent or wrong.
template <class Sink>
const toml::table* sub_table(Sink& sink, const toml::table& parent, std::string_view key, std::string_view field) {
  const auto* n = parent.get(key);
  if (n == nullptr)
    return nullptr;
  if (!n->is_table()) {
    sink.error(n->source(), std::string{field},
               "expected a table ([" + std::string{field} + "]), got " + std::string{type_name(n->type())});
    return nullptr;
  }
  return n->as_table();
}

/// The array of tables under `key` ([[key]]), reporting a value of another type.
const toml::array* table_array(diagnostics& diag, const toml::table& parent, std::string_view key,
                               std::string_view field);

/// Reports every key of `root` that is not in `known` as an unknown table or key.
void check_top_level(diagnostics& diag, const toml::table& root, const std::vector<std::string>& known);

}  // namespace rekindle::config::detail
