#include "tests/support/etcd.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <thread>

#include "tests/support/wait.hpp"

namespace rekindle::testing {

namespace {

// A port nobody listens on now (the kernel's choice for port 0); etcd takes it a moment later, and
// the constructor tries again with other ports if someone else did first.
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// etcd's /health over plain HTTP: {"health":"true"} once it serves.
bool answers(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET /health HTTP/1.0\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; got.size() < 65536 && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
        got.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return got.find("\"health\":\"true\"") != std::string::npos;
}

}  // namespace

std::optional<std::string> etcd_server::missing() { return missing_tool("etcd", "etcd-server"); }

etcd_server::etcd_server(const std::filesystem::path& dir) : dir_(dir) {
  std::filesystem::create_directories(dir_);
  for (int attempt = 0; attempt < 5 && !ready_; ++attempt) {
    client_port_ = free_port();
    const auto peer_port = free_port();
    const auto client = "http://127.0.0.1:" + std::to_string(client_port_);
    const auto peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::error_code ec;
    std::filesystem::remove_all(dir_ / "data", ec);
    process_ = std::make_unique<child_process>(
        std::vector<std::string>{"etcd", "--name", "rekindle-test", "--data-dir", (dir_ / "data").string(),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", "rekindle-test=" + peer, "--log-level", "warn"},
        log());
    ready_ = wait_until([&] { return !process_->running() ? true : answers(client_port_); }, std::chrono::seconds{30}) &&
             process_->running();
  }
}

etcd_server::~etcd_server() = default;

std::string etcd_server::endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }

void etcd_server::kill() {
  if (process_)
    process_->kill_all();
}

void etcd_server::pause() {
  if (process_)
    process_->signal_group(SIGSTOP);
}

void etcd_server::resume() {
  if (process_)
    process_->signal_group(SIGCONT);
}

}  // namespace rekindle::testing
