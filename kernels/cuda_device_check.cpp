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

// What one measurement holds, freed whatever happens.
struct gemm_resources {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  gemm_resources() = default;
  gemm_resources(const gemm_resources&) = delete;
  gemm_resources& operator=(const gemm_resources&) = delete;
  ~gemm_resources() {
    if (start != nullptr)
      cudaEventDestroy(start);
    if (stop != nullptr)
      cudaEventDestroy(stop);
    if (blas != nullptr)
      cublasDestroy(blas);
    for (float* p : {a, b, c})
      if (p != nullptr)
        cudaFree(p);
  }
};

status measure(int index, cuda_device_figures& f) {
  RK_CUDA_TRY(cudaSetDevice(index));
  char bus[32] = {};
  RK_CUDA_TRY(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
  f.pci_bus_id = bus;
  const std::size_t bytes = std::size_t{side} * side * sizeof(float);
  gemm_resources r;
  for (float** p : {&r.a, &r.b, &r.c}) {
    RK_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(p), bytes));
    RK_CUDA_TRY(cudaMemset(*p, 0x3c, bytes));  // every float 0.0115: finite products
  }
  RK_CUBLAS_TRY(cublasCreate(&r.blas));
  RK_CUDA_TRY(cudaEventCreate(&r.start));
  RK_CUDA_TRY(cudaEventCreate(&r.stop));
  const float one = 1.0f, zero = 0.0f;
  const auto product = [&] {
    return cublasSgemm(r.blas, CUBLAS_OP_N, CUBLAS_OP_N, side, side, side, &one, r.a, side, r.b, side, &zero, r.c, side);
  };
  RK_CUBLAS_TRY(product());  // warm-up: the library picks its kernel
  RK_CUDA_TRY(cudaDeviceSynchronize());
  const double flops = 2.0 * side * static_cast<double>(side) * side * products;
  double best = 0;
  for (int round = 0; round < rounds; ++round) {
    RK_CUDA_TRY(cudaEventRecord(r.start));
    for (int i = 0; i < products; ++i)
      RK_CUBLAS_TRY(product());
    RK_CUDA_TRY(cudaEventRecord(r.stop));
    RK_CUDA_TRY(cudaEventSynchronize(r.stop));
    float ms = 0;
    RK_CUDA_TRY(cudaEventElapsedTime(&ms, r.start, r.stop));
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
