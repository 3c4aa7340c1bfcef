// The GPU part of the node check: a cuBLAS SGEMM on every device, timed with CUDA events. Built
// into the GPU plugin only (gpu/CMakeLists.txt); the node check reaches it through
// check_cuda_devices() (kernels/backend.hpp).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda_backend.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_ops.hpp"

namespace rekindle::kernels::cuda {

namespace {

constexpr int side = 4096;  // large enough to reach the device's rate, 64 MiB a matrix
constexpr int rounds = 5;
constexpr int products = 4;  // a round: 4 products, 550 GFLOP

// The cuBLAS handle and the two events of one measurement, freed whatever happens (the matrices
// are device_arrays).
struct gemm_handles {
  cublasHandle_t blas = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  gemm_handles() = default;
  gemm_handles(const gemm_handles&) = delete;
  gemm_handles& operator=(const gemm_handles&) = delete;
  ~gemm_handles() {
    if (start != nullptr)
      cudaEventDestroy(start);
    if (stop != nullptr)
      cudaEventDestroy(stop);
    if (blas != nullptr)
      cublasDestroy(blas);
  }
};

status measure(int index, cuda_device_figures& f) {
  RK_RETURN_IF_ERROR(set_device(index));
  char bus[32] = {};
  RK_CUDA_TRY(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
  f.pci_bus_id = bus;
  const std::size_t count = std::size_t{side} * side;
  RK_ASSIGN_OR_RETURN(auto a, device_array<float>::create(count));
  RK_ASSIGN_OR_RETURN(auto b, device_array<float>::create(count));
  RK_ASSIGN_OR_RETURN(auto c, device_array<float>::create(count));
  // Every input 0.0115 rather than 0: finite products, and the power a real GEMM draws.
  RK_CUDA_TRY(cudaMemset(a.data(), 0x3c, count * sizeof(float)));
  RK_CUDA_TRY(cudaMemset(b.data(), 0x3c, count * sizeof(float)));
  gemm_handles h;
  RK_CUBLAS_TRY(cublasCreate(&h.blas));
  RK_CUDA_TRY(cudaEventCreate(&h.start));
  RK_CUDA_TRY(cudaEventCreate(&h.stop));
  const float one = 1.0f, zero = 0.0f;
  const auto product = [&] {
    return cublasSgemm(h.blas, CUBLAS_OP_N, CUBLAS_OP_N, side, side, side, &one, a.data(), side, b.data(), side, &zero,
                       c.data(), side);
  };
  RK_CUBLAS_TRY(product());  // warm-up: the library picks its kernel
  RK_CUDA_TRY(cudaDeviceSynchronize());
  const double flops = 2.0 * side * static_cast<double>(side) * side * products;
  double best = 0;
  for (int round = 0; round < rounds; ++round) {
    RK_CUDA_TRY(cudaEventRecord(h.start));
    for (int i = 0; i < products; ++i)
      RK_CUBLAS_TRY(product());
    RK_CUDA_TRY(cudaEventRecord(h.stop));
    RK_CUDA_TRY(cudaEventSynchronize(h.stop));
    float ms = 0;
    RK_CUDA_TRY(cudaEventElapsedTime(&ms, h.start, h.stop));
    if (ms > 0)
      best = std::max(best, flops / (static_cast<double>(ms) * 1e-3) / 1e9);
  }
  RK_CUDA_TRY(cudaGetLastError());
  f.gemm_gflops = best;
  return {};
}

}  // namespace

expected<std::vector<cuda_device_figures>> check_devices() {
  int count = 0;
  RK_CUDA_TRY(cudaGetDeviceCount(&count));
  std::vector<cuda_device_figures> out;
  for (int i = 0; i < count; ++i) {
    cuda_device_figures f;
    f.index = i;
    f.name = device_name(i);
    if (const status s = measure(i, f); !s.ok())
      f.error = s.message();
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace rekindle::kernels::cuda
