#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>
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

// Connects every ring of a group at once, as their processes would.
status connect_all(std::vector<std::unique_ptr<ring_communicator>>& rings, const std::vector<std::vector<std::byte>>& addresses) {
  std::vector<status> results(rings.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < rings.size(); ++r)
    threads.emplace_back([&, r] { results[r] = rings[r]->connect(addresses); });
  for (auto& t : threads)
    t.join();
  for (const auto& s : results)
    RK_RETURN_IF_ERROR(s);
  return {};
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
    RK_RETURN_IF_ERROR(connect_all(rings, addresses));
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

// First-fit pieces of one rank's shared buffer, in pages of 64 KiB; malloc when it is full (that
// rank's operand is then private, and every rank of the call runs the ring).
class shared_pool {
 public:
  explicit shared_pool(std::span<std::byte> memory) : memory_(memory), used_(memory.size() / page, false) {}

  std::shared_ptr<void> alloc(std::size_t bytes) {
    const std::size_t pages = (bytes + page - 1) / page;
    std::lock_guard lock{mutex_};
    for (std::size_t first = 0, run = 0; first + run < used_.size();) {
      if (used_[first + run]) {
        first += run + 1;
        run = 0;
      } else if (++run == pages) {
        std::fill_n(used_.begin() + static_cast<std::ptrdiff_t>(first), pages, true);
        return std::shared_ptr<void>(memory_.data() + first * page, [this, first, pages](void*) {
          std::lock_guard l{mutex_};
          std::fill_n(used_.begin() + static_cast<std::ptrdiff_t>(first), pages, false);
        });
      }
    }
    return std::shared_ptr<void>(std::malloc(bytes), std::free);
  }

 private:
  static constexpr std::size_t page = 64 << 10;
  std::mutex mutex_;
  std::span<std::byte> memory_;
  std::vector<bool> used_;
};

// As ring_backend, with the buffers in memory every rank maps (ring_resources::allocate_shared):
// the collectives read the peers' operands in place, and must give what the ring gives.
testing::comm_backend ring_shared_backend(std::size_t chunk) {
  struct state {
    std::vector<std::shared_ptr<ring_resources>> resources;
    std::vector<std::unique_ptr<shared_pool>> pools;
  };
  auto st = std::make_shared<state>();
  testing::comm_backend b;
  b.name = "ring_shared_chunk" + std::to_string(chunk);
  b.make_group = [chunk, st](int n, std::chrono::nanoseconds timeout) -> expected<std::vector<std::unique_ptr<communicator>>> {
    st->resources.clear();
    st->pools.clear();
    std::vector<std::unique_ptr<ring_communicator>> rings;
    std::vector<std::vector<std::byte>> addresses;
    for (int r = 0; r < n; ++r) {
      RK_ASSIGN_OR_RETURN(auto res, ring_resources::create(test_options(chunk, timeout)));
      RK_ASSIGN_OR_RETURN(auto memory, res->allocate_shared(std::size_t{48} << 20));
      st->pools.push_back(std::make_unique<shared_pool>(memory));
      RK_ASSIGN_OR_RETURN(auto c, ring_communicator::create(res, r, n, test_options(chunk, timeout)));
      st->resources.push_back(std::move(res));
      addresses.push_back(c->address());
      rings.push_back(std::move(c));
    }
    RK_RETURN_IF_ERROR(connect_all(rings, addresses));
    std::vector<std::unique_ptr<communicator>> out;
    for (auto& r : rings) {
      if (n > 1 && !r->reads_shared_buffers())
        return status{errc::internal, "the ranks of one host did not map each other's shared buffers"};
      out.push_back(std::move(r));
    }
    return out;
  };
  b.alloc = [st](int rank, std::size_t bytes) { return st->pools[static_cast<std::size_t>(rank)]->alloc(bytes); };
  b.upload = [](int, void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); };
  b.download = b.upload;
  return b;
}

using testing::communicator_suite;
INSTANTIATE_TEST_SUITE_P(ring, communicator_suite,
                         ::testing::Values(testing::suite_param{ring_backend(16 << 10), 1},
                                           testing::suite_param{ring_backend(16 << 10), 2},
                                           testing::suite_param{ring_backend(4096), 3},
                                           testing::suite_param{ring_backend(64 << 10), 4},
                                           testing::suite_param{ring_shared_backend(16 << 10), 2},
                                           testing::suite_param{ring_shared_backend(64 << 10), 3},
                                           testing::suite_param{ring_shared_backend(64 << 10), 4}),
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

namespace rekindle::transport {
namespace {

// The same inputs reduced through the ring (private operands) and in place (shared operands),
// and with one rank's operand private (every rank then runs the ring): the same bits, for every
// operation and type, with 2 ranks (one peer) and 3 (partial sums over two peers).
TEST(ring_shared_buffers, give_the_ring_s_result_to_the_bit) {
  for (const int n : {2, 3}) {
    const std::size_t count = 300007;  // segments of unequal lengths, over many 32 KiB blocks
    std::vector<std::shared_ptr<ring_resources>> res;
    std::vector<std::span<std::byte>> shared;
    std::vector<std::unique_ptr<ring_communicator>> comms;
    std::vector<std::vector<std::byte>> addresses;
    for (int r = 0; r < n; ++r) {
      auto made = ring_resources::create(test_options(64 << 10, 30s));
      ASSERT_TRUE(made) << made.error();
      auto memory = (*made)->allocate_shared(count * 4);
      ASSERT_TRUE(memory) << memory.error();
      shared.push_back(*memory);
      auto c = ring_communicator::create(*made, r, n, test_options(64 << 10, 30s));
      ASSERT_TRUE(c) << c.error();
      addresses.push_back((*c)->address());
      comms.push_back(std::move(*c));
      res.push_back(std::move(*made));
    }
    const auto value = [](int r, std::size_t i) {
      return static_cast<float>(std::sin(static_cast<double>(i) * 0.37 + r) * std::pow(10.0, static_cast<int>(i % 7) - 3));
    };
    // Runs `call` on every rank with its operand private or shared; returns each rank's bytes.
    const auto run = [&](std::size_t bytes, auto fill, auto call, auto is_shared) {
      std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(n));
      std::vector<std::thread> threads;
      std::vector<status> results(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          std::vector<std::byte> own(bytes);
          std::byte* buf = is_shared(r) ? shared[static_cast<std::size_t>(r)].data() : own.data();
          fill(r, buf);
          results[static_cast<std::size_t>(r)] = call(*comms[static_cast<std::size_t>(r)], r, buf);
          out[static_cast<std::size_t>(r)].assign(buf, buf + bytes);
        });
      for (auto& t : threads)
        t.join();
      for (int r = 0; r < n; ++r)
        EXPECT_TRUE(results[static_cast<std::size_t>(r)].ok()) << n << " ranks, rank " << r << ": "
                                                                << results[static_cast<std::size_t>(r)];
      return out;
    };
    const auto connected = connect_all(comms, addresses);
    ASSERT_TRUE(connected.ok()) << connected;
    for (const auto& c : comms)
      ASSERT_TRUE(c->reads_shared_buffers());
    const auto none = [](int) { return false; };
    const auto all = [](int) { return true; };
    const auto all_but_0 = [](int r) { return r != 0; };
    for (const auto type : {dtype::f32, dtype::bf16}) {
      for (const auto op : {reduce_op::sum, reduce_op::average, reduce_op::max}) {
        const std::size_t e = size_of(type);
        const auto fill = [&](int r, std::byte* buf) {
          for (std::size_t i = 0; i < count; ++i) {
            if (type == dtype::f32) {
              const float v = value(r, i);
              std::memcpy(buf + i * 4, &v, 4);
            } else {
              const auto v = float_to_bf16(value(r, i));
              std::memcpy(buf + i * 2, &v, 2);
            }
          }
        };
        const auto call = [&](ring_communicator& c, int, std::byte* buf) { return c.allreduce(buf, count, type, op); };
        const auto ring = run(count * e, fill, call, none);
        const auto direct = run(count * e, fill, call, all);
        const auto mixed = run(count * e, fill, call, all_but_0);
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(direct[static_cast<std::size_t>(r)], ring[0]) << n << " ranks, rank " << r << ", " << to_string(type) << " "
                                                                  << to_string(op);
          EXPECT_EQ(mixed[static_cast<std::size_t>(r)], ring[0]) << n << " ranks, rank " << r;
        }
      }
    }
    // reduce_scatter reads the peers' shared `send`; allgather their shared `recv`.
    const std::size_t block = count / static_cast<std::size_t>(n);
    const auto fill_all = [&](int r, std::byte* buf) {
      for (std::size_t i = 0; i < block * static_cast<std::size_t>(n); ++i) {
        const float v = value(r, i);
        std::memcpy(buf + i * 4, &v, 4);
      }
    };
    std::vector<std::vector<float>> scattered(2, std::vector<float>(block * static_cast<std::size_t>(n)));
    const auto scatter = [&](int which) {
      return [&, which](ring_communicator& c, int r, std::byte* buf) {
        return c.reduce_scatter(buf, scattered[static_cast<std::size_t>(which)].data() + static_cast<std::size_t>(r) * block,
                                block, dtype::f32, reduce_op::sum);
      };
    };
    (void)run(block * n * 4, fill_all, scatter(0), none);
    (void)run(block * n * 4, fill_all, scatter(1), all);
    EXPECT_EQ(scattered[0], scattered[1]) << n << " ranks: reduce_scatter";
    const auto gather = [&](ring_communicator& c, int r, std::byte* buf) {
      return c.allgather(buf + static_cast<std::size_t>(r) * block * 4, buf, block, dtype::f32);
    };
    const auto gathered_ring = run(block * n * 4, fill_all, gather, none);
    const auto gathered = run(block * n * 4, fill_all, gather, all);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(gathered[static_cast<std::size_t>(r)], gathered_ring[static_cast<std::size_t>(r)]) << n << " ranks: allgather";
  }
}

}  // namespace
}  // namespace rekindle::transport
