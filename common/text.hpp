#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"

namespace rekindle {

/// Edit distance (insertions, deletions, substitutions and swaps of neighbours) between a and b.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, if one is close enough to be a likely typo.
std::optional<std::string> closest_match(std::string_view word, std::span<const std::string> candidates);
std::optional<std::string> closest_match(std::string_view word, std::span<const std::string_view> candidates);

/// " (did you mean 'x'?)" when a candidate is close to `word`, else "".
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);

/// Parses "250ms", "2s", "1.5s", "10us", "3m", "1h", "100ns" into nanoseconds.
expected<std::chrono::nanoseconds> parse_duration(std::string_view text);
/// The shortest exact spelling of `d` that `parse_duration` reads back, e.g. "200ms".
std::string duration_to_string(std::chrono::nanoseconds d);
/// A rounded spelling for people: "41 ms", "1.02 s", "3.1 µs", "2 min 05 s".
std::string format_duration(std::chrono::nanoseconds d);

/// Parses "4096", "64KiB", "16MiB", "1GiB", "10MB" into bytes.
expected<std::uint64_t> parse_size(std::string_view text);
/// The exact spelling of `bytes` in the largest binary unit that divides it, e.g. "16MiB".
std::string size_to_string(std::uint64_t bytes);
/// A rounded spelling for people: "96.0 MiB", "1.50 GiB".
std::string format_bytes(double bytes);

/// Splits on `sep`, keeping empty fields.
std::vector<std::string_view> split(std::string_view text, char sep);
/// The admin shell's words: spaces and tabs separate, quotes ('…' or "…") group (no escapes inside
/// them), a backslash outside quotes takes the next character as it is. Errors (invalid_argument):
/// an unterminated quote, a line longer than max_shell_line bytes.
inline constexpr std::size_t max_shell_line = 64 * 1024;
expected<std::vector<std::string>> split_shell_words(std::string_view line);
/// `word` quoted so that split_shell_words reads it back as one word, whatever it holds.
std::string quote_shell_word(std::string_view word);

/// Removes leading and trailing ASCII whitespace.
std::string_view trim(std::string_view text);

/// How deeply the arrays and objects of a JSON text nest (0 for a scalar), read without parsing it:
/// JSON from outside is checked against a limit first, since the values a parser builds are
/// copied, printed and freed by recursion (100,000 nested arrays overflow the stack).
std::size_t json_nesting_depth(std::string_view json_text);

/// Where a JSON text holds a number a double cannot hold (1e400), read without parsing it: the
/// number as written and the key of the innermost object member it lies in ("" at the top level
/// or when there is none), so an error can name the field the parser's own message omits.
struct json_number_problem {
  std::string key;
  std::string number;
};
std::optional<json_number_problem> json_number_out_of_range(std::string_view json_text);

/// A whole number written in decimal digits (no sign, no spaces) from `min` to `max`. Every number
/// rekindle reads from outside (options, addresses, files) goes through here: "-5", "1e3",
/// "99999999999999999999" and "" are errors that say the range, never a wrapped or clamped value.
expected<std::uint64_t> parse_whole_number(std::string_view text, std::uint64_t min = 0,
                                           std::uint64_t max = UINT64_MAX);

/// Whether `host` can name a machine: an IPv4 address ("10.0.0.7"; every part 0-255), an IPv6
/// address without brackets ("::1"), or a DNS name (labels of letters, digits and '-'). The error
/// says what is wrong with it; whether the name resolves is only known when it is used.
status check_host(std::string_view host);

/// A host and a port, as in "10.0.0.7:7400", "node3:7400" or "[fe80::1]:7400".
struct host_port {
  std::string host;
  std::uint16_t port = 0;
};
/// Splits "host:port" (an IPv6 host in brackets); the port must be a number in 1..65535.
expected<host_port> parse_host_port(std::string_view text);

/// Each item's `to_string()`, one per line (no newline after the last).
template <class Range>
std::string join_lines(const Range& items) {
  std::string out;
  for (const auto& x : items) {
    if (!out.empty())
      out += '\n';
    out += x.to_string();
  }
  return out;
}

}  // namespace rekindle
