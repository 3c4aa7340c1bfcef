#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/process.hpp"
#include "common/status.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Waits for `pid` (a child) to exit; its wait status, or -1 after 20 s.
int wait_exit(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return st;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

TEST(process, child_output_and_environment_go_to_the_log) {
  testing::temp_dir dir;
  const auto log = dir.path() / "child.log";
  auto pid = spawn_child({"/bin/sh", "-c", "echo \"hello $REKINDLE_TEST_VALUE\"; echo oops >&2"},
                         {.log = log, .env = {{"REKINDLE_TEST_VALUE", "world"}}});
  ASSERT_TRUE(pid.has_value()) << pid.error().message();
  const int st = wait_exit(*pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(testing::read_file(log), "hello world\noops\n");
}

// UCX opens its sockets without close-on-exec; a child must still see none of the parent's
// descriptors, or it would keep a dead daemon's port open.
TEST(process, a_child_inherits_no_descriptor_beyond_its_output) {
  testing::temp_dir dir;
  int leak[2] = {-1, -1};
  ASSERT_EQ(::pipe(leak), 0);  // deliberately without O_CLOEXEC
  const auto log = dir.path() / "child.log";
  const auto probe = "for f in " + std::to_string(leak[0]) + " " + std::to_string(leak[1]) +
                     "; do if [ -e /proc/$$/fd/$f ]; then echo open $f; fi; done; echo checked";
  auto pid = spawn_child({"/bin/sh", "-c", probe}, {.log = log});
  ASSERT_TRUE(pid.has_value()) << pid.error().message();
  const int st = wait_exit(*pid);
  ::close(leak[0]);
  ::close(leak[1]);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(testing::read_file(log), "checked\n");
}

TEST(process, child_leads_its_own_group_and_the_group_dies_together) {
  testing::temp_dir dir;
  const auto pidfile = dir.path() / "grandchild.pid";
  // The child starts a grandchild in its group and waits.
  auto pid = spawn_child({"/bin/sh", "-c", "sleep 60 & echo $! > " + pidfile.string() + "; wait"});
  ASSERT_TRUE(pid.has_value());
  EXPECT_EQ(getpgid(*pid), *pid);
  pid_t grandchild = 0;
  for (int i = 0; i < 2000 && grandchild == 0; ++i) {
    std::ifstream in(pidfile);
    if (!(in >> grandchild))
      grandchild = 0;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(getpgid(grandchild), *pid);
  kill_child_group(*pid);
  EXPECT_FALSE(alive(*pid));
  // The grandchild is not ours to reap; it is gone once init reaped it.
  bool gone = false;
  for (int i = 0; i < 2000 && !gone; ++i) {
    gone = !alive(grandchild);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone);
}

TEST(process, a_program_that_cannot_run_exits_127) {
  auto pid = spawn_child({"/nonexistent/program"});
  ASSERT_TRUE(pid.has_value());
  const int st = wait_exit(*pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 127);
}

TEST(process, an_unwritable_log_is_an_error_naming_it) {
  auto pid = spawn_child({"/bin/true"}, {.log = "/nonexistent/dir/child.log"});
  ASSERT_FALSE(pid.has_value());
  EXPECT_EQ(pid.error().code(), errc::io_error);
  EXPECT_NE(pid.error().message().find("/nonexistent/dir/child.log"), std::string::npos);
}

TEST(process, run_for_output_returns_what_the_program_wrote_and_bounds_time_and_size) {
  auto out = run_for_output({"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2"}, 20s, 1024);
  ASSERT_TRUE(out.has_value()) << out.error();
  EXPECT_EQ(*out, "to-stdout\nto-stderr\n");

  const auto t0 = std::chrono::steady_clock::now();
  out = run_for_output({"/bin/sleep", "100"}, 200ms, 1024);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code(), errc::timeout);
  EXPECT_NE(out.error().message().find("sleep did not finish within 200 ms"), std::string::npos) << out.error();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);

  out = run_for_output({"/usr/bin/yes"}, 20s, 1000);
  ASSERT_TRUE(out.has_value()) << out.error();
  EXPECT_EQ(out->size(), 1000u);

  out = run_for_output({"/bin/sh", "-c", "echo broken; exit 3"}, 20s, 1024);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code(), errc::unavailable);
  EXPECT_NE(out.error().message().find("sh failed (exit status 3): broken"), std::string::npos) << out.error();
}

TEST(process, capture_stack_shows_where_a_process_waits) {
  if (!find_program("eu-stack", {}))
    GTEST_SKIP() << "eu-stack is not installed (Debian package elfutils; scripts/setup-deps installs it)";
  auto pid = spawn_child({"/bin/sleep", "60"});
  ASSERT_TRUE(pid.has_value());
  std::this_thread::sleep_for(100ms);  // past exec
  auto stack = capture_stack(*pid, 20s);
  kill_child_group(*pid);
  ASSERT_TRUE(stack.has_value()) << stack.error();
  EXPECT_NE(stack->find("PID " + std::to_string(*pid)), std::string::npos) << *stack;
  EXPECT_NE(stack->find("TID"), std::string::npos) << *stack;
  EXPECT_NE(stack->find("#0"), std::string::npos) << *stack;

  auto gone = capture_stack(999999999, 20s);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code(), errc::unavailable);
  EXPECT_NE(gone.error().message().find("eu-stack could not read process 999999999"), std::string::npos) << gone.error();
}

// A thread is named for top -H, perf and /proc; a name over the kernel's 15 characters is cut,
// not refused.
TEST(name_this_thread, names_the_calling_thread_and_cuts_a_long_name) {
  const auto comm_of = [](pid_t tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::string name;
    std::getline(in, name);
    return name;
  };
  std::string shown, cut;
  std::thread([&] {
    name_this_thread("rk-test");
    shown = comm_of(gettid());
    name_this_thread("rk-a-name-longer-than-fifteen");
    cut = comm_of(gettid());
  }).join();
  EXPECT_EQ(shown, "rk-test");
  EXPECT_EQ(cut, "rk-a-name-longe");
}

}  // namespace
}  // namespace rekindle
