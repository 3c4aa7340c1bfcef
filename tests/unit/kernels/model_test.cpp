#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/apply_adamw.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu_ops.hpp"
#include "kernels/layout.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/transformer.hpp"

namespace rekindle::kernels {
namespace {

const model_shape small{.layers = 2, .heads = 4, .width = 32, .seq_len = 16};

std::vector<std::int32_t> byte_tokens(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t)
    x = static_cast<std::int32_t>(rng() % vocab_size);
  return t;
}

TEST(layout, tensors_tile_the_buffer_in_documented_order) {
  const param_layout layout(small);
  const std::size_t C = small.width;
  EXPECT_EQ(layout.size(), vocab_size * C + small.seq_len * C + small.layers * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(layout.size(), parameter_count(small));
  std::size_t next = 0;
  for (const auto& t : layout.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    next = t.end();
  }
  EXPECT_EQ(next, layout.size());
  EXPECT_EQ(layout.tensors().front().name, "wte");
  EXPECT_EQ(layout.tensors()[1].name, "wpe");
  EXPECT_EQ(layout.tensors()[2].name, "h0.ln1_g");
  EXPECT_EQ(layout.tensors().back().name, "lnf_b");
  EXPECT_EQ(layout.block(1).qkv_w, layout.block(1).ln1_b + C + 0);
  EXPECT_EQ(layout.lnf_b(), layout.size() - C);
}

TEST(layout, decay_applies_to_matrices_only_and_segments_cover_ranges) {
  const param_layout layout(small);
  for (const auto& t : layout.tensors()) {
    const bool matrix = t.rows > 1;
    EXPECT_EQ(t.decay, matrix) << t.name;
  }
  // A range across wpe (decayed) into h0.ln1 (not) and beyond the end into padding.
  const std::size_t begin = layout.wpe() + 5;
  const auto segs = layout.decay_segments(begin, layout.block(0).qkv_w + 3);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].begin, begin);
  EXPECT_TRUE(segs[0].decay);
  EXPECT_EQ(segs[1].begin, layout.block(0).ln1_g);
  EXPECT_FALSE(segs[1].decay);
  EXPECT_EQ(segs[2].begin, layout.block(0).qkv_w);
  EXPECT_EQ(segs[2].end, layout.block(0).qkv_w + 3);
  EXPECT_TRUE(segs[2].decay);
  const auto tail = layout.decay_segments(layout.size() - 2, layout.size() + 7);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_FALSE(tail[0].decay);
  EXPECT_EQ(tail[0].end, layout.size() + 7);
}

TEST(layout, initialisation_depends_on_seed_and_index_only) {
  const param_layout layout(small);
  std::vector<float> a(layout.size() + 3, 9.0f), b(layout.size()), c(layout.size());
  init_parameters(layout, 42, a);
  init_parameters(layout, 42, b);
  init_parameters(layout, 43, c);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), b.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), c.size() * sizeof(float)), 0);
  EXPECT_EQ(a[layout.size()], 0.0f);  // padding
  EXPECT_EQ(a[layout.block(0).ln1_g], 1.0f);
  EXPECT_EQ(a[layout.block(0).ln1_b], 0.0f);
  // wte ~ N(0, 0.02).
  const auto& wte = layout.tensors()[0];
  double sum = 0, sq = 0;
  for (std::size_t i = 0; i < wte.count(); ++i) {
    sum += a[i];
    sq += double{a[i]} * a[i];
  }
  const double mean = sum / static_cast<double>(wte.count());
  const double sd = std::sqrt(sq / static_cast<double>(wte.count()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.002);
}

TEST(layout, flops_formula_matches_its_terms) {
  const model_shape s{.layers = 4, .heads = 8, .width = 512, .seq_len = 128};
  const double L = 4, C = 512, T = 128, V = 256;
  EXPECT_DOUBLE_EQ(training_flops_per_token(s), 72 * L * C * C + 6 * V * C + 12 * L * T * C);
}

TEST(shape, validation_names_the_problem) {
  EXPECT_TRUE(small.validate().ok());
  const auto bad = model_shape{.layers = 1, .heads = 3, .width = 32, .seq_len = 8}.validate();
  EXPECT_EQ(bad.code(), errc::invalid_argument);
  EXPECT_NE(bad.message().find("multiple of heads"), std::string::npos) << bad;
  EXPECT_FALSE((model_shape{.layers = 0}.validate().ok()));
}

TEST(optimizer, schedule_warms_up_then_follows_a_cosine_to_the_minimum) {
  adamw_hyper h;
  h.learning_rate = 1e-2;
  h.min_learning_rate = 1e-3;
  h.warmup_steps = 10;
  h.total_steps = 111;  // the cosine runs from step 10 to step 110
  EXPECT_DOUBLE_EQ(learning_rate_at(h, 0), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate_at(h, 4), 5e-3);
  EXPECT_DOUBLE_EQ(learning_rate_at(h, 9), 1e-2);
  EXPECT_DOUBLE_EQ(learning_rate_at(h, 10), 1e-2);
  EXPECT_NEAR(learning_rate_at(h, 60), 5.5e-3, 1e-12);  // half way: the mean of peak and minimum
  EXPECT_DOUBLE_EQ(learning_rate_at(h, 110), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate_at(h, 500), 1e-3);
  for (std::uint64_t s = 10; s < 110; ++s)
    EXPECT_GT(learning_rate_at(h, s), learning_rate_at(h, s + 1)) << s;
}

TEST(optimizer, clip_factor_scales_to_the_limit) {
  adamw_hyper h;
  h.grad_clip = 2.0;
  EXPECT_EQ(clip_factor(h, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_factor(h, 8.0), 0.25);
  h.grad_clip = 0;
  EXPECT_EQ(clip_factor(h, 1e9), 1.0);
}

TEST(optimizer, adamw_matches_the_formula) {
  cpu_ops<double> ops;
  adamw_hyper h;
  h.warmup_steps = 0;
  h.total_steps = 10;
  const adamw_step s = make_adamw_step(h, 2, 0.5f);
  double p = 0.3, g = -0.8, m = 0.01, v = 0.002;
  ops.adamw(&p, &g, &m, &v, 1, s);
  const double b1 = s.beta1, b2 = s.beta2, gs = -0.8 * 0.5;
  const double m_want = b1 * 0.01 + (1 - b1) * gs;
  const double v_want = b2 * 0.002 + (1 - b2) * gs * gs;
  const double c1 = 1 - std::pow(double{s.beta1}, 3.0), c2 = 1 - std::pow(double{s.beta2}, 3.0);
  const double p_want = 0.3 - double{s.lr} * ((m_want / c1) / (std::sqrt(v_want / c2) + double{s.epsilon}) +
                                              double{s.weight_decay} * 0.3);
  EXPECT_NEAR(m, m_want, 1e-12);
  EXPECT_NEAR(v, v_want, 1e-12);
  EXPECT_NEAR(p, p_want, 1e-8);
  EXPECT_NEAR(s.correction1, c1, 1e-7);
}

TEST(optimizer, a_range_update_equals_the_pieces_and_decays_only_matrices) {
  const param_layout layout(small);
  const std::size_t n = layout.size() + 5;  // with padding, as a sharded buffer has
  std::vector<float> p0(n), g(n);
  init_parameters(layout, 5, p0);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  for (std::size_t i = 0; i < layout.size(); ++i)
    g[i] = dist(rng);
  adamw_hyper h;
  const adamw_step s = make_adamw_step(h, 30, 1.0f);
  cpu_ops<float> ops;
  // The whole buffer at once.
  std::vector<float> p1 = p0, m1(n), v1(n);
  apply_adamw(ops, layout, p1.data(), 0, n, g.data(), m1.data(), v1.data(), s);
  // The same in three shards with their own moment buffers.
  std::vector<float> p2 = p0;
  const std::size_t cuts[] = {0, 1000, layout.block(1).fc_w + 17, n};
  std::vector<float> m2, v2;
  for (int k = 0; k < 3; ++k) {
    std::vector<float> m(cuts[k + 1] - cuts[k]), v(m.size());
    apply_adamw(ops, layout, p2.data(), cuts[k], cuts[k + 1], g.data() + cuts[k], m.data(), v.data(), s);
    m2.insert(m2.end(), m.begin(), m.end());
    v2.insert(v2.end(), v.begin(), v.end());
  }
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), n * sizeof(float)), 0);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  // With zero gradient only decay moves a parameter: matrices shrink, gains stay.
  std::vector<float> p3 = p0, zero(n), m3(n), v3(n);
  apply_adamw(ops, layout, p3.data(), 0, n, zero.data(), m3.data(), v3.data(), s);
  const std::size_t w = layout.block(0).qkv_w + 3, gain = layout.block(0).ln1_g;
  EXPECT_NEAR(p3[w], p0[w] * (1 - s.lr * s.weight_decay), 1e-9);
  EXPECT_EQ(p3[gain], p0[gain]);
  EXPECT_EQ(p3[layout.size() + 1], 0.0f);
}

TEST(ops, sum_squares_is_exact_for_small_integers) {
  cpu_ops<float> ops;
  std::vector<float> x(37);
  std::iota(x.begin(), x.end(), 1.0f);
  double want = 0;
  for (float v : x)
    want += double{v} * v;
  EXPECT_EQ(ops.sum_squares(x.data(), x.size()), want);
  EXPECT_EQ(ops.sum(x.data(), x.size()), 37.0 * 38.0 / 2.0);
}

class backend_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = make_cpu_backend(small, 3);
    ASSERT_TRUE(b.has_value()) << b.error();
    be_ = std::move(b).value();
    auto p = be_->allocate(be_->layout().size());
    ASSERT_TRUE(p.has_value());
    params_ = std::move(p).value();
    std::vector<float> init(be_->layout().size());
    init_parameters(be_->layout(), 11, init);
    ASSERT_TRUE(be_->upload(params_, 0, init).ok());
  }

  std::vector<float> run_step(backend& be, const device_buffer& params) {
    auto g = be.allocate(be.layout().size());
    EXPECT_TRUE(g.has_value());
    const auto tokens = byte_tokens(3 * small.seq_len, 1);
    const auto targets = byte_tokens(3 * small.seq_len, 2);
    auto loss = be.forward_backward(params, *g, tokens, targets, 1.0f);
    EXPECT_TRUE(loss.has_value());
    std::vector<float> out(be.layout().size() + 1);
    EXPECT_TRUE(be.download(*g, 0, std::span<float>(out).first(be.layout().size())).ok());
    out.back() = static_cast<float>(loss.value_or(-1));
    return out;
  }

  std::unique_ptr<backend> be_;
  device_buffer params_;
};

TEST_F(backend_test, cpu_backend_reports_itself) {
  EXPECT_EQ(be_->kind(), device_kind::cpu);
  EXPECT_TRUE(be_->host_memory());
  EXPECT_NE(be_->describe().find("OpenBLAS"), std::string::npos) << be_->describe();
}

TEST_F(backend_test, a_step_is_bitwise_reproducible_in_one_and_in_a_fresh_backend) {
  const auto a = run_step(*be_, params_);
  const auto b = run_step(*be_, params_);
  auto other = make_cpu_backend(small, 3);
  ASSERT_TRUE(other.has_value());
  auto p = (*other)->allocate(be_->layout().size() + 1);
  ASSERT_TRUE(p.has_value());
  std::vector<float> host(be_->layout().size());
  ASSERT_TRUE(be_->download(params_, 0, host).ok());
  ASSERT_TRUE((*other)->upload(*p, 0, host).ok());
  const auto c = run_step(**other, *p);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
  // The untrained model predicts close to uniform: loss near ln(256).
  EXPECT_NEAR(a.back(), std::log(256.0), 0.1);
}

TEST_F(backend_test, float_model_agrees_with_the_double_reference) {
  cpu_ops<double> dops;
  auto ref = transformer<cpu_ops<double>>::create(dops, small, 2);
  ASSERT_TRUE(ref.has_value());
  std::vector<float> host(be_->layout().size());
  ASSERT_TRUE(be_->download(params_, 0, host).ok());
  std::vector<double> params(host.begin(), host.end()), grads(host.size());
  const auto tokens = byte_tokens(2 * small.seq_len, 5);
  const auto targets = byte_tokens(2 * small.seq_len, 6);
  auto want = ref->forward(params.data(), tokens.data(), targets.data(), 2);
  ASSERT_TRUE(want.has_value());
  ASSERT_TRUE(ref->backward(params.data(), grads.data(), 1.0).ok());
  auto g = be_->allocate(host.size());
  ASSERT_TRUE(g.has_value());
  auto got = be_->forward_backward(params_, *g, tokens, targets, 1.0f);
  ASSERT_TRUE(got.has_value());
  EXPECT_NEAR(*got, *want, 1e-5);
  std::vector<float> fg(host.size());
  ASSERT_TRUE(be_->download(*g, 0, fg).ok());
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < fg.size(); ++i) {
    max_err = std::max(max_err, std::abs(fg[i] - grads[i]));
    max_ref = std::max(max_ref, std::abs(grads[i]));
  }
  EXPECT_LT(max_err, 1e-4 * max_ref + 1e-7) << "largest gradient " << max_ref;
}

TEST_F(backend_test, bad_batches_are_rejected_with_a_reason) {
  auto g = be_->allocate(be_->layout().size());
  ASSERT_TRUE(g.has_value());
  auto tokens = byte_tokens(small.seq_len, 1);
  auto targets = tokens;
  tokens[3] = 256;
  auto r = be_->forward_backward(params_, *g, tokens, targets, 1.0f);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("token 3"), std::string::npos) << r.error();
  auto four = byte_tokens(4 * small.seq_len, 1);
  r = be_->forward(params_, four, four);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("maximum of 3"), std::string::npos) << r.error();
  auto ragged = byte_tokens(small.seq_len + 1, 1);
  EXPECT_FALSE(be_->forward(params_, ragged, ragged).has_value());
  EXPECT_EQ(be_->zero(*g, be_->layout().size() - 1, 2).code(), errc::out_of_range);
}

// Two stages of a pipeline (the first `split` blocks, then the rest with the head), each with two
// slots, against the whole model on the same micro-batches: the same losses bit for bit, and the
// same gradients (bit for bit except the tied embedding, whose two contributions are added in
// another order).
TEST_F(backend_test, two_stages_compute_what_the_whole_model_does) {
  const model_shape shape = be_->layout().shape();
  ASSERT_GE(shape.layers, 2u);
  const std::uint32_t split = 1;
  auto first = make_cpu_backend(shape, 3, stage_spec{.first_layer = 0, .layers = split, .slots = 2});
  auto second = make_cpu_backend(shape, 3, stage_spec{.first_layer = split, .layers = 0, .slots = 2});
  ASSERT_TRUE(first.has_value()) << first.error();
  ASSERT_TRUE(second.has_value()) << second.error();
  EXPECT_TRUE((*first)->embeds());
  EXPECT_FALSE((*first)->has_head());
  EXPECT_EQ((*second)->stage().layers, shape.layers - split) << "layers 0 resolves to the rest of the model";
  EXPECT_TRUE((*second)->has_head());
  const std::size_t n = be_->layout().size();
  auto whole_grads = be_->allocate(n);
  auto g0 = (*first)->allocate(n);
  auto g1 = (*second)->allocate(n);
  ASSERT_TRUE(whole_grads.has_value() && g0.has_value() && g1.has_value());
  const std::size_t acts = 2 * std::size_t{shape.seq_len} * shape.width;
  // Two micro-batches of 2 sequences, both forwards before both backwards (two slots).
  std::vector<std::vector<std::int32_t>> tokens{byte_tokens(2 * shape.seq_len, 5), byte_tokens(2 * shape.seq_len, 6)};
  std::vector<std::vector<std::int32_t>> targets{byte_tokens(2 * shape.seq_len, 7), byte_tokens(2 * shape.seq_len, 8)};
  std::vector<double> whole_loss, staged_loss;
  for (int m = 0; m < 2; ++m) {
    auto l = be_->forward_backward(params_, *whole_grads, tokens[m], targets[m], 1.0f);
    ASSERT_TRUE(l.has_value()) << l.error();
    whole_loss.push_back(*l);
  }
  std::vector<float> out(acts), dout(acts), din(acts);
  for (std::uint32_t m = 0; m < 2; ++m) {
    auto none = (*first)->stage_forward(m, params_, tokens[m], {}, {}, out);
    ASSERT_TRUE(none.has_value()) << none.error();
    EXPECT_EQ(*none, 0.0) << "a stage without the head has no loss";
    auto l = (*second)->stage_forward(m, params_, {}, targets[m], out, {});
    ASSERT_TRUE(l.has_value()) << l.error();
    staged_loss.push_back(*l);
  }
  EXPECT_EQ(staged_loss, whole_loss);
  for (std::uint32_t m = 0; m < 2; ++m) {
    ASSERT_TRUE((*second)->stage_backward(m, params_, *g1, {}, din, 1.0f).ok());
    ASSERT_TRUE((*first)->stage_backward(m, params_, *g0, din, {}, 1.0f).ok());
  }
  std::vector<float> want(n), a(n), b(n);
  ASSERT_TRUE(be_->download(*whole_grads, 0, want).ok());
  ASSERT_TRUE((*first)->download(*g0, 0, a).ok());
  ASSERT_TRUE((*second)->download(*g1, 0, b).ok());
  const std::size_t wte_end = shape.width * std::size_t{vocab_size};
  for (std::size_t i = wte_end; i < n; ++i) {
    // Each tensor belongs to one stage: the other stage leaves it at zero.
    ASSERT_TRUE(a[i] == 0.0f || b[i] == 0.0f) << "both stages wrote float " << i;
    ASSERT_EQ(a[i] + b[i], want[i]) << "float " << i;
  }
  for (std::size_t i = 0; i < wte_end; ++i)
    ASSERT_NEAR(a[i] + b[i], want[i], 1e-6 + 1e-4 * std::fabs(want[i])) << "wte float " << i;
}

TEST_F(backend_test, stage_calls_that_do_not_fit_the_stage_are_refused) {
  const model_shape shape = be_->layout().shape();
  auto later = make_cpu_backend(shape, 3, stage_spec{.first_layer = 1, .layers = 0, .slots = 1});
  ASSERT_TRUE(later.has_value()) << later.error();
  auto g = (*later)->allocate(be_->layout().size());
  ASSERT_TRUE(g.has_value());
  const auto tokens = byte_tokens(shape.seq_len, 1);
  std::vector<float> acts(std::size_t{shape.seq_len} * shape.width);
  // The whole-model calls on a stage.
  auto r = (*later)->forward(params_, tokens, tokens);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::failed_precondition);
  // Tokens to a stage that reads activations; a slot out of range; a backward before a forward.
  r = (*later)->stage_forward(0, params_, tokens, tokens, acts, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("tokens: this stage does not use it"), std::string::npos) << r.error();
  r = (*later)->stage_forward(1, params_, {}, tokens, acts, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("slot 1 of a stage with 1"), std::string::npos) << r.error();
  EXPECT_EQ((*later)->stage_backward(0, params_, *g, {}, acts, 1.0f).code(), errc::failed_precondition);
  // Activations of a ragged size; targets of another batch.
  std::vector<float> ragged(acts.size() + 1);
  r = (*later)->stage_forward(0, params_, {}, tokens, ragged, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("input activations"), std::string::npos) << r.error();
  const auto two = byte_tokens(2 * shape.seq_len, 1);
  r = (*later)->stage_forward(0, params_, {}, two, acts, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("targets hold 2 sequences"), std::string::npos) << r.error();
  // An input gradient of the wrong size after a good forward.
  ASSERT_TRUE((*later)->stage_forward(0, params_, {}, tokens, acts, {}).has_value());
  EXPECT_EQ((*later)->stage_backward(0, params_, *g, {}, ragged, 1.0f).code(), errc::invalid_argument);
  EXPECT_TRUE((*later)->stage_backward(0, params_, *g, {}, acts, 1.0f).ok());
  // Stages outside the model, and no slots.
  EXPECT_EQ(make_cpu_backend(shape, 3, stage_spec{.first_layer = shape.layers}).error().code(), errc::invalid_argument);
  EXPECT_EQ(make_cpu_backend(shape, 3, stage_spec{.first_layer = 0, .layers = shape.layers + 1}).error().code(),
            errc::invalid_argument);
  EXPECT_EQ(make_cpu_backend(shape, 3, stage_spec{.slots = 0}).error().code(), errc::invalid_argument);
}

TEST(backend, selection_follows_the_request_and_the_machine) {
  const cuda_probe probe = probe_cuda();
  backend_options o;
  o.shape = small;
  o.device.type = device_request::kind::cpu;
  auto cpu = make_backend(o);
  ASSERT_TRUE(cpu.has_value()) << cpu.error();
  EXPECT_EQ((*cpu)->kind(), device_kind::cpu);
  o.device.type = device_request::kind::auto_select;
  auto any = make_backend(o);
  ASSERT_TRUE(any.has_value()) << any.error();
  EXPECT_EQ((*any)->kind(), probe.device_count > 0 ? device_kind::cuda : device_kind::cpu);
  if (probe.device_count == 0) {
    EXPECT_NE(probe.detail.find("no CUDA device"), std::string::npos) << probe.detail;
    o.device.type = device_request::kind::cuda;
    auto gpu = make_backend(o);
    ASSERT_FALSE(gpu.has_value());
    EXPECT_EQ(gpu.error().code(), errc::unsupported);
    EXPECT_NE(gpu.error().message().find(probe.detail), std::string::npos) << gpu.error();
  }
}

}  // namespace
}  // namespace rekindle::kernels
