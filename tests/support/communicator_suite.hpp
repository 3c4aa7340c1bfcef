#pragma once

// The test suite every communicator backend runs (ring over UCX, NCCL). A backend provides a
// comm_backend: how to build a connected group of N ranks in this process, and how to move test
// data into and out of the memory it computes in. Include this header in one test file per
// backend and instantiate `communicator_suite` with its parameters.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/expected.hpp"
#include "transport/communicator.hpp"
#include "transport/reduce.hpp"

namespace rekindle::testing {

struct comm_backend {
  std::string name;
  /// A connected group of n ranks with the given call deadline, or errc::unsupported with the
  /// reason to skip (e.g. too few GPUs).
  std::function<expected<std::vector<std::unique_ptr<transport::communicator>>>(int n, std::chrono::nanoseconds timeout)>
      make_group;
  /// A buffer of `bytes` in the memory rank `rank` computes in.
  std::function<std::shared_ptr<void>(int rank, std::size_t bytes)> alloc;
  std::function<void(int rank, void* dst, const void* src, std::size_t bytes)> upload;
  std::function<void(int rank, void* dst, const void* src, std::size_t bytes)> download;
};

struct suite_param {
  comm_backend backend;
  int ranks = 1;
};

inline void PrintTo(const suite_param& p, std::ostream* os) { *os << p.backend.name << ", " << p.ranks << " ranks"; }

inline std::string suite_param_name(const ::testing::TestParamInfo<suite_param>& info) {
  return info.param.backend.name + "_" + std::to_string(info.param.ranks) + "ranks";
}

class communicator_suite : public ::testing::TestWithParam<suite_param> {
 protected:
  using comms_t = std::vector<std::unique_ptr<transport::communicator>>;

  void SetUp() override {
    auto group = GetParam().backend.make_group(GetParam().ranks, std::chrono::seconds{60});
    if (!group) {
      if (group.error().code() == errc::unsupported)
        GTEST_SKIP() << group.error().message();
      FAIL() << group.error();
    }
    comms_ = std::move(*group);
  }

  /// Runs fn(rank) on one thread per rank, as separate processes would.
  void on_each(const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n(); ++r)
      threads.emplace_back([&, r] { fn(r); });
    for (auto& t : threads)
      t.join();
  }

  /// Uploads `host` for rank r, runs `call` on the backend buffer, downloads the result.
  template <class T, class Call>
  void round_trip(int r, std::vector<T>& host, Call call) {
    const auto& b = GetParam().backend;
    const std::size_t bytes = host.size() * sizeof(T);
    auto buf = b.alloc(r, std::max<std::size_t>(bytes, 1));
    b.upload(r, buf.get(), host.data(), bytes);
    call(buf.get());
    b.download(r, host.data(), buf.get(), bytes);
  }

  int n() const { return GetParam().ranks; }
  transport::communicator& comm(int r) { return *comms_[static_cast<std::size_t>(r)]; }

  static float value_of(int rank, std::size_t i) {
    // Varied magnitudes so the reduction order matters to the last bit.
    return static_cast<float>(std::sin(static_cast<double>(i) * 0.37 + rank) * std::pow(10.0, static_cast<int>(i % 7) - 3));
  }

  comms_t comms_;
};

TEST_P(communicator_suite, allreduce_matches_float64_reference_and_is_bitwise_reproducible) {
  using transport::reduce_op;
  for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{7}, static_cast<std::size_t>(n()) + 1,
                            std::size_t{1000}, std::size_t{100003}, std::size_t{3} << 20}) {
    for (auto op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
      std::vector<std::vector<float>> first(static_cast<std::size_t>(n())), second(static_cast<std::size_t>(n()));
      for (auto* out : {&first, &second}) {
        on_each([&](int r) {
          std::vector<float> data(count);
          for (std::size_t i = 0; i < count; ++i)
            data[i] = value_of(r, i);
          round_trip(r, data, [&](void* buf) {
            auto st = comm(r).allreduce(buf, count, transport::dtype::f32, op);
            ASSERT_TRUE(st.ok()) << st << " count " << count << " op " << to_string(op);
          });
          (*out)[static_cast<std::size_t>(r)] = std::move(data);
        });
      }
      ASSERT_FALSE(HasFatalFailure());
      for (std::size_t i = 0; i < count; ++i) {
        double ref = op == reduce_op::max ? -INFINITY : 0.0;
        double magnitude = 0;  // float32 summation error is bounded relative to the sum of |x|
        for (int r = 0; r < n(); ++r) {
          ref = op == reduce_op::max ? std::max(ref, static_cast<double>(value_of(r, i))) : ref + value_of(r, i);
          magnitude += std::fabs(value_of(r, i));
        }
        if (op == reduce_op::average) {
          ref /= n();
          magnitude /= n();
        }
        ASSERT_NEAR(first[0][i], ref, 2.0 * n() * 1.2e-7 * magnitude + 1e-30) << "count " << count << " element " << i;
      }
      for (int r = 1; r < n(); ++r)
        ASSERT_EQ(std::memcmp(first[0].data(), first[static_cast<std::size_t>(r)].data(), count * 4), 0)
            << "ranks disagree, count " << count;
      ASSERT_EQ(std::memcmp(first[0].data(), second[0].data(), count * 4), 0) << "a rerun differs, count " << count;
    }
  }
}

TEST_P(communicator_suite, bf16_allreduce) {
  const std::size_t count = 50001;
  std::vector<std::vector<std::uint16_t>> results(static_cast<std::size_t>(n()));
  on_each([&](int r) {
    std::vector<std::uint16_t> data(count);
    for (std::size_t i = 0; i < count; ++i)
      data[i] = transport::float_to_bf16(static_cast<float>(i % 100) * 0.25f + static_cast<float>(r));
    round_trip(r, data, [&](void* buf) {
      auto st = comm(r).allreduce(buf, count, transport::dtype::bf16, transport::reduce_op::sum);
      ASSERT_TRUE(st.ok()) << st;
    });
    results[static_cast<std::size_t>(r)] = std::move(data);
  });
  ASSERT_FALSE(HasFatalFailure());
  for (std::size_t i = 0; i < count; ++i) {
    double ref = 0;
    for (int r = 0; r < n(); ++r)
      ref += static_cast<double>(i % 100) * 0.25 + r;
    ASSERT_NEAR(transport::bf16_to_float(results[0][i]), ref, std::fabs(ref) * 0.02 + 0.01) << i;
    for (int r = 1; r < n(); ++r)
      ASSERT_EQ(results[0][i], results[static_cast<std::size_t>(r)][i]);
  }
}

TEST_P(communicator_suite, reduce_scatter_allgather_broadcast_barrier) {
  const auto f32 = transport::dtype::f32;
  for (std::size_t block : {std::size_t{1}, std::size_t{3}, std::size_t{5000}, std::size_t{1} << 18}) {
    on_each([&](int r) {
      const auto& b = GetParam().backend;
      const std::size_t all_count = block * static_cast<std::size_t>(n());
      std::vector<float> send(all_count);
      for (std::size_t i = 0; i < send.size(); ++i)
        send[i] = static_cast<float>((i % 1000) + 1000 * static_cast<std::size_t>(r));
      auto send_buf = b.alloc(r, all_count * 4);
      auto recv_buf = b.alloc(r, block * 4);
      b.upload(r, send_buf.get(), send.data(), all_count * 4);
      auto st = comm(r).reduce_scatter(send_buf.get(), recv_buf.get(), block, f32, transport::reduce_op::sum);
      ASSERT_TRUE(st.ok()) << st;
      std::vector<float> recv(block);
      b.download(r, recv.data(), recv_buf.get(), block * 4);
      for (std::size_t i = 0; i < block; ++i) {
        const std::size_t global = static_cast<std::size_t>(r) * block + i;
        const double ref = n() * static_cast<double>(global % 1000) + 1000.0 * n() * (n() - 1) / 2;
        ASSERT_EQ(recv[i], static_cast<float>(ref)) << "rank " << r << " element " << i;
      }
      // Gather every rank's block back, sending from inside the output buffer.
      std::vector<float> all(all_count, -1.0f);
      for (std::size_t i = 0; i < block; ++i)
        all[static_cast<std::size_t>(r) * block + i] = static_cast<float>(r * 10 + static_cast<int>(i % 10));
      auto all_buf = b.alloc(r, all_count * 4);
      b.upload(r, all_buf.get(), all.data(), all_count * 4);
      auto* base = static_cast<std::byte*>(all_buf.get());
      st = comm(r).allgather(base + static_cast<std::size_t>(r) * block * 4, base, block, f32);
      ASSERT_TRUE(st.ok()) << st;
      b.download(r, all.data(), all_buf.get(), all_count * 4);
      for (int q = 0; q < n(); ++q)
        for (std::size_t i = 0; i < block; ++i)
          ASSERT_EQ(all[static_cast<std::size_t>(q) * block + i], static_cast<float>(q * 10 + static_cast<int>(i % 10)));
      for (int root = 0; root < n(); ++root) {
        std::vector<float> data(block, static_cast<float>(r == root ? 42 + root : -1));
        round_trip(r, data, [&](void* buf) {
          auto bst = comm(r).broadcast(buf, block, f32, root);
          ASSERT_TRUE(bst.ok()) << bst;
        });
        for (float v : data)
          ASSERT_EQ(v, static_cast<float>(42 + root));
      }
      st = comm(r).barrier();
      ASSERT_TRUE(st.ok()) << st;
    });
  }
}

TEST_P(communicator_suite, abort_from_another_thread_unblocks_a_call) {
  if (n() < 2)
    GTEST_SKIP() << "needs a second rank that never joins";
  const auto& b = GetParam().backend;
  std::vector<float> host(1000, 1.0f);
  auto buf = b.alloc(0, host.size() * 4);
  b.upload(0, buf.get(), host.data(), host.size() * 4);
  const auto start = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds{300});
    comm(0).abort();
  });
  // Rank 1 never joins, so only abort() can end this call (the deadline is 60 s).
  auto st = comm(0).allreduce(buf.get(), host.size(), transport::dtype::f32, transport::reduce_op::sum);
  aborter.join();
  EXPECT_EQ(st.code(), errc::aborted) << st;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{30});
  EXPECT_TRUE(comm(0).aborted());
  EXPECT_EQ(comm(0).barrier().code(), errc::aborted) << "a broken communicator stays broken";
}

TEST_P(communicator_suite, missing_peer_times_out_with_a_precise_error) {
  if (n() < 2)
    GTEST_SKIP() << "needs a second rank that never joins";
  auto group = GetParam().backend.make_group(n(), std::chrono::milliseconds{500});
  ASSERT_TRUE(group) << group.error();
  auto& c = *(*group)[0];
  const auto& b = GetParam().backend;
  std::vector<float> host(100000, 1.0f);
  auto buf = b.alloc(0, host.size() * 4);
  b.upload(0, buf.get(), host.data(), host.size() * 4);
  auto st = c.allreduce(buf.get(), host.size(), transport::dtype::f32, transport::reduce_op::sum);
  EXPECT_EQ(st.code(), errc::timeout) << st;
  EXPECT_NE(st.message().find("within 500 ms"), std::string::npos) << st;
  EXPECT_FALSE(c.barrier().ok()) << "a broken communicator stays broken";
}

TEST_P(communicator_suite, point_to_point_arrives_in_order_both_ways_beside_collectives) {
  if (!comm(0).point_to_point())
    GTEST_SKIP() << GetParam().backend.name << " has no point-to-point sends";
  if (n() < 2)
    GTEST_SKIP() << "needs a peer";
  // Sizes from one byte to several chunks; each rank sends all its messages to both neighbours
  // before it receives any (sends must not wait for the receiver), then the ring reduces.
  const std::vector<std::size_t> sizes{1, 4096, 100003, std::size_t{3} << 20};
  const auto fill = [](int from, int to, std::size_t k, std::size_t bytes) {
    std::vector<std::uint8_t> v(bytes);
    for (std::size_t i = 0; i < bytes; ++i)
      v[i] = static_cast<std::uint8_t>(from * 31 + to * 7 + k * 13 + i);
    return v;
  };
  for (int round = 0; round < 2; ++round) {
    on_each([&](int r) {
      const int right = (r + 1) % n();
      const int left = (r + n() - 1) % n();
      for (std::size_t k = 0; k < sizes.size(); ++k)
        for (int to : {right, left}) {
          if (to == right && to == left && k % 2 == 1)
            continue;  // with two ranks both neighbours are one: send each message once
          auto v = fill(r, to, k, sizes[k]);
          ASSERT_TRUE(comm(r).send(v.data(), v.size(), to).ok());
        }
      for (std::size_t k = 0; k < sizes.size(); ++k)
        for (int from : {left, right}) {
          if (from == right && from == left && k % 2 == 1)
            continue;
          std::vector<std::uint8_t> got(sizes[k]);
          const status st = comm(r).recv(got.data(), got.size(), from);
          ASSERT_TRUE(st.ok()) << st;
          ASSERT_TRUE(got == fill(from, r, k, sizes[k])) << "message " << k << " from rank " << from;
        }
      std::vector<float> one{1.0f};
      round_trip(r, one, [&](void* buf) {
        ASSERT_TRUE(comm(r).allreduce(buf, 1, transport::dtype::f32, transport::reduce_op::sum).ok());
      });
      EXPECT_EQ(one[0], static_cast<float>(n()));
    });
    ASSERT_FALSE(HasFatalFailure());
  }
  int v = 0;
  EXPECT_EQ(comm(0).send(&v, sizeof v, 0).code(), errc::invalid_argument) << "not to itself";
  EXPECT_EQ(comm(0).recv(&v, sizeof v, n()).code(), errc::invalid_argument) << "not outside the world";
}

TEST_P(communicator_suite, point_to_point_from_a_silent_peer_or_of_another_size_fails) {
  if (!comm(0).point_to_point() || n() < 2)
    GTEST_SKIP() << "needs point-to-point sends and a peer";
  auto group = GetParam().backend.make_group(n(), std::chrono::milliseconds{500});
  ASSERT_TRUE(group) << group.error();
  auto& c = *(*group)[0];
  int v = 0;
  const status silent = c.recv(&v, sizeof v, 1);
  EXPECT_EQ(silent.code(), errc::timeout) << silent;
  EXPECT_NE(silent.message().find("500 ms for message 0 from rank 1"), std::string::npos) << silent;
  EXPECT_FALSE(c.barrier().ok()) << "a broken communicator stays broken";
  // Eight bytes sent, four expected: an error, not a short read. The sender then waits in a
  // receive of its own, which moves its send along, until the deadline.
  auto other = GetParam().backend.make_group(n(), std::chrono::seconds{1});
  ASSERT_TRUE(other) << other.error();
  status wrong;
  std::thread sender([&] {
    const std::int64_t big = 42;
    ASSERT_TRUE((*other)[1]->send(&big, sizeof big, 0).ok());
    int none = 0;
    (void)(*other)[1]->recv(&none, sizeof none, 0);
  });
  wrong = (*other)[0]->recv(&v, sizeof v, 1);
  sender.join();
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.code(), errc::timeout) << wrong;
  EXPECT_FALSE((*other)[0]->barrier().ok()) << "a broken communicator stays broken";
}

}  // namespace rekindle::testing
