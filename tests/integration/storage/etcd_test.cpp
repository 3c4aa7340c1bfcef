// The etcd client against a real etcd server: the lease the supervisor's leadership lives on.

#include "storage/etcd.hpp"

#include <gtest/gtest.h>

#include "tests/support/etcd.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

namespace rekindle::storage {
namespace {

using namespace std::chrono_literals;

struct etcd_fixture : ::testing::Test {
  testing::temp_dir dir{"rekindle-etcd"};
  std::unique_ptr<testing::etcd_server> server;

  void SetUp() override {
    if (auto why = testing::etcd_server::missing())
      GTEST_SKIP() << *why;
    server = std::make_unique<testing::etcd_server>(dir.path());
    ASSERT_TRUE(server->ready()) << testing::read_file(server->log());
  }
  etcd_client client(std::chrono::milliseconds timeout = 5s) const {
    return etcd_client{"127.0.0.1", server->client_port(), timeout};
  }
};

TEST_F(etcd_fixture, one_lease_holds_the_key_and_the_next_holder_gets_a_larger_revision) {
  auto c = client();
  auto a = c.grant(10s);
  auto b = c.grant(10s);
  ASSERT_TRUE(a.has_value()) << a.to_status();
  ASSERT_TRUE(b.has_value()) << b.to_status();
  EXPECT_NE(*a, *b);

  auto first = c.create("/rekindle/job/leader", "n0 10.0.0.1:7400", *a);
  ASSERT_TRUE(first.has_value()) << first.to_status();
  EXPECT_TRUE(first->created);
  EXPECT_GT(first->current.create_revision, 0);

  auto second = c.create("/rekindle/job/leader", "n1 10.0.0.2:7400", *b);
  ASSERT_TRUE(second.has_value()) << second.to_status();
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->current.value, "n0 10.0.0.1:7400");
  EXPECT_EQ(second->current.lease, *a);
  EXPECT_EQ(second->current.create_revision, first->current.create_revision);

  auto left = c.keep_alive(*a);
  ASSERT_TRUE(left.has_value()) << left.to_status();
  EXPECT_GT(left->count(), 0);

  // The holder's lease ends: the key goes with it and the next holder's revision is larger.
  ASSERT_TRUE(c.revoke(*a).ok());
  auto gone = c.get("/rekindle/job/leader");
  ASSERT_TRUE(gone.has_value()) << gone.to_status();
  EXPECT_FALSE(gone->has_value());
  auto third = c.create("/rekindle/job/leader", "n1 10.0.0.2:7400", *b);
  ASSERT_TRUE(third.has_value()) << third.to_status();
  EXPECT_TRUE(third->created);
  EXPECT_GT(third->current.create_revision, first->current.create_revision);
  auto now = c.get("/rekindle/job/leader");
  ASSERT_TRUE(now.has_value() && now->has_value());
  EXPECT_EQ((*now)->value, "n1 10.0.0.2:7400");
  EXPECT_EQ((*now)->create_revision, third->current.create_revision);
}

TEST_F(etcd_fixture, a_lease_not_renewed_expires_and_takes_the_key_with_it) {
  auto c = client();
  auto lease = c.grant(2s);
  ASSERT_TRUE(lease.has_value()) << lease.to_status();
  ASSERT_TRUE(c.create("/rekindle/job/leader", "n0", *lease).has_value());
  ASSERT_TRUE(testing::wait_until(
      [&] {
        auto k = c.get("/rekindle/job/leader");
        return k && !k->has_value();
      },
      30s));
  auto renewed = c.keep_alive(*lease);
  EXPECT_EQ(renewed.to_status().code(), errc::not_found) << renewed.to_status();
}

TEST_F(etcd_fixture, an_etcd_that_is_gone_or_silent_is_an_error_in_bounded_time) {
  server->pause();
  auto c = client(500ms);
  const auto start = std::chrono::steady_clock::now();
  auto silent = c.grant(5s);
  EXPECT_EQ(silent.to_status().code(), errc::timeout) << silent.to_status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  server->resume();
  server->kill();
  auto gone = c.get("/rekindle/job/leader");
  EXPECT_EQ(gone.to_status().code(), errc::unavailable) << gone.to_status();
  EXPECT_NE(gone.to_status().message().find("etcd at 127.0.0.1:"), std::string::npos) << gone.to_status();
}

}  // namespace
}  // namespace rekindle::storage
