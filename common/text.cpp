#include "common/text.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rekindle {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance over three rolling rows.
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  std::vector<std::size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

namespace {

template <class S>
std::optional<std::string> closest_impl(std::string_view word, std::span<const S> candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& c : candidates) {
    const std::string_view cv{c};
    std::size_t d = edit_distance(word, cv);
    // A prefix of a longer name is a likely abbreviation.
    if (word.size() >= 2 && cv.starts_with(word))
      d = std::min<std::size_t>(d, 1);
    if (!best || d < best_distance) {
      best = std::string{cv};
      best_distance = d;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  if (best && best_distance <= limit && best_distance < std::max(word.size(), best->size()))
    return best;
  return std::nullopt;
}

bool parse_number(std::string_view digits, double& out) {
  if (digits.empty())
    return false;
  const auto* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, out);
  return ec == std::errc{} && ptr == end && std::isfinite(out);
}

// Splits "250ms" into "250" and "ms".
std::pair<std::string_view, std::string_view> split_unit(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  return {text.substr(0, i), trim(text.substr(i))};
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word, std::span<const std::string> candidates) {
  return closest_impl(word, candidates);
}

std::optional<std::string> closest_match(std::string_view word, std::span<const std::string_view> candidates) {
  return closest_impl(word, candidates);
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  if (auto m = closest_match(word, candidates))
    return " (did you mean '" + *m + "'?)";
  return {};
}

expected<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  const auto bad = [&] {
    return status{errc::parse_error, "'" + std::string{text} +
                                         "' is not a duration; write a number and a unit, "
                                         "e.g. '500ms', '2s', '1.5s', '5m' (units: ns, us, ms, s, m, h)"};
  };
  auto [num, unit] = split_unit(trim(text));
  double value = 0;
  if (!parse_number(num, value) || unit.empty())
    return bad();
  double scale = 0;
  if (unit == "ns")
    scale = 1;
  else if (unit == "us" || unit == "µs")
    scale = 1e3;
  else if (unit == "ms")
    scale = 1e6;
  else if (unit == "s")
    scale = 1e9;
  else if (unit == "m" || unit == "min")
    scale = 60e9;
  else if (unit == "h")
    scale = 3600e9;
  else
    return bad();
  const double ns = value * scale;
  if (ns > 9.0e18)
    return status{errc::out_of_range, "'" + std::string{text} + "' is too long a duration"};
  return std::chrono::nanoseconds{static_cast<std::int64_t>(std::llround(ns))};
}

std::string duration_to_string(std::chrono::nanoseconds d) {
  const std::int64_t ns = d.count();
  struct unit {
    std::int64_t ns;
    const char* name;
  };
  static constexpr unit units[] = {{3600'000'000'000, "h"}, {60'000'000'000, "m"}, {1'000'000'000, "s"},
                                   {1'000'000, "ms"}, {1'000, "us"}};
  if (ns != 0) {
    for (const auto& u : units)
      if (ns % u.ns == 0)
        return std::to_string(ns / u.ns) + u.name;
  }
  return std::to_string(ns) + "ns";
}

std::string format_duration(std::chrono::nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  char buf[64];
  const double a = std::fabs(ns);
  if (a < 1e3)
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (a < 1e6)
    std::snprintf(buf, sizeof buf, a < 1e4 ? "%.1f µs" : "%.0f µs", ns / 1e3);
  else if (a < 1e9)
    std::snprintf(buf, sizeof buf, a < 1e7 ? "%.1f ms" : "%.0f ms", ns / 1e6);
  else if (a < 120e9)
    std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  else if (a < 7200e9) {
    const auto s = static_cast<long long>(ns / 1e9);
    std::snprintf(buf, sizeof buf, "%lld min %02lld s", s / 60, s % 60);
  } else {
    const auto m = static_cast<long long>(ns / 60e9);
    std::snprintf(buf, sizeof buf, "%lld h %02lld min", m / 60, m % 60);
  }
  return buf;
}

expected<std::uint64_t> parse_size(std::string_view text) {
  const auto bad = [&] {
    return status{errc::parse_error, "'" + std::string{text} +
                                         "' is not a size; write bytes or a number and a unit, "
                                         "e.g. '4096', '64KiB', '16MiB', '1GiB'"};
  };
  auto [num, unit] = split_unit(trim(text));
  double value = 0;
  if (!parse_number(num, value))
    return bad();
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (unit == "TB")
    scale = 1e12;
  else
    return bad();
  const double bytes = value * scale;
  if (bytes > 1.8e19)
    return status{errc::out_of_range, "'" + std::string{text} + "' is too large a size"};
  if (bytes != std::floor(bytes))
    return status{errc::parse_error, "'" + std::string{text} + "' is not a whole number of bytes"};
  return static_cast<std::uint64_t>(bytes);
}

std::string size_to_string(std::uint64_t bytes) {
  static constexpr std::pair<std::uint64_t, const char*> units[] = {
      {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  if (bytes != 0)
    for (const auto& [scale, name] : units)
      if (bytes % scale == 0)
        return std::to_string(bytes / scale) + name;
  return std::to_string(bytes);
}

std::string format_bytes(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

expected<std::vector<std::string>> split_shell_words(std::string_view line) {
  if (line.size() > max_shell_line)
    return status{errc::invalid_argument, "a line of " + std::to_string(line.size()) + " bytes; at most " +
                                              std::to_string(max_shell_line)};
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote)
        quote = 0;
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word)
        words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0)
    return status{errc::invalid_argument, std::string{"unterminated "} + quote + " quote"};
  if (in_word)
    words.push_back(std::move(word));
  return words;
}

std::string quote_shell_word(std::string_view word) {
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'')
      out += "'\\''";  // close, an escaped quote, open again
    else
      out += c;
  }
  return out + "'";
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const auto pos = text.find(sep, start);
    out.push_back(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos)
      break;
    start = pos + 1;
  }
  return out;
}

std::string_view trim(std::string_view text) {
  const auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!text.empty() && ws(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && ws(text.back()))
    text.remove_suffix(1);
  return text;
}

std::size_t json_nesting_depth(std::string_view json_text) {
  std::size_t depth = 0, deepest = 0;
  bool quoted = false, escaped = false;
  for (const char ch : json_text) {
    if (quoted) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        quoted = false;
      continue;
    }
    if (ch == '"')
      quoted = true;
    else if (ch == '{' || ch == '[')
      deepest = std::max(deepest, ++depth);
    else if ((ch == '}' || ch == ']') && depth > 0)
      --depth;
  }
  return deepest;
}

std::optional<json_number_problem> json_number_out_of_range(std::string_view json_text) {
  // The key of each open object (and "" for each open array, which keeps its parent's key).
  std::vector<std::string> keys;
  std::string last_string;
  bool quoted = false, escaped = false;
  std::size_t string_start = 0;
  std::string pending_key;
  constexpr std::size_t max_scanned_depth = 4096;
  for (std::size_t i = 0; i < json_text.size(); ++i) {
    const char ch = json_text[i];
    if (quoted) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"') {
        quoted = false;
        last_string.assign(json_text.substr(string_start, std::min<std::size_t>(i - string_start, 256)));
      }
      continue;
    }
    switch (ch) {
      case '"':
        quoted = true;
        string_start = i + 1;
        break;
      case ':':
        pending_key = last_string;
        break;
      case '{':
      case '[':
        if (keys.size() < max_scanned_depth)
          keys.push_back(keys.empty() ? pending_key : (pending_key.empty() ? keys.back() : pending_key));
        pending_key.clear();
        break;
      case '}':
      case ']':
        if (!keys.empty())
          keys.pop_back();
        pending_key.clear();
        break;
      case ',':
        pending_key.clear();
        break;
      default:
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
          std::size_t end = i;
          while (end < json_text.size() && std::strchr("+-0123456789.eE", json_text[end]) != nullptr && json_text[end] != '\0')
            ++end;
          const std::string number{json_text.substr(i, std::min<std::size_t>(end - i, 64))};
          const double v = std::strtod(std::string{json_text.substr(i, end - i)}.c_str(), nullptr);
          if (!std::isfinite(v)) {
            std::string key = !pending_key.empty() ? pending_key : (keys.empty() ? std::string{} : keys.back());
            return json_number_problem{std::move(key), number};
          }
          i = end - 1;
        }
        break;
    }
  }
  return std::nullopt;
}

expected<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min, std::uint64_t max) {
  const auto range = "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const auto [stop, ec] = digits ? std::from_chars(text.data(), end, value) : std::from_chars_result{text.data(), std::errc::invalid_argument};
  if (!digits || ec != std::errc{} || stop != end || value < min || value > max)
    return status{errc::parse_error, "'" + std::string{text} + "' is not " + range};
  return value;
}

status check_host(std::string_view host) {
  const auto bad = [&](const std::string& why) {
    return status{errc::parse_error, "'" + std::string{host} + "' is not a host: " + why};
  };
  if (host.empty())
    return bad("it is empty");
  if (host.size() > 253)
    return bad("longer than 253 characters");
  const std::string text{host};
  if (host.front() == '[')
    return bad("write an IPv6 address without brackets here, e.g. ::1");
  if (host.find(':') != std::string_view::npos) {
    in6_addr a6{};
    return inet_pton(AF_INET6, text.c_str(), &a6) == 1 ? status{} : bad("not an IPv6 address");
  }
  if (std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    in_addr a4{};
    return inet_pton(AF_INET, text.c_str(), &a4) == 1 ? status{}
                                                      : bad("not an IPv4 address (four numbers from 0 to 255)");
  }
  for (const auto label : split(host, '.')) {
    if (label.empty() || label.size() > 63)
      return bad("each part between dots must have 1 to 63 characters");
    const bool ok = std::all_of(label.begin(), label.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    });
    if (!ok || label.front() == '-' || label.back() == '-')
      return bad("a name may hold letters, digits and '-' (not at either end of a part)");
  }
  return {};
}

expected<host_port> parse_host_port(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return status{errc::parse_error, "'" + std::string{text} + "' is not host:port: " + std::string{why}};
  };
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return bad("no ':' before the port");
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string_view::npos)
    return bad("write an IPv6 host in brackets, e.g. [::1]:7400");
  if (host.empty())
    return bad("no host");
  if (auto s = check_host(host); !s.ok())
    return bad(s.message().substr(s.message().find(": ") + 2));
  const auto value = parse_whole_number(port, 1, 65535);
  if (!value)
    return bad("the port must be a number from 1 to 65535");
  return host_port{std::string{host}, static_cast<std::uint16_t>(*value)};
}

}  // namespace rekindle
