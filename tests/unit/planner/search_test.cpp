#include <gtest/gtest.h>

#include <chrono>

#include <set>

#include "planner/cost.hpp"
#include "planner/search.hpp"
#include "planner/test_set.hpp"

namespace rekindle::planner {
namespace {

device_type make_type(std::string name, double tflops, double memory_gb, double link_gb = 300) {
  device_type t;
  t.name = std::move(name);
  t.flops = tflops * 1e12;
  t.efficiency = 0.5;
  t.memory = memory_gb * 1e9;
  t.reserved_memory = 1e9;
  t.memory_bandwidth = 2e12;
  t.link_bandwidth = link_gb * 1e9;
  t.link_latency = 5e-6;
  return t;
}

model make_model(std::uint32_t layers, std::uint32_t hidden, std::uint32_t batch) {
  model m;
  m.name = "m";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = hidden / 128;
  m.ffn_hidden = 4 * hidden;
  m.seq_len = 2048;
  m.vocab = 50257;
  m.global_batch = batch;
  m.micro_batch_sizes = {1, 2, 4};
  return m;
}

// `nodes[i]` devices of type `types[i]` per node.
problem make_problem(std::vector<device_type> types, std::vector<std::pair<std::uint32_t, std::uint32_t>> nodes,
                     model m) {
  problem p;
  p.hardware.name = "c";
  p.hardware.types = std::move(types);
  p.hardware.net = network{25e9, 10e-6};
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    node n;
    n.name = "n" + std::to_string(i);
    n.type = nodes[i].first;
    for (std::uint32_t d = 0; d < nodes[i].second; ++d)
      n.devices.push_back(d);
    p.hardware.nodes.push_back(std::move(n));
  }
  p.workload = std::move(m);
  return p;
}

search_options with_mode(search_mode mode, std::uint32_t top = 5) {
  search_options o;
  o.mode = mode;
  o.top = top;
  return o;
}

// Checks what every returned plan must satisfy: it fits, its terms add up, and evaluating it
// again from its description gives the same prediction.
void check_plans(const problem& p, const search_result& r) {
  ASSERT_FALSE(r.plans.empty());
  std::set<std::string> shapes;
  double previous = 0;
  for (const auto& pl : r.plans) {
    EXPECT_GE(pl.step_time, previous) << "best first";
    previous = pl.step_time;
    EXPECT_NEAR(pl.step_time, pl.breakdown.total(), 1e-12 * pl.step_time);
    for (const auto& u : pl.memory) {
      EXPECT_LE(u.total(), u.capacity) << pl.shape() << " stage " << u.stage;
      EXPECT_NEAR(u.capacity, p.hardware.types[u.type].memory - p.hardware.types[u.type].reserved_memory, 1);
    }
    std::uint32_t micro_batches = 0;
    for (const auto& rep : pl.replicas) {
      EXPECT_GE(rep.micro_batches, 1u);
      micro_batches += rep.micro_batches;
    }
    EXPECT_EQ(micro_batches, pl.micro_batches);
    EXPECT_EQ(pl.micro_batches * pl.micro_batch_size, p.workload.global_batch);
    auto again = evaluate(p, pl);
    ASSERT_TRUE(again.has_value()) << again.error();
    EXPECT_NEAR(again->step_time, pl.step_time, 1e-9 * pl.step_time);
    EXPECT_EQ(pl.devices() + pl.idle_devices, p.hardware.device_count());
  }
}

TEST(planner_search, exhaustive_and_fast_agree_on_tiny_cases) {
  const std::vector<problem> cases = {
      make_problem({make_type("a", 312, 80)}, {{0, 1}}, make_model(2, 1024, 8)),
      make_problem({make_type("a", 312, 80)}, {{0, 2}}, make_model(3, 1024, 8)),
      make_problem({make_type("a", 312, 80), make_type("b", 989, 80)}, {{0, 1}, {1, 1}}, make_model(2, 2048, 8)),
      make_problem({make_type("a", 312, 40), make_type("b", 989, 80)}, {{0, 2}, {1, 2}}, make_model(4, 2048, 16)),
  };
  for (const auto& p : cases) {
    auto ex = search(p, with_mode(search_mode::exhaustive));
    auto fast = search(p, with_mode(search_mode::fast));
    ASSERT_TRUE(ex.has_value()) << ex.error();
    ASSERT_TRUE(fast.has_value()) << fast.error();
    EXPECT_EQ(ex->stats.mode, search_mode::exhaustive);
    EXPECT_EQ(fast->stats.mode, search_mode::fast);
    EXPECT_NEAR(fast->plans[0].step_time, ex->plans[0].step_time, 1e-9 * ex->plans[0].step_time)
        << "exhaustive " << ex->plans[0].shape() << ", fast " << fast->plans[0].shape();
    check_plans(p, *ex);
    check_plans(p, *fast);
  }
}

TEST(planner_search, fast_is_within_three_percent_of_exhaustive_on_the_reference_set) {
  const auto cases = reference_cases(40, 20261130, 100'000);
  ASSERT_EQ(cases.size(), 40u);
  double worst = 0;
  std::uint32_t infeasible = 0;
  for (const auto& c : cases) {
    auto ex = search(c.target, with_mode(search_mode::exhaustive, 3));
    auto fast = search(c.target, with_mode(search_mode::fast, 3));
    if (!ex.has_value()) {
      EXPECT_EQ(ex.error().code(), errc::resource_exhausted) << c.name;
      EXPECT_FALSE(fast.has_value()) << c.name << ": fast found a plan the exhaustive search did not";
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(fast.has_value()) << c.name << ": " << fast.error() << "; exhaustive found " << ex->plans[0].shape();
    const double gap = fast->plans[0].step_time / ex->plans[0].step_time - 1;
    worst = std::max(worst, gap);
    EXPECT_LE(gap, 0.03) << c.name << ": exhaustive " << ex->plans[0].shape() << " " << ex->plans[0].step_time
                         << " s, fast " << fast->plans[0].shape() << " " << fast->plans[0].step_time << " s";
    EXPECT_GE(gap, -1e-9) << c.name << ": the fast search's space is inside the exhaustive one";
    check_plans(c.target, *ex);
    check_plans(c.target, *fast);
  }
  EXPECT_LT(infeasible, cases.size() / 2) << "the set should mostly have plans";
  RecordProperty("worst_gap_percent", std::to_string(worst * 100));
}

// Problems where the local search once stopped short: the best layout lay past layouts it could
// not place or that did not fit (a stage split into halves of half the width, a half twice as
// wide, a stage's types exchanged between replicas), or past a layout an earlier start had
// evaluated, or past types in an order other than blocks (seed 99 case 173: 19% behind; seed 2
// case 5: 3.5x; seed 10 case 187: 19%).
TEST(planner_search, fast_finds_the_layouts_that_lie_past_unplaceable_or_explored_ones) {
  const std::vector<std::pair<std::uint64_t, std::uint32_t>> picks{{99, 173}, {99, 289}, {31337, 125}, {2, 5}, {10, 187}};
  for (const auto& [seed, index] : picks) {
    const auto cases = reference_cases(index + 1, seed, 200'000);
    ASSERT_EQ(cases.size(), index + 1);
    const auto& c = cases[index];
    auto ex = search(c.target, with_mode(search_mode::exhaustive, 1));
    auto fast = search(c.target, with_mode(search_mode::fast, 1));
    ASSERT_TRUE(ex.has_value()) << c.name << ": " << ex.error();
    ASSERT_TRUE(fast.has_value()) << c.name << ": " << fast.error();
    EXPECT_LE(fast->plans[0].step_time, 1.03 * ex->plans[0].step_time)
        << "seed " << seed << ", " << c.name << ": exhaustive " << ex->plans[0].shape() << " "
        << ex->plans[0].step_time << " s, fast " << fast->plans[0].shape() << " " << fast->plans[0].step_time << " s";
  }
}

TEST(planner_search, top_plans_have_distinct_shapes) {
  const auto p = make_problem({make_type("a", 312, 80), make_type("b", 989, 80)}, {{0, 4}, {1, 4}},
                              make_model(8, 2048, 32));
  auto r = search(p, with_mode(search_mode::fast, 6));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->plans.size(), 6u);
  check_plans(p, *r);
  std::set<std::string> seen;
  for (const auto& pl : r->plans)
    EXPECT_TRUE(seen.insert(pl.shape()).second) << "repeated " << pl.shape();
}

TEST(planner_search, faster_devices_get_more_layers_or_micro_batches) {
  // One slow and one fast device, a model that fits on either: data parallel with 3:1 shares, or
  // a pipeline with 3:1 layers. Either way the fast device does most of the work.
  const auto p = make_problem({make_type("slow", 100, 80), make_type("fast", 300, 80)}, {{0, 1}, {1, 1}},
                              make_model(8, 1024, 16));
  auto r = search(p, with_mode(search_mode::exhaustive, 1));
  ASSERT_TRUE(r.has_value()) << r.error();
  const auto& pl = r->plans[0];
  if (pl.data() == 2) {
    const auto fast_replica = p.hardware.nodes[pl.replicas[0].stages[0].node].type == 1 ? 0 : 1;
    EXPECT_GT(pl.replicas[fast_replica].micro_batches, 2 * pl.replicas[1 - fast_replica].micro_batches);
  } else {
    ASSERT_EQ(pl.pipeline(), 2u);
    const auto fast_stage = p.hardware.nodes[pl.replicas[0].stages[0].node].type == 1 ? 0 : 1;
    EXPECT_GT(pl.stages[fast_stage].layers, 2 * pl.stages[1 - fast_stage].layers);
  }
}

TEST(planner_search, a_model_too_large_for_the_cluster_gets_a_reason) {
  const auto p = make_problem({make_type("a", 312, 16)}, {{0, 2}}, make_model(24, 8192, 8));
  auto r = search(p);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::resource_exhausted);
  EXPECT_NE(r.error().message().find("parameters need at least"), std::string::npos) << r.error();
  EXPECT_NE(r.error().message().find("the cluster's 2 devices have 27.9 GiB usable"), std::string::npos) << r.error();
}

TEST(planner_search, a_model_past_the_memory_bound_is_refused_before_any_search) {
  // 20,000 layers of a 1.3 B-parameter model's width on 32 devices: refused from the bound alone.
  // A search that had started would have been stopped by the token and said so instead.
  std::stop_source source;
  source.request_stop();
  search_options o;
  o.stop = source.get_token();
  const auto p = make_problem({make_type("a", 312, 80)}, {{0, 8}, {0, 8}, {0, 8}, {0, 8}}, make_model(20000, 2048, 512));
  for (auto mode : {search_mode::automatic, search_mode::fast, search_mode::exhaustive}) {
    o.mode = mode;
    auto r = search(p, o);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), errc::resource_exhausted) << r.error();
    EXPECT_NE(r.error().message().find("the cluster's 32 devices have"), std::string::npos) << r.error();
  }
}

TEST(planner_search, a_search_that_would_run_for_minutes_stops_at_its_budget) {
  // 100,000 thin layers fit, but every evaluation walks them: without a budget the fast search
  // ran for more than two minutes here.
  auto m = make_model(100000, 64, 64);
  m.heads = 1;
  m.ffn_hidden = 256;
  m.seq_len = 128;
  m.vocab = 1000;
  const auto p = make_problem({make_type("a", 312, 80)}, {{0, 8}, {0, 8}}, m);
  search_options o;
  o.budget = std::chrono::milliseconds{300};
  const auto start = std::chrono::steady_clock::now();
  auto r = search(p, o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds{60}) << "bounded by the budget, with room for one slow evaluation";
  if (r.has_value()) {
    EXPECT_TRUE(r->stats.stopped);
    check_plans(p, *r);
  } else {
    EXPECT_EQ(r.error().code(), errc::aborted) << r.error();
    EXPECT_NE(r.error().message().find("within its budget of 0.3 s"), std::string::npos) << r.error();
  }
}

TEST(planner_search, enough_memory_in_total_but_no_plan_fits_names_the_closest) {
  // 4 devices of 16 GB hold the state in total, but the long sequence's activations do not fit.
  auto m = make_model(2, 4096, 4);
  m.seq_len = 16384;
  m.recompute = config::recompute_policy::never;
  const auto p = make_problem({make_type("a", 312, 16)}, {{0, 4}}, m);
  auto r = search(p);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::resource_exhausted);
  EXPECT_NE(r.error().message().find("no plan fits in memory; the closest ("), std::string::npos) << r.error();
  EXPECT_NE(r.error().message().find("is usable"), std::string::npos) << r.error();
}

TEST(planner_search, automatic_mode_chooses_by_the_size_of_the_space) {
  const auto small = make_problem({make_type("a", 312, 80)}, {{0, 2}}, make_model(2, 1024, 8));
  auto r = search(small);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->stats.mode, search_mode::exhaustive);
  EXPECT_LE(exhaustive_size(small, 1000), 1000u);
  const auto large = make_problem({make_type("a", 312, 80), make_type("b", 989, 80)}, {{0, 8}, {0, 8}, {1, 8}, {1, 8}},
                                  make_model(24, 2048, 64));
  EXPECT_GT(exhaustive_size(large, 200'000), 200'000u);
  auto big = search(large);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->stats.mode, search_mode::fast);
  check_plans(large, *big);
  // Asked for explicitly, an exhaustive search of a huge space refuses instead of running for days.
  auto refused = search(large, with_mode(search_mode::exhaustive));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), errc::invalid_argument);
  EXPECT_NE(refused.error().message().find("use the fast search"), std::string::npos) << refused.error();
  // Many device types and layers: counting stops early instead of listing every type sequence.
  std::vector<device_type> six;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> nodes;
  for (std::uint32_t t = 0; t < 6; ++t) {
    six.push_back(make_type("t" + std::to_string(t), 100 + 50.0 * t, 80));
    nodes.emplace_back(t, 2);
  }
  const auto wide = make_problem(six, nodes, make_model(48, 1024, 64));
  EXPECT_GT(exhaustive_size(wide, 1'000'000'000), 1'000'000'000u);
}

TEST(planner_search, a_stopped_search_returns_what_it_has) {
  std::stop_source source;
  source.request_stop();
  search_options o;
  o.mode = search_mode::fast;
  o.stop = source.get_token();
  const auto p = make_problem({make_type("a", 312, 80)}, {{0, 8}}, make_model(8, 2048, 32));
  auto r = search(p, o);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::aborted);
}

}  // namespace
}  // namespace rekindle::planner
