#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/expected.hpp"
#include "kernels/host_array.hpp"
#include "kernels/optimizer.hpp"

namespace rekindle::kernels {

/// The model's operations on the CPU, over float (training) or double (gradient checks).
///
/// Every operation of the transformer has a forward and a backward here; `transformer<Ops>` strings
/// them together, and `cuda::ops` offers the same members on the GPU. Matrix products go to
/// OpenBLAS (`cblas_sgemm` / `cblas_dgemm`); everything else is plain loops whose reductions run
/// in a fixed order, so the same inputs give bitwise identical outputs in every run.
///
/// Shapes: `rows` = batch·seq_len positions, `width` = C. Activations are row major. Weight
/// matrices are [out, in]. Backward members accumulate (`+=`) into parameter gradients and, where
/// noted, into input gradients; the rest overwrite.
///
/// Thread-safety: an object keeps scratch memory, so one thread at a time; distinct objects may be
/// used concurrently.
template <class T>
class cpu_ops {
 public:
  using value_type = T;
  using array = host_array<T>;

  /// Zeroed memory for `count` values.
  [[nodiscard]] expected<array> allocate(std::size_t count);
  [[nodiscard]] static T* data(array& a) noexcept { return a.data(); }
  [[nodiscard]] static const T* data(const array& a) noexcept { return a.data(); }
  /// The first error of an operation since construction; the CPU never fails.
  [[nodiscard]] status check() const { return {}; }

  /// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
  void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::size_t batch,
                         std::size_t seq, std::size_t width);
  /// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:].
  void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::size_t batch,
                          std::size_t seq, std::size_t width);

  /// out = (in - mean) · rstd · gain + bias per row, rstd = 1/sqrt(var + 1e-5); keeps mean and rstd.
  void layernorm_forward(T* out, T* mean, T* rstd, const T* in, const T* gain, const T* bias, std::size_t rows,
                         std::size_t width);
  /// din += ∂/∂in; dgain, dbias +=.
  void layernorm_backward(T* din, T* dgain, T* dbias, const T* dout, const T* in, const T* gain, const T* mean,
                          const T* rstd, std::size_t rows, std::size_t width);

  /// out[rows, out_f] = in[rows, in_f] · weightᵀ + bias (bias may be null).
  void matmul_forward(T* out, const T* in, const T* weight, const T* bias, std::size_t rows, std::size_t in_f,
                      std::size_t out_f);
  /// din = dout · weight (overwritten); dweight += doutᵀ · in; dbias += column sums of dout (when
  /// not null).
  void matmul_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight, std::size_t rows,
                       std::size_t in_f, std::size_t out_f);

  /// Causal multi-head attention. qkv is [batch, seq, 3·width] (queries, keys, values, each split
  /// into heads); out is [batch, seq, width]; att keeps the probabilities [batch, heads, seq, seq]
  /// (zero above the diagonal).
  void attention_forward(T* out, T* att, const T* qkv, std::size_t batch, std::size_t seq, std::size_t width,
                         std::size_t heads);
  /// dqkv (overwritten) from dout, the forward's qkv and att.
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::size_t batch, std::size_t seq,
                          std::size_t width, std::size_t heads);

  /// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
  void gelu_forward(T* out, const T* in, std::size_t n);
  /// din = gelu'(in) · dout (overwritten; din may alias dout).
  void gelu_backward(T* din, const T* in, const T* dout, std::size_t n);

  /// out = a + b.
  void residual_forward(T* out, const T* a, const T* b, std::size_t n);

  /// probs = softmax(logits) per row; losses[r] = -log probs[r, targets[r]].
  void crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets, std::size_t rows,
                            std::size_t vocab);
  /// dlogits = (probs - onehot(targets)) · dloss (overwritten).
  void crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, T dloss, std::size_t rows,
                             std::size_t vocab);

  /// Σ x in a fixed order, accumulated in double.
  [[nodiscard]] double sum(const T* x, std::size_t n);
  /// Σ x² in a fixed order, accumulated in double.
  [[nodiscard]] double sum_squares(const T* x, std::size_t n);
  /// x *= factor.
  void scale(T* x, std::size_t n, T factor);
  /// x = 0.
  void zero(T* x, std::size_t n);
  /// One AdamW update of n elements (see adamw_step).
  void adamw(T* params, const T* grads, T* m, T* v, std::size_t n, const adamw_step& s);

 private:
  // [seq, seq] scratch of the attention backward.
  std::vector<T> scratch_;
};

/// Row-major C = alpha · op(A) · op(B) + beta · C through cblas_sgemm / cblas_dgemm.
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

/// Makes OpenBLAS compute on the calling thread only, so products are bitwise reproducible and
/// ranks sharing a machine do not oversubscribe it. Called by every CPU backend.
void use_single_threaded_blas() noexcept;

/// OpenBLAS's build and the kernel it picked for this CPU, e.g. "OpenBLAS 0.3.21 ... Haswell".
[[nodiscard]] std::string blas_description();

extern template class cpu_ops<float>;
extern template class cpu_ops<double>;

}  // namespace rekindle::kernels
