#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <thread>

#include "tests/support/communicator_suite.hpp"
#include "transport/ring_communicator.hpp"

namespace rekindle::transport {
namespace {

using namespace std::chrono_literals;

ring_options test_options(std::size_t chunk, std::chrono::nanoseconds timeout) {
  ring_options o;
  o.chunk_size = chunk;
  o.timeout = timeout;
  o.net_devices = "lo";
  return o;
}

// N ranks as threads of this process, each with its own UCX worker, in host memory.
testing::comm_backend ring_backend(std::size_t chunk) {
  testing::comm_backend b;
  b.name = "ring_chunk" + std::to_string(chunk);
  b.make_group = [chunk](int n, std::chrono::nanoseconds timeout)
      -> expected<std::vector<std::unique_ptr<communicator>>> {
    std::vector<std::unique_ptr<ring_communicator>> rings;
    std::vector<std::vector<std::byte>> addresses;
    for (int r = 0; r < n; ++r) {
      RK_ASSIGN_OR_RETURN(auto c, ring_communicator::create(r, n, test_options(chunk, timeout)));
      addresses.push_back(c->address());
      rings.push_back(std::move(c));
    }
    std::vector<status> results(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] { results[static_cast<std::size_t>(r)] = rings[static_cast<std::size_t>(r)]->connect(addresses); });
    for (auto& t : threads)
      t.join();
    for (const auto& s : results)
      RK_RETURN_IF_ERROR(s);
    std::vector<std::unique_ptr<communicator>> out;
    for (auto& r : rings)
      out.push_back(std::move(r));
    return out;
  };
  b.alloc = [](int, std::size_t bytes) { return std::shared_ptr<void>(std::malloc(bytes), std::free); };
  b.upload = [](int, void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); };
  b.download = b.upload;
  return b;
}

using testing::communicator_suite;
INSTANTIATE_TEST_SUITE_P(ring, communicator_suite,
                         ::testing::Values(testing::suite_param{ring_backend(16 << 10), 1},
                                           testing::suite_param{ring_backend(16 << 10), 2},
                                           testing::suite_param{ring_backend(4096), 3},
                                           testing::suite_param{ring_backend(64 << 10), 4}),
                         testing::suite_param_name);

TEST(ring, bad_arguments) {
  EXPECT_FALSE(ring_communicator::create(3, 3, test_options(1 << 20, 10s)));
  EXPECT_FALSE(ring_communicator::create(0, 0, test_options(1 << 20, 10s)));
  auto c = ring_communicator::create(0, 2, test_options(1 << 20, 10s));
  ASSERT_TRUE(c);
  std::vector<float> data(4);
  EXPECT_EQ((*c)->allreduce(data.data(), 4, dtype::f32, reduce_op::sum).code(), errc::failed_precondition);
  EXPECT_EQ((*c)->connect({(*c)->address()}).code(), errc::invalid_argument);
  EXPECT_FALSE((*c)->device_memory());
}

}  // namespace
}  // namespace rekindle::transport

namespace rekindle::transport {
namespace {

// Epoch after epoch on the same resources, as a worker process does: each generation's
// communicator reduces correctly, and one broken by a missing peer leaves the next unharmed.
TEST(ring_resources, communicators_of_successive_generations_share_one_worker) {
  const int n = 3;
  std::vector<std::shared_ptr<ring_resources>> res;
  for (int r = 0; r < n; ++r) {
    auto made = ring_resources::create(test_options(64 << 10, 30s));
    ASSERT_TRUE(made) << made.error();
    res.push_back(std::move(*made));
  }
  for (std::uint32_t gen = 1; gen <= 4; ++gen) {
    auto opts = test_options(64 << 10, gen == 2 ? 500ms : 30s);
    opts.generation = gen;
    std::vector<std::unique_ptr<ring_communicator>> comms;
    std::vector<std::vector<std::byte>> addresses;
    for (int r = 0; r < n; ++r) {
      auto c = ring_communicator::create(res[static_cast<std::size_t>(r)], r, n, opts);
      ASSERT_TRUE(c) << c.error();
      addresses.push_back((*c)->address());
      comms.push_back(std::move(*c));
    }
    std::vector<std::thread> threads;
    std::vector<status> results(n);
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        auto& c = *comms[static_cast<std::size_t>(r)];
        results[static_cast<std::size_t>(r)] = c.connect(addresses);
        if (!results[static_cast<std::size_t>(r)].ok())
          return;
        if (gen == 2 && r == 1)
          return;  // generation 2: rank 1 leaves, the others time out
        std::vector<float> data(300000, static_cast<float>(r + gen));
        results[static_cast<std::size_t>(r)] = c.allreduce(data.data(), data.size(), dtype::f32, reduce_op::sum);
        for (float v : data)
          if (results[static_cast<std::size_t>(r)].ok() && v != static_cast<float>(3 + 3 * gen)) {
            results[static_cast<std::size_t>(r)] = status{errc::internal, "wrong sum"};
            break;
          }
        (void)res[static_cast<std::size_t>(r)]->prepare();
      });
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < n; ++r) {
      if (gen == 2 && r != 1)
        EXPECT_EQ(results[static_cast<std::size_t>(r)].code(), errc::timeout) << "generation " << gen << " rank " << r;
      else
        EXPECT_TRUE(results[static_cast<std::size_t>(r)].ok()) << "generation " << gen << " rank " << r << ": "
                                                                << results[static_cast<std::size_t>(r)];
    }
  }
}

}  // namespace
}  // namespace rekindle::transport
