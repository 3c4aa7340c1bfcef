#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>

#include "common/files.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

TEST(files, a_regular_file_within_the_limit_is_read_whole) {
  testing::temp_dir dir;
  const auto p = dir.write("a.toml", "x = 1\n");
  auto r = read_file_bounded(p, 100, "configuration file");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(*r, "x = 1\n");
}

TEST(files, a_missing_file_is_not_found_and_says_what_it_was) {
  auto r = read_file_bounded("/nonexistent/c.toml", 100, "configuration file");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::not_found);
  EXPECT_EQ(r.error().message(), "cannot read configuration file: No such file or directory");
}

TEST(files, dev_zero_a_directory_and_a_fifo_are_refused_at_once_never_read_or_waited_on) {
  testing::temp_dir dir;
  const auto fifo = dir.path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A FIFO with no writer would block a plain open forever: the answer must come without one.
  auto pending = std::async(std::launch::async, [&] { return read_file_bounded(fifo, 100, "token file"); });
  ASSERT_EQ(pending.wait_for(20s), std::future_status::ready) << "reading a FIFO hung";
  auto r = pending.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "is a FIFO, not a token file");
  r = read_file_bounded("/dev/zero", 100, "trace file");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "is a character device, not a trace file");
  r = read_file_bounded(dir.path(), 100, "configuration file");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::invalid_argument);
  EXPECT_EQ(r.error().message(), "is a directory, not a configuration file");
}

TEST(files, a_file_over_the_limit_is_refused_with_both_sizes) {
  testing::temp_dir dir;
  const auto p = dir.write("big", std::string(2048, 'x'));
  auto r = read_file_bounded(p, 1024, "token file");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "is 2.00 KiB; the limit for a token file is 1.00 KiB");
  EXPECT_TRUE(read_file_bounded(p, 2048, "token file"));
}

}  // namespace
}  // namespace rekindle
