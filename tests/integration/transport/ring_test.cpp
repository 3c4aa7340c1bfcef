#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "transport/reduce.hpp"
#include "transport/ring_communicator.hpp"

namespace rekindle::transport {
namespace {

using namespace std::chrono_literals;

ring_options test_options(std::size_t chunk = 64 << 10, std::chrono::nanoseconds timeout = 60s) {
  ring_options o;
  o.chunk_size = chunk;
  o.timeout = timeout;
  o.net_devices = "lo";
  return o;
}

// N ranks as threads of this process, each with its own UCX worker.
std::vector<std::unique_ptr<ring_communicator>> make_ring(int n, const ring_options& options) {
  std::vector<std::unique_ptr<ring_communicator>> comms;
  std::vector<std::vector<std::byte>> addresses;
  for (int r = 0; r < n; ++r) {
    auto c = ring_communicator::create(r, n, options);
    EXPECT_TRUE(c) << c.error();
    addresses.push_back((*c)->address());
    comms.push_back(std::move(*c));
  }
  std::vector<std::thread> threads;
  std::vector<status> results(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { results[static_cast<std::size_t>(r)] = comms[static_cast<std::size_t>(r)]->connect(addresses); });
  for (auto& t : threads)
    t.join();
  for (const auto& s : results)
    EXPECT_TRUE(s.ok()) << s;
  return comms;
}

void on_each(std::vector<std::unique_ptr<ring_communicator>>& comms, const std::function<void(int, ring_communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { fn(static_cast<int>(r), *comms[r]); });
  for (auto& t : threads)
    t.join();
}

float value_of(int rank, std::size_t i) {
  // Varied magnitudes so the reduction order matters to the last bit.
  return static_cast<float>(std::sin(static_cast<double>(i) * 0.37 + rank) * std::pow(10.0, static_cast<int>(i % 7) - 3));
}

class ring_sizes : public ::testing::TestWithParam<int> {};

TEST_P(ring_sizes, allreduce_matches_float64_reference_and_is_bitwise_reproducible) {
  const int n = GetParam();
  auto comms = make_ring(n, test_options(16 << 10));
  for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{7}, static_cast<std::size_t>(n) + 1,
                            std::size_t{1000}, std::size_t{100003}, std::size_t{3} << 20}) {
    for (auto op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
      std::vector<std::vector<float>> first(static_cast<std::size_t>(n)), second(static_cast<std::size_t>(n));
      for (auto* out : {&first, &second}) {
        on_each(comms, [&](int r, ring_communicator& c) {
          std::vector<float> data(count);
          for (std::size_t i = 0; i < count; ++i)
            data[i] = value_of(r, i);
          auto st = c.allreduce(data.data(), count, dtype::f32, op);
          ASSERT_TRUE(st.ok()) << st << " count " << count << " op " << to_string(op);
          (*out)[static_cast<std::size_t>(r)] = std::move(data);
        });
      }
      for (std::size_t i = 0; i < count; ++i) {
        double ref = op == reduce_op::max ? -INFINITY : 0.0;
        double magnitude = 0;  // float32 summation error is bounded relative to the sum of |x|
        for (int r = 0; r < n; ++r) {
          ref = op == reduce_op::max ? std::max(ref, static_cast<double>(value_of(r, i))) : ref + value_of(r, i);
          magnitude += std::fabs(value_of(r, i));
        }
        if (op == reduce_op::average) {
          ref /= n;
          magnitude /= n;
        }
        const double got = first[0][i];
        ASSERT_NEAR(got, ref, 2.0 * n * 1.2e-7 * magnitude + 1e-30) << "count " << count << " element " << i;
      }
      for (int r = 1; r < n; ++r)
        ASSERT_EQ(std::memcmp(first[0].data(), first[static_cast<std::size_t>(r)].data(), count * 4), 0)
            << "ranks disagree, count " << count;
      ASSERT_EQ(std::memcmp(first[0].data(), second[0].data(), count * 4), 0) << "a rerun differs, count " << count;
    }
  }
}

TEST_P(ring_sizes, bf16_allreduce) {
  const int n = GetParam();
  auto comms = make_ring(n, test_options(4096));
  const std::size_t count = 50001;
  std::vector<std::vector<std::uint16_t>> results(static_cast<std::size_t>(n));
  on_each(comms, [&](int r, ring_communicator& c) {
    std::vector<std::uint16_t> data(count);
    for (std::size_t i = 0; i < count; ++i)
      data[i] = float_to_bf16(static_cast<float>(i % 100) * 0.25f + static_cast<float>(r));
    ASSERT_TRUE(c.allreduce(data.data(), count, dtype::bf16, reduce_op::sum).ok());
    results[static_cast<std::size_t>(r)] = std::move(data);
  });
  for (std::size_t i = 0; i < count; ++i) {
    double ref = 0;
    for (int r = 0; r < n; ++r)
      ref += static_cast<double>(i % 100) * 0.25 + r;
    ASSERT_NEAR(bf16_to_float(results[0][i]), ref, std::fabs(ref) * 0.02 + 0.01) << i;
    for (int r = 1; r < n; ++r)
      ASSERT_EQ(results[0][i], results[static_cast<std::size_t>(r)][i]);
  }
}

TEST_P(ring_sizes, reduce_scatter_allgather_broadcast_barrier) {
  const int n = GetParam();
  auto comms = make_ring(n, test_options(8192));
  for (std::size_t block : {std::size_t{1}, std::size_t{3}, std::size_t{5000}, std::size_t{1} << 18}) {
    on_each(comms, [&](int r, ring_communicator& c) {
      std::vector<float> send(block * static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < send.size(); ++i)
        send[i] = static_cast<float>((i % 1000) + 1000 * static_cast<std::size_t>(r));
      std::vector<float> recv(block);
      ASSERT_TRUE(c.reduce_scatter(send.data(), recv.data(), block, dtype::f32, reduce_op::sum).ok());
      for (std::size_t i = 0; i < block; ++i) {
        const std::size_t global = static_cast<std::size_t>(r) * block + i;
        const double ref = n * static_cast<double>(global % 1000) + 1000.0 * n * (n - 1) / 2;
        ASSERT_EQ(recv[i], static_cast<float>(ref)) << "rank " << r << " element " << i;
      }
      // Gather every rank's block back, sending from inside the output buffer.
      std::vector<float> all(block * static_cast<std::size_t>(n), -1.0f);
      for (std::size_t i = 0; i < block; ++i)
        all[static_cast<std::size_t>(r) * block + i] = static_cast<float>(r * 10 + static_cast<int>(i % 10));
      ASSERT_TRUE(c.allgather(all.data() + static_cast<std::size_t>(r) * block, all.data(), block, dtype::f32).ok());
      for (int q = 0; q < n; ++q)
        for (std::size_t i = 0; i < block; ++i)
          ASSERT_EQ(all[static_cast<std::size_t>(q) * block + i], static_cast<float>(q * 10 + static_cast<int>(i % 10)));
      for (int root = 0; root < n; ++root) {
        std::vector<float> data(block, static_cast<float>(r == root ? 42 + root : -1));
        ASSERT_TRUE(c.broadcast(data.data(), block, dtype::f32, root).ok());
        for (float v : data)
          ASSERT_EQ(v, static_cast<float>(42 + root));
      }
      ASSERT_TRUE(c.barrier().ok());
    });
  }
}

INSTANTIATE_TEST_SUITE_P(ranks, ring_sizes, ::testing::Values(1, 2, 3, 4));

TEST(ring, abort_from_another_thread_unblocks_a_call) {
  auto comms = make_ring(2, test_options(64 << 10, 120s));
  std::vector<float> data(1000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(300ms);
    comms[0]->abort();
  });
  // Rank 1 never joins, so only abort() can end this call.
  auto st = comms[0]->allreduce(data.data(), data.size(), dtype::f32, reduce_op::sum);
  aborter.join();
  EXPECT_EQ(st.code(), errc::aborted) << st;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  EXPECT_TRUE(comms[0]->aborted());
  EXPECT_EQ(comms[0]->barrier().code(), errc::aborted) << "a broken communicator stays broken";
}

TEST(ring, missing_peer_times_out_with_a_precise_error) {
  auto comms = make_ring(3, test_options(64 << 10, 500ms));
  std::vector<float> data(100000, 1.0f);
  auto st = comms[1]->allreduce(data.data(), data.size(), dtype::f32, reduce_op::sum);
  EXPECT_EQ(st.code(), errc::timeout) << st;
  EXPECT_NE(st.message().find("did not complete within 500 ms"), std::string::npos) << st;
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st;
  EXPECT_EQ(comms[1]->barrier().code(), errc::timeout);
}

TEST(ring, bad_arguments) {
  EXPECT_FALSE(ring_communicator::create(3, 3, test_options()));
  EXPECT_FALSE(ring_communicator::create(0, 0, test_options()));
  auto c = ring_communicator::create(0, 2, test_options());
  ASSERT_TRUE(c);
  std::vector<float> data(4);
  EXPECT_EQ((*c)->allreduce(data.data(), 4, dtype::f32, reduce_op::sum).code(), errc::failed_precondition);
  EXPECT_EQ((*c)->connect({(*c)->address()}).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace rekindle::transport
