// Every CUDA kernel against its CPU reference (cpu_ops<float>), and a whole training step of the
// CUDA backend against the CPU backend. Each comparison prints one line
//   GPUCHECK <name> <max abs err> <max rel err> <ok|FAIL>
// that scripts/gpu-check collects into a table. Without a GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu_ops.hpp"
#include "kernels/cuda_ops.hpp"
#include "kernels/layout.hpp"
#include "tests/support/values.hpp"

namespace rekindle::kernels {
namespace {

using fvec = std::vector<float>;
using ivec = std::vector<std::int32_t>;
using darray = cuda::device_array<float>;

fvec random_vec(std::size_t n, std::uint64_t seed, float scale = 1.0f) { return testing::random_normal(n, seed, scale); }

ivec random_tokens(std::size_t n, std::uint64_t seed) { return testing::random_tokens(n, seed, vocab_size); }

// Checks |gpu - ref| <= atol + rtol·|ref| element-wise, with atol = atol_frac · max|ref| so one
// tolerance fits tensors of any magnitude; prints the GPUCHECK line.
void expect_close(const std::string& name, const fvec& gpu, const fvec& ref, double rtol = 1e-4,
                  double atol_frac = 1e-5) {
  ASSERT_EQ(gpu.size(), ref.size()) << name;
  double scale = 0;
  for (float r : ref)
    scale = std::max(scale, std::abs(static_cast<double>(r)));
  const double atol = atol_frac * std::max(scale, 1e-30);
  double max_abs = 0, max_rel = 0;
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double a = gpu[i], r = ref[i];
    const double err = std::abs(a - r);
    if (!(err <= atol + rtol * std::abs(r))) {
      if (bad++ == 0)
        first_bad = i;
    }
    max_abs = std::max(max_abs, err);
    if (std::abs(r) > atol)
      max_rel = std::max(max_rel, err / std::abs(r));
  }
  std::printf("GPUCHECK %s %.3e %.3e %s\n", name.c_str(), max_abs, max_rel, bad == 0 ? "ok" : "FAIL");
  std::fflush(stdout);
  EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << ref.size() << " elements differ; first at " << first_bad
                     << ": gpu " << gpu[first_bad] << " vs cpu " << ref[first_bad];
}

class cuda_kernels : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda_probe probe = probe_cuda();
    if (probe.device_count == 0)
      GTEST_SKIP() << probe.detail;
    auto o = cuda::ops::create(0);
    ASSERT_TRUE(o.has_value()) << o.error();
    gpu_ = std::move(o).value();
  }

  darray up(const fvec& v) {
    auto a = darray::from_host(v);
    EXPECT_TRUE(a.has_value()) << a.error();
    return a.has_value() ? std::move(a).value() : darray{};
  }
  cuda::device_array<std::int32_t> up(const ivec& v) {
    auto a = cuda::device_array<std::int32_t>::from_host(v);
    EXPECT_TRUE(a.has_value()) << a.error();
    return a.has_value() ? std::move(a).value() : cuda::device_array<std::int32_t>{};
  }
  fvec down(const darray& a) {
    const status s = gpu_->synchronize();
    EXPECT_TRUE(s.ok()) << s;
    auto v = a.to_host();
    EXPECT_TRUE(v.has_value()) << v.error();
    return v.has_value() ? std::move(v).value() : fvec{};
  }

  cpu_ops<float> cpu_;
  std::unique_ptr<cuda::ops> gpu_;
};

TEST_F(cuda_kernels, embedding) {
  const std::size_t B = 3, S = 37, C = 48;
  auto tokens = random_tokens(B * S, 1);
  tokens[5] = tokens[40] = tokens[77];  // repeats accumulate
  const fvec wte = random_vec(vocab_size * C, 2), wpe = random_vec(S * C, 3), dout = random_vec(B * S * C, 4);
  fvec out(B * S * C);
  cpu_.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, S, C);
  auto g_tokens = up(tokens);
  auto g_wte = up(wte), g_wpe = up(wpe), g_out = up(fvec(out.size())), g_dout = up(dout);
  gpu_->embedding_forward(g_out.data(), g_tokens.data(), g_wte.data(), g_wpe.data(), B, S, C);
  expect_close("embedding_forward", down(g_out), out);

  fvec dwte = random_vec(wte.size(), 5), dwpe = random_vec(wpe.size(), 6);
  auto g_dwte = up(dwte), g_dwpe = up(dwpe);
  cpu_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, S, C);
  gpu_->embedding_backward(g_dwte.data(), g_dwpe.data(), g_dout.data(), g_tokens.data(), B, S, C);
  expect_close("embedding_backward.dwte", down(g_dwte), dwte);
  expect_close("embedding_backward.dwpe", down(g_dwpe), dwpe);
}

TEST_F(cuda_kernels, layernorm) {
  const std::size_t N = 70, C = 100;
  const fvec in = random_vec(N * C, 10, 3.0f), gain = random_vec(C, 11), bias = random_vec(C, 12),
             dout = random_vec(N * C, 13);
  fvec out(N * C), mean(N), rstd(N);
  cpu_.layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), gain.data(), bias.data(), N, C);
  auto g_in = up(in), g_gain = up(gain), g_bias = up(bias), g_dout = up(dout);
  auto g_out = up(fvec(N * C)), g_mean = up(fvec(N)), g_rstd = up(fvec(N));
  gpu_->layernorm_forward(g_out.data(), g_mean.data(), g_rstd.data(), g_in.data(), g_gain.data(), g_bias.data(), N, C);
  expect_close("layernorm_forward.out", down(g_out), out);
  expect_close("layernorm_forward.mean", down(g_mean), mean);
  expect_close("layernorm_forward.rstd", down(g_rstd), rstd);

  fvec din = random_vec(N * C, 14), dgain = random_vec(C, 15), dbias = random_vec(C, 16);
  auto g_din = up(din), g_dgain = up(dgain), g_dbias = up(dbias);
  cpu_.layernorm_backward(din.data(), dgain.data(), dbias.data(), dout.data(), in.data(), gain.data(), mean.data(),
                          rstd.data(), N, C);
  // The GPU backward reads the CPU's mean and rstd, so it is compared on equal inputs.
  auto c_mean = up(mean), c_rstd = up(rstd);
  gpu_->layernorm_backward(g_din.data(), g_dgain.data(), g_dbias.data(), g_dout.data(), g_in.data(), g_gain.data(),
                           c_mean.data(), c_rstd.data(), N, C);
  expect_close("layernorm_backward.din", down(g_din), din, 1e-3, 1e-4);
  expect_close("layernorm_backward.dgain", down(g_dgain), dgain);
  expect_close("layernorm_backward.dbias", down(g_dbias), dbias);
}

TEST_F(cuda_kernels, matmul) {
  const std::size_t N = 37, IN = 48, OUT = 80;
  const fvec in = random_vec(N * IN, 20), w = random_vec(OUT * IN, 21), b = random_vec(OUT, 22),
             dout = random_vec(N * OUT, 23);
  fvec out(N * OUT), nobias(N * OUT);
  cpu_.matmul_forward(out.data(), in.data(), w.data(), b.data(), N, IN, OUT);
  cpu_.matmul_forward(nobias.data(), in.data(), w.data(), nullptr, N, IN, OUT);
  auto g_in = up(in), g_w = up(w), g_b = up(b), g_dout = up(dout), g_out = up(fvec(out.size())),
       g_nobias = up(fvec(out.size()));
  gpu_->matmul_forward(g_out.data(), g_in.data(), g_w.data(), g_b.data(), N, IN, OUT);
  gpu_->matmul_forward(g_nobias.data(), g_in.data(), g_w.data(), nullptr, N, IN, OUT);
  expect_close("matmul_forward", down(g_out), out);
  expect_close("matmul_forward.no_bias", down(g_nobias), nobias);

  fvec din(N * IN), dw = random_vec(w.size(), 24), db = random_vec(OUT, 25);
  auto g_din = up(fvec(din.size(), 9.0f)), g_dw = up(dw), g_db = up(db);
  cpu_.matmul_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), N, IN, OUT);
  gpu_->matmul_backward(g_din.data(), g_dw.data(), g_db.data(), g_dout.data(), g_in.data(), g_w.data(), N, IN, OUT);
  expect_close("matmul_backward.din", down(g_din), din);
  expect_close("matmul_backward.dweight", down(g_dw), dw);
  expect_close("matmul_backward.dbias", down(g_db), db);
}

TEST_F(cuda_kernels, attention) {
  const std::size_t B = 2, S = 45, C = 48, H = 3;
  const fvec qkv = random_vec(B * S * 3 * C, 30), dout = random_vec(B * S * C, 31);
  fvec out(B * S * C), att(B * H * S * S);
  cpu_.attention_forward(out.data(), att.data(), qkv.data(), B, S, C, H);
  auto g_qkv = up(qkv), g_dout = up(dout), g_out = up(fvec(out.size())), g_att = up(fvec(att.size(), 5.0f));
  gpu_->attention_forward(g_out.data(), g_att.data(), g_qkv.data(), B, S, C, H);
  expect_close("attention_forward.out", down(g_out), out);
  expect_close("attention_forward.att", down(g_att), att);

  fvec dqkv(qkv.size());
  cpu_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, S, C, H);
  auto c_att = up(att), g_dqkv = up(fvec(qkv.size(), 7.0f));
  gpu_->attention_backward(g_dqkv.data(), g_dout.data(), g_qkv.data(), c_att.data(), B, S, C, H);
  expect_close("attention_backward", down(g_dqkv), dqkv, 1e-3, 1e-4);
}

TEST_F(cuda_kernels, gelu_and_residual) {
  const std::size_t n = 10007;
  const fvec in = random_vec(n, 40, 3.0f), dout = random_vec(n, 41), other = random_vec(n, 42);
  fvec out(n), din(n), sum(n);
  cpu_.gelu_forward(out.data(), in.data(), n);
  cpu_.gelu_backward(din.data(), in.data(), dout.data(), n);
  cpu_.residual_forward(sum.data(), in.data(), other.data(), n);
  auto g_in = up(in), g_dout = up(dout), g_other = up(other), g_out = up(fvec(n)), g_sum = up(fvec(n));
  gpu_->gelu_forward(g_out.data(), g_in.data(), n);
  gpu_->residual_forward(g_sum.data(), g_in.data(), g_other.data(), n);
  gpu_->gelu_backward(g_dout.data(), g_in.data(), g_dout.data(), n);  // in place, as the model does
  expect_close("gelu_forward", down(g_out), out);
  expect_close("gelu_backward", down(g_dout), din, 1e-4, 1e-5);
  expect_close("residual_forward", down(g_sum), sum, 0.0, 0.0);
}

TEST_F(cuda_kernels, crossentropy) {
  const std::size_t N = 75;
  const fvec logits = random_vec(N * vocab_size, 50, 4.0f);
  const ivec targets = random_tokens(N, 51);
  fvec losses(N), probs(N * vocab_size), dlogits(N * vocab_size);
  cpu_.crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, vocab_size);
  cpu_.crossentropy_backward(dlogits.data(), probs.data(), targets.data(), 0.25f, N, vocab_size);
  auto g_logits = up(logits), g_losses = up(fvec(N)), g_probs = up(fvec(probs.size())),
       g_dlogits = up(fvec(probs.size()));
  auto g_targets = up(targets);
  gpu_->crossentropy_forward(g_losses.data(), g_probs.data(), g_logits.data(), g_targets.data(), N, vocab_size);
  gpu_->crossentropy_backward(g_dlogits.data(), g_probs.data(), g_targets.data(), 0.25f, N, vocab_size);
  expect_close("crossentropy_forward.loss", down(g_losses), losses);
  expect_close("crossentropy_forward.probs", down(g_probs), probs);
  expect_close("crossentropy_backward", down(g_dlogits), dlogits);
}

TEST_F(cuda_kernels, reductions_scale_and_adamw) {
  const std::size_t n = 1'000'003;
  const fvec x = random_vec(n, 60);
  auto g_x = up(x);
  const double s = gpu_->sum(g_x.data(), n), sq = gpu_->sum_squares(g_x.data(), n);
  expect_close("sum", {static_cast<float>(s)}, {static_cast<float>(cpu_.sum(x.data(), n))}, 1e-9, 1e-9);
  expect_close("sum_squares", {static_cast<float>(sq)}, {static_cast<float>(cpu_.sum_squares(x.data(), n))}, 1e-9,
               1e-9);
  // Run to run the reduction is bitwise identical.
  EXPECT_EQ(gpu_->sum_squares(g_x.data(), n), sq);

  fvec scaled = x;
  cpu_.scale(scaled.data(), n, 0.37f);
  gpu_->scale(g_x.data(), n, 0.37f);
  expect_close("scale", down(g_x), scaled, 0.0, 0.0);

  const std::size_t m = 5003;
  fvec p = random_vec(m, 61), g = random_vec(m, 62), mo = random_vec(m, 63, 0.1f), v = random_vec(m, 64, 0.1f);
  for (auto& e : v)
    e = e * e;
  auto g_p = up(p), g_g = up(g), g_m = up(mo), g_v = up(v);
  adamw_hyper h;
  const adamw_step st = make_adamw_step(h, 7, 0.5f);
  cpu_.adamw(p.data(), g.data(), mo.data(), v.data(), m, st);
  gpu_->adamw(g_p.data(), g_g.data(), g_m.data(), g_v.data(), m, st);
  expect_close("adamw.params", down(g_p), p, 1e-5);
  expect_close("adamw.m", down(g_m), mo, 1e-5);
  expect_close("adamw.v", down(g_v), v, 1e-5);
}

// A whole step (forward, backward, AdamW) of the CUDA backend against the CPU backend.
TEST(cuda_backend, training_step_matches_the_cpu) {
  const cuda_probe probe = probe_cuda();
  if (probe.device_count == 0)
    GTEST_SKIP() << probe.detail;
  const model_shape shape{.layers = 2, .heads = 4, .width = 64, .seq_len = 32};
  const std::uint32_t batch = 4;
  backend_options o{.device = {.type = device_request::kind::cuda, .index = 0}, .shape = shape, .max_batch = batch};
  auto gpu = make_backend(o);
  ASSERT_TRUE(gpu.has_value()) << gpu.error();
  ASSERT_EQ((*gpu)->kind(), device_kind::cuda);
  std::printf("device: %s\n", (*gpu)->describe().c_str());
  o.device.type = device_request::kind::cpu;
  auto cpu = make_backend(o);
  ASSERT_TRUE(cpu.has_value()) << cpu.error();

  const param_layout& layout = (*cpu)->layout();
  const std::size_t P = layout.size();
  fvec init(P);
  init_parameters(layout, 3, init);
  const ivec tokens = random_tokens(batch * shape.seq_len, 70), targets = random_tokens(batch * shape.seq_len, 71);
  adamw_hyper h;
  h.warmup_steps = 0;
  // Some gradients are zero in exact arithmetic (the key bias: softmax ignores a constant added to
  // a row of scores) and only rounding noise in float, with a sign that differs between devices.
  // With ε = 1e-8 AdamW's first step turns any such noise into ±lr; a larger ε keeps the update
  // continuous in the gradient, so the comparison measures the devices, not the noise.
  h.epsilon = 1e-3;
  const adamw_step st = make_adamw_step(h, 0, 1.0f);

  struct result {
    double loss = 0;
    fvec grads, params;
  };
  const auto run = [&](backend& be) {
    result r;
    auto params = be.allocate(P);
    auto grads = be.allocate(P);
    auto m = be.allocate(P);
    auto v = be.allocate(P);
    EXPECT_TRUE(params && grads && m && v);
    EXPECT_TRUE(be.upload(*params, 0, init).ok());
    auto loss = be.forward_backward(*params, *grads, tokens, targets, 1.0f);
    EXPECT_TRUE(loss.has_value()) << loss.error();
    r.loss = loss.value_or(0);
    r.grads.resize(P);
    EXPECT_TRUE(be.download(*grads, 0, r.grads).ok());
    const status s = be.adamw(*params, 0, P, *grads, *m, *v, st);
    EXPECT_TRUE(s.ok()) << s;
    r.params.resize(P);
    EXPECT_TRUE(be.download(*params, 0, r.params).ok());
    return r;
  };
  const result c = run(**cpu);
  const result g = run(**gpu);
  expect_close("step.loss", {static_cast<float>(g.loss)}, {static_cast<float>(c.loss)}, 1e-5, 0);
  expect_close("step.grads", g.grads, c.grads, 1e-2, 1e-4);
  // AdamW's first step moves every parameter by about lr·sign(g): compare the updates.
  fvec dc(P), dg(P);
  for (std::size_t i = 0; i < P; ++i) {
    dc[i] = c.params[i] - init[i];
    dg[i] = g.params[i] - init[i];
  }
  expect_close("step.param_update", dg, dc, 1e-2, 2e-2);
  // Run to run the GPU step is bitwise identical.
  const result again = run(**gpu);
  EXPECT_EQ(again.loss, g.loss);
  EXPECT_EQ(std::memcmp(again.grads.data(), g.grads.data(), P * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(again.params.data(), g.params.data(), P * sizeof(float)), 0);
}

}  // namespace
}  // namespace rekindle::kernels
