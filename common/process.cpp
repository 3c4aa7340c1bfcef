#include "common/process.hpp"

#include <fcntl.h>
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
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
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

void kill_child_group(pid_t pid) noexcept {
  if (pid <= 0)
    return;
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace rekindle
