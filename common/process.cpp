#include "common/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/check.hpp"
#include "common/status.hpp"

namespace rekindle {

expected<pid_t> spawn_child(const std::vector<std::string>& argv, const child_options& options) {
  RK_CHECK(!argv.empty());
  int fd = -1;
  if (!options.log.empty()) {
    fd = ::open(options.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
      return status{errc::io_error, "cannot open " + options.log.string() + ": " + std::strerror(errno)};
  }
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    if (fd >= 0)
      ::close(fd);
    return status{errc::io_error, std::string{"fork failed: "} + std::strerror(e)};
  }
  if (pid == 0) {
    // A parent's threads may block signals (a daemon blocks SIGCHLD and the stop signals); its
    // children start with none blocked.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    // Where Yama restricts ptrace to ancestors, a sibling started by the parent (eu-stack taking
    // a hung rank's stack) may trace this child too.
    (void)prctl(PR_SET_PTRACER, parent, 0, 0, 0);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (options.output_fd >= 0) {
      dup2(options.output_fd, 1);
      dup2(options.output_fd, 2);
    }
    // Nothing of the parent's leaks into the child: UCX opens its sockets without close-on-exec,
    // and a child holding a daemon's listening socket would keep its port after the daemon died.
    (void)close_range(3, ~0U, 0);
    for (const auto& [name, value] : options.env)
      setenv(name.c_str(), value.c_str(), 1);
    if (!options.workdir.empty() && chdir(options.workdir.c_str()) != 0)
      _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  // Both sides set the group, so a kill of it right after this returns reaches the child.
  setpgid(pid, pid);
  if (fd >= 0)
    ::close(fd);
  return pid;
}

expected<std::filesystem::path> find_program(const std::string& name, const std::filesystem::path& workdir) {
  namespace fs = std::filesystem;
  const auto usable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    fs::path p{name};
    if (p.is_relative())
      p = workdir / p;
    p = p.lexically_normal();
    std::error_code ec;
    if (!fs::exists(p, ec))
      return status{errc::not_found, "program '" + p.string() + "' does not exist"};
    if (!usable(p))
      return status{errc::failed_precondition, "program '" + p.string() + "' is not an executable file"};
    return p;
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= dirs.size()) {
    const auto end = std::min(dirs.find(':', begin), dirs.size());
    const fs::path dir = end > begin ? fs::path{dirs.substr(begin, end - begin)} : fs::path{"."};
    if (const auto p = dir / name; usable(p))
      return p;
    begin = end + 1;
  }
  return status{errc::not_found, "program '" + name + "' is not on PATH (" + dirs + ")"};
}

expected<std::string> run_for_output(const std::vector<std::string>& argv, std::chrono::nanoseconds timeout,
                                     std::size_t max_bytes, bool any_exit_status) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return status{errc::io_error, std::string{"pipe failed: "} + std::strerror(errno)};
  child_options o;
  o.output_fd = fds[1];
  auto pid = spawn_child(argv, o);
  ::close(fds[1]);
  if (!pid) {
    ::close(fds[0]);
    return pid.error();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR)
      break;
    if (ready <= 0)
      continue;
    const auto n = ::read(fds[0], buf, sizeof buf);
    if (n == 0)
      break;  // the program closed its output: it ended
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      break;
    }
    out.append(buf, static_cast<std::size_t>(std::min<std::size_t>(static_cast<std::size_t>(n), max_bytes - out.size())));
    if (out.size() >= max_bytes)
      break;
  }
  ::close(fds[0]);
  int st = 0;
  if (timed_out || out.size() >= max_bytes) {
    ::kill(-*pid, SIGKILL);
    ::kill(*pid, SIGKILL);
  }
  // A daemon's reaper may take the child first (waitpid(-1)): its status is then unknown here.
  pid_t got = -1;
  while ((got = ::waitpid(*pid, &st, 0)) < 0 && errno == EINTR) {
  }
  const std::string name = std::filesystem::path{argv[0]}.filename().string();
  if (timed_out)
    return status{errc::timeout, name + " did not finish within " + std::to_string(timeout.count() / 1000000) + " ms"};
  if (!any_exit_status && got == *pid && out.size() < max_bytes && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
    return status{errc::unavailable, name + " failed (" +
                                    (WIFEXITED(st) ? "exit status " + std::to_string(WEXITSTATUS(st))
                                                   : "signal " + std::to_string(WTERMSIG(st))) +
                                    "): " + out.substr(0, 500)};
  return out;
}

expected<std::string> capture_stack(pid_t pid, std::chrono::nanoseconds timeout) {
  auto program = find_program("eu-stack", {});
  if (!program)
    return status{errc::not_found, "eu-stack is not installed (Debian package elfutils)"};
  auto out = run_for_output({program->string(), "-n", "64", "-p", std::to_string(pid)}, timeout, 64 * 1024, true);
  if (out && out->find("TID ") == std::string::npos)
    return status{errc::unavailable, "eu-stack could not read process " + std::to_string(pid) + ": " +
                                         out->substr(0, std::min<std::size_t>(out->size(), 500))};
  return out;
}

void kill_child_group(pid_t pid) noexcept {
  if (pid <= 0)
    return;
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void name_this_thread(const char* name) noexcept {
  char kept[16] = {};
  std::strncpy(kept, name, sizeof kept - 1);
  (void)pthread_setname_np(pthread_self(), kept);
}

}  // namespace rekindle
