#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace rekindle::testing {

/// A program on a pseudo-terminal, driven as a person at a keyboard would: keys in, screen text
/// out. It runs in its own session; the destructor kills its process group and reaps it, so a
/// failing test leaves nothing behind.
class pty_process {
 public:
  pty_process(const std::vector<std::string>& argv, const environment& env = {});
  ~pty_process();
  pty_process(const pty_process&) = delete;
  pty_process& operator=(const pty_process&) = delete;

  /// Types `keys` (use "\r" for Enter, "\t" for Tab, "\x1b[A" for the up arrow).
  void type(const std::string& keys);
  /// Reads the screen until `text` appears after the position of the last match (or the start);
  /// false after `timeout`. The next wait starts after this match.
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds{60});
  /// Everything the program wrote so far.
  [[nodiscard]] const std::string& screen() const noexcept { return screen_; }
  /// What it wrote since the last match.
  [[nodiscard]] std::string since_last_match() const { return screen_.substr(mark_); }
  /// Waits for the program to exit; its exit status (-1: killed by a signal), or nothing.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);

 private:
  void read_some(std::chrono::milliseconds wait);
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string screen_;
  std::size_t mark_ = 0;
  std::optional<int> status_;
};

}  // namespace rekindle::testing
