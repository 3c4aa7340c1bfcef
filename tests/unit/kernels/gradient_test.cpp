// Finite-difference checks, in float64, of the backward of every operation and of the whole model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu_ops.hpp"
#include "kernels/layout.hpp"
#include "kernels/transformer.hpp"
#include "tests/support/values.hpp"

namespace rekindle::kernels {
namespace {

using vec = std::vector<double>;
using ops_t = cpu_ops<double>;

vec random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) { return testing::random_normal(n, seed, scale); }

std::vector<std::int32_t> random_tokens(std::size_t n, std::uint64_t seed) {
  return testing::random_tokens(n, seed, vocab_size);
}

double dot(const vec& a, const vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of `objective` in every element of `x`.
void expect_gradient(const char* what, vec& x, const vec& analytic, const std::function<double()>& objective,
                     double h = 1e-5, double rtol = 1e-6, double atol = 1e-8) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = objective();
    x[i] = saved - h;
    const double down = objective();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - analytic[i]);
    worst = std::max(worst, err / (atol + rtol * std::abs(numeric)));
    ASSERT_LE(err, atol + rtol * std::abs(numeric))
        << what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric;
  }
  EXPECT_LE(worst, 1.0) << what;
}

// grads_after - grads_before: the part a backward added.
vec added(const vec& after, const vec& before) {
  vec d(after.size());
  for (std::size_t i = 0; i < d.size(); ++i)
    d[i] = after[i] - before[i];
  return d;
}

TEST(gradient, embedding) {
  ops_t ops;
  const std::size_t B = 2, S = 3, C = 4;
  auto tokens = random_tokens(B * S, 1);
  tokens[4] = tokens[1];  // a repeated token accumulates twice
  vec wte = random_vec(vocab_size * C, 2), wpe = random_vec(S * C, 3), w = random_vec(B * S * C, 4);
  vec out(B * S * C);
  const auto objective = [&] {
    ops.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, S, C);
    return dot(out, w);
  };
  vec dwte0 = random_vec(wte.size(), 5), dwpe0 = random_vec(wpe.size(), 6);
  vec dwte = dwte0, dwpe = dwpe0;
  ops.embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, S, C);
  expect_gradient("wte", wte, added(dwte, dwte0), objective);
  expect_gradient("wpe", wpe, added(dwpe, dwpe0), objective);
}

TEST(gradient, layernorm) {
  ops_t ops;
  const std::size_t N = 3, C = 7;
  vec in = random_vec(N * C, 10, 2.0), gain = random_vec(C, 11), bias = random_vec(C, 12), w = random_vec(N * C, 13);
  vec out(N * C), mean(N), rstd(N);
  const auto objective = [&] {
    ops.layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), gain.data(), bias.data(), N, C);
    return dot(out, w);
  };
  objective();
  vec din0 = random_vec(N * C, 14), dgain0 = random_vec(C, 15), dbias0 = random_vec(C, 16);
  vec din = din0, dgain = dgain0, dbias = dbias0;
  ops.layernorm_backward(din.data(), dgain.data(), dbias.data(), w.data(), in.data(), gain.data(), mean.data(),
                         rstd.data(), N, C);
  expect_gradient("in", in, added(din, din0), objective);
  expect_gradient("gain", gain, added(dgain, dgain0), objective);
  expect_gradient("bias", bias, added(dbias, dbias0), objective);
}

TEST(gradient, matmul) {
  ops_t ops;
  const std::size_t N = 4, IN = 5, OUT = 3;
  vec in = random_vec(N * IN, 20), weight = random_vec(OUT * IN, 21), bias = random_vec(OUT, 22),
      w = random_vec(N * OUT, 23);
  vec out(N * OUT);
  const auto objective = [&] {
    ops.matmul_forward(out.data(), in.data(), weight.data(), bias.data(), N, IN, OUT);
    return dot(out, w);
  };
  vec din(N * IN, 7.0);  // overwritten
  vec dweight0 = random_vec(OUT * IN, 24), dbias0 = random_vec(OUT, 25);
  vec dweight = dweight0, dbias = dbias0;
  ops.matmul_backward(din.data(), dweight.data(), dbias.data(), w.data(), in.data(), weight.data(), N, IN, OUT);
  expect_gradient("in", in, din, objective);
  expect_gradient("weight", weight, added(dweight, dweight0), objective);
  expect_gradient("bias", bias, added(dbias, dbias0), objective);
}

TEST(gradient, matmul_without_bias_matches_explicit_products) {
  ops_t ops;
  const std::size_t N = 2, IN = 3, OUT = 2;
  vec in = random_vec(N * IN, 30), weight = random_vec(OUT * IN, 31), out(N * OUT);
  ops.matmul_forward(out.data(), in.data(), weight.data(), nullptr, N, IN, OUT);
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t o = 0; o < OUT; ++o) {
      double want = 0;
      for (std::size_t i = 0; i < IN; ++i)
        want += in[r * IN + i] * weight[o * IN + i];
      EXPECT_NEAR(out[r * OUT + o], want, 1e-12);
    }
}

TEST(gradient, attention) {
  ops_t ops;
  const std::size_t B = 2, S = 4, C = 6, H = 2;
  vec qkv = random_vec(B * S * 3 * C, 40), w = random_vec(B * S * C, 41);
  vec out(B * S * C), att(B * H * S * S);
  const auto objective = [&] {
    ops.attention_forward(out.data(), att.data(), qkv.data(), B, S, C, H);
    return dot(out, w);
  };
  objective();
  // Causal: probabilities are zero above the diagonal and each row sums to 1.
  for (std::size_t r = 0; r < B * H * S; ++r) {
    const std::size_t t = r % S;
    double total = 0;
    for (std::size_t j = 0; j < S; ++j) {
      if (j > t) {
        EXPECT_EQ(att[r * S + j], 0.0);
      }
      total += att[r * S + j];
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
  vec dqkv(qkv.size(), 3.0);  // overwritten
  ops.attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, S, C, H);
  expect_gradient("qkv", qkv, dqkv, objective);
}

TEST(gradient, gelu) {
  ops_t ops;
  const std::size_t n = 40;
  vec in = random_vec(n, 50, 2.0), w = random_vec(n, 51), out(n);
  const auto objective = [&] {
    ops.gelu_forward(out.data(), in.data(), n);
    return dot(out, w);
  };
  vec din(n);
  ops.gelu_backward(din.data(), in.data(), w.data(), n);
  expect_gradient("in", in, din, objective);
  // In place (din aliasing dout), as the model calls it.
  vec inplace = w;
  ops.gelu_backward(inplace.data(), in.data(), inplace.data(), n);
  EXPECT_EQ(inplace, din);
}

TEST(gradient, crossentropy) {
  ops_t ops;
  const std::size_t N = 3, V = vocab_size;
  vec logits = random_vec(N * V, 60, 3.0), probs(N * V), losses(N);
  auto targets = random_tokens(N, 61);
  const double dloss = 0.7;
  const auto objective = [&] {
    ops.crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    double s = 0;
    for (double l : losses)
      s += dloss * l;
    return s;
  };
  objective();
  for (std::size_t r = 0; r < N; ++r)
    EXPECT_NEAR(losses[r], -std::log(probs[r * V + static_cast<std::size_t>(targets[r])]), 1e-12);
  vec dlogits(N * V);
  ops.crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V);
  expect_gradient("logits", logits, dlogits, objective);
}

TEST(gradient, whole_model_end_to_end) {
  ops_t ops;
  const model_shape shape{.layers = 2, .heads = 2, .width = 8, .seq_len = 5};
  const std::uint32_t B = 2;
  auto model = transformer<ops_t>::create(ops, shape, B);
  ASSERT_TRUE(model.has_value()) << model.error();
  const param_layout& layout = model->layout();
  std::vector<float> init(layout.size());
  init_parameters(layout, 7, init);
  vec params(init.begin(), init.end());
  // Non-trivial layernorm gains and biases, so their gradients are exercised away from 1 and 0.
  const vec jitter = random_vec(params.size(), 70, 0.1);
  for (const auto& t : layout.tensors())
    if (t.init_std == 0)
      for (std::size_t i = t.offset; i < t.end(); ++i)
        params[i] += jitter[i];
  // Larger weights than the initialisation so attention is far from uniform.
  for (auto& p : params)
    p *= 4.0;
  const auto tokens = random_tokens(B * shape.seq_len, 71);
  const auto targets = random_tokens(B * shape.seq_len, 72);
  const double loss_scale = 0.5;
  const auto objective = [&] {
    auto loss = model->forward(params.data(), tokens.data(), targets.data(), B);
    EXPECT_TRUE(loss.has_value());
    return loss_scale * loss.value_or(0.0);
  };
  const double loss = objective() / loss_scale;
  EXPECT_GT(loss, 0.0);
  vec grads0 = random_vec(params.size(), 73, 0.01);
  vec grads = grads0;
  ASSERT_TRUE(model->backward(params.data(), grads.data(), loss_scale).ok());
  const vec analytic = added(grads, grads0);
  // Every tensor receives a gradient.
  for (const auto& t : layout.tensors()) {
    double norm = 0;
    for (std::size_t i = t.offset; i < t.end(); ++i)
      norm += analytic[i] * analytic[i];
    EXPECT_GT(norm, 0.0) << t.name;
  }
  expect_gradient("params", params, analytic, objective, 1e-5, 1e-5, 1e-9);
}

}  // namespace
}  // namespace rekindle::kernels
