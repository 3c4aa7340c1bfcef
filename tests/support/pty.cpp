#include "tests/support/pty.hpp"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace rekindle::testing {

pty_process::pty_process(const std::vector<std::string>& argv, const environment& env) {
  struct winsize size{};
  size.ws_row = 40;
  size.ws_col = 120;
  const pid_t parent = getpid();
  pid_ = forkpty(&fd_, nullptr, nullptr, &size);
  if (pid_ < 0)
    throw std::runtime_error(std::string{"forkpty failed: "} + std::strerror(errno));
  if (pid_ == 0)
    exec_child(argv, env, parent);  // forkpty made it a session (and group) leader on the terminal
}

pty_process::~pty_process() {
  if (pid_ > 0 && !status_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  if (fd_ >= 0)
    close(fd_);
}

void pty_process::type(const std::string& keys) {
  // One key at a time, as typed: line editors read escape sequences and Tab as they come.
  for (char c : keys) {
    if (::write(fd_, &c, 1) != 1)
      return;
    read_some(std::chrono::milliseconds{5});
  }
}

void pty_process::read_some(std::chrono::milliseconds wait) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(wait.count())) <= 0)
    return;
  char buf[4096];
  const auto n = ::read(fd_, buf, sizeof buf);
  if (n > 0)
    screen_.append(buf, static_cast<std::size_t>(n));
}

bool pty_process::wait_for(const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (const auto at = screen_.find(text, mark_); at != std::string::npos) {
      mark_ = at + text.size();
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    read_some(std::chrono::milliseconds{50});
  }
}

std::optional<int> pty_process::wait_exit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!status_) {
    read_some(std::chrono::milliseconds{20});
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_)
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    else if (std::chrono::steady_clock::now() > deadline)
      return std::nullopt;
  }
  return status_;
}

}  // namespace rekindle::testing
