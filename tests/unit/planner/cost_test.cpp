#include <gtest/gtest.h>

#include "planner/cost.hpp"
#include "planner/layout.hpp"

namespace rekindle::planner {
namespace {

// A tiny model whose figures are easy to compute by hand:
//   layer parameters 4·64² + 2·64·256 + 9·64 + 256 = 49,984
//   embeddings (100 + 32)·64 = 8,448
//   layer forward FLOPs per sequence 2·32·(4·64² + 2·64·256) + 4·32²·64 = 3,407,872
//   output projection forward FLOPs per sequence 2·32·64·100 = 409,600
//   activations per sequence and layer at t=1: 32·64·(10 + 24 + 5·4·32/64) = 90,112 bytes
model tiny_model() {
  model m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.ffn_hidden = 256;
  m.seq_len = 32;
  m.vocab = 100;
  m.global_batch = 8;
  m.micro_batch_sizes = {1, 2, 4, 8};
  return m;
}

device_type tiny_type(std::string name, double flops) {
  device_type t;
  t.name = std::move(name);
  t.flops = flops;
  t.efficiency = 0.5;
  t.memory = 1e9;
  t.reserved_memory = 0;
  t.memory_bandwidth = 1e11;
  t.link_bandwidth = 1e10;
  t.link_latency = 1e-6;
  return t;
}

// Nodes of `devices` devices each, all of type 0 unless `types` says otherwise.
problem tiny_problem(std::vector<std::uint32_t> devices, std::vector<std::uint32_t> types = {}) {
  problem p;
  p.workload = tiny_model();
  p.hardware.name = "tiny";
  p.hardware.types = {tiny_type("x", 1e12), tiny_type("y", 2e12)};
  p.hardware.net = network{1e9, 1e-5};
  for (std::size_t i = 0; i < devices.size(); ++i) {
    node n;
    n.name = "n" + std::to_string(i);
    n.type = types.empty() ? 0 : types[i];
    for (std::uint32_t d = 0; d < devices[i]; ++d)
      n.devices.push_back(d);
    p.hardware.nodes.push_back(std::move(n));
  }
  return p;
}

plan shape(std::vector<stage> stages, std::vector<std::vector<placement>> replicas, std::uint32_t b,
           bool recompute = false) {
  plan out;
  out.stages = std::move(stages);
  for (auto& r : replicas)
    out.replicas.push_back(replica{std::move(r), 0});
  out.micro_batch_size = b;
  out.recompute = recompute;
  return out;
}

TEST(planner_cost, analytic_figures) {
  const auto m = tiny_model();
  EXPECT_DOUBLE_EQ(layer_parameters(m), 49984);
  EXPECT_DOUBLE_EQ(embedding_parameters(m), 8448);
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, 1), 3407872);
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, 3), 3 * 3407872.0);
  EXPECT_DOUBLE_EQ(head_forward_flops(m, 1), 409600);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 1, 1), 90112);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 2, 2), 2 * 32 * 64 * 27.0);
  EXPECT_DOUBLE_EQ(stage_parameters(m, 2, true, true), 2 * 49984 + 8448 + 128) << "tied: one copy";
  EXPECT_DOUBLE_EQ(stage_parameters(m, 1, false, true), 49984 + 128 + 6400) << "the last stage's own projection";
  auto untied = m;
  untied.tied_embeddings = false;
  EXPECT_DOUBLE_EQ(stage_parameters(untied, 2, true, true), 2 * 49984 + 8448 + 128 + 6400);
  EXPECT_DOUBLE_EQ(model_parameters(m), 108544);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(1000, 1, 1e3, 1), 0);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(1000, 4, 1e3, 0.5), 2 * 3.0 / 4 + 6 * 0.5);
}

TEST(planner_cost, one_device_step) {
  const auto p = tiny_problem({1});
  auto r = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}}, 2));
  ASSERT_TRUE(r.has_value()) << r.error();
  const auto& pl = *r;
  // 4 micro-batches of 2 sequences: 2·(2·3·3,407,872 + 3·409,600) FLOPs each at 5e11 FLOP/s.
  const double per_micro_batch = 2 * (2 * 3 * 3407872.0 + 3 * 409600.0) / 5e11;
  EXPECT_EQ(pl.micro_batches, 4u);
  EXPECT_EQ(pl.replicas[0].micro_batches, 4u);
  EXPECT_DOUBLE_EQ(pl.breakdown.compute, 4 * per_micro_batch);
  EXPECT_EQ(pl.breakdown.tensor_parallel, 0);
  EXPECT_EQ(pl.breakdown.pipeline_p2p, 0);
  EXPECT_EQ(pl.breakdown.bubble, 0);
  EXPECT_EQ(pl.breakdown.data_parallel, 0);
  EXPECT_DOUBLE_EQ(pl.breakdown.optimizer, 108544 * 28 / 1e11);
  EXPECT_DOUBLE_EQ(pl.step_time, pl.breakdown.total());
  ASSERT_EQ(pl.memory.size(), 1u);
  EXPECT_DOUBLE_EQ(pl.memory[0].weights, 108544 * 2.0);
  EXPECT_DOUBLE_EQ(pl.memory[0].gradients, 108544 * 4.0) << "fp32 gradients by default";
  EXPECT_DOUBLE_EQ(pl.memory[0].optimizer, 108544 * 12.0);
  // One micro-batch in flight: 2 sequences × 2 layers × 90,112 + fp32 logits 4·2·32·100.
  EXPECT_DOUBLE_EQ(pl.memory[0].activations, 2 * 2 * 90112.0 + 25600);
  EXPECT_EQ(pl.memory[0].buffers, 0) << "one stage: no neighbours";
  EXPECT_DOUBLE_EQ(pl.memory[0].margin, 0.1 * (108544 * 18.0 + 2 * 2 * 90112.0 + 25600));
  EXPECT_DOUBLE_EQ(pl.memory[0].total(), 1.1 * (108544 * 18.0 + 2 * 2 * 90112.0 + 25600));
  EXPECT_DOUBLE_EQ(pl.memory[0].capacity, 1e9);
  EXPECT_EQ(pl.idle_devices, 0u);
}

TEST(planner_cost, pipeline_of_two_stages_in_one_node) {
  const auto p = tiny_problem({2});
  auto r = evaluate(p, shape({{0, 1, 1}, {1, 1, 1}}, {{{0, {0}}, {0, {1}}}}, 2));
  ASSERT_TRUE(r.has_value()) << r.error();
  const auto& pl = *r;
  const double c0 = 2 * 3 * 3407872.0 / 5e11;
  const double c1 = 2 * (3 * 3407872.0 + 3 * 409600.0) / 5e11;
  const double send = 1e-6 + 2 * 32 * 64 * 2 / 1e10;  // one activation message over the node's link
  const double t0 = c0 + send;
  const double t1 = c1 + send;
  // 1F1B: (M - 1) × slowest stage + every stage once.
  EXPECT_NEAR(pl.step_time - pl.breakdown.optimizer, 3 * t1 + t0 + t1, 1e-15);
  EXPECT_DOUBLE_EQ(pl.breakdown.compute, 4 * c1);
  EXPECT_DOUBLE_EQ(pl.breakdown.pipeline_p2p, 4 * send);
  EXPECT_DOUBLE_EQ(pl.breakdown.bubble, t0);
  EXPECT_DOUBLE_EQ(pl.breakdown.optimizer, (49984 + 8448) * 28 / 1e11);
  ASSERT_EQ(pl.memory.size(), 2u);
  // Stage 0 keeps two micro-batches in flight, stage 1 one, plus the logits.
  EXPECT_DOUBLE_EQ(pl.memory[0].activations, 2 * 2 * 90112.0);
  EXPECT_DOUBLE_EQ(pl.memory[1].activations, 2 * 90112.0 + 25600);
  EXPECT_DOUBLE_EQ(pl.memory[1].weights, (49984 + 128 + 6400) * 2.0);
  // Each stage has one neighbour: a buffer for the activation and one for the gradient that cross
  // the boundary, 2·32·64·2 bytes each.
  EXPECT_DOUBLE_EQ(pl.memory[0].buffers, 2 * 8192.0);
  EXPECT_DOUBLE_EQ(pl.memory[1].buffers, 2 * 8192.0);
}

TEST(planner_cost, tensor_parallel_all_reduces_and_sharded_activations) {
  const auto p = tiny_problem({2});
  auto r = evaluate(p, shape({{0, 2, 2}}, {{{0, {0, 1}}}}, 2));
  ASSERT_TRUE(r.has_value()) << r.error();
  // Four all-reduces of 2·32·64·2 bytes per layer, ring over 2 devices: bytes/bw + 2 latencies.
  const double allreduce = 8192 / 1e10 + 2e-6;
  EXPECT_DOUBLE_EQ(r->breakdown.tensor_parallel, 4 * (2 * 4 * allreduce));
  EXPECT_DOUBLE_EQ(r->breakdown.compute, 4 * (2 * (2 * 3 * 3407872.0 + 3 * 409600.0) / 5e11 / 2));
  EXPECT_DOUBLE_EQ(r->memory[0].weights, 108544 * 2.0 / 2);
  EXPECT_DOUBLE_EQ(r->memory[0].activations, 2 * 2 * 32 * 64 * 27.0 + 25600 / 2);
}

TEST(planner_cost, data_parallel_ring_over_the_network_and_zero_sharding) {
  const auto p = tiny_problem({1, 1});
  auto r = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->replicas[0].micro_batches, 4u);
  EXPECT_EQ(r->replicas[1].micro_batches, 4u);
  // Two members over the network (1e9 B/s, 10 µs): a reduce-scatter of fp32 gradients and an
  // all-gather of 16-bit weights, the volume of an all-reduce of 3 bytes a parameter.
  EXPECT_DOUBLE_EQ(r->breakdown.data_parallel, 108544 * 3 / 1e9 + 2e-5);
  EXPECT_DOUBLE_EQ(r->memory[0].optimizer, 108544 * 12.0 / 2);
  EXPECT_DOUBLE_EQ(r->breakdown.optimizer, 108544 / 2.0 * 28 / 1e11);
  auto no_zero = p;
  no_zero.workload.zero = false;
  auto full = evaluate(no_zero, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1));
  ASSERT_TRUE(full.has_value());
  EXPECT_DOUBLE_EQ(full->memory[0].optimizer, 108544 * 12.0);
}

TEST(planner_cost, group_and_link_bandwidths_set_the_slowest_ring_link) {
  auto p = tiny_problem({1, 1, 1});
  const auto g = p.hardware.net.add_group(4e9);
  p.hardware.nodes[0].group = g;
  p.hardware.nodes[1].group = g;
  auto two = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1));
  ASSERT_TRUE(two.has_value());
  EXPECT_DOUBLE_EQ(two->breakdown.data_parallel, 108544 * 3 / 4e9 + 2e-5) << "inside the group";
  auto three = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}, {{2, {0}}}}, 1));
  ASSERT_TRUE(three.has_value());
  EXPECT_DOUBLE_EQ(three->breakdown.data_parallel, 4.0 / 3 * 108544 * 3 / 1e9 + 4e-5) << "the default link leaves it";
  p.hardware.net.set_link(0, 1, 0.5e9);
  auto slow = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1));
  ASSERT_TRUE(slow.has_value());
  EXPECT_DOUBLE_EQ(slow->breakdown.data_parallel, 108544 * 3 / 0.5e9 + 2e-5) << "a pair's link overrides the group";
}

TEST(planner_cost, a_nic_shared_by_a_nodes_devices_slows_their_rings_across_nodes) {
  // Two nodes of two devices; each device's share of the network is 1e9 B/s.
  auto p = tiny_problem({2, 2});
  const auto four = shape({{0, 2, 1}}, {{{0, {0}}}, {{0, {1}}}, {{1, {0}}}, {{1, {1}}}}, 1);
  auto own = evaluate(p, four);
  ASSERT_TRUE(own.has_value()) << own.error();
  // The ring 0,1 on n0 then 2,3 on n1: its slowest link is the network's 1e9 B/s.
  const double volume = 2.0 * 3 / 4 * 108544 * 3;  // 2(d-1)/d of 3 bytes a parameter, d = 4
  EXPECT_DOUBLE_EQ(own->breakdown.data_parallel, volume / 1e9 + 6e-5);
  // One 1 GB/s interface per node, shared by the node's two devices: 0.5e9 each.
  for (auto& n : p.hardware.nodes)
    n.nic_bandwidth = 1e9;
  auto shared = evaluate(p, four);
  ASSERT_TRUE(shared.has_value());
  EXPECT_DOUBLE_EQ(shared->breakdown.data_parallel, volume / 0.5e9 + 6e-5);
  // One replica per node uses one device each: the interface is its own again.
  auto two = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1));
  ASSERT_TRUE(two.has_value());
  EXPECT_DOUBLE_EQ(two->breakdown.data_parallel, 108544 * 3 / 1e9 + 2e-5);
}

TEST(planner_cost, faster_replica_gets_more_micro_batches) {
  const auto p = tiny_problem({1, 1}, {0, 1});  // n1 is twice as fast
  auto r = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replicas[0].micro_batches + r->replicas[1].micro_batches, 8u);
  // 5 or 6 on the fast one and the rest on the slow one both finish in 3 units; 4 and 4 take 4.
  EXPECT_GE(r->replicas[1].micro_batches, 5u);
  const double unit = (2 * 3 * 3407872.0 + 3 * 409600.0) / 5e11;
  EXPECT_DOUBLE_EQ(r->breakdown.compute, 3 * unit);
}

TEST(planner_cost, fixed_micro_batch_counts) {
  const auto p = tiny_problem({1, 1}, {0, 1});
  auto s = shape({{0, 2, 1}}, {{{0, {0}}}, {{1, {0}}}}, 1);
  s.replicas[0].micro_batches = 4;
  s.replicas[1].micro_batches = 4;
  auto r = evaluate(p, s);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->replicas[0].micro_batches, 4u);
  const double unit = (2 * 3 * 3407872.0 + 3 * 409600.0) / 5e11;
  EXPECT_DOUBLE_EQ(r->breakdown.compute, 4 * unit);
  s.replicas[1].micro_batches = 3;
  auto wrong = evaluate(p, s);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code(), errc::invalid_argument);
}

TEST(planner_cost, recompute_trades_time_for_memory) {
  const auto p = tiny_problem({1});
  auto plain = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}}, 2));
  auto rc = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}}, 2, true));
  ASSERT_TRUE(plain.has_value());
  ASSERT_TRUE(rc.has_value());
  EXPECT_DOUBLE_EQ(rc->breakdown.compute - plain->breakdown.compute, 4 * 2 * 2 * 3407872.0 / 5e11)
      << "one more forward of every layer";
  // Inputs of both layers (2·32·64·2 bytes each) plus one layer's full activations.
  EXPECT_DOUBLE_EQ(rc->memory[0].activations, 2 * 2 * 8192.0 / 2 + 2 * 90112.0 + 25600);
  EXPECT_LT(rc->memory[0].activations, plain->memory[0].activations);
}

TEST(planner_cost, measured_layers_replace_the_estimate) {
  auto p = tiny_problem({1});
  p.workload.measured.assign(2, {});
  p.workload.measured[0].assign(2, {});
  // One point, at one sequence and tensor degree 1: two sequences take twice its time (the
  // estimate, without a layer overhead, is linear in the micro-batch).
  p.workload.measured[0][1] = {layer_measurement{1, 1, 1e-3, 2e-3, 5000}};
  auto r = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}}, 2));
  ASSERT_TRUE(r.has_value());
  const double analytic = 3 * 3407872.0 / 5e11;
  EXPECT_DOUBLE_EQ(r->breakdown.compute, 4 * 2 * (analytic + 3e-3 + 3 * 409600.0 / 5e11));
  EXPECT_DOUBLE_EQ(r->memory[0].activations, 2 * (90112.0 + 5000) + 25600);
}

TEST(planner_cost, measured_points_are_interpolated_and_scaled_by_the_estimate_outside_them) {
  // The estimate: forward 1 ms a sequence at degree 1 plus 0.1 ms, backward twice that.
  const auto analytic = [](std::uint32_t b, std::uint32_t t) {
    const double f = 1e-3 * b / t + 1e-4;
    return detail::measured_time{f, 2 * f};
  };
  const std::vector<layer_measurement> points{{1, 1, 2e-3, 4e-3, -1}, {4, 1, 5e-3, 10e-3, -1}, {1, 4, 1e-3, 2e-3, -1}};
  const auto at = [&](std::uint32_t b, std::uint32_t t) { return detail::interpolate_points(points, b, t, analytic); };
  EXPECT_DOUBLE_EQ(at(1, 1).forward, 2e-3) << "a measured point is its own time";
  EXPECT_DOUBLE_EQ(at(4, 1).backward, 10e-3);
  EXPECT_DOUBLE_EQ(at(2, 1).forward, 3e-3) << "linear in the micro-batch between 1 and 4";
  EXPECT_DOUBLE_EQ(at(1, 4).forward, 1e-3);
  // Between degrees 1 and 4, linear in 1/t: at t = 2, 1/2 is a third of the way from 1 to 1/4.
  EXPECT_DOUBLE_EQ(at(1, 2).forward, 2e-3 + (1e-3 - 2e-3) * (0.5 - 1.0) / (0.25 - 1.0));
  // Past the largest micro-batch measured at degree 1: 4's time times the estimate's ratio.
  EXPECT_DOUBLE_EQ(at(8, 1).forward, 5e-3 * analytic(8, 1).forward / analytic(4, 1).forward);
  // Past the largest degree: degree 4's time at b = 1, scaled to degree 8.
  EXPECT_DOUBLE_EQ(at(1, 8).forward, 1e-3 * analytic(1, 8).forward / analytic(1, 4).forward);
}

TEST(planner_cost, a_second_tensor_degree_is_a_second_point_not_an_override) {
  auto p = tiny_problem({2});
  p.workload.measured.assign(2, {});
  p.workload.measured[0].assign(2, {});
  for (auto& layer : p.workload.measured[0])
    layer = {layer_measurement{2, 1, 4e-3, 8e-3, -1}, layer_measurement{2, 2, 3e-3, 6e-3, -1}};
  const detail::cost_model cm{p};
  EXPECT_DOUBLE_EQ(cm.block_compute(0, 0, 2, 2, 1, false), 2 * 12e-3);
  EXPECT_DOUBLE_EQ(cm.block_compute(0, 0, 2, 2, 2, false), 2 * 9e-3)
      << "degree 2 barely faster than 1, as measured, not half";
  EXPECT_DOUBLE_EQ(cm.block_compute(0, 0, 2, 2, 2, true), 2 * 12e-3) << "recompute: one more forward";
}

TEST(planner_cost, a_layer_overhead_makes_small_work_less_efficient) {
  auto p = tiny_problem({4});
  const detail::cost_model plain{p};
  p.hardware.types[0].layer_overhead = 1e-5;
  const detail::cost_model with{p};
  const double unit = 3407872.0 / 5e11;  // forward seconds of a sequence at degree 1
  EXPECT_DOUBLE_EQ(plain.block_compute(0, 0, 1, 1, 4, false), 3 * unit / 4);
  EXPECT_DOUBLE_EQ(with.block_compute(0, 0, 1, 1, 4, false), 3 * (unit / 4 + 1e-5));
  // Degree 4 is 4x faster than degree 1 without the overhead; with it, much less.
  const double speedup = with.block_compute(0, 0, 1, 1, 1, false) / with.block_compute(0, 0, 1, 1, 4, false);
  EXPECT_LT(speedup, 2.0);
  EXPECT_GT(speedup, 1.0);
}

TEST(planner_cost, a_plan_that_does_not_fit_is_refused_with_the_place) {
  auto p = tiny_problem({1});
  p.hardware.types[0].memory = 1.5e6;
  p.hardware.types[0].reserved_memory = 0.1e6;
  auto r = evaluate(p, shape({{0, 2, 1}}, {{{0, {0}}}}, 8));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::resource_exhausted);
  EXPECT_NE(r.error().message().find("a x device of stage 0 needs"), std::string::npos) << r.error();
  EXPECT_NE(r.error().message().find("of 1.34 MiB usable"), std::string::npos) << r.error();
}

TEST(planner_cost, malformed_plans_are_rejected) {
  const auto p = tiny_problem({2});
  const auto expect_bad = [&](plan s, const std::string& text) {
    auto r = evaluate(p, std::move(s));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(text), std::string::npos) << r.error();
  };
  expect_bad(shape({{0, 1, 1}}, {{{0, {0}}}}, 2), "cover 1 layers");
  expect_bad(shape({{0, 2, 3}}, {{{0, {0, 1, 2}}}}, 2), "does not divide the 4 heads");
  expect_bad(shape({{0, 2, 1}}, {{{0, {5}}}}, 2), "device 5 of node n0 does not exist");
  expect_bad(shape({{0, 1, 1}, {1, 1, 1}}, {{{0, {0}}, {0, {0}}}}, 2), "is used twice");
  expect_bad(shape({{0, 2, 1}}, {{{0, {0}}}}, 3), "does not divide the global batch");
  expect_bad(shape({{0, 2, 1}}, {{{0, {0}}}, {{0, {1}}}}, 8), "2 replicas need at least as many micro-batches");
}

TEST(planner_cost, balance_matches_brute_force) {
  // Replica classes with finish(m) = fixed + m·per; compare with trying every split.
  const std::vector<double> fixed = {0.5, 0.1, 0.0};
  const std::vector<double> per = {1.0, 0.7, 2.3};
  const std::vector<std::uint32_t> count = {1, 1, 1};
  for (std::uint32_t total = 3; total <= 30; ++total) {
    std::vector<detail::class_share> shares;
    ASSERT_TRUE(detail::balance(fixed, per, count, total, shares));
    double got = 0;
    std::uint32_t sum = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      sum += shares[k].count;
      got = std::max(got, fixed[k] + per[k] * shares[k].count);
    }
    EXPECT_EQ(sum, total);
    double best = 1e300;
    for (std::uint32_t a = 1; a + 2 <= total; ++a)
      for (std::uint32_t b = 1; a + b + 1 <= total; ++b) {
        const std::uint32_t c = total - a - b;
        best = std::min(best, std::max({fixed[0] + per[0] * a, fixed[1] + per[1] * b, fixed[2] + per[2] * c}));
      }
    EXPECT_NEAR(got, best, 1e-12) << "total " << total;
  }
  std::vector<detail::class_share> shares;
  EXPECT_FALSE(detail::balance(fixed, per, count, 2, shares)) << "every replica needs one";
  // A class of 3 identical replicas sharing 7: two run 2, one runs 3.
  ASSERT_TRUE(detail::balance(std::vector<double>{0.0}, std::vector<double>{1.0}, std::vector<std::uint32_t>{3}, 7, shares));
  EXPECT_EQ(shares[0].count, 3u);
  EXPECT_EQ(shares[0].high, 1u);
}

TEST(planner_layout, place_keeps_a_replica_in_one_node_and_packs_mixed_degrees) {
  const auto p = tiny_problem({4, 4});
  const std::vector<std::uint32_t> tensor = {2, 1, 1};
  const std::vector<std::vector<std::uint32_t>> patterns = {{0, 0, 0}, {0, 0, 0}};
  auto l = detail::place(p.hardware, tensor, patterns);
  ASSERT_TRUE(l.has_value());
  for (const auto& rep : l->replicas) {
    EXPECT_EQ(rep[0].node, rep[1].node);
    EXPECT_EQ(rep[1].node, rep[2].node);
    EXPECT_EQ(rep[0].devices.size(), 2u);
  }
  EXPECT_NE(l->replicas[0][0].node, l->replicas[1][0].node);
  EXPECT_EQ(l->used_devices, 8u);
  ASSERT_EQ(l->classes.size(), 1u) << "both replicas look the same to the cost model";
  EXPECT_EQ(l->classes[0].count, 2u);
  // Three replicas of 4, 2 and 2 devices fit only when the 4 is placed first.
  const std::vector<std::uint32_t> wide = {4};
  const std::vector<std::vector<std::uint32_t>> three = {{0}, {0}};
  EXPECT_TRUE(detail::place(p.hardware, wide, three).has_value());
  const std::vector<std::vector<std::uint32_t>> too_many = {{0}, {0}, {0}};
  EXPECT_FALSE(detail::place(p.hardware, wide, too_many).has_value());
}

}  // namespace
}  // namespace rekindle::planner
