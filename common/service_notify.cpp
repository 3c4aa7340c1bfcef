#include "common/service_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rekindle {

status notify_service_manager(std::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || *env == '\0')
    return {};
  const std::string path = env;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path || (path[0] != '/' && path[0] != '@'))
    return status{errc::invalid_argument, "NOTIFY_SOCKET '" + path + "' is not a socket path or an abstract name"};
  std::memcpy(addr.sun_path, path.data(), path.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  if (path[0] == '@')
    addr.sun_path[0] = '\0';  // abstract namespace
  else
    ++len;  // with its terminating NUL
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return status{errc::io_error, std::string{"notifying the service manager: socket: "} + std::strerror(errno)};
  const auto sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = errno;
  ::close(fd);
  if (sent < 0 || static_cast<std::size_t>(sent) != state.size())
    return status{errc::io_error, "notifying the service manager at " + path + ": " + std::strerror(err)};
  return {};
}

}  // namespace rekindle
