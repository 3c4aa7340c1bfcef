// A real cluster on loopback: two rekindled daemons, four worker processes, RocksDB on disk.

#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

TEST(cluster, a_job_trains_to_the_end_and_every_process_exits) {
  testing::local_cluster c{{.steps = 60}};
  c.start_all();
  const auto report = c.wait_done(180s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  EXPECT_EQ(report["state"], "completed");
  EXPECT_EQ(report["step"], 60);
  EXPECT_EQ(report["epoch"], 1);
  ASSERT_EQ(report["losses"].size(), 60u);
  // The built-in corpus is learnable: the loss falls from ln(256).
  EXPECT_NEAR(report["losses"][0].get<double>(), 5.55, 0.3);
  EXPECT_LT(testing::final_loss(report), report["losses"][0].get<double>() - 0.5);
  EXPECT_EQ(report["recoveries"].size(), 0u);
  for (const auto& n : c.node_names()) {
    auto st = c.wait_node(n, 60s);
    ASSERT_TRUE(st.has_value()) << n << " did not exit";
    EXPECT_EQ(*st, 0) << c.log(n);
  }
}

TEST(cluster, status_and_bad_admin_requests_through_the_shell) {
  testing::local_cluster c{{.steps = 2000}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  auto r = c.admin({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["state"], "running");
  EXPECT_EQ(s["world"], 4);
  ASSERT_EQ(s["nodes"].size(), 2u);
  EXPECT_EQ(s["nodes"][1]["name"], "n1");
  EXPECT_TRUE(s["nodes"][1]["up"].get<bool>());
  // Once training runs, each node starts a standby worker and reports it warm.
  EXPECT_TRUE(c.wait_for(
      [](const nlohmann::json& st) {
        for (const auto& n : st["nodes"])
          if (!n.value("standby_ready", false))
            return false;
        return true;
      },
      120s))
      << c.status().dump(2);
  r = c.admin({"kill", "rank", "7", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rank 7 is not in the job (world 4)"), std::string::npos) << r.err;
  r = c.admin({"kill", "rank", "1"});
  EXPECT_EQ(r.exit_code, 2) << "destructive commands need --yes";
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto report = c.wait_done(60s);
  ASSERT_FALSE(report.is_null());
  EXPECT_EQ(report["state"], "stopped");
}

TEST(cluster, the_shell_shows_ranks_nodes_events_and_takes_a_checkpoint_now) {
  // No periodic checkpoints: the one on disk comes from the operator's request.
  testing::local_cluster c{{.steps = 3000, .persist_every = 1000000}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  auto r = c.admin({"status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("job test  RUNNING  epoch 1  step "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/3000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no failure so far"), std::string::npos) << r.out;

  r = c.admin({"ranks"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank  node  state"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n3     n1    "), std::string::npos) << r.out;
  r = c.admin({"ranks", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 4u);

  r = c.admin({"nodes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("n1    yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2,3"), std::string::npos) << "n1's ranks: " << r.out;

  r = c.admin({"events", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> events;
  std::istringstream lines{r.out};
  for (std::string line; std::getline(lines, line);)
    events.push_back(nlohmann::json::parse(line));
  ASSERT_GE(events.size(), 3u) << r.out;
  EXPECT_EQ(events[0]["kind"], "job_created");
  EXPECT_EQ(events[0]["seq"], 1);
  const auto last = events.back()["seq"].get<std::uint64_t>();
  r = c.admin({"events", "--since", std::to_string(last)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("job_created"), std::string::npos) << "only events after --since: " << r.out;
  r = c.admin({"events", "--since", "x"});
  EXPECT_EQ(r.exit_code, 2) << "a bad number is bad input";

  r = c.admin({"checkpoint", "now"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint requested"), std::string::npos) << r.out;
  EXPECT_TRUE(c.wait_for(
      [](const nlohmann::json& st) {
        return st.contains("checkpoint") && st["checkpoint"]["last_step"].is_number();
      },
      120s))
      << c.log("n0");
  r = c.admin({"events"});
  EXPECT_NE(r.out.find("checkpoint_committed"), std::string::npos) << r.out;
  auto verify = c.admin({"recoveries"});
  EXPECT_EQ(verify.exit_code, 0) << verify.err;
  EXPECT_NE(verify.out.find("no failure so far"), std::string::npos) << verify.out;
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(cluster, pause_resume_scale_and_drain_from_the_shell) {
  testing::local_cluster c{{.steps = 100000, .persist_every = 0}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto state_is = [&](const char* state) {
    return c.wait_for([&](const nlohmann::json& s) { return s.value("state", "") == state; }, 60s);
  };
  auto r = c.admin({"resume"});
  EXPECT_EQ(r.exit_code, 3) << "nothing to resume";
  EXPECT_NE(r.err.find("not paused"), std::string::npos) << r.err;
  r = c.admin({"pause"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("paused at step"), std::string::npos) << r.out;
  ASSERT_TRUE(state_is("paused")) << c.status().dump(2);
  const auto paused_at = c.status()["step"].get<std::uint64_t>();
  std::this_thread::sleep_for(1s);
  EXPECT_LE(c.status()["step"].get<std::uint64_t>(), paused_at + 1) << "a paused job does not train";
  r = c.admin({"resume"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(state_is("running")) << c.status().dump(2);

  r = c.admin({"drain", "node", "n9", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no node 'n9'"), std::string::npos) << r.err;
  r = c.admin({"drain", "node", "n0", "--yes"});
  EXPECT_EQ(r.exit_code, 3) << "the supervisor's own node";
  r = c.admin({"drain", "node", "n1"});
  EXPECT_EQ(r.exit_code, 2) << "drain needs --yes";
  r = c.admin({"drain", "node", "n1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world 4 → 2 ranks"), std::string::npos) << "no spare: the world shrinks\n" << r.out;
  EXPECT_TRUE(c.wait_for(
      [](const nlohmann::json& s) {
        for (const auto& rank : s["ranks"])
          if (rank["node"] != "n0")
            return false;
        return s.value("world", 0) == 2 && s.value("state", "") == "running";
      },
      60s))
      << "every rank left n1: " << c.status().dump(2);

  r = c.admin({"scale", "4", "--yes"});
  EXPECT_EQ(r.exit_code, 3) << "n1 is drained: n0 holds 2 ranks\n" << r.out;
  EXPECT_NE(r.err.find("cannot scale to 4 ranks"), std::string::npos) << r.err;
  r = c.admin({"scale", "two", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("usage: scale RANKS"), std::string::npos) << r.err;
  r = c.admin({"scale", "1"});
  EXPECT_EQ(r.exit_code, 2) << "scale needs --yes";
  r = c.admin({"scale", "1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world 2 → 1 ranks"), std::string::npos) << r.out;
  EXPECT_TRUE(c.wait_for([](const nlohmann::json& s) { return s.value("world", 0) == 1 && s.value("state", "") == "running"; },
                         60s))
      << c.status().dump(2);
  ASSERT_TRUE(c.wait_step(c.status()["step"].get<std::uint64_t>() + 5, 60s)) << "training goes on\n" << c.log("n0");
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace rekindle
