#include <gtest/gtest.h>

#include <thread>

#include "kernels/layout.hpp"
#include "tests/support/values.hpp"
#include "training/training_task.hpp"
#include "transport/ring_communicator.hpp"

namespace rekindle::training {
namespace {

using namespace std::chrono_literals;

struct rank_result {
  std::vector<double> losses;
  std::vector<std::byte> state;
  bool read_in_place = false;
};

// `world` ranks as threads over the real ring, each with its own resources; the gradients in the
// ring's shared buffers (as the worker places them) or in the backend's memory.
std::vector<rank_result> train(const config::spec& spec, int world, bool shared, int steps) {
  transport::ring_options ro;
  ro.timeout = 60s;
  ro.net_devices = "lo";
  std::vector<std::shared_ptr<transport::ring_resources>> res;
  std::vector<std::span<float>> memory(static_cast<std::size_t>(world));
  std::vector<std::unique_ptr<transport::ring_communicator>> comms;
  std::vector<std::vector<std::byte>> addresses;
  for (int r = 0; r < world; ++r) {
    auto made = transport::ring_resources::create(ro);
    EXPECT_TRUE(made) << made.error();
    if (!made)
      return {};
    if (shared) {
      // As the worker places them (actors::shared_gradient_memory).
      const auto floats = gradient_floats(spec, transport::ring_communicator::max_size);
      auto m = (*made)->allocate_shared(floats * sizeof(float));
      EXPECT_TRUE(m) << m.error();
      if (!m)
        return {};
      memory[static_cast<std::size_t>(r)] = {reinterpret_cast<float*>(m->data()), floats};
    }
    auto c = transport::ring_communicator::create(*made, r, world, ro);
    EXPECT_TRUE(c) << c.error();
    if (!c)
      return {};
    addresses.push_back((*c)->address());
    comms.push_back(std::move(*c));
    res.push_back(std::move(*made));
  }
  std::vector<rank_result> out(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto& comm = *comms[static_cast<std::size_t>(r)];
      const auto st = comm.connect(addresses);
      ASSERT_TRUE(st.ok()) << st;
      task_options o;
      o.device.type = kernels::device_request::kind::cpu;
      o.gradient_memory = memory[static_cast<std::size_t>(r)];
      auto task = make_training_task(spec, r, world, comm, o);
      ASSERT_TRUE(task) << task.error();
      auto& result = out[static_cast<std::size_t>(r)];
      result.read_in_place = comm.reads_shared_buffers();
      for (int i = 0; i < steps; ++i) {
        auto step = (*task)->step();
        ASSERT_TRUE(step) << step.error();
        result.losses.push_back(step->loss);
      }
      result.state.resize((*task)->state_size());
      ASSERT_TRUE((*task)->export_state(result.state));
    });
  for (auto& t : threads)
    t.join();
  return out;
}

// The ranks of one host read each other's gradients in place: the same losses and states to the
// bit as when the ring carries them.
TEST(shared_gradient_buffers, train_bit_for_bit_as_private_memory_does) {
  auto spec = testing::tiny_spec();
  spec.model.width = 32;
  const kernels::model_shape shape{
      .layers = spec.model.layers, .heads = spec.model.heads, .width = spec.model.width, .seq_len = spec.model.seq_len};
  ASSERT_GE(kernels::parameter_count(shape) * sizeof(float), std::size_t{64} << 10)
      << "a gradient under 64 KiB goes around the ring whatever its memory";
  for (const int world : {2, 3}) {
    const auto ring = train(spec, world, false, 8);
    const auto shared = train(spec, world, true, 8);
    ASSERT_EQ(ring.size(), static_cast<std::size_t>(world));
    ASSERT_EQ(shared.size(), static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      const auto& a = ring[static_cast<std::size_t>(r)];
      const auto& b = shared[static_cast<std::size_t>(r)];
      EXPECT_FALSE(a.read_in_place);
      EXPECT_TRUE(b.read_in_place) << world << " ranks: the ring did not map the shared buffers";
      EXPECT_EQ(a.losses, b.losses) << world << " ranks, rank " << r;
      EXPECT_TRUE(a.state == b.state) << world << " ranks, rank " << r << ": the states differ";
    }
    EXPECT_LT(shared[0].losses.back(), shared[0].losses.front());
  }
}

}  // namespace
}  // namespace rekindle::training
