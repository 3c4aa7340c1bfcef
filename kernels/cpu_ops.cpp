#include "kernels/cpu_ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <limits>
#include <string>

#include "common/check.hpp"

namespace rekindle::kernels {

namespace {

constexpr double layernorm_epsilon = 1e-5;

int blas_int(std::size_t v) {
  RK_CHECK_LE(v, static_cast<std::size_t>(std::numeric_limits<int>::max()), "matrix dimension too large for BLAS");
  return static_cast<int>(v);
}

template <class T>
struct gelu_constants {
  static constexpr T k = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
  static constexpr T c = static_cast<T>(0.044715);
};

// Float hot loops. They are written branch-free so the compiler vectorizes them (this file is
// built with -O3 -fno-trapping-math -fno-math-errno -ffp-contract=off, see CMakeLists.txt), and on
// x86-64 an AVX2 clone is picked at load time. Element-wise IEEE operations give the same bits at
// every vector width and without contraction, so the clone does not change results.
#if defined(__x86_64__) && defined(__GNUC__)
#define RK_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RK_VECTOR_CLONES
#endif

// exp(x) for float: 2^k · p(r) with r = x − k·ln2 (|r| <= ln2/2) and p the Taylor polynomial of
// degree 7 (truncation error below 1e-8 relative); x is clamped to [-87, 88], where the result is
// a normal float. Compilers vectorize it, unlike std::exp.
inline float exp_f32(float x) noexcept {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  constexpr float round_magic = 12582912.0f;  // 1.5·2^23: adding and subtracting it rounds to an integer
  const float k = (x * 1.44269504088896341f + round_magic) - round_magic;
  // ln 2 in two parts; k·ln2_hi is exact for the k that occur.
  const float r = (x - k * 0.693145751953125f) - k * 1.4286068203094173e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<std::int32_t>(k) + 127) << 23);
}

// tanh(u) = sign(u)·(e − 1)/(e + 1) with e = exp(2|u|), |u| clamped to 9 (tanh(9) rounds to 1).
// Absolute error below 2e-7.
inline float tanh_f32(float u) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(u);
  float a = std::bit_cast<float>(bits & 0x7fffffffu);
  a = a > 9.0f ? 9.0f : a;
  const float e = exp_f32(2.0f * a);
  const float t = (e - 1.0f) / (e + 1.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(t) | (bits & 0x80000000u));
}

RK_VECTOR_CLONES void gelu_forward_f32(float* out, const float* in, std::size_t n) noexcept {
  using g = gelu_constants<float>;
  for (std::size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = g::k * (x + g::c * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanh_f32(u));
  }
}

// din may alias dout; each element is read before it is written.
RK_VECTOR_CLONES void gelu_backward_f32(float* din, const float* in, const float* dout, std::size_t n) noexcept {
  using g = gelu_constants<float>;
  for (std::size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = g::k * (x + g::c * x * x * x);
    const float th = tanh_f32(u);
    const float du = g::k * (1.0f + 3.0f * g::c * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    din[i] = grad * dout[i];
  }
}

// x[i] = exp(x[i] - shift).
RK_VECTOR_CLONES void exp_shifted_f32(float* x, std::size_t n, float shift) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = exp_f32(x[i] - shift);
}

RK_VECTOR_CLONES void adamw_f32(float* __restrict params, const float* __restrict grads, float* __restrict m,
                                float* __restrict v, std::size_t n, adamw_step s) noexcept {
  const float one_b1 = 1.0f - s.beta1;
  const float one_b2 = 1.0f - s.beta2;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grads[i] * s.grad_scale;
    const float mi = s.beta1 * m[i] + one_b1 * g;
    const float vi = s.beta2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / s.correction1) / (std::sqrt(vi / s.correction2) + s.epsilon);
    params[i] -= s.lr * (update + s.weight_decay * params[i]);
  }
}

}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                 std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blas_int(m),
              blas_int(n), blas_int(k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha,
                  const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta, double* c,
                  std::size_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blas_int(m),
              blas_int(n), blas_int(k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

void use_single_threaded_blas() noexcept {
  openblas_set_num_threads(1);
}

std::string blas_description() {
  std::string out = openblas_get_config();
  out += ", kernel ";
  out += openblas_get_corename();
  return out;
}

template <class T>
expected<host_array<T>> cpu_ops<T>::allocate(std::size_t count) {
  host_array<T> a(count);
  if (!a.valid())
    return status{errc::resource_exhausted,
                  "cannot allocate " + std::to_string(count * sizeof(T)) + " bytes of host memory"};
  return a;
}

template <class T>
void cpu_ops<T>::embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe,
                                   std::size_t batch, std::size_t seq, std::size_t width) {
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t t = 0; t < seq; ++t) {
      T* o = out + (b * seq + t) * width;
      const T* e = wte + static_cast<std::size_t>(tokens[b * seq + t]) * width;
      const T* p = wpe + t * width;
      for (std::size_t c = 0; c < width; ++c)
        o[c] = e[c] + p[c];
    }
  }
}

template <class T>
void cpu_ops<T>::embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::size_t batch,
                                    std::size_t seq, std::size_t width) {
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t t = 0; t < seq; ++t) {
      const T* d = dout + (b * seq + t) * width;
      T* e = dwte + static_cast<std::size_t>(tokens[b * seq + t]) * width;
      T* p = dwpe + t * width;
      for (std::size_t c = 0; c < width; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

template <class T>
void cpu_ops<T>::layernorm_forward(T* out, T* mean, T* rstd, const T* in, const T* gain, const T* bias,
                                   std::size_t rows, std::size_t width) {
  const T inv_width = T{1} / static_cast<T>(width);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* x = in + r * width;
    T* o = out + r * width;
    T m = 0;
    for (std::size_t c = 0; c < width; ++c)
      m += x[c];
    m *= inv_width;
    T var = 0;
    for (std::size_t c = 0; c < width; ++c) {
      const T d = x[c] - m;
      var += d * d;
    }
    var *= inv_width;
    const T s = T{1} / std::sqrt(var + static_cast<T>(layernorm_epsilon));
    for (std::size_t c = 0; c < width; ++c)
      o[c] = (x[c] - m) * s * gain[c] + bias[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class T>
void cpu_ops<T>::layernorm_backward(T* din, T* dgain, T* dbias, const T* dout, const T* in, const T* gain,
                                    const T* mean, const T* rstd, std::size_t rows, std::size_t width) {
  const T inv_width = T{1} / static_cast<T>(width);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* x = in + r * width;
    const T* d = dout + r * width;
    T* dx = din + r * width;
    const T m = mean[r];
    const T s = rstd[r];
    // Means of dnorm and dnorm·xhat, where dnorm = dout·gain is the gradient of the normalised row.
    T dnorm_mean = 0;
    T dnorm_xhat_mean = 0;
    for (std::size_t c = 0; c < width; ++c) {
      const T xhat = (x[c] - m) * s;
      const T dnorm = d[c] * gain[c];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean *= inv_width;
    dnorm_xhat_mean *= inv_width;
    for (std::size_t c = 0; c < width; ++c) {
      const T xhat = (x[c] - m) * s;
      const T dnorm = d[c] * gain[c];
      dbias[c] += d[c];
      dgain[c] += xhat * d[c];
      dx[c] += s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
    }
  }
}

template <class T>
void cpu_ops<T>::matmul_forward(T* out, const T* in, const T* weight, const T* bias, std::size_t rows,
                                std::size_t in_f, std::size_t out_f) {
  if (bias != nullptr) {
    for (std::size_t r = 0; r < rows; ++r)
      std::copy(bias, bias + out_f, out + r * out_f);
  }
  gemm<T>(false, true, rows, out_f, in_f, T{1}, in, in_f, weight, in_f, bias != nullptr ? T{1} : T{0}, out, out_f);
}

template <class T>
void cpu_ops<T>::matmul_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                                 std::size_t rows, std::size_t in_f, std::size_t out_f) {
  gemm<T>(false, false, rows, in_f, out_f, T{1}, dout, out_f, weight, in_f, T{0}, din, in_f);
  gemm<T>(true, false, out_f, in_f, rows, T{1}, dout, out_f, in, in_f, T{1}, dweight, in_f);
  if (dbias != nullptr) {
    for (std::size_t r = 0; r < rows; ++r) {
      const T* d = dout + r * out_f;
      for (std::size_t o = 0; o < out_f; ++o)
        dbias[o] += d[o];
    }
  }
}

template <class T>
void cpu_ops<T>::attention_forward(T* out, T* att, const T* qkv, std::size_t batch, std::size_t seq,
                                   std::size_t width, std::size_t heads) {
  const std::size_t hs = width / heads;
  const std::size_t ld = 3 * width;
  const T scale = T{1} / std::sqrt(static_cast<T>(hs));
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const T* q = qkv + b * seq * ld + h * hs;
      const T* k = q + width;
      const T* v = q + 2 * width;
      T* p = att + (b * heads + h) * seq * seq;
      // Scores q·kᵀ/sqrt(hs) for every pair; the causal mask is applied by the softmax below.
      gemm<T>(false, true, seq, seq, hs, scale, q, ld, k, ld, T{0}, p, seq);
      for (std::size_t t = 0; t < seq; ++t) {
        T* row = p + t * seq;
        T max = row[0];
        for (std::size_t j = 1; j <= t; ++j)
          max = std::max(max, row[j]);
        if constexpr (std::is_same_v<T, float>) {
          exp_shifted_f32(row, t + 1, max);
        } else {
          for (std::size_t j = 0; j <= t; ++j)
            row[j] = std::exp(row[j] - max);
        }
        T total = 0;
        for (std::size_t j = 0; j <= t; ++j)
          total += row[j];
        const T inv = T{1} / total;
        for (std::size_t j = 0; j <= t; ++j)
          row[j] *= inv;
        std::fill(row + t + 1, row + seq, T{0});
      }
      gemm<T>(false, false, seq, hs, seq, T{1}, p, seq, v, ld, T{0}, out + b * seq * width + h * hs, width);
    }
  }
}

template <class T>
void cpu_ops<T>::attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, std::size_t batch,
                                    std::size_t seq, std::size_t width, std::size_t heads) {
  const std::size_t hs = width / heads;
  const std::size_t ld = 3 * width;
  const T scale = T{1} / std::sqrt(static_cast<T>(hs));
  scratch_.resize(seq * seq);
  T* ds = scratch_.data();
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const T* q = qkv + b * seq * ld + h * hs;
      const T* k = q + width;
      const T* v = q + 2 * width;
      T* dq = dqkv + b * seq * ld + h * hs;
      T* dk = dq + width;
      T* dv = dq + 2 * width;
      const T* p = att + (b * heads + h) * seq * seq;
      const T* dy = dout + b * seq * width + h * hs;
      // dP = dY·Vᵀ and dV = Pᵀ·dY.
      gemm<T>(false, true, seq, seq, hs, T{1}, dy, width, v, ld, T{0}, ds, seq);
      gemm<T>(true, false, seq, hs, seq, T{1}, p, seq, dy, width, T{0}, dv, ld);
      // Softmax backward in place: dS = P ⊙ (dP - rowsum(P ⊙ dP)); zero above the diagonal.
      for (std::size_t t = 0; t < seq; ++t) {
        const T* prow = p + t * seq;
        T* row = ds + t * seq;
        T dot = 0;
        for (std::size_t j = 0; j <= t; ++j)
          dot += prow[j] * row[j];
        for (std::size_t j = 0; j <= t; ++j)
          row[j] = prow[j] * (row[j] - dot);
        std::fill(row + t + 1, row + seq, T{0});
      }
      // dQ = dS·K/sqrt(hs) and dK = dSᵀ·Q/sqrt(hs).
      gemm<T>(false, false, seq, hs, seq, scale, ds, seq, k, ld, T{0}, dq, ld);
      gemm<T>(true, false, seq, hs, seq, scale, ds, seq, q, ld, T{0}, dk, ld);
    }
  }
}

template <class T>
void cpu_ops<T>::gelu_forward(T* out, const T* in, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    gelu_forward_f32(out, in, n);
    return;
  }
  using g = gelu_constants<T>;
  for (std::size_t i = 0; i < n; ++i) {
    const T x = in[i];
    const T u = g::k * (x + g::c * x * x * x);
    out[i] = T{0.5} * x * (T{1} + std::tanh(u));
  }
}

template <class T>
void cpu_ops<T>::gelu_backward(T* din, const T* in, const T* dout, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    gelu_backward_f32(din, in, dout, n);
    return;
  }
  using g = gelu_constants<T>;
  for (std::size_t i = 0; i < n; ++i) {
    const T x = in[i];
    const T u = g::k * (x + g::c * x * x * x);
    const T th = std::tanh(u);
    const T du = g::k * (T{1} + T{3} * g::c * x * x);
    const T grad = T{0.5} * (T{1} + th) + T{0.5} * x * (T{1} - th * th) * du;
    din[i] = grad * dout[i];
  }
}

template <class T>
void cpu_ops<T>::residual_forward(T* out, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

template <class T>
void cpu_ops<T>::crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets,
                                      std::size_t rows, std::size_t vocab) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* z = logits + r * vocab;
    T* p = probs + r * vocab;
    T max = z[0];
    for (std::size_t v = 1; v < vocab; ++v)
      max = std::max(max, z[v]);
    T total = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      p[v] = std::exp(z[v] - max);
      total += p[v];
    }
    const T inv = T{1} / total;
    for (std::size_t v = 0; v < vocab; ++v)
      p[v] *= inv;
    // -log softmax from the log-sum-exp, exact even when the target's probability underflows.
    losses[r] = std::log(total) - (z[targets[r]] - max);
  }
}

template <class T>
void cpu_ops<T>::crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, T dloss,
                                       std::size_t rows, std::size_t vocab) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* p = probs + r * vocab;
    T* d = dlogits + r * vocab;
    for (std::size_t v = 0; v < vocab; ++v)
      d[v] = p[v] * dloss;
    d[targets[r]] -= dloss;
  }
}

template <class T>
double cpu_ops<T>::sum(const T* x, std::size_t n) {
  double total = 0;
  for (std::size_t i = 0; i < n; ++i)
    total += static_cast<double>(x[i]);
  return total;
}

template <class T>
double cpu_ops<T>::sum_squares(const T* x, std::size_t n) {
  // Eight interleaved partial sums (a fixed order, so reproducible) keep the loop short.
  double part[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[i + j]);
      part[j] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    part[0] += v * v;
  }
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

template <class T>
void cpu_ops<T>::scale(T* x, std::size_t n, T factor) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] *= factor;
}

template <class T>
void cpu_ops<T>::zero(T* x, std::size_t n) {
  std::fill(x, x + n, T{0});
}

template <class T>
void cpu_ops<T>::adamw(T* params, const T* grads, T* m, T* v, std::size_t n, const adamw_step& s) {
  if constexpr (std::is_same_v<T, float>) {
    adamw_f32(params, grads, m, v, n, s);
    return;
  }
  const T b1 = s.beta1;
  const T b2 = s.beta2;
  const T one_b1 = T{1} - b1;
  const T one_b2 = T{1} - b2;
  const T c1 = s.correction1;
  const T c2 = s.correction2;
  const T lr = s.lr;
  const T eps = s.epsilon;
  const T wd = s.weight_decay;
  const T gs = s.grad_scale;
  for (std::size_t i = 0; i < n; ++i) {
    const T g = grads[i] * gs;
    const T mi = b1 * m[i] + one_b1 * g;
    const T vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const T update = (mi / c1) / (std::sqrt(vi / c2) + eps);
    params[i] -= lr * (update + wd * params[i]);
  }
}

template class cpu_ops<float>;
template class cpu_ops<double>;

}  // namespace rekindle::kernels
