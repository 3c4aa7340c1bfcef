#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <optional>
#include <thread>

#include "tests/support/communicator_suite.hpp"
#include "transport/nccl_communicator.hpp"

namespace rekindle::transport {
namespace {

// N ranks as threads of this process, rank r on GPU r (NCCL allows one rank per GPU).
testing::comm_backend nccl_backend() {
  testing::comm_backend b;
  b.name = "nccl";
  b.make_group = [](int n, std::chrono::nanoseconds timeout) -> expected<std::vector<std::unique_ptr<communicator>>> {
    RK_ASSIGN_OR_RETURN(int devices, cuda_device_count());
    if (devices < n)
      return status{errc::unsupported, "needs " + std::to_string(n) + " GPUs (NCCL runs one rank per GPU), found " +
                                           std::to_string(devices)};
    RK_ASSIGN_OR_RETURN(auto id, make_nccl_unique_id());
    std::vector<std::optional<expected<std::unique_ptr<communicator>>>> made(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        made[static_cast<std::size_t>(r)] = make_nccl_communicator(r, n, id, r, nccl_options{.timeout = timeout});
      });
    for (auto& t : threads)
      t.join();
    std::vector<std::unique_ptr<communicator>> out;
    for (auto& m : made) {
      if (!*m)
        return m->error();
      out.push_back(std::move(**m));
    }
    return out;
  };
  b.alloc = [](int rank, std::size_t bytes) {
    cudaSetDevice(rank);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    return std::shared_ptr<void>(p, [rank](void* q) {
      cudaSetDevice(rank);
      cudaFree(q);
    });
  };
  b.upload = [](int rank, void* dst, const void* src, std::size_t bytes) {
    cudaSetDevice(rank);
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  };
  b.download = [](int rank, void* dst, const void* src, std::size_t bytes) {
    cudaSetDevice(rank);
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  };
  return b;
}

using testing::communicator_suite;
INSTANTIATE_TEST_SUITE_P(nccl, communicator_suite,
                         ::testing::Values(testing::suite_param{nccl_backend(), 1}, testing::suite_param{nccl_backend(), 2},
                                           testing::suite_param{nccl_backend(), 4}),
                         testing::suite_param_name);

TEST(nccl, unique_id_and_device_checks) {
  auto devices = cuda_device_count();
  if (!devices)
    GTEST_SKIP() << devices.error().message();
  auto id = make_nccl_unique_id();
  ASSERT_TRUE(id) << id.error();
  auto bad = make_nccl_communicator(0, 1, std::span{*id}.first(10), 0, {});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), errc::invalid_argument);
  auto no_device = make_nccl_communicator(0, 1, *id, *devices + 3, {});
  ASSERT_FALSE(no_device);
  EXPECT_NE(no_device.error().message().find("does not exist"), std::string::npos);
  auto one = make_nccl_communicator(0, 1, *id, 0, {});
  ASSERT_TRUE(one) << one.error();
  EXPECT_TRUE((*one)->device_memory());
}

}  // namespace
}  // namespace rekindle::transport
