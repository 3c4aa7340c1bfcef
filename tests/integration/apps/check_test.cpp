// The pre-flight node check on a real cluster: every node measured before it is placed, and
// `rekindle check` quarantining a node slowed by a drill, its ranks moved to the spare.

#include <gtest/gtest.h>

#include <sstream>

#include "tests/support/cluster.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

std::string node_check(const nlohmann::json& status, const std::string& node) {
  for (const auto& n : status.value("nodes", nlohmann::json::array()))
    if (n.value("name", "") == node)
      return n.value("check", "");
  return "(no node)";
}

bool ranks_avoid(const nlohmann::json& status, const std::string& node) {
  for (const auto& r : status.value("ranks", nlohmann::json::array()))
    if (r.value("node", "") == node)
      return false;
  return true;
}

TEST(check, every_node_passes_preflight_and_a_node_slowed_by_a_drill_is_quarantined_until_it_passes_again) {
  testing::local_cluster c{{.spare = true, .steps = 100000, .persist_every = 0}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(3, 120s)) << c.log("n0");
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) {
        return node_check(s, "n0") == "passed" && node_check(s, "n1") == "passed" && node_check(s, "s0") == "passed";
      },
      60s))
      << c.status().dump(2);

  auto r = c.admin({"check", "--nodes", "n9"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no node 'n9'"), std::string::npos) << r.err;
  r = c.admin({"check", "--drill-slow", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--drill-slow needs --nodes"), std::string::npos) << r.err;

  // n1 measures as hardware five times slower would: quarantined, its ranks go to the spare.
  r = c.admin({"check", "--nodes", "n1", "--drill-slow", "5"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("QUARANTINED: compute"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the fleet median"), std::string::npos) << r.out;
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) {
        return node_check(s, "n1") == "quarantined" && ranks_avoid(s, "n1") && !ranks_avoid(s, "s0") &&
               s.value("world", 0) == 4 && s.value("state", "") == "running";
      },
      90s))
      << c.status().dump(2);
  r = c.admin({"nodes"});
  EXPECT_NE(r.out.find("quarantined"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("n1: compute"), std::string::npos) << r.out;
  r = c.admin({"events", "--json"});
  std::istringstream lines{r.out};
  bool logged = false;
  for (std::string line; std::getline(lines, line);) {
    const auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == "node_quarantined" && e.value("node", "") == "n1")
      logged = e.dump().find("compute_median") != std::string::npos;
  }
  EXPECT_TRUE(logged) << r.out;
  ASSERT_TRUE(c.wait_step(c.status()["step"].get<std::uint64_t>() + 3, 60s)) << "training goes on\n" << c.log("n0");

  // A check of every node without the drill: n1 passes and is released (a spare from now on).
  r = c.admin({"check", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.value("quarantined", -1), 0);
  EXPECT_EQ(j["nodes"].size(), 3u);
  EXPECT_TRUE(c.wait_for([](const nlohmann::json& s) { return node_check(s, "n1") == "passed"; }, 30s))
      << c.status().dump(2);
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace rekindle
