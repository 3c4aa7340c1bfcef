// The trace commands behind `rekindle trace ...` and `rekindle simulate`, through their streams.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "tests/support/temp_dir.hpp"
#include "trace/commands.hpp"

namespace rekindle::trace {
namespace {

struct outcome {
  int code = -1;
  std::string out;
  std::string err;
};

template <class Options, class Command>
outcome run(Command command, const Options& o) {
  std::ostringstream out, err;
  outcome r;
  r.code = command(o, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

cluster_options compact(std::uint32_t nodes, std::uint32_t width) {
  cluster_options c;
  c.nodes = nodes;
  c.ranks_per_node = width;
  return c;
}

constexpr std::string_view small_trace =
    "{\"rekindle_trace\": 1, \"duration\": 20000}\n"
    "{\"at\": 1000, \"kind\": \"crash\", \"rank\": 3}\n"
    "{\"at\": 5000, \"kind\": \"node_down\", \"node\": \"n1\", \"repair\": 3000}\n"
    "{\"at\": 9000, \"kind\": \"hang\", \"rank\": 6}\n";

TEST(trace_commands, generate_then_check) {
  testing::temp_dir dir;
  generate_command_options g;
  g.cluster = compact(8, 4);
  g.rate = 0.05;
  g.days = 5;
  g.seed = 9;
  g.out = (dir.path() / "g.jsonl").string();
  auto r = run(generate_command, g);
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.err.find("faults on 8 nodes × 4 ranks (32 ranks) over 5.0 days"), std::string::npos) << r.err;
  check_options c;
  c.input = g.out;
  c.cluster = compact(8, 4);
  r = run(check_command, c);
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find("a valid trace of"), std::string::npos);
  c.cluster = compact(2, 4);
  r = run(check_command, c);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("; the trace was not used"), std::string::npos);
  g.mix = "gpu=1,disco=2";
  EXPECT_EQ(run(generate_command, g).code, exit_bad_input);
}

TEST(trace_commands, simulate_prints_a_breakdown_and_json) {
  testing::temp_dir dir;
  simulate_options s;
  s.input = dir.write("t.jsonl", small_trace).string();
  s.cluster = compact(4, 2);
  auto r = run(simulate_command, s);
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find("8 accelerators · 0.2 days · 3 faults (1 crash, 1 hang, 1 node_down)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("policy: in-place restart + memory snapshots"), std::string::npos);
  EXPECT_NE(r.out.find("  detection"), std::string::npos);
  s.json = true;
  s.compare = true;
  r = run(simulate_command, s);
  ASSERT_EQ(r.code, exit_ok) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_EQ(doc["results"][0]["policy"], "in-place");
  EXPECT_EQ(doc["results"][1]["policy"], "restart-all");
  EXPECT_EQ(doc["trace"]["events"], 3);
  EXPECT_EQ(doc["results"][0]["faults"], 3);
  EXPECT_GT(doc["results"][0]["ratio"].get<double>(), doc["results"][1]["ratio"].get<double>());
  EXPECT_EQ(doc["model"]["step_time"], "5s");
}

TEST(trace_commands, simulate_sweep_finds_the_peak_and_writes_data) {
  testing::temp_dir dir;
  simulate_options s;
  s.input = dir.write("t.jsonl", small_trace).string();
  s.cluster = compact(4, 2);
  s.sweep = "snapshot_every=1,10,100,1000";
  s.data = (dir.path() / "sweep.dat").string();
  auto r = run(simulate_command, s);
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find("peak (in-place): snapshot_every = "), std::string::npos) << r.out;
  const auto data = testing::read_file(s.data);
  EXPECT_NE(data.find("\n1000 0."), std::string::npos) << data;
  EXPECT_EQ(std::count(data.begin(), data.end(), '\n'), 6) << "two comment lines and four points";
}

TEST(trace_commands, simulate_bad_input_exits_2_and_says_why) {
  testing::temp_dir dir;
  simulate_options s;
  s.input = dir.write("t.jsonl", small_trace).string();
  s.cluster = compact(4, 2);
  s.set = {"step_tim=4s"};
  auto r = run(simulate_command, s);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("did you mean 'step_time'?"), std::string::npos) << r.err;
  s.set = {};
  s.policy = "in-plaice";
  r = run(simulate_command, s);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("(did you mean 'in-place'?)"), std::string::npos) << r.err;
  s.policy = "in-place";
  s.cluster = compact(1, 2);
  r = run(simulate_command, s);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("t.jsonl:3: node: 'n1' is not a node of the cluster"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  s.cluster = {};
  r = run(simulate_command, s);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("no cluster"), std::string::npos) << r.err;
  s.cluster = compact(4, 2);
  s.job = dir.write("m.toml", "snapshot_every = 0\n").string();
  r = run(simulate_command, s);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("m.toml:1:18: snapshot_every: must be at least 1, got 0"), std::string::npos) << r.err;
}

TEST(trace_commands, convert_names_a_bad_format) {
  convert_options c;
  c.format = "infinitehdb";
  c.input = "whatever.json";
  c.cluster = compact(4, 2);
  auto r = run(convert_command, c);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("(did you mean 'infinitehbd'?)"), std::string::npos) << r.err;
  c.format = "infinitehbd";
  r = run(convert_command, c);
  EXPECT_EQ(r.code, exit_bad_input);
  EXPECT_NE(r.err.find("whatever.json: cannot read record: No such file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rekindle::trace
