#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

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

std::string contents(const std::filesystem::path& p) {
  std::ifstream in{p};
  return {std::istreambuf_iterator<char>{in}, {}};
}

TEST(files, a_background_writer_hands_text_over_at_once_while_the_disk_is_stuck_and_writes_the_newest) {
  testing::temp_dir dir;
  const auto stuck = dir.path() / "stuck.json";
  const auto status = dir.path() / "status.json";
  // A disk that does not answer: writing "stuck.json.tmp" blocks until someone reads the FIFO.
  ASSERT_EQ(::mkfifo((stuck.string() + ".tmp").c_str(), 0600), 0);
  background_file_writer w;
  auto handed = std::async(std::launch::async, [&] {
    w.write(stuck, "held up");
    w.write(status, "older");
    w.write(status, "newer");
  });
  ASSERT_EQ(handed.wait_for(20s), std::future_status::ready) << "a write waited for the disk";
  // The disk answers: the held-up text arrives, and the newest text of the other file follows.
  EXPECT_EQ(contents(stuck.string() + ".tmp"), "held up");
  EXPECT_TRUE(w.flush(20s));
  EXPECT_EQ(contents(status), "newer");
  EXPECT_FALSE(std::filesystem::exists(status.string() + ".tmp"));
}

TEST(files, a_background_writer_writes_what_is_pending_before_it_stops_and_survives_a_failure) {
  testing::temp_dir dir;
  const auto p = dir.path() / "report.json";
  {
    background_file_writer w;
    w.write(dir.path() / "no such directory" / "x.json", "lost");  // logged, not thrown
    w.write(p, "last words");
  }
  EXPECT_EQ(contents(p), "last words");
}

TEST(files, a_background_writer_stuck_in_a_write_lets_flush_time_out_and_its_owner_go_on) {
  testing::temp_dir dir;
  const auto stuck = dir.path() / "stuck.json";
  const auto tmp = stuck.string() + ".tmp";
  ASSERT_EQ(::mkfifo(tmp.c_str(), 0600), 0);
  auto owner = std::async(std::launch::async, [&] {
    background_file_writer w{100ms};
    w.write(stuck, "late");
    return w.flush(100ms);
  });
  ASSERT_EQ(owner.wait_for(20s), std::future_status::ready) << "the writer's owner waited for a hung disk";
  EXPECT_FALSE(owner.get()) << "flush said the text was written";
  // The disk answers at last: the thread left behind finishes its write and ends.
  EXPECT_EQ(contents(tmp), "late");
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!std::filesystem::exists(stuck) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(std::filesystem::exists(stuck));
}

}  // namespace
}  // namespace rekindle
