// bench/planner: how long the deployment planner takes on large mixed clusters, how long a
// re-plan after losing a node takes, and how close the fast search comes to the exhaustive one.
//
//   build/bench/planner [--runs N] [--quality-cases N] [--seed S] [--json]
//
// Every result is verified before it is timed: the plans fit in every device's memory, evaluate
// again to the same prediction, and a re-plan uses no lost device.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "config/device_presets.hpp"
#include "planner/cost.hpp"
#include "planner/replan.hpp"
#include "planner/search.hpp"
#include "planner/test_set.hpp"

namespace {

using namespace rekindle;
using namespace rekindle::planner;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point start) { return std::chrono::duration<double>(clock_type::now() - start).count(); }

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

device_type from_preset(const char* preset, std::string name) {
  const auto* p = config::find_device_preset(preset);
  device_type t;
  t.name = std::move(name);
  t.flops = p->bf16_flops;
  t.efficiency = 0.5;
  t.memory = p->memory;
  t.reserved_memory = 1024.0 * 1024 * 1024;
  t.memory_bandwidth = p->memory_bandwidth;
  t.link_bandwidth = p->link_bandwidth;
  t.link_latency = 5e-6;
  return t;
}

struct scenario {
  std::string name;
  problem target;
  double search_goal;  // seconds
  double replan_goal;  // seconds; 0 when there is no goal
};

// `nodes_per_type` nodes of 8 devices for each preset; each type's nodes share a leaf switch
// (50 GB/s per device), 25 GB/s between leaves.
problem make_cluster(const std::vector<std::pair<const char*, const char*>>& presets, std::uint32_t nodes_per_type) {
  problem p;
  p.hardware.name = "bench";
  p.hardware.net = network{25e9, 10e-6};
  for (std::uint32_t t = 0; t < presets.size(); ++t) {
    p.hardware.types.push_back(from_preset(presets[t].first, presets[t].second));
    const auto group = p.hardware.net.add_group(50e9);
    for (std::uint32_t i = 0; i < nodes_per_type; ++i) {
      node n;
      n.name = std::string{presets[t].second} + "-" + std::to_string(i);
      n.type = t;
      n.group = group;
      for (std::uint32_t d = 0; d < 8; ++d)
        n.devices.push_back(d);
      p.hardware.nodes.push_back(std::move(n));
    }
  }
  return p;
}

model gpt(std::string name, std::uint32_t layers, std::uint32_t hidden, std::uint32_t heads, std::uint32_t batch) {
  model m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.seq_len = 2048;
  m.vocab = 51200;
  m.global_batch = batch;
  m.micro_batch_sizes = {1, 2, 4, 8};
  return m;
}

std::vector<scenario> scenarios() {
  std::vector<scenario> out;
  {
    auto p = make_cluster({{"a100-80gb", "a100"}, {"h100-sxm", "h100"}}, 8);
    p.workload = gpt("gpt-13b", 40, 5120, 40, 512);
    out.push_back({"128 devices, 2 types, 13B", std::move(p), 1.0, 0.1});
  }
  {
    auto p = make_cluster({{"a100-80gb", "a100"}, {"h100-sxm", "h100"}}, 32);
    p.workload = gpt("gpt-30b", 48, 7168, 56, 1024);
    out.push_back({"512 devices, 2 types, 30B", std::move(p), 5.0, 0.1});
  }
  {
    auto p = make_cluster({{"a100-40gb", "a100-40"}, {"a100-80gb", "a100-80"}, {"h100-sxm", "h100"}, {"h200", "h200"}}, 64);
    p.workload = gpt("gpt-175b", 96, 12288, 96, 1536);
    out.push_back({"2048 devices, 4 types, 175B", std::move(p), 30.0, 0});
  }
  return out;
}

// Aborts the benchmark when a plan is wrong: timing a wrong answer means nothing.
void verify(const problem& p, const plan& pl, const std::string& what) {
  for (const auto& u : pl.memory)
    if (u.total() > u.capacity) {
      std::cerr << "planner bench: " << what << ": a plan exceeds a device's memory\n";
      std::exit(1);
    }
  auto again = evaluate(p, pl);
  if (!again.has_value() || std::abs(again->step_time - pl.step_time) > 1e-9 * pl.step_time) {
    std::cerr << "planner bench: " << what << ": the plan does not evaluate again to its prediction\n";
    std::exit(1);
  }
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pad(std::string s, std::size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench/planner: search time, re-plan time and fast-vs-exhaustive quality of the deployment planner"};
  int runs = 5;
  int quality_cases = 200;
  std::uint64_t seed = 20261130;
  bool json = false;
  app.add_option("--runs", runs, "Timed runs per measurement, after one warm-up (default 5; at most 3 for 2,048 devices)")
      ->check(CLI::Range(1, 100));
  app.add_option("--quality-cases", quality_cases, "Reference problems for the fast-vs-exhaustive gap (default 200)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--seed", seed, "Seed of the reference problems (default 20261130)");
  app.add_flag("--json", json, "Print the figures as JSON");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json out;
  out["runs"] = runs;
  out["scenarios"] = nlohmann::json::array();
  std::vector<std::string> lines;
  lines.push_back(pad("scenario", 30) + pad("search (s)", 12) + pad("goal", 7) + pad("best plan", 34) +
                  pad("step (s)", 10) + pad("re-plan (ms) median / max", 27) + "goal");
  for (auto& sc : scenarios()) {
    const auto& p = sc.target;
    search_options o;
    o.mode = search_mode::fast;
    o.top = 3;
    // Warm up and verify.
    auto first = search(p, o);
    if (!first.has_value()) {
      std::cerr << "planner bench: " << sc.name << ": " << first.error() << "\n";
      return 1;
    }
    for (const auto& pl : first->plans)
      verify(p, pl, sc.name);
    const int n = p.hardware.device_count() >= 2048 ? std::min(runs, 3) : runs;
    std::vector<double> times;
    double best_step = 0;
    for (int i = 0; i < n; ++i) {
      const auto start = clock_type::now();
      auto r = search(p, o);
      times.push_back(since(start));
      best_step = r->plans.front().step_time;
    }
    const auto& best = first->plans.front();
    // Re-plan after losing one node the best plan uses: several different nodes.
    std::vector<std::uint32_t> used;
    for (const auto& rep : best.replicas)
      for (const auto& st : rep.stages)
        if (std::find(used.begin(), used.end(), st.node) == used.end())
          used.push_back(st.node);
    std::vector<double> replans;
    std::string how;
    const int losses = std::min<int>(runs, static_cast<int>(used.size()));
    for (int i = 0; i < losses; ++i) {
      const auto victim = used[static_cast<std::size_t>(i) * used.size() / static_cast<std::size_t>(losses)];
      const std::vector<lost_device> lost = {{victim, std::nullopt}};
      const auto start = clock_type::now();
      auto r = replan(p, best, lost);
      replans.push_back(since(start));
      if (!r.has_value()) {
        std::cerr << "planner bench: " << sc.name << ": re-plan after losing " << p.hardware.nodes[victim].name << ": "
                  << r.error() << "\n";
        return 1;
      }
      for (const auto& rep : r->plans.front().replicas)
        for (const auto& st : rep.stages)
          if (st.node == victim) {
            std::cerr << "planner bench: " << sc.name << ": the re-plan uses the lost node\n";
            return 1;
          }
      verify(r->reduced, r->plans.front(), sc.name + " re-plan");
      if (i == 0)
        how = r->how;
    }
    const double search_median = median(times);
    const double replan_median = replans.empty() ? 0 : median(replans);
    const double replan_max = replans.empty() ? 0 : *std::max_element(replans.begin(), replans.end());
    lines.push_back(pad(sc.name, 30) + pad(fixed(search_median, 2), 12) + pad(fixed(sc.search_goal, 0), 7) +
                    pad(best.shape(), 34) + pad(fixed(best_step, 3), 10) +
                    pad(fixed(replan_median * 1e3, 1) + " / " + fixed(replan_max * 1e3, 1), 27) +
                    (sc.replan_goal > 0 ? fixed(sc.replan_goal * 1e3, 0) : "-"));
    out["scenarios"].push_back({{"name", sc.name},
                                {"devices", p.hardware.device_count()},
                                {"types", p.hardware.types.size()},
                                {"search_seconds_median", search_median},
                                {"search_seconds", times},
                                {"search_goal_seconds", sc.search_goal},
                                {"layouts", first->stats.layouts},
                                {"evaluations", first->stats.evaluations},
                                {"best_plan", best.shape()},
                                {"best_step_time", best_step},
                                {"best_devices", best.devices()},
                                {"replan_seconds_median", replan_median},
                                {"replan_seconds_max", replan_max},
                                {"replan_seconds", replans},
                                {"replan_goal_seconds", sc.replan_goal},
                                {"replan_how", how}});
  }

  // Fast against exhaustive on generated problems small enough to enumerate.
  const auto cases = reference_cases(static_cast<std::uint32_t>(quality_cases), seed, 200'000);
  double worst = 0;
  double sum = 0;
  int feasible = 0;
  int over = 0;
  int disagree = 0;
  double exhaustive_seconds = 0;
  double fast_seconds = 0;
  std::string worst_case;
  for (const auto& c : cases) {
    search_options o;
    o.top = 1;
    o.mode = search_mode::exhaustive;
    auto ex = search(c.target, o);
    o.mode = search_mode::fast;
    auto fa = search(c.target, o);
    if (!ex.has_value() || !fa.has_value()) {
      disagree += ex.has_value() != fa.has_value() ? 1 : 0;
      continue;
    }
    verify(c.target, ex->plans.front(), c.name);
    verify(c.target, fa->plans.front(), c.name);
    ++feasible;
    exhaustive_seconds += ex->stats.seconds;
    fast_seconds += fa->stats.seconds;
    const double gap = fa->plans.front().step_time / ex->plans.front().step_time - 1;
    sum += gap;
    over += gap > 0.03 ? 1 : 0;
    if (gap > worst) {
      worst = gap;
      worst_case = c.name;
    }
  }
  out["quality"] = {{"cases", cases.size()},
                    {"seed", seed},
                    {"with_a_plan", feasible},
                    {"only_one_search_found_a_plan", disagree},
                    {"worst_gap", worst},
                    {"worst_case", worst_case},
                    {"mean_gap", feasible > 0 ? sum / feasible : 0},
                    {"over_3_percent", over},
                    {"exhaustive_seconds_total", exhaustive_seconds},
                    {"fast_seconds_total", fast_seconds}};
  if (json) {
    std::cout << out.dump(2) << "\n";
    return over == 0 && disagree == 0 ? 0 : 1;
  }
  std::cout << "planner benchmark: fast search, median of " << runs << " runs after a warm-up (3 for 2,048 devices); "
            << "re-plan after losing one node the best plan uses, " << runs << " different nodes\n\n";
  for (const auto& l : lines)
    std::cout << l << "\n";
  std::cout << "\nquality: " << cases.size() << " reference problems (seed " << seed << "), " << feasible
            << " with a plan: fast vs exhaustive worst gap " << fixed(100 * worst, 2) << "%, mean "
            << fixed(feasible > 0 ? 100 * sum / feasible : 0, 3) << "%, " << over << " over 3%, " << disagree
            << " where only one search found a plan; exhaustive " << fixed(exhaustive_seconds, 2) << " s, fast "
            << fixed(fast_seconds, 2) << " s in all\n";
  if (!worst_case.empty())
    std::cout << "worst: " << worst_case << "\n";
  return over == 0 && disagree == 0 ? 0 : 1;
}
