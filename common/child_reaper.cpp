#include "common/child_reaper.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/process.hpp"
#include "common/status.hpp"

namespace rekindle {
namespace {

// The reaper's wake-up, made once and never closed: a handler still running on another thread
// when a reaper ends must not write into a descriptor reused by then.
std::atomic<int> wake_fd{-1};

extern "C" void on_child_signal(int) {
  const int saved = errno;
  if (const int fd = wake_fd.load(); fd >= 0) {
    const std::uint64_t one = 1;
    (void)!write(fd, &one, sizeof one);
  }
  errno = saved;
}

int process_wake_fd() {
  static const int fd = [] {
    const int made = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    wake_fd.store(made);
    return made;
  }();
  return fd;
}

void wake(int fd) {
  const std::uint64_t one = 1;
  (void)!write(fd, &one, sizeof one);
}

}  // namespace

expected<std::unique_ptr<child_reaper>> child_reaper::start(on_exit report) {
  const int wake = process_wake_fd();
  if (wake < 0)
    return status{errc::io_error, std::string{"eventfd for the child reaper: "} + std::strerror(errno)};
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  const int signal_fd = signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0)
    return status{errc::io_error, std::string{"signalfd for SIGCHLD: "} + std::strerror(errno)};
  struct sigaction action {};
  action.sa_handler = on_child_signal;
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&action.sa_mask);
  sigaction(SIGCHLD, &action, nullptr);
  return std::unique_ptr<child_reaper>(new child_reaper(signal_fd, wake, std::move(report)));
}

child_reaper::child_reaper(int signal_fd, int wake_fd, on_exit report)
    : signal_fd_(signal_fd), wake_fd_(wake_fd), report_(std::move(report)), thread_([this] { run(); }) {}

child_reaper::~child_reaper() {
  stopping_.store(true);
  wake(wake_fd_);
  thread_.join();
  close(signal_fd_);
}

void child_reaper::run() {
  name_this_thread("rk-reaper");
  while (!stopping_.load()) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    (void)poll(fds, 2, -1);
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof info) > 0) {
    }
    std::uint64_t wakes = 0;
    while (read(wake_fd_, &wakes, sizeof wakes) > 0) {
    }
    int st = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
      report_(pid, st);
  }
}

}  // namespace rekindle
