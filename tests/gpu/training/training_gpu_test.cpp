// The data-parallel step on CUDA backends (two ranks as threads on GPU 0, collectives staged
// through host memory) against the same job on the CPU, plus reproducibility and restore on the GPU.
// Prints GPUCHECK lines for scripts/gpu-check; skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/backend.hpp"
#include "tests/support/thread_communicator.hpp"
#include "tests/support/values.hpp"
#include "training/training_task.hpp"

namespace rekindle::training {
namespace {

using bytes = std::vector<std::byte>;

config::spec tiny_spec() {
  auto s = testing::tiny_spec();
  s.job.steps = 50;
  s.job.seed = 3;
  s.model.width = 64;
  s.optimizer.warmup_steps = 2;
  return s;
}

struct run {
  std::vector<double> losses;
  std::vector<bytes> states;
};

run train(kernels::device_request::kind device, int world, std::uint64_t steps, const std::vector<bytes>* restore) {
  testing::thread_group group(world);
  run out;
  out.states.resize(static_cast<std::size_t>(world));
  std::vector<std::vector<double>> losses(static_cast<std::size_t>(world));
  group.run([&](int r, transport::communicator& comm) {
    task_options o;
    o.device.type = device;
    auto task = make_training_task(tiny_spec(), r, world, comm, o);
    ASSERT_TRUE(task.has_value()) << task.error();
    if (device == kernels::device_request::kind::cuda) {
      EXPECT_EQ((*task)->device(), kernels::device_kind::cuda) << (*task)->describe();
    }
    if (restore != nullptr) {
      std::vector<std::span<const std::byte>> in(restore->begin(), restore->end());
      const status s = (*task)->import_state(in);
      ASSERT_TRUE(s.ok()) << s;
    }
    for (std::uint64_t i = 0; i < steps; ++i) {
      auto res = (*task)->step();
      ASSERT_TRUE(res.has_value()) << res.error();
      losses[static_cast<std::size_t>(r)].push_back(res->loss);
    }
    auto& st = out.states[static_cast<std::size_t>(r)];
    st.resize((*task)->state_size());
    const auto sum = (*task)->export_state(st);
    ASSERT_TRUE(sum.has_value()) << sum.error();
  });
  for (const auto& l : losses)
    EXPECT_EQ(l, losses[0]) << "ranks disagree on the loss";
  out.losses = losses[0];
  return out;
}

TEST(training_gpu, cuda_ranks_match_the_cpu_and_reproduce_bitwise) {
  const kernels::cuda_probe probe = kernels::probe_cuda();
  if (probe.device_count == 0)
    GTEST_SKIP() << probe.detail;
  using kind = kernels::device_request::kind;
  const run gpu = train(kind::cuda, 2, 6, nullptr);
  const run cpu = train(kind::cpu, 2, 6, nullptr);
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  double max_abs = 0, max_rel = 0;
  for (std::size_t i = 0; i < cpu.losses.size(); ++i) {
    const double err = std::abs(gpu.losses[i] - cpu.losses[i]);
    max_abs = std::max(max_abs, err);
    max_rel = std::max(max_rel, err / std::abs(cpu.losses[i]));
  }
  const bool ok = max_rel <= 1e-3;
  std::printf("GPUCHECK training.loss_6_steps %.3e %.3e %s\n", max_abs, max_rel, ok ? "ok" : "FAIL");
  EXPECT_TRUE(ok) << "GPU and CPU losses differ by up to " << max_rel << " (relative)";
  EXPECT_LT(gpu.losses.back(), gpu.losses.front());

  // Run to run, and across an export/import, the GPU job is bitwise reproducible.
  const run again = train(kind::cuda, 2, 6, nullptr);
  EXPECT_EQ(again.losses, gpu.losses);
  EXPECT_TRUE(again.states == gpu.states) << "exported states differ between two GPU runs";
  const run first = train(kind::cuda, 2, 3, nullptr);
  const run second = train(kind::cuda, 2, 3, &first.states);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  EXPECT_EQ(joined, gpu.losses);
  EXPECT_TRUE(second.states == gpu.states) << "the restored GPU run ends in another state";
  std::printf("GPUCHECK training.restore_bitwise 0 0 %s\n", joined == gpu.losses ? "ok" : "FAIL");
}

}  // namespace
}  // namespace rekindle::training
