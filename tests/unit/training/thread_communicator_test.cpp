#include "tests/support/thread_communicator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace rekindle::testing {
namespace {

using namespace std::chrono_literals;
using transport::dtype;
using transport::reduce_op;

TEST(thread_communicator, allreduce_sums_in_rank_order_on_every_rank) {
  thread_group g(3);
  std::vector<std::vector<float>> out(3);
  g.run([&](int r, transport::communicator& c) {
    // 1e8 + 1 - 1e8 in float depends on the order: rank order gives (1e8 + 1) - 1e8 = 0.
    std::vector<float> v = {r == 0 ? 1e8f : r == 1 ? 1.0f : -1e8f, static_cast<float>(r + 1)};
    ASSERT_TRUE(c.allreduce(v.data(), v.size(), dtype::f32, reduce_op::sum).ok());
    out[static_cast<std::size_t>(r)] = v;
  });
  for (const auto& v : out) {
    EXPECT_EQ(v[0], (1e8f + 1.0f) - 1e8f);
    EXPECT_EQ(v[1], 6.0f);
  }
}

TEST(thread_communicator, average_max_and_bf16) {
  thread_group g(4);
  g.run([&](int r, transport::communicator& c) {
    float a = static_cast<float>(r);
    ASSERT_TRUE(c.allreduce(&a, 1, dtype::f32, reduce_op::average).ok());
    EXPECT_EQ(a, 1.5f);
    float m = static_cast<float>(r * r);
    ASSERT_TRUE(c.allreduce(&m, 1, dtype::f32, reduce_op::max).ok());
    EXPECT_EQ(m, 9.0f);
    // bf16 rounds after every addition: 256 + 1 rounds back to 256 (8 significant bits), so
    // 256 + 1 + 1 + 1 stays 256, where one rounding at the end would give 260.
    const float mine = r == 0 ? 256.0f : 1.0f;
    auto b = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(mine) >> 16);
    ASSERT_TRUE(c.allreduce(&b, 1, dtype::bf16, reduce_op::sum).ok());
    EXPECT_EQ(std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16), 256.0f);
  });
}

TEST(thread_communicator, reduce_scatter_allgather_broadcast) {
  thread_group g(2);
  g.run([&](int r, transport::communicator& c) {
    const std::vector<float> send = {1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r};
    std::vector<float> recv(2);
    ASSERT_TRUE(c.reduce_scatter(send.data(), recv.data(), 2, dtype::f32, reduce_op::sum).ok());
    EXPECT_EQ(recv, (r == 0 ? std::vector<float>{3, 5} : std::vector<float>{7, 9}));
    // allgather with send aliasing the own block of recv.
    std::vector<float> all(4, -1.0f);
    all[static_cast<std::size_t>(2 * r)] = 10.0f * r;
    all[static_cast<std::size_t>(2 * r + 1)] = 10.0f * r + 1;
    ASSERT_TRUE(c.allgather(all.data() + 2 * r, all.data(), 2, dtype::f32).ok());
    EXPECT_EQ(all, (std::vector<float>{0, 1, 10, 11}));
    float b = r == 1 ? 42.0f : 0.0f;
    ASSERT_TRUE(c.broadcast(&b, 1, dtype::f32, 1).ok());
    EXPECT_EQ(b, 42.0f);
    EXPECT_TRUE(c.barrier().ok());
  });
}

TEST(thread_communicator, a_missing_peer_times_out_and_breaks_the_group) {
  thread_group g(2, 100ms);
  const auto start = std::chrono::steady_clock::now();
  const status s = g.rank(0).barrier();  // rank 1 never comes
  EXPECT_EQ(s.code(), errc::timeout) << s;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_EQ(g.rank(1).barrier().code(), errc::timeout);  // broken: fails at once
}

TEST(thread_communicator, abort_unblocks_peers_promptly) {
  thread_group g(3, 30s);
  std::atomic<int> waiting{0};
  std::vector<status> results(3);
  g.run([&](int r, transport::communicator& c) {
    if (r == 2) {
      while (waiting.load() < 2)
        std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(20ms);
      c.abort();
      results[2] = c.barrier();
      return;
    }
    ++waiting;
    float x = 1;
    results[static_cast<std::size_t>(r)] = c.allreduce(&x, 1, dtype::f32, reduce_op::sum);
  });
  EXPECT_EQ(results[0].code(), errc::peer_failed) << results[0];
  EXPECT_EQ(results[1].code(), errc::peer_failed) << results[1];
  EXPECT_EQ(results[2].code(), errc::aborted) << results[2];
  EXPECT_TRUE(g.rank(2).aborted());
  EXPECT_FALSE(g.rank(0).aborted());
}

TEST(thread_communicator, point_to_point_keeps_order_per_pair_and_buffers_sends) {
  thread_group g(3, 5s);
  std::vector<std::vector<int>> got(3);
  g.run([&](int r, transport::communicator& c) {
    ASSERT_TRUE(c.point_to_point());
    // Both neighbours send before they receive: sends do not wait for the receiver.
    const int right = (r + 1) % 3;
    const int left = (r + 2) % 3;
    for (int i = 0; i < 3; ++i) {
      const int v = 10 * r + i;
      ASSERT_TRUE(c.send(&v, sizeof v, right).ok());
    }
    for (int i = 0; i < 3; ++i) {
      int v = -1;
      ASSERT_TRUE(c.recv(&v, sizeof v, left).ok());
      got[static_cast<std::size_t>(r)].push_back(v);
    }
  });
  EXPECT_EQ(got[0], (std::vector<int>{20, 21, 22}));
  EXPECT_EQ(got[1], (std::vector<int>{0, 1, 2}));
  int v = 0;
  EXPECT_EQ(g.rank(0).send(&v, sizeof v, 0).code(), errc::invalid_argument) << "not to itself";
  EXPECT_EQ(g.rank(0).recv(&v, sizeof v, 3).code(), errc::invalid_argument) << "not outside the world";
}

TEST(thread_communicator, a_message_of_another_size_breaks_the_group) {
  thread_group g(2, 5s);
  const std::int64_t big = 7;
  ASSERT_TRUE(g.rank(0).send(&big, sizeof big, 1).ok());
  int small = 0;
  const status s = g.rank(1).recv(&small, sizeof small, 0);
  EXPECT_EQ(s.code(), errc::invalid_argument) << s;
  EXPECT_NE(s.message().find("expected 4 bytes from rank 0, the message holds 8"), std::string::npos) << s;
  EXPECT_FALSE(g.rank(0).barrier().ok()) << "the group is broken";
}

}  // namespace
}  // namespace rekindle::testing
