#include "tests/support/process.hpp"

#include "common/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace rekindle::testing {

namespace {

using namespace std::chrono_literals;

}  // namespace

std::optional<std::string> missing_tool(const std::string& program, const std::string& package) {
  if (find_program(program, std::filesystem::current_path()))
    return std::nullopt;
  return program + " is not installed (Debian package " + package + "; scripts/setup-deps does not install it)";
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const environment& env, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(127);
  for (const auto& [k, v] : env)
    setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}

namespace {

void fill_result(process_result& r, int wstatus) {
  if (WIFEXITED(wstatus))
    r.exit_code = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus))
    r.term_signal = WTERMSIG(wstatus);
}

}  // namespace

process_result run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                           const std::string& stdin_data, const environment& env) {
  int out_pipe[2], err_pipe[2], in_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0 || pipe(in_pipe) != 0)
    throw std::runtime_error("pipe failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      close(fd);
    exec_child(argv, env, parent);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(in_pipe[0]);
  // Small inputs fit the pipe buffer; a test never sends more.
  if (!stdin_data.empty())
    (void)!write(in_pipe[1], stdin_data.data(), stdin_data.size());
  close(in_pipe[1]);

  process_result r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      char buf[4096];
      const auto n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0)
      close(f.fd);
  int wstatus = 0;
  if (r.timed_out) {
    waitpid(pid, &wstatus, 0);
    return r;
  }
  // The pipes closed; wait for the exit, killing the group if it lingers past the deadline.
  for (;;) {
    const pid_t w = waitpid(pid, &wstatus, WNOHANG);
    if (w == pid)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      return r;
    }
    std::this_thread::sleep_for(5ms);
  }
  kill(-pid, SIGKILL);  // anything it left in its group
  fill_result(r, wstatus);
  return r;
}

child_process::child_process(const std::vector<std::string>& argv, const std::filesystem::path& log,
                             const environment& env) {
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0)
    throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    if (!log.empty()) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, 0);
      close(devnull);
    }
    exec_child(argv, env, parent);
  }
  setpgid(pid_, pid_);
}

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), status_(other.status_) {}

child_process::~child_process() { kill_all(); }

void child_process::signal(int sig) const {
  if (pid_ > 0)
    kill(pid_, sig);
}

void child_process::signal_group(int sig) const {
  if (pid_ > 0)
    kill(-pid_, sig);
}

std::optional<int> child_process::wait_for(std::chrono::milliseconds timeout) {
  if (status_)
    return status_;
  if (pid_ <= 0)
    return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int wstatus = 0;
    const pid_t w = waitpid(pid_, &wstatus, WNOHANG);
    if (w == pid_) {
      status_ = wstatus;
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

bool child_process::running() { return pid_ > 0 && !wait_for(0ms).has_value(); }

void child_process::kill_all() {
  if (pid_ <= 0)
    return;
  kill(-pid_, SIGCONT);
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  if (!status_) {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, 0) == pid_)
      status_ = wstatus;
  }
  pid_ = -1;
}

}  // namespace rekindle::testing
