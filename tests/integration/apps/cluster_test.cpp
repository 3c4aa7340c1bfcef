// A real cluster on loopback: two rekindled daemons, four worker processes, RocksDB on disk.

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/pty.hpp"

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

TEST(cluster, a_ranks_step_time_is_the_loops_period_with_the_snapshot_in_it) {
  // A snapshot every step that stops the step (overlap off), of a state that takes milliseconds
  // to copy, and steps of one micro-batch so the copy is a good part of each step: the step times of the steps between two readings of the status add up to the wall
  // time between them, snapshots included. The times of exactly those steps are summed (the
  // report keeps every step's), so a machine whose speed changes during the window moves both
  // sides alike; only the staleness of the two readings (a tick and a step each) is slack.
  testing::local_cluster c{{.nodes = 1,
                            .ranks_per_node = 1,
                            .steps = 1000000,
                            .snapshot_every = 1,
                            .persist_every = 0,
                            .overlap = false,
                            .global_batch = 1,
                            .micro_batch = 1,
                            .width = 256}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(20, 120s)) << c.log("n0");
  // The first reading of a new step: the status is read until its step changes, so each end of
  // the window is as fresh as the status file can be.
  const auto reading = [&] {
    const auto before = c.status().value("step", std::uint64_t{0});
    for (;;) {
      const auto s = c.status();
      const auto step = s.is_null() ? before : s.value("step", before);
      if (step != before) {
        std::vector<double> stalls;
        if (!s["ranks"].empty())
          stalls.push_back(s["ranks"][0].value("snapshot_stall_s", 0.0));
        return std::tuple{step, std::chrono::steady_clock::now(), stalls};
      }
      std::this_thread::sleep_for(2ms);
    }
  };
  const auto [s0, t0, stall0] = reading();
  std::this_thread::sleep_for(5s);
  const auto [s1, t1, stall1] = reading();
  const double wall = std::chrono::duration<double>(t1 - t0).count();
  ASSERT_GT(s1, s0 + 20) << c.log("n0");
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
  const auto seconds = c.wait_done(60s)["step_seconds"];
  ASSERT_GE(seconds.size(), s1) << c.log("n0");
  double sum = 0, longest = 0;
  for (auto step = s0 + 1; step <= s1; ++step) {
    const double t = seconds[step - 1].get<double>();
    sum += t;
    longest = std::max(longest, t);
  }
  ASSERT_FALSE(stall1.empty());
  const double stall = stall1.front(), steps = static_cast<double>(s1 - s0);
  EXPECT_GT(stall, 0.0) << "every step takes a snapshot";
  // Left out, the snapshots would take steps x stall from the sum. The slack: the status file is
  // rewritten at the supervisor's tick (100 ms, later on a loaded machine) at each end.
  const double slack = 0.05 * wall + 2 * longest + 0.3;
  EXPECT_NEAR(sum, wall, slack) << "steps " << s0 + 1 << ".." << s1 << " count " << sum << " s in " << wall
                                << " s of wall time; snapshot stall " << stall << " s a step, " << steps * stall
                                << " s in all";
}

TEST(cluster, a_nodes_buddy_is_in_another_failure_domain) {
  // Four daemons in two racks, n0 n1 in rack-a and n2 n3 in rack-b: each node's replicas go to
  // the node at its own position in the other rack, not to the next node.
  testing::local_cluster c{{.nodes = 4,
                            .ranks_per_node = 1,
                            .steps = 1000000,
                            .global_batch = 4,
                            .micro_batch = 1,
                            .domains = {{"n0", "rack-a"}, {"n1", "rack-a"}, {"n2", "rack-b"}, {"n3", "rack-b"}}}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(3, 120s)) << c.log("n0");
  const auto st = c.status();
  std::map<std::string, std::string> buddy, domain;
  for (const auto& n : st["nodes"]) {
    buddy[n["name"]] = n.value("buddy", "");
    domain[n["name"]] = n.value("domain", "");
  }
  EXPECT_EQ(buddy["n0"], "n2") << st.dump();
  EXPECT_EQ(buddy["n1"], "n3");
  EXPECT_EQ(buddy["n2"], "n0");
  EXPECT_EQ(buddy["n3"], "n1");
  EXPECT_EQ(domain["n1"], "rack-a");
  auto r = c.admin({"nodes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("buddy  domain  ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("n3     rack-a  1"), std::string::npos) << "n1 (rank 1) keeps its replicas on n3: " << r.out;
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
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
  EXPECT_NE(r.err.find("rank 7 is not in the job (world 4: ranks 0-3)"), std::string::npos) << r.err;
  r = c.admin({"kill", "rank", "1"});
  EXPECT_EQ(r.exit_code, 2) << "destructive commands need --yes";
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto report = c.wait_done(60s);
  ASSERT_FALSE(report.is_null());
  EXPECT_EQ(report["state"], "stopped");
}

TEST(cluster, a_status_file_the_disk_does_not_take_holds_up_neither_training_nor_the_shell) {
  // The status file's temporary name is a FIFO nobody reads: replacing status.json blocks there
  // for good, as on a disk that does not answer (a rename behind a journal that flushed another
  // program's data once took 5.6 s here, and the supervisor handled nothing meanwhile).
  testing::local_cluster c{{.steps = 300}};
  std::filesystem::create_directories(c.data_dir());
  ASSERT_EQ(::mkfifo((c.data_dir() / "status.json.tmp").c_str(), 0600), 0);
  c.start_all();
  // The shell's status comes from the supervisor itself: it answers, and the job trains on.
  std::uint64_t step = 0;
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (step < 100 && std::chrono::steady_clock::now() < until) {
    const auto r = c.admin({"status", "--json"});
    if (r.exit_code == 0)
      step = nlohmann::json::parse(r.out).value("step", std::uint64_t{0});
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_GE(step, 100u) << c.log("n0");
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  EXPECT_EQ(report["state"], "completed");
  EXPECT_EQ(report["step"], 300);
  EXPECT_NE(c.log("n0").find("status.json was not written within"), std::string::npos) << c.log("n0");
  EXPECT_FALSE(std::filesystem::exists(c.data_dir() / "status.json")) << "it was never written";
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
  EXPECT_NE(r.err.find("'two' is not a whole number of ranks from 1 to 1000000"), std::string::npos) << r.err;
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

// Steps every rank finished, from status.json.
std::uint64_t step_of(const testing::local_cluster& c) {
  const auto s = c.status();
  return s.is_null() ? 0 : s.value("step", std::uint64_t{0});
}

TEST(cluster, slow_drill_loss_chart_and_read_only_tokens) {
  // An admin token and a read-only one, beside the configuration.
  testing::local_cluster c{{.steps = 1000000,
                            .persist_every = 0,
                            .extra = "\n[security]\ntoken_file = \"admin.token\"\nreadonly_token_file = \"ro.token\"\n"}};
  const auto dir = c.config().parent_path();
  std::ofstream(dir / "admin.token") << "admin-secret-0123456789abcdef\n";
  std::ofstream(dir / "ro.token") << "look-only-0123456789abcdef\n";
  std::ofstream(dir / "wrong.token") << "not-the-token-0123456789abcdef\n";
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto ro = (dir / "ro.token").string();

  // A read-only token looks but changes nothing; a wrong token is refused outright.
  auto r = c.admin({"status", "--json", "--token-file", ro});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::vector<std::string>> changes{
      {"kill", "rank", "1", "--yes"}, {"hang", "rank", "1", "--yes"},  {"slow", "rank", "1", "2", "--yes"},
      {"fail", "node", "n1", "--yes"}, {"drain", "node", "n1", "--yes"}, {"scale", "2", "--yes"},
      {"partition", "n0", "n1", "--yes"}, {"rebalance", "--yes"},
      {"pause"},                       {"resume"},                       {"checkpoint", "now"},
      {"stop", "--yes"}};
  for (auto args : changes) {
    args.insert(args.end(), {"--token-file", ro});
    r = c.admin(args);
    EXPECT_EQ(r.exit_code, 3) << args[0] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("this token is read-only"), std::string::npos) << args[0] << ": " << r.err;
  }
  r = c.admin({"stop", "--yes", "--token-file", (dir / "wrong.token").string()});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("refused this token"), std::string::npos) << r.err;
  auto s = c.status();
  EXPECT_EQ(s["state"], "running");
  EXPECT_EQ(s["epoch"], 1) << "nothing was changed";
  EXPECT_EQ(s["world"], 4);
  EXPECT_EQ(s["recoveries"].size(), 0u);

  // slow: bad input first, then a 20x slowdown that shows in the step rate, then back to normal.
  r = c.admin({"slow", "rank", "1", "0.5", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'0.5' is not a factor from 1 (back to normal) to 100"), std::string::npos) << r.err;
  r = c.admin({"slow", "rank", "9", "2", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rank 9 is not in the job"), std::string::npos) << r.err;
  r = c.admin({"slow", "rank", "1", "2"});
  EXPECT_EQ(r.exit_code, 2) << "slow needs --yes";
  r = c.admin({"hang", "rank", "x", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'x' is not a rank number"), std::string::npos) << r.err;
  // The slowed rank's compute, as its reports give it, against its peers' (not the step rate: how
  // much of a step compute is depends on the machine and its load).
  const auto compute_ratio = [&] {
    const auto ranks = c.status()["ranks"];
    return ranks[1].value("compute_time_s", 0.0) / std::max(ranks[0].value("compute_time_s", 0.0), 1e-9);
  };
  r = c.admin({"slow", "rank", "1", "20", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("20 times as long"), std::string::npos) << r.out;
  const std::uint64_t slowed_from = step_of(c);
  EXPECT_TRUE(c.wait_for([&](const nlohmann::json& st) { return st.value("step", std::uint64_t{0}) > slowed_from + 5 &&
                                                                 compute_ratio() > 5; },
                         60s))
      << "rank 1 computes 20 times as long: " << c.status()["ranks"].dump();
  // The straggler detector names it, as compute, within its window of steps; and clears it.
  const auto stragglers = [&](const char* want) {
    testing::process_result d;
    const auto deadline = std::chrono::steady_clock::now() + 90s;
    while (std::chrono::steady_clock::now() < deadline) {
      d = c.admin({"diagnose", "stragglers"});
      if (d.out.find(want) != std::string::npos)
        break;
      std::this_thread::sleep_for(500ms);
    }
    return d;
  };
  auto d = stragglers("stragglers now: rank 1");
  EXPECT_NE(d.out.find("stragglers now: rank 1\n"), std::string::npos) << d.out << d.err;
  EXPECT_NE(d.out.find("flagged rank 1 computes"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("its compute, not its link"), std::string::npos) << d.out;
  r = c.admin({"slow", "rank", "1", "1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("normal speed"), std::string::npos) << r.out;
  d = stragglers("stragglers now: none");
  EXPECT_NE(d.out.find("cleared rank 1 computes at the others' pace again"), std::string::npos) << d.out << d.err;
  s = c.status();
  EXPECT_EQ(s["recoveries"].size(), 0u) << "a slow rank is not a failure";

  // loss: the curve as JSON and as a chart.
  r = c.admin({"loss", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto loss = nlohmann::json::parse(r.out);
  ASSERT_GT(loss["steps"].get<std::uint64_t>(), 5u);
  ASSERT_FALSE(loss["points"].empty());
  EXPECT_LE(loss["points"].size(), 80u);
  for (const auto& p : loss["points"]) {
    EXPECT_LE(p["min"].get<double>(), p["loss"].get<double>()) << p;
    EXPECT_LE(p["loss"].get<double>(), p["max"].get<double>()) << p;
  }
  EXPECT_NEAR(loss["points"][0]["max"].get<double>(), 5.55, 0.3) << "the first step's loss, ln(256)";
  r = c.admin({"loss", "--width", "40", "--height", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loss over "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("+----------------------------------------\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1 "), std::string::npos) << r.out;
  r = c.admin({"loss", "--width", "5"});
  EXPECT_EQ(r.exit_code, 2) << "a plot narrower than 10 columns";
  r = c.admin({"stop", "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(cluster, a_partition_loses_the_cut_off_node_to_the_spare_and_the_node_comes_back) {
  testing::local_cluster c{{.spare = true, .steps = 1000000, .persist_every = 0}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  auto r = c.admin({"partition", "n0", "n0", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has no link to itself"), std::string::npos) << r.err;
  r = c.admin({"partition", "n0", "n9", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no node 'n9'"), std::string::npos) << r.err;
  r = c.admin({"partition", "n0", "n1", "--for", "5h", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("from 100ms to 1h, not '5h'"), std::string::npos) << r.err;
  r = c.admin({"partition", "n0", "n1"});
  EXPECT_EQ(r.exit_code, 2) << "partition needs --yes";
  EXPECT_EQ(c.status()["recoveries"].size(), 0u) << "bad input changes nothing";

  // Cut n1 off from the supervisor's node for 4 s: n1 is lost (its heartbeats stop, node timeout
  // 3 s), its ranks move to the spare with their states from n0's memory, and once the network
  // heals n1 joins again as a free node.
  r = c.admin({"partition", "n0", "n1", "--for", "4s", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dropped for 4.00 s"), std::string::npos) << r.out;
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) {
        const auto& recs = s["recoveries"];
        return !recs.empty() && recs[0].value("done", false);
      },
      120s))
      << c.status().dump(2) << c.log("n0");
  auto s = c.status();
  const auto& rec = s["recoveries"][0];
  EXPECT_NE(rec["cause"].get<std::string>().find("node n1 lost"), std::string::npos) << rec.dump();
  EXPECT_NE(rec["source"].get<std::string>().find("buddy memory"), std::string::npos) << rec.dump() << c.log("n0");
  EXPECT_LE(rec["steps_lost"].get<std::uint64_t>(), 20u) << "the ranks stalled at the cut: " << rec.dump();
  EXPECT_EQ(s["world"], 4);
  for (const auto& rank : s["ranks"])
    if (rank["rank"] == 2 || rank["rank"] == 3) {
      EXPECT_EQ(rank["node"], "s0") << s["ranks"].dump(2);
    }
  EXPECT_TRUE(c.wait_for(
      [](const nlohmann::json& st) {
        for (const auto& n : st["nodes"])
          if (n["name"] == "n1")
            return n.value("up", false);
        return false;
      },
      60s))
      << "n1 comes back once the partition heals\n" << c.status().dump(2) << c.log("n1");
  ASSERT_TRUE(c.wait_step(c.status()["step"].get<std::uint64_t>() + 20, 60s)) << "training goes on\n" << c.log("n0");
  r = c.admin({"events"});
  EXPECT_NE(r.out.find("partition n0 n1 for 4.00 s"), std::string::npos) << r.out;

  // Fail the node that took n1's ranks: n1 came back and its ranks had moved away, so it is back in
  // the pool and takes them like a spare; the world keeps its size.
  r = c.admin({"fail", "node", "s0"});
  EXPECT_EQ(r.exit_code, 2) << "fail needs --yes";
  r = c.admin({"fail", "node", "s0", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto st = c.wait_node("s0", 60s);
  ASSERT_TRUE(st.has_value()) << "s0's daemon did not die";
  EXPECT_EQ(*st, 128 + SIGKILL);
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& x) {
        const auto& recs = x["recoveries"];
        return recs.size() == 2 && recs[1].value("done", false) && x.value("state", "") == "running";
      },
      120s))
      << c.status().dump(2) << c.log("n0");
  s = c.status();
  EXPECT_EQ(s["world"], 4) << "the node that came back took s0's ranks";
  EXPECT_NE(s["recoveries"][1]["cause"].get<std::string>().find("node s0 lost"), std::string::npos)
      << s["recoveries"][1].dump();
  for (const auto& rank : s["ranks"])
    if (rank["rank"] == 2 || rank["rank"] == 3) {
      EXPECT_EQ(rank["node"], "n1") << s["ranks"].dump(2);
    }
  ASSERT_TRUE(c.wait_step(s["step"].get<std::uint64_t>() + 10, 60s)) << "training goes on on n1\n" << c.log("n0");
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
}

TEST(cluster, an_unreachable_supervisor_is_retried_with_a_countdown_then_reported) {
  testing::local_cluster c{{}};  // configured, never started
  const auto started = std::chrono::steady_clock::now();
  auto r = c.admin({"status", "--connect", "127.0.0.1:1", "--retries", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("no supervisor answers at 127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("retrying in 1 s (attempt 2 of 2"), std::string::npos) << r.err;
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1s) << "it waited before the second attempt";
  r = c.admin({"status", "--connect", "nonsense"});
  EXPECT_EQ(r.exit_code, 2) << "a bad address is bad input, not retried: " << r.err;
  EXPECT_EQ(r.err.find("retrying"), std::string::npos) << r.err;
  r = c.admin({"stauts"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'stauts' (did you mean 'status'?)"), std::string::npos) << r.err;
}

TEST(cluster, the_shell_reads_commands_from_a_pipe) {
  testing::local_cluster c{{.steps = 1000000, .persist_every = 0}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto r = testing::run_process(
      {(std::filesystem::path{REKINDLE_BIN_DIR} / "rekindle").string(), "shell", "--config", c.config().string()}, 60s,
      "status\n\nstauts\nkill rank 1\nhelp slow\nranks --json\n");
  EXPECT_EQ(r.exit_code, 0) << "the last command's status: " << r.out << r.err;
  EXPECT_NE(r.out.find("job test  RUNNING"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("unknown command 'stauts' (did you mean 'status'?)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kill is destructive; add --yes"), std::string::npos) << "a pipe cannot confirm: " << r.err;
  EXPECT_NE(r.out.find("FACTOR"), std::string::npos) << "help COMMAND: " << r.out;
  EXPECT_NE(r.out.find("\"rank\": 3"), std::string::npos) << r.out;
  EXPECT_EQ(c.status()["recoveries"].size(), 0u);
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
}

TEST(cluster, the_interactive_shell_completes_recalls_and_asks_before_destroying) {
  testing::local_cluster c{{.steps = 1000000, .persist_every = 0}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto history = c.config().parent_path() / "history";
  testing::pty_process sh({(std::filesystem::path{REKINDLE_BIN_DIR} / "rekindle").string(), "shell", "--config",
                           c.config().string()},
                          {{"REKINDLE_HISTORY", history.string()}, {"TERM", "xterm"}, {"HOME", "/nonexistent"}});
  ASSERT_TRUE(sh.wait_for("rekindle> ")) << sh.screen();
  // Tab completes a command (the screen shows it redrawn; what runs shows what the line became)...
  sh.type("stat\t\r");
  ASSERT_TRUE(sh.wait_for("job test  RUNNING")) << sh.screen();
  ASSERT_TRUE(sh.wait_for("rekindle> ")) << sh.screen();
  // ...the word after it, and node names from the running job.
  sh.type("dra\tno\t");
  sh.type("\t\t");
  ASSERT_TRUE(sh.wait_for("n0")) << sh.screen();
  ASSERT_TRUE(sh.wait_for("n1")) << sh.screen();
  // A destructive command asks; no is the default and changes nothing.
  sh.type("1\r");
  ASSERT_TRUE(sh.wait_for("drain node n1: this will move every rank off the node. Go ahead? [y/N] ")) << sh.screen();
  sh.type("\r");
  ASSERT_TRUE(sh.wait_for("not done")) << sh.screen();
  ASSERT_TRUE(sh.wait_for("rekindle> ")) << sh.screen();
  // An unknown command gets a suggestion.
  sh.type("nodse\r");
  ASSERT_TRUE(sh.wait_for("did you mean 'nodes'?")) << sh.screen();
  ASSERT_TRUE(sh.wait_for("rekindle> ")) << sh.screen();
  // The up arrow recalls the last command line (the unknown one), twice back the drain.
  sh.type("\x1b[A\x1b[A\r");
  ASSERT_TRUE(sh.wait_for("Go ahead? [y/N] ")) << sh.screen();
  sh.type("n\r");
  ASSERT_TRUE(sh.wait_for("not done")) << sh.screen();
  sh.type("exit\r");
  const auto status = sh.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << sh.screen();
  // History outlives the session (libedit's file writes a space as \040).
  std::ifstream in(history);
  std::stringstream saved;
  saved << in.rdbuf();
  EXPECT_NE(saved.str().find("drain\\040node\\040n1"), std::string::npos) << saved.str();
  EXPECT_NE(saved.str().find("\nnodse\n"), std::string::npos) << saved.str();
  // A new session starts with it: the up arrow brings back the last line of the one before.
  testing::pty_process again({(std::filesystem::path{REKINDLE_BIN_DIR} / "rekindle").string(), "shell", "--config",
                              c.config().string()},
                             {{"REKINDLE_HISTORY", history.string()}, {"TERM", "xterm"}, {"HOME", "/nonexistent"}});
  ASSERT_TRUE(again.wait_for("rekindle> ")) << again.screen();
  again.type("\x1b[A\x1b[A\r");  // exit, then the drain before it
  ASSERT_TRUE(again.wait_for("Go ahead? [y/N] ")) << again.screen();
  again.type("n\rexit\r");
  EXPECT_TRUE(again.wait_exit(30s).has_value()) << again.screen();
  const auto s = c.status();
  EXPECT_EQ(s["world"], 4) << "nothing was drained";
  EXPECT_EQ(s["recoveries"].size(), 0u);
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
}

}  // namespace
}  // namespace rekindle
