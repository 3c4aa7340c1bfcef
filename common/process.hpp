#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/expected.hpp"

namespace rekindle {

/// How spawn_child starts a program.
struct child_options {
  /// Where the child's stdout and stderr go (appended); empty: inherited.
  std::filesystem::path log;
  /// Extra environment variables (name, value), on top of this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  /// The child's working directory; empty: this process's.
  std::filesystem::path workdir;
  /// A descriptor the child's stdout and stderr go to instead (a pipe's write end); -1: none.
  int output_fd = -1;
};

/// The program `name` names, as execv needs it: with a '/', that file (relative to `workdir`);
/// without, the first match on PATH. Errors: not_found (naming PATH), failed_precondition when
/// the file is not an executable regular file.
[[nodiscard]] expected<std::filesystem::path> find_program(const std::string& name,
                                                           const std::filesystem::path& workdir);

/// Starts `argv[0]` (a path) with `argv` as a child in a process group of its own that is killed
/// when this process dies (PR_SET_PDEATHSIG), so that nothing a tool starts outlives it. The
/// child starts with no signal blocked, whatever this thread blocks.
/// Errors: io_error when the log cannot be opened or fork fails; a program that cannot be
/// executed exits with status 127.
/// REQUIRES: !argv.empty(); called from the thread that will outlive the child.
[[nodiscard]] expected<pid_t> spawn_child(const std::vector<std::string>& argv, const child_options& options = {});

/// Runs `argv` to its end and returns what it wrote to stdout and stderr, at most `max_bytes` (the
/// rest is dropped and the program killed). Errors: those of spawn_child; timeout when it runs
/// longer than `timeout` (it is killed); unavailable when it exits with a status other than 0 (its
/// output in the message), unless `any_exit_status`.
[[nodiscard]] expected<std::string> run_for_output(const std::vector<std::string>& argv,
                                                   std::chrono::nanoseconds timeout, std::size_t max_bytes,
                                                   bool any_exit_status = false);

/// The stacks of every thread of process `pid`, as eu-stack (Debian's elfutils) prints them, at
/// most 64 KiB; a thread it could not unwind all the way keeps the frames it found. Errors:
/// not_found when eu-stack is not installed; unavailable with eu-stack's reason when it read no
/// thread (no such process, or one this process may not trace); timeout.
[[nodiscard]] expected<std::string> capture_stack(pid_t pid, std::chrono::nanoseconds timeout);

/// SIGKILLs the process group of a child started by spawn_child and reaps the child. Does
/// nothing for pid <= 0.
void kill_child_group(pid_t pid) noexcept;

/// Names the calling thread as `top -H`, `perf` and /proc/PID/task/TID/comm show it (the
/// service's threads are named "rk-…"; at most 15 characters are kept).
void name_this_thread(const char* name) noexcept;

}  // namespace rekindle
