#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/logging.hpp"
#include "common/text.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

TEST(text, edit_distance_counts_swaps_once) {
  EXPECT_EQ(edit_distance("steps", "steps"), 0u);
  EXPECT_EQ(edit_distance("stpes", "steps"), 1u);
  EXPECT_EQ(edit_distance("stepz", "steps"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(text, did_you_mean_suggests_close_names_only) {
  const std::vector<std::string> names{"status", "step", "ranks", "nodes"};
  EXPECT_EQ(did_you_mean("stauts", names), " (did you mean 'status'?)");
  EXPECT_EQ(did_you_mean("rank", names), " (did you mean 'ranks'?)");
  EXPECT_EQ(did_you_mean("frobnicate", names), "");
}

TEST(text, durations_parse_and_print_back) {
  EXPECT_EQ(*parse_duration("250ms"), 250ms);
  EXPECT_EQ(*parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(*parse_duration("3m"), 180s);
  EXPECT_EQ(*parse_duration("10us"), 10us);
  EXPECT_EQ(*parse_duration(" 2h "), 2h);
  for (auto d : {std::chrono::nanoseconds{200ms}, std::chrono::nanoseconds{2s}, std::chrono::nanoseconds{1500ms},
                 std::chrono::nanoseconds{7}, std::chrono::nanoseconds{90min}})
    EXPECT_EQ(*parse_duration(duration_to_string(d)), d) << duration_to_string(d);
  EXPECT_EQ(duration_to_string(1500ms), "1500ms");
}

TEST(text, bad_durations_say_what_is_expected) {
  for (auto bad : {"", "ms", "5", "5 parsecs", "1..2s", "-3s"}) {
    auto d = parse_duration(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_EQ(d.error().code(), errc::parse_error);
    EXPECT_NE(d.error().message().find("e.g. '500ms'"), std::string::npos);
  }
}

TEST(text, sizes_parse_and_print_back) {
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("64KiB"), 65536u);
  EXPECT_EQ(*parse_size("16MiB"), 16u << 20);
  EXPECT_EQ(*parse_size("10MB"), 10'000'000u);
  EXPECT_EQ(size_to_string(16u << 20), "16MiB");
  EXPECT_EQ(size_to_string(1000), "1000");
  EXPECT_FALSE(parse_size("12 apples"));
  EXPECT_FALSE(parse_size("0.5"));
}

TEST(text, human_formats) {
  EXPECT_EQ(format_duration(41ms), "41 ms");
  EXPECT_EQ(format_duration(1020ms), "1.02 s");
  EXPECT_EQ(format_duration(2500us), "2.5 ms");
  EXPECT_EQ(format_bytes(96.0 * 1024 * 1024), "96.0 MiB");
  EXPECT_EQ(format_bytes(512), "512 B");
}

TEST(text, split_and_trim) {
  auto parts = split("a,,b", ',');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(trim("  x y \n"), "x y");
}

TEST(text, host_and_port_parse_and_every_bad_address_is_refused_saying_why) {
  auto a = parse_host_port("10.0.0.7:7400");
  ASSERT_TRUE(a) << a.error();
  EXPECT_EQ(a->host, "10.0.0.7");
  EXPECT_EQ(a->port, 7400);
  auto v6 = parse_host_port("[::1]:65535");
  ASSERT_TRUE(v6) << v6.error();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 65535);
  for (const char* bad : {"127.0.0.1:abc", "127.0.0.1:99999", "127.0.0.1:99999999999", "127.0.0.1:", ":7400",
                          "not-an-address", "127.0.0.1:0", "::1:7400", "h:7400x", "h:-1", "[]:7400"}) {
    auto r = parse_host_port(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code(), errc::parse_error) << bad;
    EXPECT_NE(r.error().message().find(bad), std::string::npos) << r.error().message();
  }
}

TEST(text, whole_numbers_are_digits_in_range_and_nothing_else) {
  EXPECT_EQ(*parse_whole_number("0"), 0u);
  EXPECT_EQ(*parse_whole_number("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*parse_whole_number("65535", 1, 65535), 65535u);
  for (const char* bad : {"", "-1", "-5", "+5", " 5", "5 ", "1e3", "0x10", "5.0", "99999999999999999999999",
                          "18446744073709551616", "abc"}) {
    auto r = parse_whole_number(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code(), errc::parse_error) << bad;
    EXPECT_EQ(r.error().message(), "'" + std::string{bad} + "' is not a whole number from 0 to 18446744073709551615");
  }
  auto r = parse_whole_number("70000", 0, 65535);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "'70000' is not a whole number from 0 to 65535");
  EXPECT_FALSE(parse_whole_number("0", 1, 10));
}

TEST(text, hosts_are_addresses_or_names_and_the_error_says_which_part_is_wrong) {
  for (const char* good : {"127.0.0.1", "10.0.0.7", "::1", "fe80::1", "localhost", "node-3.cluster.local", "n0"})
    EXPECT_TRUE(check_host(good).ok()) << good << ": " << check_host(good);
  const std::vector<std::pair<const char*, const char*>> bad{
      {"999.1.1.1", "not an IPv4 address"},
      {"1.2.3", "not an IPv4 address"},
      {"[::1]", "without brackets"},
      {"::g", "not an IPv6 address"},
      {"", "empty"},
      {"a..b", "1 to 63 characters"},
      {"-a", "letters, digits and '-'"},
      {"a b", "letters, digits and '-'"},
  };
  for (const auto& [host, why] : bad) {
    const auto s = check_host(host);
    ASSERT_FALSE(s.ok()) << host;
    EXPECT_NE(s.message().find(why), std::string::npos) << host << ": " << s.message();
  }
  EXPECT_FALSE(parse_host_port("999.1.1.1:7400"));
}

TEST(text, shell_words_split_on_blanks_group_in_quotes_and_read_back_what_quote_wrote) {
  using words = std::vector<std::string>;
  EXPECT_EQ(*split_shell_words("  kill  rank\t2 --yes "), (words{"kill", "rank", "2", "--yes"}));
  EXPECT_EQ(*split_shell_words("events --kind 'rank exited' \"a b\"c"), (words{"events", "--kind", "rank exited", "a bc"}));
  EXPECT_EQ(*split_shell_words("a\\ b ''"), (words{"a b", ""}));
  EXPECT_TRUE(split_shell_words("").value().empty());
  const auto open = split_shell_words("say 'unfinished");
  ASSERT_FALSE(open.has_value());
  EXPECT_EQ(open.error().message(), "unterminated ' quote");
  const auto long_line = split_shell_words(std::string(max_shell_line + 1, 'x'));
  ASSERT_FALSE(long_line.has_value());
  EXPECT_NE(long_line.error().message().find("at most"), std::string::npos);
  for (const std::string w : {"", "plain", "it's", "\"quoted\"", "back\\slash", " spaced out ", "''", "\t"}) {
    const auto back = split_shell_words("x " + quote_shell_word(w) + " y");
    ASSERT_TRUE(back.has_value()) << w;
    EXPECT_EQ(*back, (words{"x", w, "y"})) << quote_shell_word(w);
  }
}

TEST(logging, levels_parse_by_name) {
  EXPECT_EQ(*parse_log_level("debug"), log_level::debug);
  EXPECT_EQ(to_string(log_level::warn), "warn");
  auto bad = parse_log_level("loud");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("'loud'"), std::string::npos);
}

}  // namespace
}  // namespace rekindle
