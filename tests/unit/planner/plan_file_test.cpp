#include <gtest/gtest.h>

#include <string>

#include "config/load.hpp"
#include "planner/cost.hpp"
#include "planner/plan_file.hpp"
#include "planner/report.hpp"
#include "planner/search.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::planner {
namespace {

device_type make_type(std::string name, double tflops) {
  device_type t;
  t.name = std::move(name);
  t.flops = tflops * 1e12;
  t.efficiency = 0.5;
  t.memory = 80e9;
  t.reserved_memory = 1e9;
  t.memory_bandwidth = 2e12;
  t.link_bandwidth = 300e9;
  t.link_latency = 5e-6;
  return t;
}

// Nodes a0 (4 × a100) and h1 (4 × h100), a 24-layer model of width 2048.
problem two_nodes() {
  problem p;
  p.hardware.name = "c";
  p.hardware.types = {make_type("a100", 312), make_type("h100", 989)};
  p.hardware.net = network{25e9, 10e-6};
  for (std::uint32_t i = 0; i < 2; ++i) {
    node n;
    n.name = (i == 0 ? "a" : "h") + std::to_string(i);
    n.type = i;
    n.devices = {0, 1, 2, 3};
    p.hardware.nodes.push_back(std::move(n));
  }
  auto& m = p.workload;
  m.name = "m";
  m.layers = 24;
  m.hidden = 2048;
  m.heads = 16;
  m.ffn_hidden = 8192;
  m.seq_len = 2048;
  m.vocab = 50257;
  m.global_batch = 64;
  m.micro_batch_sizes = {1, 2, 4};
  return p;
}

std::string error_of(std::string_view text) {
  auto r = parse_plan_file(text, "p.json", two_nodes());
  EXPECT_FALSE(r.has_value()) << text;
  return r.has_value() ? std::string{} : r.error().message();
}

TEST(plan_file, the_planners_json_reads_back_to_the_same_plans_and_predictions) {
  const auto p = two_nodes();
  search_options o;
  o.top = 3;
  auto found = search(p, o);
  ASSERT_TRUE(found.has_value()) << found.error();
  auto read = parse_plan_file(format_json(p, found->plans, found->stats), "plans.json", p);
  ASSERT_TRUE(read.has_value()) << read.error();
  ASSERT_EQ(read->size(), found->plans.size());
  for (std::size_t i = 0; i < read->size(); ++i) {
    const auto& want = found->plans[i];
    EXPECT_EQ((*read)[i].stages, want.stages);
    EXPECT_EQ((*read)[i].replicas, want.replicas);
    EXPECT_EQ((*read)[i].micro_batch_size, want.micro_batch_size);
    EXPECT_EQ((*read)[i].recompute, want.recompute);
    auto e = evaluate(p, (*read)[i]);
    ASSERT_TRUE(e.has_value()) << e.error();
    EXPECT_NEAR(e->step_time, want.step_time, 1e-12 * want.step_time);
  }
}

TEST(plan_file, a_short_hand_written_plan_gets_its_layers_devices_and_shares_filled_in) {
  const auto p = two_nodes();
  auto read = parse_plan_file(R"({"micro_batch_size": 2,
      "stages": [{"layers": 8, "tensor": 2}, {"layers": 16}],
      "replicas": [{"stages": [{"node": "a0"}, {"node": "h1"}]},
                   {"stages": [{"node": "a0"}, {"node": "h1", "devices": [3]}]}]})",
                              "mine.json", p);
  ASSERT_TRUE(read.has_value()) << read.error();
  ASSERT_EQ(read->size(), 1u);
  const auto& pl = read->front();
  EXPECT_EQ(pl.stages, (std::vector<stage>{{0, 8, 2}, {8, 16, 1}}));
  ASSERT_EQ(pl.replicas.size(), 2u);
  EXPECT_EQ(pl.replicas[0].stages[0].devices, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(pl.replicas[0].stages[1].devices, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(pl.replicas[1].stages[0].devices, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(pl.replicas[1].stages[1].devices, (std::vector<std::uint32_t>{3}));
  auto e = evaluate(p, pl);
  ASSERT_TRUE(e.has_value()) << e.error();
  EXPECT_EQ(e->replicas[0].micro_batches + e->replicas[1].micro_batches, 32u);
  EXPECT_NEAR(e->breakdown.total(), e->step_time, 1e-12);
}

TEST(plan_file, every_error_names_the_file_and_the_field) {
  const auto one = [](std::string replica) {
    return R"({"stages": [{"layers": 24}], "replicas": [)" + replica + "]}";
  };
  EXPECT_EQ(error_of(one(R"({"stages": [{"node": "h2"}]})")),
            "p.json: replicas[0].stages[0].node: unknown node 'h2' (did you mean 'h1'?)");
  EXPECT_EQ(error_of(one(R"({"stages": []})")),
            "p.json: replicas[0].stages: an array of 1 placements, one per stage, not an array of 0");
  EXPECT_EQ(error_of(one(R"({"stages": [{"node": "a0", "devices": [7]}]})")),
            "p.json: replicas[0].stages[0].devices[0]: node a0 has devices 0-3");
  EXPECT_EQ(error_of(one(R"({"stages": [{"node": "a0", "devces": [0]}]})")),
            "p.json: replicas[0].stages[0].devces: unknown key (did you mean 'devices'?)");
  EXPECT_EQ(error_of(one(R"({"stages": [{"node": "a0"}], "micro_batches": 2.5})")),
            "p.json: replicas[0].micro_batches: a whole number from 0 to 64, not a fractional number");
  EXPECT_EQ(error_of(one(R"({"stages": [{"node": "a0"}], "micro_batches": -1})")),
            "p.json: replicas[0].micro_batches: -1 is out of range: 0 to 64");
  EXPECT_EQ(error_of(R"({"stages": [{"layers": 25}], "replicas": []})"),
            "p.json: stages[0].layers: 25 is out of range: 1 to 24");
  EXPECT_EQ(error_of(R"({"stages": [{"layers": 24}]})"), "p.json: replicas: missing");
  EXPECT_EQ(error_of(R"({"stage": []})"), "p.json: stage: unknown key (did you mean 'stages'?)");
  EXPECT_EQ(error_of(R"({"plans": [], "cluster": {}})"), "p.json: plans: an array of 1 to 100 plans");
  EXPECT_EQ(error_of(R"({"plans": [{"stages": [{"layers": 24}], "replicas": [{"stages": [{"node": 3}]}]}]})"),
            "p.json: plans[0].replicas[0].stages[0].node: a node's name, not a number");
  // Four devices of a0 only: a fifth implicit stage finds none left.
  std::string many = R"({"stages": [{"layers": 24}], "replicas": [)";
  for (int i = 0; i < 5; ++i)
    many += std::string{i ? "," : ""} + R"({"stages": [{"node": "a0"}]})";
  EXPECT_EQ(error_of(many + "]}"),
            "p.json: replicas[4].stages[0]: node a0 has no 1 devices left for this stage (name them with \"devices\")");
}

TEST(plan_file, malformed_text_deep_nesting_and_huge_numbers_are_refused_before_parsing) {
  EXPECT_EQ(error_of("{\n  \"stages\": [1,\n}"), "p.json: 3:1: syntax error while parsing value - unexpected '}'; "
                                                   "expected '[', '{', or a literal");
  EXPECT_EQ(error_of(std::string(100000, '[') + std::string(100000, ']')),
            "p.json: JSON nested 100000 deep; a plan file nests at most 16");
  EXPECT_EQ(error_of(R"({"micro_batch_size": 1e400})"), "p.json: micro_batch_size: the number 1e400 is out of range");
  EXPECT_EQ(error_of("[]"), "p.json: a plan is an object with \"stages\" and \"replicas\", not an array of 0");
}

TEST(plan_file, the_planners_json_runs_as_a_job_plan_of_the_daemons_configuration) {
  // Four one-device nodes n0-n3 of two types and the daemons' four-block model, never recomputed:
  // a plan the built-in model can run.
  auto p = two_nodes();
  p.hardware.nodes.clear();
  for (std::uint32_t i = 0; i < 4; ++i)
    p.hardware.nodes.push_back({"n" + std::to_string(i), i % 2, {0}});
  p.workload.layers = 4;
  p.workload.hidden = 128;
  p.workload.heads = 4;
  p.workload.ffn_hidden = 512;
  p.workload.seq_len = 64;
  p.workload.vocab = 256;
  p.workload.global_batch = 16;
  p.workload.recompute = config::recompute_policy::never;
  search_options o;
  o.top = 1;
  auto found = search(p, o);
  ASSERT_TRUE(found.has_value()) << found.error();
  const auto& best = found->plans.front();
  testing::temp_dir dir;
  dir.write("plan.json", format_json(p, found->plans, found->stats));
  auto loaded = config::parse(R"([cluster]
ranks_per_node = 1
[[nodes]]
name = "n0"
[[nodes]]
name = "n1"
[[nodes]]
name = "n2"
[[nodes]]
name = "n3"
[job]
plan = "plan.json"
)",
                              "c.toml", dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error_text() << "\n" << format_json(p, found->plans, found->stats);
  const auto& job = loaded.value->job;
  ASSERT_EQ(job.stages.size(), best.stages.size());
  for (std::size_t s = 0; s < best.stages.size(); ++s)
    EXPECT_EQ(job.stages[s], best.stages[s].layers);
  EXPECT_EQ(job.micro_batch, best.micro_batch_size);
  const auto placement = loaded.value->initial_placement();
  ASSERT_EQ(placement.size(), best.devices());
  for (std::size_t r = 0; r < best.replicas.size(); ++r)
    for (std::size_t s = 0; s < best.stages.size(); ++s)
      EXPECT_EQ(placement[r * best.stages.size() + s].node.value(), best.replicas[r].stages[s].node);
  ASSERT_EQ(job.plan_shares.size(), best.replicas.size());
  for (std::size_t r = 0; r < best.replicas.size(); ++r)
    EXPECT_EQ(job.plan_shares[r], best.replicas[r].micro_batches);
}

}  // namespace
}  // namespace rekindle::planner
