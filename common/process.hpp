#pragma once

#include <sys/types.h>

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

/// SIGKILLs the process group of a child started by spawn_child and reaps the child. Does
/// nothing for pid <= 0.
void kill_child_group(pid_t pid) noexcept;

}  // namespace rekindle
