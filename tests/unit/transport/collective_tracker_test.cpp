#include <gtest/gtest.h>

#include <thread>

#include "transport/collective_tracker.hpp"

namespace rekindle::transport {
namespace {

// A communicator whose collectives succeed, fail, or block until released.
class scripted_communicator final : public communicator {
 public:
  [[nodiscard]] int rank() const noexcept override { return 0; }
  [[nodiscard]] int size() const noexcept override { return 2; }
  status allreduce(void*, std::size_t, dtype, reduce_op) override { return answer(); }
  status reduce_scatter(const void*, void*, std::size_t, dtype, reduce_op) override { return answer(); }
  status allgather(const void*, void*, std::size_t, dtype) override { return answer(); }
  status broadcast(void*, std::size_t, dtype, int) override { return answer(); }
  status barrier() override {
    while (block.load())
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    return answer();
  }
  [[nodiscard]] bool point_to_point() const noexcept override { return true; }
  status send(const void*, std::size_t, int) override { return answer(); }
  status recv(void*, std::size_t, int) override {
    while (block.load())
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    return answer();
  }
  void abort() noexcept override {}
  [[nodiscard]] bool aborted() const noexcept override { return false; }

  bool fail = false;
  std::atomic<bool> block{false};

 private:
  [[nodiscard]] status answer() const { return fail ? status{errc::timeout, "collective timed out"} : status{}; }
};

TEST(collective_tracker, counts_calls_and_tells_inside_done_and_failed) {
  scripted_communicator inner;
  collective_tracker t;
  tracked_communicator c{inner, t};
  EXPECT_EQ(t.now().phase, collective_phase::idle);
  EXPECT_EQ(t.now().seq, 0u);
  float x = 1;
  ASSERT_TRUE(c.allreduce(&x, 1, dtype::f32, reduce_op::sum).ok());
  EXPECT_EQ(t.now().seq, 1u);
  EXPECT_EQ(t.now().kind, collective_kind::allreduce);
  EXPECT_EQ(t.now().phase, collective_phase::done);
  ASSERT_TRUE(c.allgather(&x, &x, 1, dtype::f32).ok());
  EXPECT_EQ(t.now().seq, 2u);
  EXPECT_EQ(t.now().kind, collective_kind::allgather);
  inner.fail = true;
  EXPECT_FALSE(c.broadcast(&x, 1, dtype::f32, 0).ok());
  EXPECT_EQ(t.now().seq, 3u);
  EXPECT_EQ(t.now().kind, collective_kind::broadcast);
  EXPECT_EQ(t.now().phase, collective_phase::failed);

  // Read from another thread while the call blocks: inside collective 4, for a growing time.
  inner.fail = false;
  inner.block = true;
  std::thread caller([&] { (void)c.barrier(); });
  while (t.now().seq != 4)
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  const auto first = t.now();
  EXPECT_EQ(first.kind, collective_kind::barrier);
  EXPECT_EQ(first.phase, collective_phase::inside);
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  EXPECT_GE(t.now().for_how_long - first.for_how_long, std::chrono::milliseconds{10});
  inner.block = false;
  caller.join();
  EXPECT_EQ(t.now().phase, collective_phase::done);

  // A new epoch numbers from 1 again.
  t.reset();
  EXPECT_EQ(t.now().seq, 0u);
  EXPECT_EQ(t.now().phase, collective_phase::idle);
  ASSERT_TRUE(c.reduce_scatter(&x, &x, 1, dtype::f32, reduce_op::sum).ok());
  EXPECT_EQ(t.now().seq, 1u);
  EXPECT_EQ(t.now().kind, collective_kind::reduce_scatter);
  EXPECT_EQ(c.size(), 2);
}

TEST(collective_tracker, point_to_point_calls_are_tracked_apart_and_not_numbered) {
  scripted_communicator inner;
  collective_tracker t;
  tracked_communicator c{inner, t};
  EXPECT_EQ(t.now().p2p.kind, collective_kind::none);
  EXPECT_EQ(t.now().p2p.peer, -1);
  float x = 1;
  ASSERT_TRUE(c.allreduce(&x, 1, dtype::f32, reduce_op::sum).ok());
  ASSERT_TRUE(c.send(&x, sizeof x, 1).ok());
  auto at = t.now();
  EXPECT_EQ(at.seq, 1u) << "not a numbered collective";
  EXPECT_EQ(at.kind, collective_kind::allreduce);
  EXPECT_EQ(at.p2p.kind, collective_kind::send);
  EXPECT_EQ(at.p2p.phase, collective_phase::done);
  EXPECT_EQ(at.p2p.peer, 1);
  // Blocked in a recv from rank 0: inside, seen from another thread, for a growing time.
  inner.block = true;
  std::thread caller([&] { (void)c.recv(&x, sizeof x, 0); });
  while (t.now().p2p.kind != collective_kind::recv)
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  const auto first = t.now();
  EXPECT_EQ(first.p2p.phase, collective_phase::inside);
  EXPECT_EQ(first.p2p.peer, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  EXPECT_GE(t.now().p2p.for_how_long - first.p2p.for_how_long, std::chrono::milliseconds{10});
  inner.fail = true;
  inner.block = false;
  caller.join();
  EXPECT_EQ(t.now().p2p.phase, collective_phase::failed);
  EXPECT_EQ(t.now().phase, collective_phase::done) << "the collective's phase is its own";
  t.reset();
  EXPECT_EQ(t.now().p2p.kind, collective_kind::none);
}

}  // namespace
}  // namespace rekindle::transport
