#include "config/toml_reader.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "common/text.hpp"

namespace rekindle::config::detail {

diagnostic diagnostics::make(const toml::source_region& where, std::string field, std::string message) const {
  return diagnostic{file_, static_cast<std::uint32_t>(where.begin.line), static_cast<std::uint32_t>(where.begin.column),
                    std::move(field), std::move(message)};
}

void diagnostics::error(const toml::source_region& where, std::string field, std::string message) {
  errors_.push_back(make(where, std::move(field), std::move(message)));
}

std::vector<diagnostic> diagnostics::take_sorted() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const diagnostic& a, const diagnostic& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  return std::move(errors_);
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// A dotted key as written ("a", "a.b", "\"quoted\""), without spaces around the dots; empty when
// the text is not a key.
std::string key_text(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 256)
    return {};
  std::string out;
  for (char c : s) {
    if (c == ' ' || c == '\t')
      continue;
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '"' || c == '\'')
      out += c;
    else
      return {};
  }
  return out;
}

}  // namespace

std::string field_at_line(std::string_view text, std::size_t line) {
  std::string table;                    // the header in force, as a field path
  std::vector<std::pair<std::string, std::size_t>> arrays;  // [[name]] seen so far, and how often
  std::size_t at = 0;
  for (std::size_t n = 1; n <= line && at <= text.size(); ++n) {
    const auto end = std::min(text.find('\n', at), text.size());
    auto l = trim(text.substr(at, end - at));
    at = end + 1;
    std::string here;
    if (l.starts_with("[[")) {
      const auto close = l.find("]]");
      const auto name = key_text(l.substr(2, close == std::string_view::npos ? l.size() - 2 : close - 2));
      if (name.empty())
        continue;
      auto it = std::find_if(arrays.begin(), arrays.end(), [&](const auto& a) { return a.first == name; });
      if (it == arrays.end())
        it = arrays.insert(arrays.end(), {name, 0});
      else
        ++it->second;
      table = name + "[" + std::to_string(it->second) + "]";
      here = table;
    } else if (l.starts_with("[")) {
      const auto close = l.find(']');
      table = key_text(l.substr(1, close == std::string_view::npos ? l.size() - 1 : close - 1));
      // A sub-table of an array's element ([nodes.extra] after [[nodes]]) continues the element.
      for (const auto& [name, count] : arrays)
        if (table.starts_with(name + "."))
          table = name + "[" + std::to_string(count) + "]" + table.substr(name.size());
      here = table;
    } else if (const auto eq = l.find('='); eq != std::string_view::npos) {
      const auto key = key_text(l.substr(0, eq));
      if (!key.empty())
        here = table.empty() ? key : table + "." + key;
    }
    if (n == line)
      return here;
  }
  return {};
}

diagnostic syntax_error(std::string_view text, const std::string& file, const toml::parse_error& e) {
  const auto& where = e.source();
  return diagnostic{file, static_cast<std::uint32_t>(where.begin.line), static_cast<std::uint32_t>(where.begin.column),
                    field_at_line(text, where.begin.line), "syntax error: " + std::string{e.description()}};
}

toml::source_region file_start() {
  toml::source_region r;
  r.begin = {1, 1};
  r.end = {1, 1};
  return r;
}

std::string_view type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, end);
}

expected<double> parse_bandwidth(std::string_view text) {
  const auto bad = [&] {
    return status{errc::parse_error, "'" + std::string{text} +
                                         "' is not a bandwidth; write a number and a unit, e.g. '25GB/s', "
                                         "'200Gb/s', '1.5TB/s' (units: B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, "
                                         "GiB/s, Mb/s, Gb/s, Tb/s)"};
  };
  const auto t = trim(text);
  std::size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.'))
    ++i;
  const auto digits = t.substr(0, i);
  const auto unit = trim(t.substr(i));
  double value = 0;
  if (digits.empty())
    return bad();
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || ptr != digits.data() + digits.size() || !std::isfinite(value))
    return bad();
  struct unit_scale {
    std::string_view name;
    double scale;
  };
  static constexpr unit_scale units[] = {
      {"B/s", 1},        {"KB/s", 1e3},           {"kB/s", 1e3},          {"MB/s", 1e6},
      {"GB/s", 1e9},     {"TB/s", 1e12},          {"KiB/s", 1024.0},      {"MiB/s", 1048576.0},
      {"GiB/s", 1073741824.0}, {"TiB/s", 1099511627776.0}, {"Mb/s", 1e6 / 8}, {"Mbit/s", 1e6 / 8},
      {"Gb/s", 1e9 / 8}, {"Gbit/s", 1e9 / 8},     {"Tb/s", 1e12 / 8},     {"Tbit/s", 1e12 / 8}};
  for (const auto& u : units)
    if (unit == u.name)
      return value * u.scale;
  return bad();
}

table_reader::table_reader(diagnostics& diag, const toml::table* tbl, std::string path, toml::source_region region)
    : diag_(diag), tbl_(tbl), path_(std::move(path)), region_(region) {}

std::string table_reader::field(std::string_view key) const {
  return path_.empty() ? std::string{key} : path_ + "." + std::string{key};
}

const toml::node* table_reader::get(std::string_view key) {
  allow(key);
  return tbl_ != nullptr ? tbl_->get(key) : nullptr;
}

void table_reader::allow(std::string_view key) {
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
    keys_.emplace_back(key);
}

toml::source_region table_reader::where(std::string_view key) const {
  if (tbl_ != nullptr)
    if (const auto* n = tbl_->get(key))
      return n->source();
  return region_;
}

bool table_reader::has(std::string_view key) const { return tbl_ != nullptr && tbl_->contains(key); }

void table_reader::error(std::string_view key, std::string message) {
  diag_.error(where(key), field(key), std::move(message));
}

void table_reader::missing(std::string_view key, std::string hint) {
  diag_.error(region_, field(key), "missing" + (hint.empty() ? std::string{} : "; " + hint));
}

std::optional<std::int64_t> table_reader::integer(std::string_view key, std::int64_t min, std::int64_t max) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_integer()) {
    type_error(key, *n, "an integer");
    return std::nullopt;
  }
  const std::int64_t v = n->as_integer()->get();
  if (v < min || v > max) {
    range_error(key, std::to_string(v), std::to_string(min), std::to_string(max));
    return std::nullopt;
  }
  return v;
}

std::optional<double> table_reader::number(std::string_view key, double min, double max) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  double v = 0;
  if (n->is_floating_point())
    v = n->as_floating_point()->get();
  else if (n->is_integer())
    v = static_cast<double>(n->as_integer()->get());
  else {
    type_error(key, *n, "a number");
    return std::nullopt;
  }
  if (!(v >= min && v <= max)) {
    range_error(key, number_text(v), number_text(min), number_text(max));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> table_reader::boolean(std::string_view key) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_boolean()) {
    type_error(key, *n, "a boolean (true or false)");
    return std::nullopt;
  }
  return n->as_boolean()->get();
}

std::optional<std::string> table_reader::string(std::string_view key) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_string()) {
    type_error(key, *n, "a string");
    return std::nullopt;
  }
  return n->as_string()->get();
}

std::optional<double> table_reader::size(std::string_view key, double min, double max) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  double v = 0;
  std::string shown;
  if (n->is_integer() && n->as_integer()->get() >= 0) {
    v = static_cast<double>(n->as_integer()->get());
    shown = std::to_string(n->as_integer()->get());
  } else if (n->is_string()) {
    auto s = parse_size(n->as_string()->get());
    if (!s) {
      error(key, s.error().message());
      return std::nullopt;
    }
    v = static_cast<double>(*s);
    shown = n->as_string()->get();
  } else {
    type_error(key, *n, "a size such as \"80GB\" or a byte count");
    return std::nullopt;
  }
  if (v < min || v > max) {
    range_error(key, shown, format_bytes(min), format_bytes(max));
    return std::nullopt;
  }
  return v;
}

std::optional<double> table_reader::bandwidth(std::string_view key, double min, double max) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_string()) {
    type_error(key, *n, "a bandwidth string such as \"25GB/s\"");
    return std::nullopt;
  }
  auto b = parse_bandwidth(n->as_string()->get());
  if (!b) {
    error(key, b.error().message());
    return std::nullopt;
  }
  if (!(*b >= min && *b <= max)) {
    range_error(key, n->as_string()->get(), number_text(min / 1e9) + "GB/s", number_text(max / 1e9) + "GB/s");
    return std::nullopt;
  }
  return *b;
}

std::optional<double> table_reader::duration(std::string_view key, double min, double max) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_string()) {
    type_error(key, *n, "a duration string such as \"5us\"");
    return std::nullopt;
  }
  auto d = parse_duration(n->as_string()->get());
  if (!d) {
    error(key, d.error().message());
    return std::nullopt;
  }
  const double seconds = std::chrono::duration<double>(*d).count();
  if (!(seconds >= min && seconds <= max)) {
    range_error(key, n->as_string()->get(), format_duration(std::chrono::nanoseconds{std::llround(min * 1e9)}),
                format_duration(std::chrono::nanoseconds{std::llround(max * 1e9)}));
    return std::nullopt;
  }
  return seconds;
}

std::optional<std::vector<std::string>> table_reader::string_array(std::string_view key) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_array()) {
    type_error(key, *n, "an array of strings");
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  std::size_t i = 0;
  for (const auto& e : *n->as_array()) {
    if (!e.is_string()) {
      diag_.error(e.source(), field(key) + "[" + std::to_string(i) + "]",
                  "expected a string, got " + std::string{type_name(e.type())});
      ok = false;
    } else {
      out.push_back(e.as_string()->get());
    }
    ++i;
  }
  if (!ok)
    return std::nullopt;
  return out;
}

std::optional<std::vector<std::int64_t>> table_reader::integer_array(std::string_view key, std::int64_t min,
                                                                    std::int64_t max) {
  const auto* n = get(key);
  if (n == nullptr)
    return std::nullopt;
  if (!n->is_array()) {
    type_error(key, *n, "an array of integers");
    return std::nullopt;
  }
  std::vector<std::int64_t> out;
  bool ok = true;
  std::size_t i = 0;
  for (const auto& e : *n->as_array()) {
    const auto name = field(key) + "[" + std::to_string(i++) + "]";
    if (!e.is_integer()) {
      diag_.error(e.source(), name, "expected an integer, got " + std::string{type_name(e.type())});
      ok = false;
      continue;
    }
    const auto v = e.as_integer()->get();
    if (v < min || v > max) {
      diag_.error(e.source(), name,
                  "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + std::to_string(v));
      ok = false;
      continue;
    }
    out.push_back(v);
  }
  if (!ok)
    return std::nullopt;
  return out;
}

std::optional<std::string> table_reader::choice(std::string_view key, const std::vector<std::string>& choices) {
  auto s = string(key);
  if (!s)
    return std::nullopt;
  if (std::find(choices.begin(), choices.end(), *s) != choices.end())
    return s;
  std::string listed;
  for (const auto& c : choices)
    listed += (listed.empty() ? "\"" : ", \"") + c + "\"";
  error(key, "'" + *s + "' is not one of " + listed + did_you_mean(*s, choices));
  return std::nullopt;
}

void table_reader::finish() {
  if (tbl_ == nullptr)
    return;
  for (auto&& [k, v] : *tbl_) {
    const std::string name{k.str()};
    if (std::find(keys_.begin(), keys_.end(), name) != keys_.end())
      continue;
    auto at = k.source().begin.line > 0 ? k.source() : v.source();
    diag_.error(at, field(name), "unknown key" + did_you_mean(name, keys_));
  }
}

void table_reader::type_error(std::string_view key, const toml::node& n, std::string_view wanted) {
  error(key, "expected " + std::string{wanted} + ", got " + std::string{type_name(n.type())});
}

void table_reader::range_error(std::string_view key, const std::string& got, const std::string& min,
                               const std::string& max) {
  error(key, "must be between " + min + " and " + max + ", got " + got);
}

const toml::array* table_array(diagnostics& diag, const toml::table& parent, std::string_view key,
                               std::string_view field) {
  const auto* n = parent.get(key);
  if (n == nullptr)
    return nullptr;
  const auto* arr = n->as_array();
  if (arr == nullptr || !arr->is_array_of_tables()) {
    diag.error(n->source(), std::string{field},
               "expected tables ([[" + std::string{field} + "]]), got " + std::string{type_name(n->type())});
    return nullptr;
  }
  return arr;
}

void check_top_level(diagnostics& diag, const toml::table& root, const std::vector<std::string>& known) {
  for (auto&& [k, v] : root) {
    const std::string name{k.str()};
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      auto at = k.source().begin.line > 0 ? k.source() : v.source();
      diag.error(at, name, "unknown table or key" + did_you_mean(name, known));
    }
  }
}

}  // namespace rekindle::config::detail
