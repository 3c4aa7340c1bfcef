// stragglers.action on a real cluster: a rank slowed by a drill is named, and with "replace" its
// node is quarantined and its ranks move to the spare.

#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

TEST(stragglers, a_straggler_s_node_is_replaced_by_the_spare) {
  testing::local_cluster c{{.spare = true,
                            .steps = 100000,
                            .persist_every = 0,
                            .extra = "\n[stragglers]\naction = \"replace\"\n"}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(3, 120s)) << c.log("n0");
  // Rank 2 runs on n1; slowed 4x, it is named within a window and n1 hands its ranks to s0.
  // Refused (exit 3) while an epoch starts; asked again until the job trains.
  testing::process_result r;
  for (int attempt = 0; attempt < 60; ++attempt) {
    r = c.admin({"slow", "rank", "2", "4", "--yes"});
    if (r.exit_code != 3)
      break;
    std::this_thread::sleep_for(1s);
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto on = [](const nlohmann::json& s, const std::string& node) {
    for (const auto& rank : s.value("ranks", nlohmann::json::array()))
      if (rank.value("node", "") == node)
        return true;
    return false;
  };
  ASSERT_TRUE(c.wait_for(
      [&](const nlohmann::json& s) {
        return !on(s, "n1") && on(s, "s0") && s.value("world", 0) == 4 && s.value("state", "") == "running";
      },
      120s))
      << c.status().dump(2) << c.log("n0");
  r = c.admin({"events", "--json"});
  std::istringstream lines{r.out};
  bool named = false, quarantined = false;
  for (std::string line; std::getline(lines, line);) {
    const auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object())
      continue;
    if (e.value("kind", "") == "straggler")
      named = named || e.value("rank", -1) == 2;
    if (e.value("kind", "") == "node_quarantined" && e.value("node", "") == "n1")
      quarantined = e.dump().find("straggler") != std::string::npos;
  }
  EXPECT_TRUE(named) << r.out;
  EXPECT_TRUE(quarantined) << r.out;
  for (const auto& n : c.status()["nodes"]) {
    if (n["name"] == "n1") {
      EXPECT_EQ(n.value("check", ""), "quarantined") << n.dump();
    }
  }
  ASSERT_TRUE(c.wait_step(c.status()["step"].get<std::uint64_t>() + 3, 60s)) << "training goes on\n" << c.log("n0");
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace rekindle
