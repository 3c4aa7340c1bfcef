// End to end: `rekindle trace convert` on the public InfiniteHBD record, `rekindle simulate` on the
// result, and the program's exit codes.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using testing::run_process;

std::string rekindle_bin() { return (testing::bin_dir() / "rekindle").string(); }

// The record lives beside the repository (../shared/data), never inside it.
std::filesystem::path infinitehbd_record() {
  return (testing::source_dir() / ".." / "shared" / "data" / "infinitehbd" / "fault_trace.json").lexically_normal();
}

TEST(rekindle_trace, converts_infinitehbd_and_simulates_it) {
  const auto record = infinitehbd_record();
  if (!std::filesystem::exists(record))
    GTEST_SKIP() << "the InfiniteHBD record is not at " << record << " (it is read from ../shared/data, not kept in the repository)";
  testing::temp_dir dir;
  const auto trace = (dir.path() / "hbd.jsonl").string();
  // 256 nodes of 8: the record's servers map one to one; its 349 days into 54.
  const std::vector<std::string> cluster{"--nodes", "256", "--ranks-per-node", "8"};
  std::vector<std::string> convert{rekindle_bin(), "trace", "convert", "infinitehbd", record.string(), "--time-scale",
                                   std::to_string(54.0 / 349.0), "--out", trace};
  convert.insert(convert.end(), cluster.begin(), cluster.end());
  auto r = run_process(convert);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("servers onto 256 nodes × 8 ranks"), std::string::npos) << r.err;
  const auto text = testing::read_file(trace);
  const auto events = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) - 1;  // less the header
  ASSERT_GT(events, 100u);

  std::vector<std::string> check{rekindle_bin(), "trace", "check", trace};
  check.insert(check.end(), cluster.begin(), cluster.end());
  r = run_process(check);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("a valid trace of " + std::to_string(events) + " events over 54.0 days"), std::string::npos) << r.out;

  std::vector<std::string> simulate{rekindle_bin(), "simulate", trace, "--compare", "--json"};
  simulate.insert(simulate.end(), cluster.begin(), cluster.end());
  r = run_process(simulate);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << r.out;
  EXPECT_EQ(doc["trace"]["events"].get<std::size_t>(), events);
  EXPECT_NEAR(doc["trace"]["duration_s"].get<double>(), 54.0 * 86400, 86400);
  ASSERT_EQ(doc["results"].size(), 2u);
  for (const auto& result : doc["results"]) {
    const double ratio = result["ratio"].get<double>();
    EXPECT_GT(ratio, 0.0) << result["policy"];
    EXPECT_LE(ratio, 1.0) << result["policy"];
    EXPECT_EQ(result["faults"].get<std::size_t>(), events);
    EXPECT_GT(result["hit"].get<std::size_t>(), events / 2) << "most faults hit a node the job uses";
    EXPECT_GT(result["recoveries"].get<std::size_t>(), 0u);
    // Every simulated second is useful or lost to something.
    double accounted = result["useful_s"].get<double>();
    for (const auto& [category, seconds] : result["lost_s"].items())
      accounted += seconds.get<double>();
    EXPECT_NEAR(accounted, result["wall_s"].get<double>(), 1e-6 * result["wall_s"].get<double>());
  }
  EXPECT_GT(doc["results"][0]["ratio"].get<double>(), doc["results"][1]["ratio"].get<double>())
      << "in-place restart from memory beats restarting everything from disk";
}

TEST(rekindle_trace, bad_trace_exits_2_with_the_line) {
  testing::temp_dir dir;
  const auto path = dir.write("bad.jsonl", "{\"rekindle_trace\": 1, \"duration\": 100}\n"
                                           "{\"at\": 5, \"kind\": \"node_dwn\", \"node\": \"n0\"}\n"
                                           "{\"at\": 6, \"kind\": \"crash\", \"rank\": 99}\n");
  auto r = run_process({rekindle_bin(), "simulate", path.string(), "--nodes", "2", "--ranks-per-node", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find(path.string() + ":2: kind: 'node_dwn' is not a fault kind (did you mean 'node_down'?)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(path.string() + ":3: rank: rank 99 is outside the cluster's world of 8 ranks (0-7)"), std::string::npos)
      << r.err;
}

TEST(rekindle_trace, generate_is_deterministic_and_help_is_true) {
  std::vector<std::string> generate{rekindle_bin(), "trace", "generate", "--nodes", "32", "--ranks-per-node", "8",
                                    "--rate", "0.01", "--days", "3", "--seed", "4"};
  auto a = run_process(generate);
  auto b = run_process(generate);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out.find("{\"rekindle_trace\":1"), std::string::npos);
  auto help = run_process({rekindle_bin(), "simulate", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const auto* flag : {"--cluster", "--nodes", "--ranks-per-node", "--job", "--set", "--compare", "--sweep", "--json"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  auto wrong = run_process({rekindle_bin(), "simulate", "--no-such-flag"});
  EXPECT_EQ(wrong.exit_code, 2);
  auto none = run_process({rekindle_bin()});
  EXPECT_EQ(none.exit_code, 2);
}

}  // namespace
}  // namespace rekindle
