#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/cost.hpp"
#include "planner/report.hpp"

namespace rekindle::planner {
namespace {

problem four_devices() {
  problem p;
  device_type t;
  t.name = "gpu";
  t.flops = 312e12;
  t.efficiency = 0.5;
  t.memory = 80e9;
  t.reserved_memory = 1e9;
  t.memory_bandwidth = 2e12;
  t.link_bandwidth = 300e9;
  p.hardware.name = "box";
  p.hardware.types = {t};
  p.hardware.net = network{25e9, 10e-6};
  p.hardware.nodes.push_back(node{"n0", 0, {0, 1, 2, 3}, node::no_group});
  auto& m = p.workload;
  m.name = "small";
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 8;
  m.ffn_hidden = 4096;
  m.seq_len = 1024;
  m.vocab = 32000;
  m.global_batch = 16;
  m.micro_batch_sizes = {1, 2};
  return p;
}

plan evaluated(const problem& p, std::vector<stage> stages, std::vector<std::vector<placement>> replicas) {
  plan s;
  s.stages = std::move(stages);
  for (auto& r : replicas)
    s.replicas.push_back(replica{std::move(r), 0});
  s.micro_batch_size = 1;
  auto r = evaluate(p, s);
  EXPECT_TRUE(r.has_value()) << r.error();
  return *r;
}

TEST(planner_report, describe_table_and_placement) {
  const auto p = four_devices();
  const auto data = evaluated(p, {{0, 4, 1}}, {{{0, {0}}}, {{0, {1}}}, {{0, {2}}}, {{0, {3}}}});
  const auto tensor = evaluated(p, {{0, 4, 4}}, {{{0, {0, 1, 2, 3}}}});
  EXPECT_EQ(describe_problem(p),
            "cluster box (4 devices: 4 × gpu), model small (84.2 M parameters, 4 layers), global batch 16 × 1024 tokens");
  const auto table = format_table(p, {data, tensor});
  EXPECT_NE(table.find("#  step"), std::string::npos);
  EXPECT_NE(table.find("\n1  "), std::string::npos);
  EXPECT_NE(table.find("\n2  "), std::string::npos);
  EXPECT_NE(table.find("4 gpu"), std::string::npos) << table;
  EXPECT_NE(table.find("1 × 16"), std::string::npos) << "micro-batch size × count: " << table;
  const auto placement = format_placement(p, tensor, 8);
  EXPECT_EQ(placement, "  replica 0 (16 micro-batches, finishes last): stage 0 on gpu n0[0-3]\n");
  const auto cut = format_placement(p, data, 2);
  EXPECT_NE(cut.find("  replica 1 (4 micro-batches): stage 0 on gpu n0[1]\n"), std::string::npos) << cut;
  EXPECT_NE(cut.find("... 2 more replicas"), std::string::npos) << cut;
}

TEST(planner_report, compare_names_the_terms_that_differ_most) {
  const auto p = four_devices();
  const auto data = evaluated(p, {{0, 4, 1}}, {{{0, {0}}}, {{0, {1}}}, {{0, {2}}}, {{0, {3}}}});
  const auto pipe = evaluated(p, {{0, 1, 1}, {1, 1, 1}, {2, 1, 1}, {3, 1, 1}}, {{{0, {0}}, {0, {1}}, {0, {2}}, {0, {3}}}});
  const auto& faster = data.step_time < pipe.step_time ? data : pipe;
  const auto& slower = data.step_time < pipe.step_time ? pipe : data;
  const auto text = compare(faster, slower, 2);
  EXPECT_EQ(text.find(std::to_string(static_cast<int>(100 * (slower.step_time - faster.step_time) / slower.step_time))),
            0u) << text;
  EXPECT_NE(text.find("% faster than plan 2 (" + slower.shape()), std::string::npos) << text;
  EXPECT_NE(text.find("plan 2 has "), std::string::npos) << text;
  EXPECT_NE(text.find("instead of"), std::string::npos) << "the shapes differ: " << text;
  // The largest difference comes first.
  const double bubble = slower.breakdown.bubble - faster.breakdown.bubble;
  const double dp = slower.breakdown.data_parallel - faster.breakdown.data_parallel;
  const auto first = std::abs(bubble) > std::abs(dp) ? "pipeline bubble" : "data-parallel reduction";
  const auto second = std::abs(bubble) > std::abs(dp) ? "data-parallel reduction" : "pipeline bubble";
  ASSERT_NE(text.find(first), std::string::npos) << text;
  if (text.find(second) != std::string::npos) {
    EXPECT_LT(text.find(first), text.find(second)) << text;
  }
}

TEST(planner_report, explanation_and_json) {
  const auto p = four_devices();
  const auto a = evaluated(p, {{0, 2, 2}, {2, 2, 2}}, {{{0, {0, 1}}, {0, {2, 3}}}});
  const auto b = evaluated(p, {{0, 4, 2}}, {{{0, {0, 1}}}, {{0, {2, 3}}}});
  const auto text = format_explanation(p, a, 1, &b);
  EXPECT_NE(text.find("plan 1: d=1 p=2 t=2 b=1"), std::string::npos) << text;
  EXPECT_NE(text.find("stages: 0: layers 0-1 (2), tensor 2; 1: layers 2-3 (2), tensor 2"), std::string::npos) << text;
  EXPECT_NE(text.find("memory per device"), std::string::npos);
  EXPECT_NE(text.find("  why: "), std::string::npos);
  EXPECT_EQ(format_explanation(p, b, 2, nullptr).find("why"), std::string::npos) << "the last plan has no next";

  search_stats stats;
  stats.mode = search_mode::exhaustive;
  stats.evaluations = 42;
  replan_report re{"n0:3", "replica 1 dropped", {b}, stats};
  const auto j = nlohmann::json::parse(format_json(p, {a, b}, stats, &re));
  EXPECT_EQ(j["search"]["mode"], "exhaustive");
  EXPECT_EQ(j["search"]["evaluations"], 42);
  EXPECT_EQ(j["plans"].size(), 2u);
  EXPECT_EQ(j["plans"][0]["tensor"], nlohmann::json::array({2, 2}));
  EXPECT_EQ(j["plans"][0]["replicas"][0]["stages"][1]["devices"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(j["plans"][0]["replicas"][0]["stages"][1]["node"], "n0");
  EXPECT_EQ(j["plans"][0]["versus_next"]["rank"], 2);
  EXPECT_DOUBLE_EQ(j["plans"][0]["versus_next"]["slower_by"].get<double>(), b.step_time - a.step_time);
  EXPECT_EQ(j["plans"][1].contains("versus_next"), false);
  EXPECT_EQ(j["replan"]["lost"], "n0:3");
  EXPECT_EQ(j["replan"]["plans"][0]["data"], 2);
  EXPECT_DOUBLE_EQ(j["plans"][1]["memory"][0]["optimizer"].get<double>(), b.memory[0].optimizer);
}

}  // namespace
}  // namespace rekindle::planner
