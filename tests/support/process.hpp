#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rekindle::testing {

/// What a finished program did.
struct process_result {
  /// Exit status when it exited, -1 when killed by a signal or timed out.
  int exit_code = -1;
  /// The signal that ended it, 0 when it exited.
  int term_signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
};

/// Extra environment for a child: NAME=VALUE pairs added to the test's own environment.
using environment = std::vector<std::pair<std::string, std::string>>;

/// In a forked child: its own process group (a session leader keeps its own), death with
/// `parent`, `env` added, then exec of `argv`; exits 127 when that fails.
[[noreturn]] void exec_child(const std::vector<std::string>& argv, const environment& env, pid_t parent);

/// Why a test cannot run `program`, when it is not on the PATH: "PROGRAM is not installed (Debian
/// package PACKAGE...)", for GTEST_SKIP. For programs that scripts/setup-deps does not install by
/// default (scripts/check-test-tools checks that a test guards every such program with this):
///   if (auto why = testing::missing_tool("gnuplot", "gnuplot-nox")) GTEST_SKIP() << *why;
[[nodiscard]] std::optional<std::string> missing_tool(const std::string& program, const std::string& package);

/// Runs `argv` to completion (or kills its process group after `timeout`), capturing its output.
process_result run_process(const std::vector<std::string>& argv,
                           std::chrono::milliseconds timeout = std::chrono::seconds{120},
                           const std::string& stdin_data = {}, const environment& env = {});

/// A child program in its own process group. The destructor kills the whole group with SIGKILL and
/// reaps the child, so a failing test leaves nothing behind; the child also dies with the test
/// process (PR_SET_PDEATHSIG).
class child_process {
 public:
  /// Starts `argv` with stdout and stderr appended to `log` (or inherited when empty).
  child_process(const std::vector<std::string>& argv, const std::filesystem::path& log = {},
                const environment& env = {});
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&&) = delete;
  child_process(const child_process&) = delete;
  ~child_process();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// Sends `sig` to the child only.
  void signal(int sig) const;
  /// Sends `sig` to the child's whole process group.
  void signal_group(int sig) const;
  /// Waits up to `timeout` for the child to end; returns its raw wait status.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  /// True until the child has been reaped.
  [[nodiscard]] bool running();
  /// SIGKILL to the group and reap. Idempotent.
  void kill_all();

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace rekindle::testing
