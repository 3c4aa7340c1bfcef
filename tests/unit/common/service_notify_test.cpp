#include "common/service_notify.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

// A datagram socket standing in for systemd's notification socket, named in $NOTIFY_SOCKET.
class notify_socket : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_.path() / "notify").string();
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("NOTIFY_SOCKET");
    ::close(fd_);
  }
  std::string receive() {
    char buf[512];
    const auto n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string{};
  }

  testing::temp_dir dir_;
  std::string path_;
  int fd_ = -1;
};

TEST_F(notify_socket, the_state_arrives_as_one_datagram) {
  ASSERT_TRUE(notify_service_manager("READY=1\nSTATUS=listening").ok());
  EXPECT_EQ(receive(), "READY=1\nSTATUS=listening");
}

TEST_F(notify_socket, a_socket_nobody_listens_on_is_an_error_naming_it) {
  ::setenv("NOTIFY_SOCKET", (dir_.path() / "nobody").c_str(), 1);
  const auto st = notify_service_manager("READY=1");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("nobody"), std::string::npos) << st.message();
}

TEST(service_notify, without_notify_socket_nothing_is_done) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(notify_service_manager("READY=1").ok());
}

TEST(service_notify, a_value_that_is_no_socket_name_is_refused) {
  ::setenv("NOTIFY_SOCKET", "relative/path", 1);
  const auto st = notify_service_manager("READY=1");
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("relative/path"), std::string::npos);
}

}  // namespace
}  // namespace rekindle
