#include <gtest/gtest.h>

#include <string>

#include "common/expected.hpp"
#include "common/status.hpp"

namespace rekindle {
namespace {

TEST(status, ok_by_default_and_carries_code_and_message_otherwise) {
  status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "ok");
  status bad{errc::not_found, "rank 7 is not in the job"};
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::not_found);
  EXPECT_EQ(bad.to_string(), "not_found: rank 7 is not in the job");
}

TEST(status, copies_are_deep_and_context_prefixes) {
  status a{errc::io_error, "fsync failed"};
  status b = a;
  EXPECT_EQ(a, b);
  auto c = b.with_context("writing shard 3");
  EXPECT_EQ(c.message(), "writing shard 3: fsync failed");
  EXPECT_EQ(c.code(), errc::io_error);
  EXPECT_EQ(b.message(), "fsync failed");
  EXPECT_TRUE(status{}.with_context("x").ok());
}

TEST(status, every_code_has_a_name) {
  for (int c = static_cast<int>(errc::invalid_argument); c <= static_cast<int>(errc::internal); ++c)
    EXPECT_NE(to_string(static_cast<errc>(c)), "unknown_error") << c;
}

expected<int> parse_positive(int x) {
  if (x <= 0)
    return status{errc::out_of_range, "must be positive, got " + std::to_string(x)};
  return x;
}

status use_twice(int x, int& out) {
  RK_ASSIGN_OR_RETURN(int v, parse_positive(x));
  out = v * 2;
  return {};
}

TEST(expected, holds_value_or_error) {
  auto good = parse_positive(3);
  ASSERT_TRUE(good);
  EXPECT_EQ(*good, 3);
  auto bad = parse_positive(-1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), errc::out_of_range);
  EXPECT_EQ(bad.value_or(9), 9);
}

TEST(expected, assign_or_return_propagates) {
  int out = 0;
  EXPECT_TRUE(use_twice(4, out).ok());
  EXPECT_EQ(out, 8);
  auto st = use_twice(0, out);
  EXPECT_EQ(st.code(), errc::out_of_range);
  EXPECT_EQ(out, 8);
}

TEST(expected_death, value_of_error_aborts_with_the_message) {
  auto bad = parse_positive(-5);
  EXPECT_DEATH((void)bad.value(), "must be positive, got -5");
}

TEST(check_death, failed_check_names_file_and_line) {
  EXPECT_DEATH(RK_CHECK_EQ(1 + 1, 3, "arithmetic"), "status_test.cpp:[0-9]+: check failed: .*arithmetic");
}

}  // namespace
}  // namespace rekindle
