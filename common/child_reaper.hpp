#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "common/expected.hpp"

namespace rekindle {

/// Reports every child of this process the moment it ends, on a thread of its own (`rk-reaper`)
/// that wakes for nothing else: SIGCHLD through a signalfd, and through a handler where a thread
/// that does not block SIGCHLD took the signal first. Such a thread exists wherever a library
/// starts one before main() (OpenBLAS does); the signalfd then finds the signal gone, and without
/// the handler the child would wait for the next child's signal.
///
/// Reaps with waitpid(-1): no other thread of the process may wait for a child it started.
/// REQUIRES: SIGCHLD blocked in the calling thread, and in every thread the process starts after
/// it (they inherit the mask); one reaper at a time.
class child_reaper {
 public:
  /// Called on the reaper's thread with each child's pid and wait status.
  using on_exit = std::function<void(pid_t pid, int status)>;

  /// Installs the SIGCHLD handler and starts the thread. Errors: io_error when the signalfd or
  /// the eventfd cannot be made.
  [[nodiscard]] static expected<std::unique_ptr<child_reaper>> start(on_exit report);

  /// Stops the thread, after reporting what had ended by then; the handler stays (it only wakes).
  ~child_reaper();
  child_reaper(const child_reaper&) = delete;
  child_reaper& operator=(const child_reaper&) = delete;

 private:
  child_reaper(int signal_fd, int wake_fd, on_exit report);
  void run();

  int signal_fd_;
  int wake_fd_;
  on_exit report_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace rekindle
