#include "kernels/layer_profile.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/cpu_ops.hpp"
#include "kernels/float_mode.hpp"

namespace rekindle::kernels {

namespace {

using clock_type = std::chrono::steady_clock;

// Buffers of the profiled layer, each zeroed or filled with small deterministic values (the
// kernels' speed does not depend on the values as long as they are normal numbers).
class buffers {
 public:
  explicit buffers(cpu_ops<float>& ops) : ops_(&ops) {}
  float* zeros(std::size_t count) {
    if (!failed_.ok())
      return nullptr;
    auto a = ops_->allocate(std::max<std::size_t>(count, 1));
    if (!a) {
      failed_ = std::move(a).error();
      return nullptr;
    }
    owned_.push_back(std::move(*a));
    return owned_.back().data();
  }
  float* values(std::size_t count, float scale) {
    float* p = zeros(count);
    if (p != nullptr)
      for (std::size_t i = 0; i < count; ++i)
        p[i] = scale * static_cast<float>(static_cast<int>((i * 2654435761u) % 2001) - 1000) / 1000.0f;
    return p;
  }
  [[nodiscard]] const status& failed() const noexcept { return failed_; }

 private:
  cpu_ops<float>* ops_;
  std::vector<host_array<float>> owned_;
  status failed_;
};

double median(std::vector<double>& v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Runs `forward` and `backward` once untimed, then `runs` times timed; the medians.
template <class Forward, class Backward>
layer_times time_passes(int runs, Forward forward, Backward backward) {
  std::vector<double> f, b;
  const auto seconds = [](clock_type::duration d) { return std::chrono::duration<double>(d).count(); };
  for (int r = -1; r < runs; ++r) {
    const auto t0 = clock_type::now();
    forward();
    const auto t1 = clock_type::now();
    backward();
    const auto t2 = clock_type::now();
    if (r >= 0) {
      f.push_back(seconds(t1 - t0));
      b.push_back(seconds(t2 - t1));
    }
  }
  return {median(f), median(b)};
}

}  // namespace

status check_profile_point(const model_shape& shape, profiled_layer layer, std::uint32_t micro_batch,
                           std::uint32_t tensor, int runs) {
  const auto bad = [](std::string why) { return status{errc::invalid_argument, std::move(why)}; };
  if (micro_batch < 1)
    return bad("micro-batch size " + std::to_string(micro_batch) + ": it must be at least 1");
  if (runs < 1 || runs > 1000)
    return bad("runs " + std::to_string(runs) + ": from 1 to 1000");
  RK_RETURN_IF_ERROR(shape.validate(micro_batch));
  if (tensor < 1)
    return bad("tensor degree " + std::to_string(tensor) + ": it must be at least 1");
  if (layer == profiled_layer::block && shape.heads % tensor != 0)
    return bad("tensor degree " + std::to_string(tensor) + " does not divide the " + std::to_string(shape.heads) +
               " heads");
  if (layer == profiled_layer::head && vocab_size % tensor != 0)
    return bad("tensor degree " + std::to_string(tensor) + " does not divide the vocabulary of " +
               std::to_string(vocab_size));
  return {};
}

expected<layer_times> profile_cpu_layer(const model_shape& shape, profiled_layer layer, std::uint32_t micro_batch,
                                        std::uint32_t tensor, int runs) {
  RK_RETURN_IF_ERROR(check_profile_point(shape, layer, micro_batch, tensor, runs));
  // As a rank's training step runs: one BLAS thread, subnormals flushed.
  use_single_threaded_blas();
  const flush_subnormals flush;
  cpu_ops<float> ops;
  buffers m{ops};
  const std::size_t B = micro_batch, S = shape.seq_len, C = shape.width, H = shape.heads, t = tensor;
  const std::size_t N = B * S, Cs = C / t, Hs = H / t, F = 4 * C / t;
  if (layer == profiled_layer::block) {
    // The shard of one block at degree t (see the header); the same calls, in the same order, as
    // transformer<Ops>::forward and backward make for a block.
    float* in = m.values(N * C, 1.0f);
    float* ln1_g = m.values(C, 1.0f);
    float* ln1_b = m.values(C, 0.1f);
    float* qkv_w = m.values(3 * Cs * C, 0.02f);
    float* qkv_b = m.values(3 * Cs, 0.01f);
    float* proj_w = m.values(C * Cs, 0.02f);
    float* proj_b = m.values(C, 0.01f);
    float* ln2_g = m.values(C, 1.0f);
    float* ln2_b = m.values(C, 0.1f);
    float* fc_w = m.values(F * C, 0.02f);
    float* fc_b = m.values(F, 0.01f);
    float* fcproj_w = m.values(C * F, 0.02f);
    float* fcproj_b = m.values(C, 0.01f);
    float* g_ln1_g = m.zeros(C);
    float* g_ln1_b = m.zeros(C);
    float* g_qkv_w = m.zeros(3 * Cs * C);
    float* g_qkv_b = m.zeros(3 * Cs);
    float* g_proj_w = m.zeros(C * Cs);
    float* g_proj_b = m.zeros(C);
    float* g_ln2_g = m.zeros(C);
    float* g_ln2_b = m.zeros(C);
    float* g_fc_w = m.zeros(F * C);
    float* g_fc_b = m.zeros(F);
    float* g_fcproj_w = m.zeros(C * F);
    float* g_fcproj_b = m.zeros(C);
    float* ln1 = m.zeros(N * C);
    float* ln1_mean = m.zeros(N);
    float* ln1_rstd = m.zeros(N);
    float* qkv = m.zeros(N * 3 * Cs);
    float* att = m.zeros(B * Hs * S * S);
    float* atty = m.zeros(N * Cs);
    float* attproj = m.zeros(N * C);
    float* res2 = m.zeros(N * C);
    float* ln2 = m.zeros(N * C);
    float* ln2_mean = m.zeros(N);
    float* ln2_rstd = m.zeros(N);
    float* fch = m.zeros(N * F);
    float* fch_gelu = m.zeros(N * F);
    float* fcproj = m.zeros(N * C);
    float* res3 = m.zeros(N * C);
    float* dout = m.values(N * C, 0.001f);
    float* dres = m.zeros(N * C);
    float* dln = m.zeros(N * C);
    float* datty = m.zeros(N * Cs);
    float* dqkv = m.zeros(N * 3 * Cs);
    float* dwide = m.zeros(N * F);
    RK_RETURN_IF_ERROR(m.failed());
    return time_passes(
        runs,
        [&] {
          ops.layernorm_forward(ln1, ln1_mean, ln1_rstd, in, ln1_g, ln1_b, N, C);
          ops.matmul_forward(qkv, ln1, qkv_w, qkv_b, N, C, 3 * Cs);
          ops.attention_forward(atty, att, qkv, B, S, Cs, Hs);
          ops.matmul_forward(attproj, atty, proj_w, proj_b, N, Cs, C);
          ops.residual_forward(res2, in, attproj, N * C);
          ops.layernorm_forward(ln2, ln2_mean, ln2_rstd, res2, ln2_g, ln2_b, N, C);
          ops.matmul_forward(fch, ln2, fc_w, fc_b, N, C, F);
          ops.gelu_forward(fch_gelu, fch, N * F);
          ops.matmul_forward(fcproj, fch_gelu, fcproj_w, fcproj_b, N, F, C);
          ops.residual_forward(res3, res2, fcproj, N * C);
        },
        [&] {
          std::copy(dout, dout + N * C, dres);  // the gradient the next block hands back
          ops.matmul_backward(dwide, g_fcproj_w, g_fcproj_b, dres, fch_gelu, fcproj_w, N, F, C);
          ops.gelu_backward(dwide, fch, dwide, N * F);
          ops.matmul_backward(dln, g_fc_w, g_fc_b, dwide, ln2, fc_w, N, C, F);
          ops.layernorm_backward(dres, g_ln2_g, g_ln2_b, dln, res2, ln2_g, ln2_mean, ln2_rstd, N, C);
          ops.matmul_backward(datty, g_proj_w, g_proj_b, dres, atty, proj_w, N, Cs, C);
          ops.attention_backward(dqkv, datty, qkv, att, B, S, Cs, Hs);
          ops.matmul_backward(dln, g_qkv_w, g_qkv_b, dqkv, ln1, qkv_w, N, C, 3 * Cs);
          ops.layernorm_backward(dres, g_ln1_g, g_ln1_b, dln, in, ln1_g, ln1_mean, ln1_rstd, N, C);
        });
  }
  // The output projection with the loss, V/t of the vocabulary.
  const std::size_t V = vocab_size / t;
  float* in = m.values(N * C, 1.0f);
  float* lnf_g = m.values(C, 1.0f);
  float* lnf_b = m.values(C, 0.1f);
  float* wte = m.values(V * C, 0.02f);
  float* g_lnf_g = m.zeros(C);
  float* g_lnf_b = m.zeros(C);
  float* g_wte = m.zeros(V * C);
  float* lnf = m.zeros(N * C);
  float* lnf_mean = m.zeros(N);
  float* lnf_rstd = m.zeros(N);
  float* logits = m.zeros(N * V);
  float* probs = m.zeros(N * V);
  float* losses = m.zeros(N);
  float* dlogits = m.zeros(N * V);
  float* dln = m.zeros(N * C);
  float* dres = m.zeros(N * C);
  RK_RETURN_IF_ERROR(m.failed());
  std::vector<std::int32_t> targets(N);
  for (std::size_t i = 0; i < N; ++i)
    targets[i] = static_cast<std::int32_t>((i * 7) % V);
  return time_passes(
      runs,
      [&] {
        ops.layernorm_forward(lnf, lnf_mean, lnf_rstd, in, lnf_g, lnf_b, N, C);
        ops.matmul_forward(logits, lnf, wte, nullptr, N, C, V);
        ops.crossentropy_forward(losses, probs, logits, targets.data(), N, V);
      },
      [&] {
        ops.crossentropy_backward(dlogits, probs, targets.data(), 1.0f / static_cast<float>(N), N, V);
        ops.matmul_backward(dln, g_wte, nullptr, dlogits, lnf, wte, N, C, V);
        ops.layernorm_backward(dres, g_lnf_g, g_lnf_b, dln, in, lnf_g, lnf_mean, lnf_rstd, N, C);
      });
}

}  // namespace rekindle::kernels
