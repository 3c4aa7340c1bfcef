#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "kernels/cuda_backend.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_ops.hpp"
#include "kernels/shape.hpp"

namespace rekindle::kernels::cuda {

status cuda_failure(cudaError_t e, const char* expr, const char* file, int line) {
  return status{errc::cuda_error, std::string{file} + ":" + std::to_string(line) + ": " + expr + ": " +
                                      cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

status cublas_failure(cublasStatus_t s, const char* expr, const char* file, int line) {
  return status{errc::cuda_error, std::string{file} + ":" + std::to_string(line) + ": " + expr + ": " +
                                      cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")"};
}

expected<void*> device_malloc(std::size_t bytes) {
  void* p = nullptr;
  RK_CUDA_TRY(cudaMalloc(&p, bytes));
  const cudaError_t e = cudaMemset(p, 0, bytes);
  if (e != cudaSuccess) {
    cudaFree(p);
    return cuda_failure(e, "cudaMemset(p, 0, bytes)", __FILE__, __LINE__);
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p != nullptr)
    cudaFree(p);
}

status copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0)
    RK_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return {};
}

status copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0)
    RK_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return {};
}

status set_device(int index) {
  RK_CUDA_TRY(cudaSetDevice(index));
  return {};
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess)
    return "cuda:" + std::to_string(index);
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
  return std::string{prop.name} + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         memory + ")";
}

cuda_probe probe() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_probe{0, "no CUDA device: cudaGetDeviceCount returned " + std::to_string(static_cast<int>(e)) + " (" +
                             cudaGetErrorString(e) + ")"};
  }
  if (count <= 0)
    return cuda_probe{0, "no CUDA device: cudaGetDeviceCount found 0 devices"};
  return cuda_probe{count, device_name(0)};
}

namespace {

constexpr int block_threads = 256;
// Fixed grid of the whole-buffer reductions: the summation order depends only on n.
constexpr int reduce_blocks = 256;
constexpr unsigned full_mask = 0xffffffffu;

int grid_for(std::size_t n) {
  const std::size_t blocks = (n + block_threads - 1) / block_threads;
  return static_cast<int>(blocks < 65536 ? (blocks == 0 ? 1 : blocks) : 65536);
}

// Blocks for one warp per row.
int warp_grid(std::size_t rows) {
  constexpr std::size_t warps = block_threads / 32;
  return static_cast<int>((rows + warps - 1) / warps);
}

// Butterfly reductions: every lane ends with the same value, summed in a fixed order.
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
  return v;
}

__device__ std::size_t global_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                         std::size_t rows, int seq, int width) {
  for (std::size_t i = global_index(); i < rows * width; i += grid_stride()) {
    const std::size_t n = i / width;
    const int c = static_cast<int>(i % width);
    const int t = static_cast<int>(n % seq);
    out[i] = wte[static_cast<std::size_t>(tokens[n]) * width + c] + wpe[static_cast<std::size_t>(t) * width + c];
  }
}

// One thread per (token, channel) sums the positions holding that token, in position order.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const std::int32_t* tokens,
                                              std::size_t rows, int width, int vocab) {
  const std::size_t i = global_index();
  if (i >= static_cast<std::size_t>(vocab) * width)
    return;
  const int v = static_cast<int>(i / width);
  const int c = static_cast<int>(i % width);
  float acc = dwte[i];
  for (std::size_t n = 0; n < rows; ++n)
    if (tokens[n] == v)
      acc += dout[n * width + c];
  dwte[i] = acc;
}

__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int batch, int seq, int width) {
  const std::size_t i = global_index();
  if (i >= static_cast<std::size_t>(seq) * width)
    return;
  const std::size_t t = i / width;
  const std::size_t c = i % width;
  float acc = dwpe[i];
  for (int b = 0; b < batch; ++b)
    acc += dout[(static_cast<std::size_t>(b) * seq + t) * width + c];
  dwpe[i] = acc;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* in, const float* gain,
                                         const float* bias, std::size_t rows, int width) {
  const std::size_t row = global_index() / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= rows)
    return;
  const float* x = in + row * width;
  float* o = out + row * width;
  const float inv_width = 1.0f / static_cast<float>(width);
  float s = 0;
  for (int c = lane; c < width; c += 32)
    s += x[c];
  const float m = warp_sum(s) * inv_width;
  float var = 0;
  for (int c = lane; c < width; c += 32) {
    const float d = x[c] - m;
    var += d * d;
  }
  var = warp_sum(var) * inv_width;
  const float r = 1.0f / sqrtf(var + 1e-5f);
  for (int c = lane; c < width; c += 32)
    o[c] = (x[c] - m) * r * gain[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_input_kernel(float* din, const float* dout, const float* in, const float* gain,
                                                const float* mean, const float* rstd, std::size_t rows, int width) {
  const std::size_t row = global_index() / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= rows)
    return;
  const float* x = in + row * width;
  const float* d = dout + row * width;
  float* dx = din + row * width;
  const float m = mean[row];
  const float r = rstd[row];
  float dnorm_mean = 0;
  float dnorm_xhat_mean = 0;
  for (int c = lane; c < width; c += 32) {
    const float xhat = (x[c] - m) * r;
    const float dnorm = d[c] * gain[c];
    dnorm_mean += dnorm;
    dnorm_xhat_mean += dnorm * xhat;
  }
  const float inv_width = 1.0f / static_cast<float>(width);
  dnorm_mean = warp_sum(dnorm_mean) * inv_width;
  dnorm_xhat_mean = warp_sum(dnorm_xhat_mean) * inv_width;
  for (int c = lane; c < width; c += 32) {
    const float xhat = (x[c] - m) * r;
    const float dnorm = d[c] * gain[c];
    dx[c] += r * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
  }
}

// One thread per channel sums over rows in row order (as the CPU does).
__global__ void layernorm_backward_params_kernel(float* dgain, float* dbias, const float* dout, const float* in,
                                                 const float* mean, const float* rstd, std::size_t rows, int width) {
  const std::size_t c = global_index();
  if (c >= static_cast<std::size_t>(width))
    return;
  float dg = dgain[c];
  float db = dbias[c];
  for (std::size_t r = 0; r < rows; ++r) {
    const float d = dout[r * width + c];
    const float xhat = (in[r * width + c] - mean[r]) * rstd[r];
    db += d;
    dg += xhat * d;
  }
  dgain[c] = dg;
  dbias[c] = db;
}

__global__ void fill_rows_kernel(float* out, const float* row, std::size_t rows, int cols) {
  for (std::size_t i = global_index(); i < rows * cols; i += grid_stride())
    out[i] = row[i % cols];
}

__global__ void column_sums_kernel(float* sums, const float* m, std::size_t rows, int cols) {
  const std::size_t c = global_index();
  if (c >= static_cast<std::size_t>(cols))
    return;
  float acc = sums[c];
  for (std::size_t r = 0; r < rows; ++r)
    acc += m[r * cols + c];
  sums[c] = acc;
}

// Causal softmax of rows of length seq in place; row index modulo seq is the query position.
__global__ void softmax_causal_kernel(float* att, std::size_t rows, int seq) {
  const std::size_t row = global_index() / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % seq);
  float* p = att + row * seq;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32)
    mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  float s = 0;
  for (int j = lane; j <= t; j += 32) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    s += e;
  }
  const float inv = 1.0f / warp_sum(s);
  for (int j = lane; j <= t; j += 32)
    p[j] *= inv;
  for (int j = t + 1 + lane; j < seq; j += 32)
    p[j] = 0.0f;
}

// dS = P ⊙ (dP - rowsum(P ⊙ dP)) in place of dP; zero above the diagonal.
__global__ void softmax_causal_backward_kernel(float* ds, const float* att, std::size_t rows, int seq) {
  const std::size_t row = global_index() / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % seq);
  const float* p = att + row * seq;
  float* d = ds + row * seq;
  float dot = 0;
  for (int j = lane; j <= t; j += 32)
    dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j <= t; j += 32)
    d[j] = p[j] * (d[j] - dot);
  for (int j = t + 1 + lane; j < seq; j += 32)
    d[j] = 0.0f;
}

constexpr float gelu_k = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float gelu_c = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float x = in[i];
    const float u = gelu_k * (x + gelu_c * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

__global__ void gelu_backward_kernel(float* din, const float* in, const float* dout, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float x = in[i];
    const float u = gelu_k * (x + gelu_c * x * x * x);
    const float th = tanhf(u);
    const float du = gelu_k * (1.0f + 3.0f * gelu_c * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    din[i] = grad * dout[i];
  }
}

__global__ void residual_kernel(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride())
    out[i] = a[i] + b[i];
}

__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits,
                                            const std::int32_t* targets, std::size_t rows, int vocab) {
  const std::size_t row = global_index() / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= rows)
    return;
  const float* z = logits + row * vocab;
  float* p = probs + row * vocab;
  float mx = -INFINITY;
  for (int v = lane; v < vocab; v += 32)
    mx = fmaxf(mx, z[v]);
  mx = warp_max(mx);
  float s = 0;
  for (int v = lane; v < vocab; v += 32) {
    const float e = expf(z[v] - mx);
    p[v] = e;
    s += e;
  }
  s = warp_sum(s);
  const float inv = 1.0f / s;
  for (int v = lane; v < vocab; v += 32)
    p[v] *= inv;
  if (lane == 0)
    losses[row] = logf(s) - (z[targets[row]] - mx);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const std::int32_t* targets,
                                             float dloss, std::size_t rows, int vocab) {
  for (std::size_t i = global_index(); i < rows * vocab; i += grid_stride()) {
    const std::size_t r = i / vocab;
    const int v = static_cast<int>(i % vocab);
    float d = probs[i] * dloss;
    if (v == targets[r])
      d -= dloss;
    dlogits[i] = d;
  }
}

// Per-block partial sums (of x or x²) in double over a fixed grid, then a tree within the block.
template <bool Square>
__global__ void partial_sums_kernel(const float* x, std::size_t n, double* partials) {
  __shared__ double buf[block_threads];
  double acc = 0;
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const double v = x[i];
    acc += Square ? v * v : v;
  }
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = block_threads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s)
      buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    partials[blockIdx.x] = buf[0];
}

// One block of reduce_blocks threads adds the partials by the same tree.
__global__ void final_sum_kernel(const double* partials, double* out) {
  __shared__ double buf[reduce_blocks];
  buf[threadIdx.x] = partials[threadIdx.x];
  __syncthreads();
  for (int s = reduce_blocks / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s)
      buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *out = buf[0];
}

__global__ void scale_kernel(float* x, std::size_t n, float factor) {
  for (std::size_t i = global_index(); i < n; i += grid_stride())
    x[i] *= factor;
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, std::size_t n, adamw_step s) {
  const float one_b1 = 1.0f - s.beta1;
  const float one_b2 = 1.0f - s.beta2;
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float g = grads[i] * s.grad_scale;
    const float mi = s.beta1 * m[i] + one_b1 * g;
    const float vi = s.beta2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / s.correction1) / (sqrtf(vi / s.correction2) + s.epsilon);
    params[i] -= s.lr * (update + s.weight_decay * params[i]);
  }
}

}  // namespace

struct ops::impl {
  int device = 0;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  status first_error;
  // [heads, seq, seq] scratch of the attention backward.
  device_array<float> scratch;
  // reduce_blocks partial sums and the result.
  device_array<double> partials;

  ~impl() {
    if (blas != nullptr)
      cublasDestroy(blas);
    if (stream != nullptr)
      cudaStreamDestroy(stream);
  }

  void record(status s) {
    if (first_error.ok() && !s.ok())
      std::swap(first_error, s);
  }
  void record_cuda(cudaError_t e, const char* expr, const char* file, int line) {
    if (e != cudaSuccess)
      record(cuda_failure(e, expr, file, line));
  }
  void record_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
      record(cublas_failure(s, expr, file, line));
  }

  // Row-major C = alpha·op(A)·op(B) + beta·C, `count` times with the given element strides.
  // cuBLAS is column-major: a row-major matrix is its transpose, so compute Cᵀ = op(B)ᵀ·op(A)ᵀ.
  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, long long stride_a, const float* b, std::size_t ldb, long long stride_b, float beta,
            float* c, std::size_t ldc, long long stride_c, int count, const char* file, int line) {
    const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
    if (count == 1)
      record_cublas(cublasSgemm(blas, op_b, op_a, N, M, K, &alpha, b, static_cast<int>(ldb), a,
                                static_cast<int>(lda), &beta, c, static_cast<int>(ldc)),
                    "cublasSgemm", file, line);
    else
      record_cublas(cublasSgemmStridedBatched(blas, op_b, op_a, N, M, K, &alpha, b, static_cast<int>(ldb), stride_b,
                                              a, static_cast<int>(lda), stride_a, &beta, c, static_cast<int>(ldc),
                                              stride_c, count),
                    "cublasSgemmStridedBatched", file, line);
  }

  // Makes sure the scratch holds `count` floats.
  float* scratch_for(std::size_t count) {
    if (scratch.size() < count) {
      auto a = device_array<float>::create(count);
      if (!a) {
        record(std::move(a).error());
        return nullptr;
      }
      scratch = std::move(a).value();
    }
    return scratch.data();
  }

  double reduce(const float* x, std::size_t n, bool square) {
    if (!first_error.ok())
      return std::numeric_limits<double>::quiet_NaN();
    if (square)
      partial_sums_kernel<true><<<reduce_blocks, block_threads, 0, stream>>>(x, n, partials.data());
    else
      partial_sums_kernel<false><<<reduce_blocks, block_threads, 0, stream>>>(x, n, partials.data());
    record_cuda(cudaGetLastError(), "partial_sums_kernel", __FILE__, __LINE__);
    final_sum_kernel<<<1, reduce_blocks, 0, stream>>>(partials.data(), partials.data() + reduce_blocks);
    record_cuda(cudaGetLastError(), "final_sum_kernel", __FILE__, __LINE__);
    double out = std::numeric_limits<double>::quiet_NaN();
    record_cuda(cudaMemcpyAsync(&out, partials.data() + reduce_blocks, sizeof out, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync(sum)", __FILE__, __LINE__);
    record_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", __FILE__, __LINE__);
    return first_error.ok() ? out : std::numeric_limits<double>::quiet_NaN();
  }
};

#define RK_CUDA_RECORD(expr) impl_->record_cuda((expr), #expr, __FILE__, __LINE__)
#define RK_LAUNCHED(name) impl_->record_cuda(cudaGetLastError(), name, __FILE__, __LINE__)

expected<std::unique_ptr<ops>> ops::create(int index) {
  RK_RETURN_IF_ERROR(set_device(index));
  auto p = std::make_unique<impl>();
  p->device = index;
  RK_CUDA_TRY(cudaStreamCreate(&p->stream));
  RK_CUBLAS_TRY(cublasCreate(&p->blas));
  RK_CUBLAS_TRY(cublasSetStream(p->blas, p->stream));
  // FP32 products in FP32 (no TF32), so results stay close to the CPU reference.
  RK_CUBLAS_TRY(cublasSetMathMode(p->blas, CUBLAS_DEFAULT_MATH));
  RK_ASSIGN_OR_RETURN(p->partials, device_array<double>::create(reduce_blocks + 1));
  return std::make_unique<ops>(passkey{}, std::move(p));
}

ops::ops(passkey /*key*/, std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}
ops::~ops() = default;

status ops::check() {
  RK_CUDA_RECORD(cudaGetLastError());
  return impl_->first_error;
}

status ops::synchronize() {
  RK_CUDA_RECORD(cudaStreamSynchronize(impl_->stream));
  return check();
}

void ops::embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                            std::size_t batch, std::size_t seq, std::size_t width) {
  const std::size_t rows = batch * seq;
  embedding_forward_kernel<<<grid_for(rows * width), block_threads, 0, impl_->stream>>>(
      out, tokens, wte, wpe, rows, static_cast<int>(seq), static_cast<int>(width));
  RK_LAUNCHED("embedding_forward_kernel");
}

void ops::embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                             std::size_t batch, std::size_t seq, std::size_t width) {
  const std::size_t table = std::size_t{vocab_size} * width;
  embedding_backward_wte_kernel<<<static_cast<int>((table + block_threads - 1) / block_threads), block_threads, 0,
                                  impl_->stream>>>(dwte, dout, tokens, batch * seq, static_cast<int>(width),
                                                   static_cast<int>(vocab_size));
  RK_LAUNCHED("embedding_backward_wte_kernel");
  const std::size_t positions = seq * width;
  embedding_backward_wpe_kernel<<<static_cast<int>((positions + block_threads - 1) / block_threads), block_threads,
                                  0, impl_->stream>>>(dwpe, dout, static_cast<int>(batch), static_cast<int>(seq),
                                                      static_cast<int>(width));
  RK_LAUNCHED("embedding_backward_wpe_kernel");
}

void ops::layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* gain,
                            const float* bias, std::size_t rows, std::size_t width) {
  layernorm_forward_kernel<<<warp_grid(rows), block_threads, 0, impl_->stream>>>(out, mean, rstd, in, gain, bias,
                                                                                 rows, static_cast<int>(width));
  RK_LAUNCHED("layernorm_forward_kernel");
}

void ops::layernorm_backward(float* din, float* dgain, float* dbias, const float* dout, const float* in,
                             const float* gain, const float* mean, const float* rstd, std::size_t rows,
                             std::size_t width) {
  layernorm_backward_input_kernel<<<warp_grid(rows), block_threads, 0, impl_->stream>>>(
      din, dout, in, gain, mean, rstd, rows, static_cast<int>(width));
  RK_LAUNCHED("layernorm_backward_input_kernel");
  layernorm_backward_params_kernel<<<static_cast<int>((width + block_threads - 1) / block_threads), block_threads, 0,
                                     impl_->stream>>>(dgain, dbias, dout, in, mean, rstd, rows,
                                                      static_cast<int>(width));
  RK_LAUNCHED("layernorm_backward_params_kernel");
}

void ops::matmul_forward(float* out, const float* in, const float* weight, const float* bias, std::size_t rows,
                         std::size_t in_f, std::size_t out_f) {
  if (bias != nullptr) {
    fill_rows_kernel<<<grid_for(rows * out_f), block_threads, 0, impl_->stream>>>(out, bias, rows,
                                                                                  static_cast<int>(out_f));
    RK_LAUNCHED("fill_rows_kernel");
  }
  impl_->gemm(false, true, rows, out_f, in_f, 1.0f, in, in_f, 0, weight, in_f, 0, bias != nullptr ? 1.0f : 0.0f, out,
              out_f, 0, 1, __FILE__, __LINE__);
}

void ops::matmul_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                          const float* weight, std::size_t rows, std::size_t in_f, std::size_t out_f) {
  impl_->gemm(false, false, rows, in_f, out_f, 1.0f, dout, out_f, 0, weight, in_f, 0, 0.0f, din, in_f, 0, 1,
              __FILE__, __LINE__);
  impl_->gemm(true, false, out_f, in_f, rows, 1.0f, dout, out_f, 0, in, in_f, 0, 1.0f, dweight, in_f, 0, 1, __FILE__,
              __LINE__);
  if (dbias != nullptr) {
    column_sums_kernel<<<static_cast<int>((out_f + block_threads - 1) / block_threads), block_threads, 0,
                         impl_->stream>>>(dbias, dout, rows, static_cast<int>(out_f));
    RK_LAUNCHED("column_sums_kernel");
  }
}

void ops::attention_forward(float* out, float* att, const float* qkv, std::size_t batch, std::size_t seq,
                            std::size_t width, std::size_t heads) {
  const std::size_t hs = width / heads;
  const std::size_t ld = 3 * width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto H = static_cast<int>(heads);
  const auto per_head = static_cast<long long>(seq * seq);
  const auto head_cols = static_cast<long long>(hs);
  // Scores for every head of a sequence in one batched product: head h's q, k start hs floats
  // after head h-1's.
  for (std::size_t b = 0; b < batch; ++b) {
    const float* q = qkv + b * seq * ld;
    impl_->gemm(false, true, seq, seq, hs, scale, q, ld, head_cols, q + width, ld, head_cols, 0.0f,
                att + b * heads * seq * seq, seq, per_head, H, __FILE__, __LINE__);
  }
  softmax_causal_kernel<<<warp_grid(batch * heads * seq), block_threads, 0, impl_->stream>>>(
      att, batch * heads * seq, static_cast<int>(seq));
  RK_LAUNCHED("softmax_causal_kernel");
  for (std::size_t b = 0; b < batch; ++b) {
    const float* v = qkv + b * seq * ld + 2 * width;
    impl_->gemm(false, false, seq, hs, seq, 1.0f, att + b * heads * seq * seq, seq, per_head, v, ld, head_cols, 0.0f,
                out + b * seq * width, width, head_cols, H, __FILE__, __LINE__);
  }
}

void ops::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, std::size_t batch,
                             std::size_t seq, std::size_t width, std::size_t heads) {
  const std::size_t hs = width / heads;
  const std::size_t ld = 3 * width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto H = static_cast<int>(heads);
  const auto per_head = static_cast<long long>(seq * seq);
  const auto head_cols = static_cast<long long>(hs);
  float* ds = impl_->scratch_for(heads * seq * seq);
  if (ds == nullptr)
    return;
  for (std::size_t b = 0; b < batch; ++b) {
    const float* q = qkv + b * seq * ld;
    const float* k = q + width;
    const float* v = q + 2 * width;
    float* dq = dqkv + b * seq * ld;
    float* dk = dq + width;
    float* dv = dq + 2 * width;
    const float* p = att + b * heads * seq * seq;
    const float* dy = dout + b * seq * width;
    // dP = dY·Vᵀ, dV = Pᵀ·dY.
    impl_->gemm(false, true, seq, seq, hs, 1.0f, dy, width, head_cols, v, ld, head_cols, 0.0f, ds, seq, per_head, H,
                __FILE__, __LINE__);
    impl_->gemm(true, false, seq, hs, seq, 1.0f, p, seq, per_head, dy, width, head_cols, 0.0f, dv, ld, head_cols, H,
                __FILE__, __LINE__);
    softmax_causal_backward_kernel<<<warp_grid(heads * seq), block_threads, 0, impl_->stream>>>(
        ds, p, heads * seq, static_cast<int>(seq));
    RK_LAUNCHED("softmax_causal_backward_kernel");
    // dQ = dS·K/sqrt(hs), dK = dSᵀ·Q/sqrt(hs).
    impl_->gemm(false, false, seq, hs, seq, scale, ds, seq, per_head, k, ld, head_cols, 0.0f, dq, ld, head_cols, H,
                __FILE__, __LINE__);
    impl_->gemm(true, false, seq, hs, seq, scale, ds, seq, per_head, q, ld, head_cols, 0.0f, dk, ld, head_cols, H,
                __FILE__, __LINE__);
  }
}

void ops::gelu_forward(float* out, const float* in, std::size_t n) {
  gelu_forward_kernel<<<grid_for(n), block_threads, 0, impl_->stream>>>(out, in, n);
  RK_LAUNCHED("gelu_forward_kernel");
}

void ops::gelu_backward(float* din, const float* in, const float* dout, std::size_t n) {
  gelu_backward_kernel<<<grid_for(n), block_threads, 0, impl_->stream>>>(din, in, dout, n);
  RK_LAUNCHED("gelu_backward_kernel");
}

void ops::residual_forward(float* out, const float* a, const float* b, std::size_t n) {
  residual_kernel<<<grid_for(n), block_threads, 0, impl_->stream>>>(out, a, b, n);
  RK_LAUNCHED("residual_kernel");
}

void ops::crossentropy_forward(float* losses, float* probs, const float* logits, const std::int32_t* targets,
                               std::size_t rows, std::size_t vocab) {
  crossentropy_forward_kernel<<<warp_grid(rows), block_threads, 0, impl_->stream>>>(losses, probs, logits, targets,
                                                                                    rows, static_cast<int>(vocab));
  RK_LAUNCHED("crossentropy_forward_kernel");
}

void ops::crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float dloss,
                                std::size_t rows, std::size_t vocab) {
  crossentropy_backward_kernel<<<grid_for(rows * vocab), block_threads, 0, impl_->stream>>>(
      dlogits, probs, targets, dloss, rows, static_cast<int>(vocab));
  RK_LAUNCHED("crossentropy_backward_kernel");
}

double ops::sum(const float* x, std::size_t n) {
  return impl_->reduce(x, n, false);
}

double ops::sum_squares(const float* x, std::size_t n) {
  return impl_->reduce(x, n, true);
}

void ops::scale(float* x, std::size_t n, float factor) {
  scale_kernel<<<grid_for(n), block_threads, 0, impl_->stream>>>(x, n, factor);
  RK_LAUNCHED("scale_kernel");
}

void ops::zero(float* x, std::size_t n) {
  if (n > 0)
    RK_CUDA_RECORD(cudaMemsetAsync(x, 0, n * sizeof(float), impl_->stream));
}

void ops::adamw(float* params, const float* grads, float* m, float* v, std::size_t n, const adamw_step& s) {
  if (n == 0)
    return;
  adamw_kernel<<<grid_for(n), block_threads, 0, impl_->stream>>>(params, grads, m, v, n, s);
  RK_LAUNCHED("adamw_kernel");
}

}  // namespace rekindle::kernels::cuda
