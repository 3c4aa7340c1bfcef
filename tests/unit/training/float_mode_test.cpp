// The CPU training step runs with subnormal floats flushed to zero (kernels/float_mode.hpp).
#include <gtest/gtest.h>

#include "kernels/float_mode.hpp"
#include "training/training_task.hpp"
#include "transport/communicator.hpp"

namespace rekindle::training {
namespace {

using kernels::flush_subnormals;

// A world of one that records the float mode its collectives are called in.
class mode_recorder final : public transport::communicator {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  status allreduce(void* d, std::size_t n, transport::dtype t, transport::reduce_op op) override {
    note();
    return solo_.allreduce(d, n, t, op);
  }
  status reduce_scatter(const void* s, void* r, std::size_t n, transport::dtype t, transport::reduce_op op) override {
    note();
    return solo_.reduce_scatter(s, r, n, t, op);
  }
  status allgather(const void* s, void* r, std::size_t n, transport::dtype t) override {
    note();
    return solo_.allgather(s, r, n, t);
  }
  status broadcast(void* d, std::size_t n, transport::dtype t, int root) override { return solo_.broadcast(d, n, t, root); }
  status barrier() override { return solo_.barrier(); }
  void abort() noexcept override { solo_.abort(); }
  bool aborted() const noexcept override { return solo_.aborted(); }
  int flushed = 0, ieee = 0;

 private:
  void note() { (flush_subnormals::active() ? flushed : ieee) += 1; }
  transport::solo_communicator solo_;
};

TEST(float_mode, a_cpu_training_step_runs_flushed_unless_told_not_to_and_leaves_the_thread_as_it_was) {
#if defined(__x86_64__)
  config::spec spec;
  spec.model = {.layers = 1, .heads = 2, .width = 32, .seq_len = 16};
  spec.job.global_batch = 2;
  spec.job.micro_batch = 1;
  for (const bool flush : {true, false}) {
    mode_recorder comm;
    task_options o;
    o.device.type = kernels::device_request::kind::cpu;
    o.flush_subnormals = flush;
    auto task = make_training_task(spec, 0, 1, comm, o);
    ASSERT_TRUE(task) << task.error().to_string();
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE((*task)->step());
    EXPECT_EQ(comm.flushed, flush ? 6 : 0) << "the step's three collectives, twice";
    EXPECT_EQ(comm.ieee, flush ? 0 : 6);
    EXPECT_FALSE(flush_subnormals::active()) << "the step gave the thread its own mode back";
  }
#else
  GTEST_SKIP() << "the float mode is set on x86-64 only";
#endif
}

}  // namespace
}  // namespace rekindle::training
