#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using testing::run_process;

std::string rekindle_bin() { return (testing::bin_dir() / "rekindle").string(); }
std::string example(const char* name) { return (testing::source_dir() / "config/examples" / name).string(); }

std::vector<std::string> plan_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {rekindle_bin(), "plan", "--cluster", example("mixed-cluster.toml"), "--model",
                                   example("gpt-1.3b.toml")};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(rekindle_plan, table_of_the_best_plans_for_the_examples) {
  auto r = run_process(plan_args());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("cluster mixed (32 devices: 16 × a100, 16 × h100), model gpt-1.3b"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#  step"), std::string::npos) << r.out;
  // Three ranked rows by default, each with the step time and the fullest device's memory.
  for (const char* row : {"\n1  ", "\n2  ", "\n3  "})
    EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n4  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan 1 runs on:\n  replica 0 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("why plan 1: "), std::string::npos) << r.out;
}

TEST(rekindle_plan, json_describes_every_plan_and_agrees_with_itself) {
  auto r = run_process(plan_args({"--json", "--top", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cluster"]["devices"], 32);
  EXPECT_EQ(j["model"]["name"], "gpt-1.3b");
  EXPECT_GT(j["search"]["evaluations"].get<int>(), 0);
  const auto& plans = j["plans"];
  ASSERT_EQ(plans.size(), 4u);
  double previous = 0;
  for (const auto& pl : plans) {
    const double step = pl["step_time"];
    EXPECT_GE(step, previous);
    previous = step;
    double sum = 0;
    for (const auto& [name, value] : pl["breakdown"].items())
      sum += value.get<double>();
    EXPECT_NEAR(sum, step, 1e-9 * step) << "the terms add up to the step time";
    int micro_batches = 0;
    for (const auto& rep : pl["replicas"]) {
      micro_batches += rep["micro_batches"].get<int>();
      ASSERT_EQ(rep["stages"].size(), pl["stages"].size());
    }
    EXPECT_EQ(micro_batches, pl["micro_batches"].get<int>());
    EXPECT_EQ(pl["micro_batches"].get<int>() * pl["micro_batch_size"].get<int>(), 512);
    int layers = 0;
    for (const auto& st : pl["stages"])
      layers += st["layers"].get<int>();
    EXPECT_EQ(layers, 24);
    for (const auto& m : pl["memory"])
      EXPECT_LE(m["total"].get<double>(), m["usable"].get<double>());
    EXPECT_EQ(pl["devices"].get<int>() + pl["idle_devices"].get<int>(), 32);
  }
  EXPECT_TRUE(plans[0].contains("versus_next"));
  EXPECT_FALSE(plans[3].contains("versus_next"));
  EXPECT_FALSE(j.contains("replan"));
}

TEST(rekindle_plan, explain_shows_terms_memory_and_why) {
  auto r = run_process(plan_args({"--explain", "--top", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plan 1: d="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan 2: d="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(the last to finish): compute "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory per device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  why: "), std::string::npos) << r.out;
}

TEST(rekindle_plan, lose_a_node_and_replan) {
  auto r = run_process(plan_args({"--json", "--lose", "h1,a0:3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("replan"));
  EXPECT_EQ(j["replan"]["lost"], "h1, a0:3");
  EXPECT_FALSE(j["replan"]["how"].get<std::string>().empty());
  const auto& pl = j["replan"]["plans"][0];
  for (const auto& rep : pl["replicas"])
    for (const auto& st : rep["stages"]) {
      EXPECT_NE(st["node"], "h1");
      if (st["node"] == "a0") {
        for (const auto& d : st["devices"])
          EXPECT_NE(d.get<int>(), 3);
      }
    }
  auto text = run_process(plan_args({"--lose", "h1"}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("after losing h1: re-planned in "), std::string::npos) << text.out;
}

TEST(rekindle_plan, bad_file_exits_2_and_names_the_place) {
  testing::temp_dir dir;
  auto path = dir.write("cluster.toml", "[types.a100]\npreset = \"a100-80\"\n[[nodes]]\nname = \"a\"\ntype = \"a100\"\n"
                                        "devices = 4\n[netwerk]\nbandwidth = \"25GB/s\"\n");
  auto r = run_process({rekindle_bin(), "plan", "--cluster", path.string(), "--model", example("gpt-1.3b.toml")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("2 errors in the input; nothing was planned"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(path.string() + ":2:10: types.a100.preset: unknown preset 'a100-80' (did you mean 'a100-80gb'?)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find(path.string() + ":7:2: netwerk: unknown table or key (did you mean 'network'?)"),
            std::string::npos) << r.err;
}

TEST(rekindle_plan, bad_command_lines_exit_2) {
  auto missing = run_process({rekindle_bin(), "plan", "--cluster", example("mixed-cluster.toml")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--model is required"), std::string::npos) << missing.err;
  auto lose = run_process(plan_args({"--lose", "h7"}));
  EXPECT_EQ(lose.exit_code, 2);
  EXPECT_NE(lose.err.find("--lose h7: unknown node 'h7' (did you mean 'h0'?)"), std::string::npos) << lose.err;
  auto unreadable = run_process({rekindle_bin(), "plan", "--cluster", "/nonexistent/c.toml", "--model", example("gpt-1.3b.toml")});
  EXPECT_EQ(unreadable.exit_code, 2);
  EXPECT_NE(unreadable.err.find("/nonexistent/c.toml: cannot read file: No such file or directory"), std::string::npos);
  auto nothing = run_process({rekindle_bin()});
  EXPECT_EQ(nothing.exit_code, 2);
  auto huge = run_process(plan_args({"--search", "exhaustive"}));
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.err.find("would need more than 50000000 evaluations; use the fast search"), std::string::npos)
      << huge.err;
  EXPECT_EQ(huge.err.find("no plan fits"), std::string::npos) << huge.err;
}

TEST(rekindle_plan, no_feasible_plan_exits_3_with_the_reason) {
  testing::temp_dir dir;
  auto cluster = dir.write("small.toml", "[types.t]\npreset = \"l4\"\n[[nodes]]\nname = \"n\"\ntype = \"t\"\ndevices = 2\n");
  auto model = dir.write("big.toml", "[model]\nlayers = 48\nhidden = 8192\nheads = 64\nseq_len = 2048\nvocab = 50257\n"
                                     "[training]\nglobal_batch = 64\n");
  auto r = run_process({rekindle_bin(), "plan", "--cluster", cluster.string(), "--model", model.string()});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("rekindle plan: no plan fits: the model's 39.09 B parameters need at least 655.3 GiB") , std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the cluster's 2 devices have"), std::string::npos) << r.err;
}

TEST(rekindle_plan, evaluate_scores_the_plans_of_an_earlier_run_and_gets_the_same_predictions) {
  testing::temp_dir dir;
  auto searched = run_process(plan_args({"--json", "--top", "3"}));
  ASSERT_EQ(searched.exit_code, 0) << searched.err;
  const auto file = dir.write("plans.json", searched.out);
  auto scored = run_process(plan_args({"--evaluate", file.string(), "--json"}));
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  const auto before = nlohmann::json::parse(searched.out);
  const auto after = nlohmann::json::parse(scored.out);
  EXPECT_FALSE(after.contains("search")) << "nothing was searched";
  EXPECT_EQ(after["evaluated"], file.string());
  ASSERT_EQ(after["plans"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(after["plans"][i]["shape"], before["plans"][i]["shape"]);
    EXPECT_NEAR(after["plans"][i]["step_time"].get<double>(), before["plans"][i]["step_time"].get<double>(),
                1e-9 * before["plans"][i]["step_time"].get<double>());
  }
}

TEST(rekindle_plan, evaluate_a_hand_written_plan_term_by_term_or_say_why_it_does_not_fit) {
  testing::temp_dir dir;
  // Two replicas of two stages, 8 layers on two A100s and 16 on one H100; devices left to the planner.
  const auto mine = dir.write("mine.json", R"({"micro_batch_size": 2,
    "stages": [{"layers": 8, "tensor": 2}, {"layers": 16}],
    "replicas": [{"stages": [{"node": "a0"}, {"node": "h0"}]}, {"stages": [{"node": "a1"}, {"node": "h1"}]}]})");
  auto r = run_process(plan_args({"--evaluate", mine.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("evaluated 1 plan from " + mine.string() + " (nothing searched"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan 1: d=2 p=2 t=[2,1] b=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stages: 0: layers 0-7 (8), tensor 2; 1: layers 8-23 (16), tensor 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(the last to finish): compute "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory per device"), std::string::npos) << r.out;
  // Every layer on one device, micro-batches of 8, nothing recomputed: past an A100's 80 GB.
  const auto big = dir.write("big.json", R"({"micro_batch_size": 8, "recompute": false,
    "stages": [{"layers": 24}], "replicas": [{"stages": [{"node": "a0"}]}]})");
  auto too_big = run_process(plan_args({"--evaluate", big.string()}));
  EXPECT_EQ(too_big.exit_code, 3) << too_big.out << too_big.err;
  EXPECT_TRUE(too_big.out.empty()) << too_big.out;
  EXPECT_NE(too_big.err.find("rekindle plan: " + big.string() + ": the plan does not fit: "), std::string::npos)
      << too_big.err;
  // A misspelt node: bad input, named by its field; --lose needs a search.
  const auto typo = dir.write("typo.json", R"({"stages": [{"layers": 24}], "replicas": [{"stages": [{"node": "h9"}]}]})");
  auto bad = run_process(plan_args({"--evaluate", typo.string()}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find(typo.string() + ": replicas[0].stages[0].node: unknown node 'h9' (did you mean 'h0'?)"),
            std::string::npos) << bad.err;
  auto both = run_process(plan_args({"--evaluate", typo.string(), "--lose", "h0"}));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("cannot be given with --evaluate"), std::string::npos) << both.err;
  auto missing = run_process(plan_args({"--evaluate", (dir.path() / "none.json").string()}));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("none.json: cannot read plan file"), std::string::npos) << missing.err;
}

TEST(rekindle_plan, help_lists_the_options) {
  auto r = run_process({rekindle_bin(), "plan", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* opt :
       {"--cluster", "--model", "--json", "--explain", "--top", "--search", "--lose", "--evaluate", "Exit status: 0"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt << "\n" << r.out;
  auto top = run_process({rekindle_bin(), "--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("plan"), std::string::npos);
  auto version = run_process({rekindle_bin(), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("rekindle 0."), std::string::npos);
}

}  // namespace
}  // namespace rekindle
