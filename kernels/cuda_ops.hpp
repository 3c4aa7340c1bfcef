#pragma once

// The CUDA operation set. Only in builds with REKINDLE_WITH_CUDA; this header includes no CUDA
// headers, so plain C++ (the backend, the GPU tests) can use it.
#if REKINDLE_WITH_CUDA

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "kernels/optimizer.hpp"

namespace rekindle::kernels::cuda {

/// cudaMalloc of `bytes`, zeroed.
[[nodiscard]] expected<void*> device_malloc(std::size_t bytes);
/// cudaFree; ignores null.
void device_free(void* p) noexcept;
/// Synchronous copies between host and device memory.
[[nodiscard]] status copy_to_device(void* dst, const void* src, std::size_t bytes);
[[nodiscard]] status copy_to_host(void* dst, const void* src, std::size_t bytes);
/// cudaSetDevice.
[[nodiscard]] status set_device(int index);
/// "NVIDIA H200 (sm_90, 139.8 GiB)".
[[nodiscard]] std::string device_name(int index);

/// `count` values of T in device memory; move-only, freed on destruction.
///
/// Thread-safety: like std::unique_ptr.
template <class T>
class device_array {
 public:
  device_array() noexcept = default;

  /// `count` zeroed values.
  [[nodiscard]] static expected<device_array> create(std::size_t count) {
    RK_ASSIGN_OR_RETURN(void* p, device_malloc(std::max<std::size_t>(count, 1) * sizeof(T)));
    device_array a;
    a.data_.reset(static_cast<T*>(p));
    a.size_ = count;
    return expected<device_array>{std::move(a)};
  }
  /// A device copy of `host`.
  [[nodiscard]] static expected<device_array> from_host(std::span<const T> host) {
    RK_ASSIGN_OR_RETURN(device_array a, create(host.size()));
    RK_RETURN_IF_ERROR(copy_to_device(a.data(), host.data(), host.size_bytes()));
    return expected<device_array>{std::move(a)};
  }
  /// A host copy of the whole array.
  [[nodiscard]] expected<std::vector<T>> to_host() const {
    std::vector<T> out(size_);
    RK_RETURN_IF_ERROR(copy_to_host(out.data(), data(), out.size() * sizeof(T)));
    return expected<std::vector<T>>{std::move(out)};
  }

  [[nodiscard]] T* data() noexcept { return data_.get(); }
  [[nodiscard]] const T* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct free_fn {
    void operator()(T* p) const noexcept { device_free(p); }
  };
  std::unique_ptr<T, free_fn> data_;
  std::size_t size_ = 0;
};

/// The model's operations on one GPU, float32, with the members and semantics of
/// `cpu_ops<float>` (see there); the CPU version is their reference.
///
/// Matrix products use cuBLAS (FP32, no TF32); layernorm, causal softmax, GELU, cross-entropy,
/// reductions and AdamW are own kernels. No reduction uses atomics: rows reduce within one warp
/// by a fixed butterfly, columns in one thread in row order, and whole-buffer sums in a fixed
/// grid of blocks followed by one block, so results are bitwise identical run to run. Work is
/// queued on one stream; `check()` returns the first failure (with file:line) since creation.
///
/// Thread-safety: one thread at a time; the device must be current (`set_device`).
class ops {
 public:
  using value_type = float;
  using array = device_array<float>;

  /// Creates a cuBLAS handle and a stream on device `index`.
  [[nodiscard]] static expected<std::unique_ptr<ops>> create(int index);
  struct impl;
  /// Only `create` can make the key.
  class passkey {
    friend class ops;
    passkey() = default;
  };
  ops(passkey key, std::unique_ptr<impl> p) noexcept;
  ~ops();
  ops(const ops&) = delete;
  ops& operator=(const ops&) = delete;

  [[nodiscard]] expected<array> allocate(std::size_t count) { return array::create(count); }
  [[nodiscard]] static float* data(array& a) noexcept { return a.data(); }
  [[nodiscard]] static const float* data(const array& a) noexcept { return a.data(); }
  /// The first error of any operation so far (after checking for launch errors).
  [[nodiscard]] status check();
  /// Waits for all queued work, then check().
  [[nodiscard]] status synchronize();

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                         std::size_t batch, std::size_t seq, std::size_t width);
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::size_t batch,
                          std::size_t seq, std::size_t width);
  void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* gain, const float* bias,
                         std::size_t rows, std::size_t width);
  void layernorm_backward(float* din, float* dgain, float* dbias, const float* dout, const float* in,
                          const float* gain, const float* mean, const float* rstd, std::size_t rows,
                          std::size_t width);
  void matmul_forward(float* out, const float* in, const float* weight, const float* bias, std::size_t rows,
                      std::size_t in_f, std::size_t out_f);
  void matmul_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                       const float* weight, std::size_t rows, std::size_t in_f, std::size_t out_f);
  void attention_forward(float* out, float* att, const float* qkv, std::size_t batch, std::size_t seq,
                         std::size_t width, std::size_t heads);
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, std::size_t batch,
                          std::size_t seq, std::size_t width, std::size_t heads);
  void gelu_forward(float* out, const float* in, std::size_t n);
  void gelu_backward(float* din, const float* in, const float* dout, std::size_t n);
  void residual_forward(float* out, const float* a, const float* b, std::size_t n);
  void crossentropy_forward(float* losses, float* probs, const float* logits, const std::int32_t* targets,
                            std::size_t rows, std::size_t vocab);
  void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float dloss,
                             std::size_t rows, std::size_t vocab);
  /// Σ x (waits for the result; NaN after an error).
  [[nodiscard]] double sum(const float* x, std::size_t n);
  /// Σ x² (waits for the result; NaN after an error).
  [[nodiscard]] double sum_squares(const float* x, std::size_t n);
  void scale(float* x, std::size_t n, float factor);
  void zero(float* x, std::size_t n);
  void adamw(float* params, const float* grads, float* m, float* v, std::size_t n, const adamw_step& s);

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace rekindle::kernels::cuda

#endif  // REKINDLE_WITH_CUDA
