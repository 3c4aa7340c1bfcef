// Pipeline stages on a real cluster (job.stages): two replicas of a two-stage pipeline, one per
// node, activations between the stages over the ranks' point-to-point sends. A killed rank of the
// second stage restarts in place and the job ends with the failure-free run's loss to the bit; a
// lost node without a spare leaves one whole pipeline, which trains to the end. A plan file
// (job.plan) places the stages on the nodes and devices it names, with its micro-batch shares; a
// node it left out takes over a lost one, and the job ends with the failure-free loss to the bit.
// With the planner's files (job.plan_cluster, job.plan_model) a node lost with no node free is
// re-planned: the job goes on in the planner's new plan, from the old split's snapshots.

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/values.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t steps = 400;

testing::cluster_options pipeline_options() {
  // The embedded tiny model has 2 blocks: stages of one block each; ranks 0-1 on n0 are replica 0,
  // ranks 2-3 on n1 replica 1.
  return testing::cluster_options{.steps = steps, .job_extra = "stages = [1, 1]\n"};
}

nlohmann::json run_to_the_end(const testing::cluster_options& o) {
  testing::local_cluster c{o};
  c.start_all();
  auto report = c.wait_done(240s);
  EXPECT_FALSE(report.is_null()) << c.log("n0");
  EXPECT_EQ(report.value("state", ""), "completed") << c.log("n0");
  return report;
}

TEST(pipeline, two_stage_pipelines_train_like_data_parallelism_and_a_killed_stage_restarts_with_the_same_loss) {
  const auto reference = run_to_the_end(pipeline_options());
  ASSERT_FALSE(HasFailure());
  const double loss = testing::final_loss(reference);
  // The same job without stages: the same training up to rounding (the sums run in another order).
  const auto plain = run_to_the_end(testing::cluster_options{.steps = steps});
  ASSERT_FALSE(HasFailure());
  EXPECT_NEAR(loss, testing::final_loss(plain), 1e-3 * std::fabs(testing::final_loss(plain)));

  testing::local_cluster c{pipeline_options()};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  // Each rank's replica and stage, in the status and in the shell's table.
  const auto s = c.status();
  ASSERT_EQ(s["ranks"].size(), 4u) << s.dump(2);
  for (unsigned r = 0; r < 4; ++r) {
    EXPECT_EQ(s["ranks"][r]["stage"], r % 2) << s.dump(2);
    EXPECT_EQ(s["ranks"][r]["replica"], r / 2) << s.dump(2);
  }
  const auto ranks = c.admin({"ranks"});
  EXPECT_NE(ranks.out.find("replica/stage"), std::string::npos) << ranks.out;
  EXPECT_NE(ranks.out.find("1/1"), std::string::npos) << ranks.out;
  const int pid = c.rank_pid(1);  // the last stage of replica 0
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  ASSERT_GE(report["recoveries"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["recoveries"][0]["rank"], 1);
  EXPECT_EQ(report["recoveries"][0]["node"], "n0") << "restarted in place";
  EXPECT_EQ(testing::bits(testing::final_loss(report)), testing::bits(loss)) << c.log("n0");
}

TEST(pipeline, a_hung_stage_is_named_by_the_stage_that_waits_for_it_and_only_it_restarts) {
  const auto reference = run_to_the_end(pipeline_options());
  ASSERT_FALSE(HasFailure());
  testing::local_cluster c{pipeline_options()};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  // Rank 1, the last stage of replica 0, stops before its next step: rank 0 waits for its
  // gradients point to point, replica 1 (ranks 2, 3) in the gradients' all-reduce.
  const auto r = c.admin({"hang", "rank", "1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::process_result d;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    d = c.admin({"diagnose", "hang"});
    if (d.out.find("hang of rank") != std::string::npos)
      break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("hang of rank 1 on n0"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("1 rank waits point to point for it"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("recv from rank 1"), std::string::npos) << d.out;  // inside, or failed at its deadline
  EXPECT_NE(d.out.find("point to point, rank < the rank it waits for: 0<1"), std::string::npos) << d.out;
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  for (const auto& rank : report["ranks"])
    EXPECT_EQ(rank["restarts"], rank["rank"] == 1 ? 1 : 0) << report["ranks"].dump(2) << c.log("n0");
  EXPECT_EQ(testing::bits(testing::final_loss(report)), testing::bits(testing::final_loss(reference))) << c.log("n0");
}

TEST(pipeline, a_lost_node_without_a_spare_leaves_one_whole_pipeline_that_trains_to_the_end) {
  testing::local_cluster c{pipeline_options()};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  c.signal_node("n1", SIGKILL);
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  EXPECT_EQ(report["world"], 2) << "one pipeline of two stages";
  EXPECT_EQ(report["step"], steps);
}

// Three nodes of two devices; the plan runs two replicas of stages [1, 1] on n2 and n0 and leaves
// n1 out: replica 0 is n2's device 1 then n0's device 0, replica 1 n0's device 1 then n2's device
// 0, with 3 and 1 of the step's 4 micro-batches.
testing::cluster_options plan_options(const testing::temp_dir& dir) {
  const auto plan = dir.write("plan.json", R"({"micro_batch_size": 2, "stages": [{"layers": 1}, {"layers": 1}],
      "replicas": [{"stages": [{"node": "n2", "devices": [1]}, {"node": "n0", "devices": [0]}], "micro_batches": 3},
                   {"stages": [{"node": "n0", "devices": [1]}, {"node": "n2", "devices": [0]}], "micro_batches": 1}]})");
  return testing::cluster_options{.nodes = 3, .steps = 200, .job_extra = "plan = \"" + plan.string() + "\"\n"};
}

TEST(pipeline, a_plan_file_places_the_stages_and_shares_and_a_node_it_left_out_takes_over_a_lost_one) {
  testing::temp_dir dir;
  const auto reference = run_to_the_end(plan_options(dir));
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(reference["world"], 4);

  testing::local_cluster c{plan_options(dir)};
  c.start_all();
  ASSERT_TRUE(c.wait_step(30, 120s)) << c.log("n0");
  const auto s = c.status();
  ASSERT_EQ(s["ranks"].size(), 4u) << s.dump(2);
  const std::vector<std::string> nodes = {"n2", "n0", "n0", "n2"};
  const std::vector<unsigned> shares = {3, 3, 1, 1};
  for (unsigned r = 0; r < 4; ++r) {
    EXPECT_EQ(s["ranks"][r]["node"], nodes[r]) << s.dump(2);
    EXPECT_EQ(s["ranks"][r]["stage"], r % 2) << s.dump(2);
    EXPECT_EQ(s["ranks"][r]["micro_batches"], shares[r]) << s.dump(2);
  }
  EXPECT_NE(c.admin({"events"}).out.find("(the plan)"), std::string::npos) << c.admin({"events"}).out;
  c.signal_node("n2", SIGKILL);
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  EXPECT_EQ(report["world"], 4) << "n1 took over n2's ranks: " << report.dump(2);
  const auto after = c.status();
  for (unsigned r = 0; r < 4; ++r) {
    EXPECT_EQ(after["ranks"][r]["node"], r == 0 || r == 3 ? "n1" : "n0") << after.dump(2);
    EXPECT_EQ(after["ranks"][r]["micro_batches"], shares[r]) << "the plan's shares hold in the plan's world";
  }
  EXPECT_EQ(testing::bits(testing::final_loss(report)), testing::bits(testing::final_loss(reference))) << c.log("n0");
}

// Four one-rank nodes: two replicas of stages [1, 1] (n0 n1, n2 n3) of 3 micro-batches each, with
// the planner's files for these nodes and the test cluster's model (2 blocks of width 32, sequences
// of 16 bytes). Six micro-batches: three ranks of data parallelism (2 each) are predicted faster
// than two (3 each).
testing::cluster_options replan_options(const testing::temp_dir& dir) {
  const auto plan = dir.write("plan.json", R"({"micro_batch_size": 2, "stages": [{"layers": 1}, {"layers": 1}],
      "replicas": [{"stages": [{"node": "n0"}, {"node": "n1"}], "micro_batches": 3},
                   {"stages": [{"node": "n2"}, {"node": "n3"}], "micro_batches": 3}]})");
  const auto cluster = dir.write("cluster.toml", R"([types.cpu]
bf16_tflops = 0.001
memory = "16GB"
memory_bandwidth = "10GB/s"
link_bandwidth = "100GB/s"
reserved_memory = "0B"

[[nodes]]
name = "n"
type = "cpu"
devices = 1
count = 4

[network]
bandwidth = "100GB/s"
latency = "1us"
)");
  const auto model = dir.write("model.toml", R"([model]
layers = 2
hidden = 32
heads = 2
seq_len = 16
vocab = 256

[training]
global_batch = 12
micro_batch_sizes = [2]
recompute = "never"
)");
  // Steps enough to pause the re-planned world well before its end (the loss comes at step 30).
  return testing::cluster_options{.nodes = 4, .ranks_per_node = 1, .steps = 1500, .global_batch = 12,
                                  .job_extra = "plan = \"" + plan.string() + "\"\nplan_cluster = \"" + cluster.string() +
                                               "\"\nplan_model = \"" + model.string() + "\"\n"};
}

TEST(pipeline, lost_nodes_are_re_planned_a_returning_one_re_plans_upwards_and_the_job_returns_to_its_plan) {
  testing::temp_dir dir;
  const auto reference = run_to_the_end(replan_options(dir));
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(reference["world"], 4);

  testing::local_cluster c{replan_options(dir)};
  c.start_all();
  ASSERT_TRUE(c.wait_step(30, 120s)) << c.log("n0");
  c.signal_node("n3", SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + 180s;
  // Until `text` is in the events after position `from`; its position.
  std::string events;
  const auto wait_event = [&](const std::string& text, std::size_t from = 0) {
    for (;;) {
      events = c.admin({"events"}).out;
      const auto at = events.find(text, from);
      if (at != std::string::npos || std::chrono::steady_clock::now() > deadline)
        return at;
      std::this_thread::sleep_for(200ms);
    }
  };
  const auto at = wait_event("re-planned from 4 to ");
  ASSERT_NE(at, std::string::npos) << events << c.log("n0");
  // The planner's full search of the three nodes, run beside the job after the re-plan, finds
  // nothing faster here: the re-plan's local search reached the same layout.
  ASSERT_NE(wait_event("the full re-search", at), std::string::npos) << events << c.log("n0");
  EXPECT_NE(events.find("the full re-search found no plan 5% faster than the re-plan's: its best, d=3 p=1"),
            std::string::npos)
      << events;
  const int world = std::stoi(events.substr(at + std::string{"re-planned from 4 to "}.size()));
  RecordProperty("replanned", events.substr(at, events.find('\n', at) - at));
  EXPECT_EQ(world, 3) << "data parallelism over the three nodes left";
  // n2 is lost too: two ranks left.
  c.signal_node("n2", SIGKILL);
  const auto second = wait_event("re-planned from 3 to 2 ranks", at);
  ASSERT_NE(second, std::string::npos) << events << c.log("n0");
  // Paused, so that the job has not ended when n2 is back, whatever the speeds (a job that trains
  // re-plans at once: policy tests); n2 back while n3 is still down re-plans upwards as it resumes.
  auto r = c.admin({"pause"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(c.wait_for([](const nlohmann::json& st) { return st.value("state", "") == "paused"; }, 60s)) << c.log("n0");
  c.start("n2");
  ASSERT_NE(wait_event("n2 is up", second), std::string::npos) << events << c.log("n0");
  r = c.admin({"resume"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto up = wait_event("resumed: re-planned up from 2 to 3 ranks; d=3 p=1", second);
  ASSERT_NE(up, std::string::npos) << events << c.log("n0");
  RecordProperty("replanned_up", events.substr(up, events.find('\n', up) - up));
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& st) { return st.value("state", "") == "running" && st["ranks"].size() == 3; }, 120s))
      << c.log("n0");
  // The upward plan's shares in the status; n3 runs nothing.
  r = c.admin({"pause"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(c.wait_for([](const nlohmann::json& st) { return st.value("state", "") == "paused"; }, 60s)) << c.log("n0");
  const auto s = c.status();
  ASSERT_EQ(s["ranks"].size(), 3u) << s.dump(2);
  unsigned micro_batches = 0;
  for (const auto& rank : s["ranks"]) {
    EXPECT_NE(rank["node"], "n3") << s.dump(2);
    micro_batches += rank["micro_batches"].get<unsigned>();
  }
  EXPECT_EQ(micro_batches, 6u) << "the global batch stays: " << s.dump(2);
  // n3 is repaired: every node of the plan is back, and the job returns to it as it resumes.
  c.start("n3");
  ASSERT_NE(wait_event("n3 is up", up), std::string::npos) << events << c.log("n0");
  r = c.admin({"resume"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  events = c.admin({"events"}).out;
  EXPECT_NE(events.find("resumed with every node of the plan up: returned to the plan, from 3 to 4 ranks in 2-stage pipelines"),
            std::string::npos)
      << events;
  EXPECT_EQ(report["world"], 4) << events;
  const auto after = c.status();
  ASSERT_EQ(after["ranks"].size(), 4u) << after.dump(2);
  for (unsigned k = 0; k < 4; ++k) {
    EXPECT_EQ(after["ranks"][k]["node"], "n" + std::to_string(k)) << after.dump(2);
    EXPECT_EQ(after["ranks"][k]["stage"], k % 2) << after.dump(2);
    EXPECT_EQ(after["ranks"][k]["micro_batches"], 3) << "the plan's shares again: " << after.dump(2);
  }
  // From a snapshot of the 4-rank plan through other splits and back: the same training up to
  // rounding.
  const double loss = testing::final_loss(reference);
  EXPECT_NEAR(testing::final_loss(report), loss, 1e-3 * std::fabs(loss)) << events;
}

// With no time for the re-plan's local search (job.replan_budget = "0s") the job goes on in the
// repaired plan, the one replica of two stages left; the planner's full search of the three nodes
// then finds data parallelism over them faster, and the job switches to it while it trains.
TEST(pipeline, the_full_re_search_switches_the_job_to_a_plan_faster_than_the_re_plan_s) {
  testing::temp_dir dir;
  auto o = replan_options(dir);
  o.steps = 3000;  // the switch comes well before the end, however fast the machine
  const auto reference = run_to_the_end(o);
  ASSERT_FALSE(HasFailure());
  o.job_extra += "replan_budget = \"0s\"\n";
  testing::local_cluster c{o};
  c.start_all();
  ASSERT_TRUE(c.wait_step(30, 120s)) << c.log("n0");
  c.signal_node("n3", SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  std::string events;
  const auto wait_event = [&](const std::string& text) {
    for (;;) {
      events = c.admin({"events"}).out;
      const auto at = events.find(text);
      if (at != std::string::npos || std::chrono::steady_clock::now() > deadline)
        return at;
      std::this_thread::sleep_for(200ms);
    }
  };
  const auto replanned = wait_event("re-planned from 4 to 2 ranks");
  ASSERT_NE(replanned, std::string::npos) << events << c.log("n0");
  EXPECT_EQ(events.find("a nearby layout is faster", replanned), std::string::npos) << "no local search: " << events;
  const auto switched = wait_event("the full re-search found a faster plan for the same nodes: d=3 p=1");
  ASSERT_NE(switched, std::string::npos) << events << c.log("n0");
  const auto line = events.substr(switched, events.find('\n', switched) - switched);
  RecordProperty("switched", line);
  EXPECT_NE(line.find("switching from 2 to 3 ranks"), std::string::npos) << line;
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  EXPECT_EQ(report["world"], 3) << c.admin({"events"}).out;
  const auto after = c.status();
  unsigned micro_batches = 0;
  for (const auto& rank : after["ranks"]) {
    EXPECT_NE(rank["node"], "n3") << after.dump(2);
    micro_batches += rank["micro_batches"].get<unsigned>();
  }
  EXPECT_EQ(micro_batches, 6u) << "the global batch stays: " << after.dump(2);
  // Each world restored the newest snapshot, none started over; ending in another world than the
  // reference's (the sums in another order for 3,000 steps), the loss is the same training's, not
  // the same bits.
  events = c.admin({"events"}).out;
  EXPECT_EQ(events.find("restarts from step 0"), std::string::npos) << events;
  const double loss = testing::final_loss(reference);
  EXPECT_NEAR(testing::final_loss(report), loss, 0.02 * std::fabs(loss)) << events;
}

}  // namespace
}  // namespace rekindle
