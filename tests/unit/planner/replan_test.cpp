#include <gtest/gtest.h>

#include <thread>

#include "planner/cost.hpp"
#include "planner/replan.hpp"
#include "planner/search.hpp"

namespace rekindle::planner {
namespace {

device_type make_type(std::string name, double tflops, double memory_gb) {
  device_type t;
  t.name = std::move(name);
  t.flops = tflops * 1e12;
  t.efficiency = 0.5;
  t.memory = memory_gb * 1e9;
  t.reserved_memory = 1e9;
  t.memory_bandwidth = 2e12;
  t.link_bandwidth = 300e9;
  t.link_latency = 5e-6;
  return t;
}

// `nodes` nodes of `devices` devices, alternating two types.
problem cluster_of(std::uint32_t nodes, std::uint32_t devices, std::uint32_t layers, std::uint32_t hidden,
                   double memory_gb = 80) {
  problem p;
  p.hardware.name = "c";
  p.hardware.types = {make_type("a100", 312, memory_gb), make_type("h100", 989, memory_gb)};
  p.hardware.net = network{25e9, 10e-6};
  for (std::uint32_t i = 0; i < nodes; ++i) {
    node n;
    n.name = (i % 2 == 0 ? "a" : "h") + std::to_string(i);
    n.type = i % 2;
    for (std::uint32_t d = 0; d < devices; ++d)
      n.devices.push_back(d);
    p.hardware.nodes.push_back(std::move(n));
  }
  auto& m = p.workload;
  m.name = "m";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = hidden / 128;
  m.ffn_hidden = 4 * hidden;
  m.seq_len = 2048;
  m.vocab = 50257;
  m.global_batch = 64;
  m.micro_batch_sizes = {1, 2, 4};
  return p;
}

plan best_plan(const problem& p) {
  search_options o;
  o.mode = search_mode::fast;
  o.top = 1;
  auto r = search(p, o);
  EXPECT_TRUE(r.has_value()) << r.error();
  return r->plans.front();
}

bool uses(const plan& pl, std::uint32_t node, std::optional<std::uint32_t> device = std::nullopt) {
  for (const auto& rep : pl.replicas)
    for (const auto& st : rep.stages)
      if (st.node == node &&
          (!device || std::find(st.devices.begin(), st.devices.end(), *device) != st.devices.end()))
        return true;
  return false;
}

void expect_valid(const problem& reduced, const plan& pl) {
  auto again = evaluate(reduced, pl);
  ASSERT_TRUE(again.has_value()) << again.error();
  EXPECT_NEAR(again->step_time, pl.step_time, 1e-9 * pl.step_time);
  for (const auto& u : pl.memory)
    EXPECT_LE(u.total(), u.capacity);
}

TEST(planner_replan, without_keeps_node_indices) {
  const auto p = cluster_of(3, 4, 8, 2048);
  const std::vector<lost_device> lost = {{1, std::nullopt}, {2, 3u}};
  auto r = without(p, lost);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->hardware.nodes.size(), 3u);
  EXPECT_TRUE(r->hardware.nodes[1].devices.empty());
  EXPECT_EQ(r->hardware.nodes[2].devices, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(r->hardware.device_count(), 7u);
  const std::vector<lost_device> bad_node = {{7, std::nullopt}};
  EXPECT_EQ(without(p, bad_node).error().code(), errc::invalid_argument);
  const std::vector<lost_device> bad_device = {{0, 9u}};
  auto e = without(p, bad_device);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message().find("device 9 of node a0 does not exist"), std::string::npos);
}

TEST(planner_replan, losing_a_node_gives_a_plan_on_the_rest) {
  const auto p = cluster_of(4, 4, 8, 2048);
  const auto current = best_plan(p);
  const std::uint32_t victim = current.replicas[0].stages[0].node;
  const std::vector<lost_device> lost = {{victim, std::nullopt}};
  auto r = replan(p, current, lost);
  ASSERT_TRUE(r.has_value()) << r.error();
  ASSERT_FALSE(r->plans.empty());
  const auto& pl = r->plans.front();
  EXPECT_FALSE(uses(pl, victim)) << pl.shape();
  EXPECT_EQ(pl.devices() + pl.idle_devices, 12u);
  expect_valid(r->reduced, pl);
  EXPECT_FALSE(r->how.empty());
  EXPECT_GE(pl.step_time, 0.0);
}

TEST(planner_replan, a_broken_replica_moves_to_idle_devices) {
  // Two replicas of one device each on a0, with a0 device 2 and node h1 idle.
  const auto p = cluster_of(2, 4, 4, 1024);
  plan current;
  current.stages = {{0, 4, 1}};
  current.replicas = {replica{{{0, {0}}}, 0}, replica{{{0, {1}}}, 0}};
  current.micro_batch_size = 4;
  auto evaluated = evaluate(p, current);
  ASSERT_TRUE(evaluated.has_value()) << evaluated.error();
  const std::vector<lost_device> lost = {{0, 1u}};
  replan_options o;
  o.budget = std::chrono::milliseconds{0};  // the repaired plan only
  auto r = replan(p, *evaluated, lost, o);
  ASSERT_TRUE(r.has_value()) << r.error();
  const auto& pl = r->plans.front();
  EXPECT_EQ(pl.data(), 2u) << "both replicas kept";
  EXPECT_FALSE(uses(pl, 0, 1u));
  EXPECT_TRUE(uses(pl, 0, 0u)) << "the intact replica stays where it was";
  EXPECT_TRUE(uses(pl, 0, 2u)) << "the broken one moves next door, in the same node";
  EXPECT_NE(r->how.find("replica 1 moved the stages they lost"), std::string::npos) << r->how;
  expect_valid(r->reduced, pl);
}

TEST(planner_replan, a_replica_with_no_idle_devices_of_its_type_is_dropped) {
  const auto p = cluster_of(2, 2, 4, 1024);  // a0 (2 × a100), h1 (2 × h100)
  plan current;
  current.stages = {{0, 4, 1}};
  current.replicas = {replica{{{0, {0}}}, 0}, replica{{{0, {1}}}, 0}, replica{{{1, {0}}}, 0},
                      replica{{{1, {1}}}, 0}};
  current.micro_batch_size = 4;
  auto evaluated = evaluate(p, current);
  ASSERT_TRUE(evaluated.has_value()) << evaluated.error();
  const std::vector<lost_device> lost = {{1, 0u}};
  replan_options o;
  o.budget = std::chrono::milliseconds{0};
  auto r = replan(p, *evaluated, lost, o);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_NE(r->how.find("replica 2 dropped (no idle devices of their type left)"), std::string::npos) << r->how;
  const auto& pl = r->plans.front();
  EXPECT_EQ(pl.data(), 3u);
  EXPECT_FALSE(uses(pl, 1, 0u));
  std::uint32_t total = 0;
  for (const auto& rep : pl.replicas)
    total += rep.micro_batches;
  EXPECT_EQ(total, 16u) << "the global batch is kept";
  expect_valid(r->reduced, pl);
}

TEST(planner_replan, when_the_repaired_plan_no_longer_fits_a_new_search_runs) {
  // Eight single-device nodes with 1.45 GB usable each. Data parallel over 8 replicas fits: 4
  // bytes of weights and gradients per parameter plus 12/8 of optimizer state (1.2 GB for the
  // model's 218 M parameters). Over the 4 replicas left after losing four nodes the optimizer
  // shards grow to 12/4 per parameter (1.5 GB): the repaired plan does not fit, a two-stage
  // pipeline does.
  problem p;
  p.hardware.types = {make_type("small", 312, 2.45)};
  p.hardware.net = network{25e9, 10e-6};
  for (std::uint32_t i = 0; i < 8; ++i)
    p.hardware.nodes.push_back(node{"n" + std::to_string(i), 0, {0}, node::no_group});
  auto& m = p.workload;
  m.name = "m";
  m.layers = 4;
  m.hidden = 2048;
  m.heads = 16;
  m.ffn_hidden = 8192;
  m.seq_len = 256;
  m.vocab = 8000;
  m.global_batch = 16;
  m.micro_batch_sizes = {1};
  m.recompute = config::recompute_policy::never;
  m.gradient_bytes = 2;  // the arithmetic above: 16-bit gradients and no fragmentation margin
  m.memory_margin = 0;
  plan current;
  current.stages = {{0, 4, 1}};
  for (std::uint32_t i = 0; i < 8; ++i)
    current.replicas.push_back(replica{{{i, {0}}}, 0});
  current.micro_batch_size = 1;
  auto evaluated = evaluate(p, current);
  ASSERT_TRUE(evaluated.has_value()) << evaluated.error();
  const std::vector<lost_device> lost = {{0, std::nullopt}, {1, std::nullopt}, {2, std::nullopt}, {3, std::nullopt}};
  auto r = replan(p, *evaluated, lost);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_NE(r->how.find("the repaired plan does not fit in memory (4 replicas hold larger optimizer shards)"),
            std::string::npos) << r->how;
  EXPECT_NE(r->how.find("a new search over the remaining devices found one"), std::string::npos) << r->how;
  const auto& pl = r->plans.front();
  EXPECT_GT(pl.pipeline(), 1u) << pl.shape();
  for (std::uint32_t n = 0; n < 4; ++n)
    EXPECT_FALSE(uses(pl, n));
  expect_valid(r->reduced, pl);
}

TEST(planner_replan, losing_everything_says_why) {
  const auto p = cluster_of(2, 2, 4, 1024);
  const auto current = best_plan(p);
  const std::vector<lost_device> lost = {{0, std::nullopt}, {1, std::nullopt}};
  auto r = replan(p, current, lost);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::resource_exhausted);
  EXPECT_NE(r.error().message().find("no plan fits the remaining 0 devices"), std::string::npos) << r.error();
}

TEST(planner_replan, a_plan_for_another_problem_is_rejected) {
  const auto p = cluster_of(2, 2, 4, 1024);
  auto current = best_plan(p);
  current.stages.back().layers += 1;
  const std::vector<lost_device> lost = {{0, 0u}};
  auto r = replan(p, current, lost);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("the current plan does not match the problem"), std::string::npos);
}

TEST(planner_replan, the_full_search_runs_in_the_background) {
  const auto p = cluster_of(4, 4, 8, 2048);
  const auto current = best_plan(p);
  const std::vector<lost_device> lost = {{3, std::nullopt}};
  auto quick = replan(p, current, lost);
  ASSERT_TRUE(quick.has_value()) << quick.error();
  // The caller switches to the full search's plan when it is better; here it just has to finish.
  expected<search_result> full = status{errc::aborted, "not run"};
  std::jthread background([&](std::stop_token stop) {
    search_options o;
    o.stop = stop;
    full = search(quick->reduced, o);
  });
  background.join();
  ASSERT_TRUE(full.has_value()) << full.error();
  EXPECT_FALSE(uses(full->plans.front(), 3));
  expect_valid(quick->reduced, full->plans.front());
}

}  // namespace
}  // namespace rekindle::planner
