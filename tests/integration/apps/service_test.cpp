// rekindled under a service manager: it notifies readiness (Type=notify) once it serves, and that
// it stops on SIGTERM, on the socket systemd names in $NOTIFY_SOCKET.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tests/support/cluster.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

TEST(service, the_daemon_notifies_ready_once_it_listens_and_stopping_on_sigterm) {
  testing::local_cluster c{{.nodes = 1, .ranks_per_node = 1, .steps = 100000, .global_batch = 2}};
  testing::temp_dir dir{"rekindle-notify"};
  const auto path = (dir.path() / "notify").string();
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto receive = [fd] {
    char buf[512];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string{};
  };

  testing::child_process daemon{{(testing::bin_dir() / "rekindled").string(), "--config", c.config().string(), "--node",
                                 "n0"},
                                dir.path() / "n0.log",
                                {{"NOTIFY_SOCKET", path}}};
  const auto ready = receive();
  EXPECT_EQ(ready.rfind("READY=1\n", 0), 0u) << ready;
  EXPECT_NE(ready.find("STATUS=node n0 listening on 127.0.0.1:"), std::string::npos) << ready;
  EXPECT_NE(ready.find("MAINPID=" + std::to_string(daemon.pid())), std::string::npos) << ready;
  // Ready means serving: its address file is written, and the job starts.
  EXPECT_TRUE(std::filesystem::exists(c.data_dir() / "n0" / "daemon.addr"));
  // Stopped once its connections are set up: a stop within milliseconds of the start can still
  // crash in UCX's connection manager (docs/RELIABILITY.md, "Known limits").
  ASSERT_TRUE(c.wait_step(1, 120s)) << testing::read_file(dir.path() / "n0.log");
  daemon.signal(SIGTERM);
  EXPECT_EQ(receive(), "STOPPING=1");
  const auto status = daemon.wait_for(60s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "wait status " << *status << "\n" << testing::read_file(dir.path() / "n0.log");
  ::close(fd);
}

}  // namespace
}  // namespace rekindle
