// Micro-batch shares on a real cluster: a rank slowed 2x gets a smaller share planned from the
// measured speeds, applied through a new epoch without restarting a process; configured node
// speeds plan the shares from the start and again when a spare takes over a lost node. How much
// faster the planned shares train is measured by bench/live-shares.

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "tests/support/cluster.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

std::vector<unsigned> shares_of(const nlohmann::json& status) {
  std::vector<unsigned> out;
  for (const auto& r : status.value("ranks", nlohmann::json::array()))
    out.push_back(r["micro_batches"].is_number() ? r["micro_batches"].get<unsigned>() : 0u);
  return out;
}

bool has_event(const testing::local_cluster& c, const std::string& kind) {
  const auto r = c.admin({"events"});
  return r.out.find(kind) != std::string::npos;
}

TEST(shares, a_rank_slowed_2x_gets_a_smaller_measured_share_without_a_restart) {
  // 16 micro-batches a step over 2 ranks, one per node, each with a core of its own as a rank has
  // its device (on this 2-core machine; 4 ranks would share the cores, and a slowed rank's idle
  // time would go to the others), and a model wide enough that compute dominates a step.
  testing::local_cluster c{{.ranks_per_node = 1, .steps = 100000000, .persist_every = 0, .global_batch = 32,
                            .micro_batch = 2, .width = 128}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(20, 120s)) << c.log("n0");
  EXPECT_EQ(shares_of(c.status()), (std::vector<unsigned>{8, 8}));
  auto r = c.admin({"slow", "rank", "1", "2", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::this_thread::sleep_for(2s);  // the measured speeds follow the slowed rank
  r = c.admin({"rebalance", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << c.log("n0");
  EXPECT_NE(r.out.find("micro-batches per rank"), std::string::npos) << r.out;
  ASSERT_TRUE(c.wait_for([](const nlohmann::json& s) { return s.value("epoch", 0) >= 2 && s.value("state", "") == "running"; }, 60s))
      << c.log("n0");
  const auto s = c.status();
  const auto shares = shares_of(s);
  ASSERT_EQ(shares.size(), 2u) << s.dump(2);
  EXPECT_EQ(shares[0] + shares[1], 16u) << "the global batch stays";
  EXPECT_LT(shares[1], shares[0]) << "the slowed rank gets fewer: " << s.dump(2);
  EXPECT_EQ(s["ranks"][1]["restarts"], 0) << "no process restarted";
  // It trains on with them (how much faster is for bench/live-shares to say, not a test).
  ASSERT_TRUE(c.wait_step(s["step"].get<std::uint64_t>() + 20, 60s)) << c.log("n0");
  EXPECT_EQ(shares_of(c.status()), shares);
  EXPECT_TRUE(has_event(c, "shares")) << c.admin({"events"}).out;
  // Back to the configured speeds (all 1): equal shares again, in a new epoch.
  const auto epoch = c.status()["epoch"].get<int>();
  r = c.admin({"rebalance", "speeds", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(c.wait_for(
      [&](const nlohmann::json& st) { return st.value("epoch", 0) > epoch && st.value("state", "") == "running"; }, 60s))
      << c.log("n0");
  EXPECT_EQ(shares_of(c.status()), (std::vector<unsigned>{8, 8}));
  // Nothing to change: the epoch stays.
  r = c.admin({"rebalance", "equal", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("stay"), std::string::npos) << r.out;
  r = c.admin({"rebalance", "fastest", "--yes"});
  EXPECT_EQ(r.exit_code, 2) << "not a way to share: " << r.out << r.err;
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
}

TEST(shares, configured_speeds_plan_the_shares_and_again_when_a_spare_replaces_a_lost_node) {
  testing::local_cluster c{{.spare = true, .steps = 100000000, .persist_every = 0, .global_batch = 32, .micro_batch = 2,
                            .balance = "speeds", .speeds = {{"n1", 0.5}}}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(20, 120s)) << c.log("n0");
  auto s = c.status();
  EXPECT_EQ(s["balance"], "speeds");
  const auto before = shares_of(s);
  ASSERT_EQ(before.size(), 4u);
  EXPECT_EQ(std::accumulate(before.begin(), before.end(), 0u), 16u);
  EXPECT_GT(before[0], before[2]) << "n1's ranks are half as fast: " << s.dump(2);
  EXPECT_GT(before[1], before[3]) << s.dump(2);
  // n1 is lost; the spare (speed 1) takes its ranks: the shares are planned again, equal now.
  ASSERT_EQ(c.admin({"fail", "node", "n1", "--yes"}).exit_code, 0);
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& st) {
        if (st.value("epoch", 0) < 2 || st.value("state", "") != "running")
          return false;
        for (const auto& r : st["ranks"])
          if (r.value("node", "") == "n1")
            return false;
        return true;
      },
      120s))
      << c.log("n0");
  ASSERT_TRUE(c.wait_step(c.status()["step"].get<std::uint64_t>() + 10, 60s)) << c.log("n0");
  EXPECT_EQ(shares_of(c.status()), (std::vector<unsigned>{4, 4, 4, 4})) << c.status().dump(2);
  EXPECT_TRUE(has_event(c, "shares"));
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
}

}  // namespace
}  // namespace rekindle
