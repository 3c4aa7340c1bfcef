#pragma once

// CUDA and cuBLAS error checks that return a status naming file:line; for .cu files of kernels/.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/status.hpp"

namespace rekindle::kernels::cuda {

/// "file:line: expr: cudaErrorX (text)" as errc::cuda_error.
[[nodiscard]] status cuda_failure(cudaError_t e, const char* expr, const char* file, int line);
/// "file:line: expr: CUBLAS_STATUS_X (text)" as errc::cuda_error.
[[nodiscard]] status cublas_failure(cublasStatus_t s, const char* expr, const char* file, int line);

}  // namespace rekindle::kernels::cuda

/// Returns a status with file:line from the enclosing function when the CUDA call fails.
#define RK_CUDA_TRY(expr)                                                                  \
  do {                                                                                     \
    const cudaError_t rk_cuda_e_ = (expr);                                                 \
    if (rk_cuda_e_ != cudaSuccess)                                                         \
      return ::rekindle::kernels::cuda::cuda_failure(rk_cuda_e_, #expr, __FILE__, __LINE__); \
  } while (false)

/// Returns a status with file:line from the enclosing function when the cuBLAS call fails.
#define RK_CUBLAS_TRY(expr)                                                                     \
  do {                                                                                          \
    const cublasStatus_t rk_cublas_s_ = (expr);                                                 \
    if (rk_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                                  \
      return ::rekindle::kernels::cuda::cublas_failure(rk_cublas_s_, #expr, __FILE__, __LINE__); \
  } while (false)
