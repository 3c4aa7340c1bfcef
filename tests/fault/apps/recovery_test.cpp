// Failures of real processes in a real cluster: each run must end with the job done and, where
// the world size is unchanged, the final loss bitwise equal to a run without failures.

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "actors/messages.hpp"
#include "common/process.hpp"
#include "storage/snapshot_slot.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/faults.hpp"
#include "tests/support/values.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

// Long enough that a test acts (stops, kills) well before the job ends, on a loaded machine too.
constexpr std::uint64_t steps = 1500;

// The failure-free run of the same configuration, computed once.
double reference_loss(const testing::cluster_options& o) {
  static std::map<std::string, double> cache;
  const auto key = std::to_string(o.nodes) + "/" + std::to_string(o.spare) + "/" + std::to_string(o.global_batch) + "/" + o.extra;
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  testing::local_cluster c{o};
  c.start_all();
  const auto report = c.wait_done(240s);
  EXPECT_FALSE(report.is_null()) << "the reference run did not finish; n0's log:\n" << c.log("n0") << "\nn1's log:\n"
                                 << c.log("n1");
  EXPECT_EQ(report.value("state", ""), "completed");
  const double loss = report.is_null() ? 0.0 : testing::final_loss(report);
  cache[key] = loss;
  return loss;
}

// Until every rank holds a step of at least `step` on two nodes (status: committed_step): a node
// lost after that restores at least from there, however busy the machine.
void wait_committed(const testing::local_cluster& c, std::uint64_t step) {
  const bool ok = c.wait_for(
      [&](const nlohmann::json& s) {
        return s.contains("committed_step") && s["committed_step"].is_number() &&
               s["committed_step"].get<std::uint64_t>() >= step;
      },
      120s);
  EXPECT_TRUE(ok) << "no step >= " << step << " committed; " << c.log("n0");
}

using testing::bits;

// On failure, the supervisor's log says why; the report alone rarely does.
void expect_recovered(const testing::local_cluster& c, const nlohmann::json& report, std::size_t recoveries) {
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  if (report.value("state", "") != "completed")
    ADD_FAILURE() << "supervisor log:\n" << c.log("n0");
  EXPECT_EQ(report["state"], "completed") << report.dump(2);
  EXPECT_EQ(report["step"], steps);
  ASSERT_GE(report["recoveries"].size(), recoveries) << report.dump(2);
  for (const auto& r : report["recoveries"])
    EXPECT_TRUE(r["done"].get<bool>()) << r.dump();
}

// Starts the cluster, loses node n1 (its daemon and ranks killed) once step 40 is committed, and
// returns the report of the job, which must have recovered.
nlohmann::json lose_n1_and_finish(testing::local_cluster& c) {
  c.start_all();
  wait_committed(c, 40);
  c.signal_node("n1", SIGKILL);
  auto report = c.wait_done(240s);
  expect_recovered(c, report, 1);
  return report;
}

TEST(recovery, sigkill_of_a_rank_restarts_it_in_place_with_the_same_final_loss) {
  const testing::cluster_options o{.steps = steps};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  const int pid = c.rank_pid(2);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 1);
  const auto& r = report["recoveries"][0];
  EXPECT_EQ(r["rank"], 2);
  EXPECT_EQ(r["node"], "n1") << "restarted in place";
  // Its own slot, or (killed while writing it over the newest step) that step's replica.
  const auto source = r["source"].get<std::string>();
  EXPECT_TRUE(source == "local memory" || source.starts_with("buddy memory")) << r.dump() << c.log("n0");
  EXPECT_LE(r["steps_lost"].get<std::uint64_t>(), 5u * policy::snapshots_per_anchor)
      << "at most one anchor interval: " << r.dump() << c.log("n0");
  // Checkpoints on disk go on in the new epoch.
  ASSERT_TRUE(report["checkpoint"]["last_step"].is_number()) << report["checkpoint"].dump();
  EXPECT_GT(report["checkpoint"]["last_step"].get<std::uint64_t>(), r["failed_at_step"].get<std::uint64_t>() + 100)
      << c.log("n0");
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

// Two ranks killed at the same moment, three times: the second exit reaches the supervisor after
// the first has started a new epoch, yet it is a fact about a process the new epoch counts on.
// Dropped as old news, that epoch would wait out the rendezvous timeout (set far beyond the test's
// deadline here, so a stall fails the test) for a rank that will never register.
TEST(recovery, two_ranks_killed_at_once_recover_together_without_waiting_out_the_rendezvous) {
  const testing::cluster_options o{.steps = steps, .rendezvous = "600s"};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  c.start_all();
  std::size_t before = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_TRUE(c.wait_for(
        [&](const nlohmann::json& s) {
          if (s.value("state", "") != "running" || s.value("step", std::uint64_t{0}) < 40 + 150 * k)
            return false;
          before = s["recoveries"].size();
          return true;
        },
        120s))
        << c.log("n0");
    const int a = c.rank_pid(2), b = c.rank_pid(0);
    ASSERT_GT(a, 0);
    ASSERT_GT(b, 0);
    ASSERT_EQ(kill(a, SIGKILL), 0);
    ASSERT_EQ(kill(b, SIGKILL), 0);
    ASSERT_TRUE(c.wait_for(
        [&](const nlohmann::json& s) {
          if (s.value("state", "") != "running" || s["recoveries"].size() <= before)
            return false;
          const auto r = s["recoveries"];
          return std::all_of(r.begin(), r.end(), [](const nlohmann::json& x) { return x.value("done", false); });
        },
        120s))
        << "kill " << k + 1 << " of ranks 2 and 0 never recovered: " << c.log("n0");
  }
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 3);
  EXPECT_EQ(c.log("n0").find("rendezvous_timeout"), std::string::npos) << c.log("n0");
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

TEST(recovery, a_stopped_rank_is_found_killed_and_restarted_with_the_same_final_loss) {
  const testing::cluster_options o{.steps = steps};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  const int pid = c.rank_pid(1);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 1);
  const auto& recs = report["recoveries"];
  EXPECT_TRUE(std::any_of(recs.begin(), recs.end(), [](const nlohmann::json& r) { return r["rank"] == 1; }))
      << recs.dump(2) << c.log("n0");
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
  kill(pid, SIGKILL);
}

TEST(recovery, a_hung_rank_is_found_by_its_silence_and_only_it_restarts_with_the_same_final_loss) {
  const testing::cluster_options o{.steps = steps};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  c.start_all();
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  // The drill from the shell: rank 1 stops before its next step, alive and heartbeating; the
  // others wait in their collectives, which time out (5 s) and say so.
  const auto r = c.admin({"hang", "rank", "1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 hangs"), std::string::npos) << r.out;
  // The verdict: rank 1 never entered the collective the others waited in; its stack was taken
  // before the kill (the agent sends it once eu-stack is done).
  testing::process_result d;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    d = c.admin({"diagnose", "hang", "--stack"});
    if (d.out.find("stack, taken before the kill") != std::string::npos || d.out.find("could not be taken") != std::string::npos)
      break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("hang of rank 1 on n"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("rank 1 never entered collective #"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("waiting in it: 0,2,3; never entered it: 1"), std::string::npos) << d.out;
  if (find_program("eu-stack", {})) {
    EXPECT_NE(d.out.find("stack, taken before the kill"), std::string::npos) << d.out;
    // The training thread, stopped by the drill in the worker's training loop.
    EXPECT_NE(d.out.find("worker_runtime::train"), std::string::npos) << d.out;
  } else {
    EXPECT_NE(d.out.find("eu-stack is not installed"), std::string::npos) << d.out;
  }
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 1);
  const auto& rec = report["recoveries"][0];
  EXPECT_EQ(rec["rank"], 1) << rec.dump();
  EXPECT_NE(rec["cause"].get<std::string>().find("hung (rank 1 never entered collective #"), std::string::npos)
      << rec.dump();
  // Found by its silence well before the 20 s hang timeout: collective timeout 5 s + 5 s margin.
  EXPECT_LT(rec["detect_s"].get<double>(), 19.0) << rec.dump() << c.log("n0");
  // Only the stuck rank was killed; the ranks that waited for it kept their processes.
  for (const auto& rank : report["ranks"])
    EXPECT_EQ(rank["restarts"], rank["rank"] == 1 ? 1 : 0) << report["ranks"].dump(2) << c.log("n0");
  EXPECT_NE(c.log("n0").find("reported nothing while 3 rank(s) timed out waiting for it"), std::string::npos)
      << c.log("n0");
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

TEST(recovery, a_lost_node_moves_its_ranks_to_the_spare_and_restores_from_buddy_memory) {
  const testing::cluster_options o{.spare = true, .steps = steps};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  const auto report = lose_n1_and_finish(c);
  const auto& r = report["recoveries"][0];
  EXPECT_NE(r["source"].get<std::string>().find("buddy memory"), std::string::npos) << r.dump() << c.log("n0");
  EXPECT_GT(r["restored_step"].get<std::uint64_t>(), 0u) << "restored, not restarted: " << r.dump();
  EXPECT_EQ(report["world"], 4);
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

// Each node's buddy is the next usable node, the spare included once it has passed its check:
// n0 -> n1 -> n2 -> (s0 ->) n0. When n1 is lost its ranks (2, 3) move to the spare and restore from
// n2's replicas, and the ring closes over the gap (n0 -> n2 -> s0 -> n0): ranks 2 and 3 are now
// guarded by n0, and n2's replicas of them are whole ranks' states held for nothing. n2 drops them
// once a newer step is committed. n2's own ranks (4, 5) were guarded by s0 or, when the spare's
// check ended after the job started, by n0; so n0 or s0 may drop theirs too, and nobody else's.
TEST(recovery, an_old_buddy_drops_the_replicas_of_ranks_it_no_longer_guards_once_a_newer_step_is_committed) {
  const testing::cluster_options o{.nodes = 3, .spare = true, .steps = steps, .global_batch = 12};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  const auto report = lose_n1_and_finish(c);
  EXPECT_EQ(report["world"], 6);
  EXPECT_NE(report["recoveries"][0]["source"].get<std::string>().find("buddy memory on n2"), std::string::npos)
      << report["recoveries"][0].dump() << c.log("n0");
  // The rank a node's drop names first (its log line), or -1 when it dropped none.
  const auto first_dropped = [&](const std::string& node) -> int {
    constexpr std::string_view dropped = "replica(s) of ranks no longer guarded here dropped";
    constexpr std::string_view first = "the first of rank ";
    const auto log = c.log(node);
    const auto at = log.find(dropped);
    if (at == std::string::npos)
      return -1;
    const auto rank = log.find(first, at);
    return rank == std::string::npos ? -1 : std::atoi(log.c_str() + rank + first.size());
  };
  const int by_n2 = first_dropped("n2");
  EXPECT_TRUE(by_n2 == 2 || by_n2 == 3) << "n2 guarded ranks 2 and 3 before n1 was lost; it dropped rank " << by_n2
                                        << ":\n" << c.log("n2");
  for (const auto* node : {"n0", "s0"}) {
    const int by = first_dropped(node);
    EXPECT_TRUE(by == -1 || by == 4 || by == 5) << node << " may have guarded only n2's ranks; it dropped rank " << by
                                                << ":\n" << c.log(node);
  }
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

TEST(recovery, a_corrupted_slot_is_skipped_for_the_buddy_replica_with_the_same_final_loss) {
  const testing::cluster_options o{.steps = steps};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  c.start_all();
  wait_committed(c, 40);
  // Rank 2 is n1's first local rank: stop it so it writes nothing more, damage its slot, kill it.
  const int pid = c.rank_pid(2);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(testing::corrupt_slot(storage::snapshot_slot::name_for(c.data_dir() / "n1", "test", 0)));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 1);
  // Whether the step chosen was in the damaged slot (its checksum fails) or had been overwritten
  // there, rank 2's state comes from its buddy's replica, never from the damaged bytes.
  const auto& r = report["recoveries"].back();
  EXPECT_EQ(r["rank"], 2);
  EXPECT_EQ(r["source"], "buddy memory on n0") << r.dump() << c.log("n0");
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

TEST(recovery, without_a_spare_the_world_shrinks_and_training_finishes) {
  testing::local_cluster c{{.steps = steps}};
  c.start_all();
  wait_committed(c, 40);
  c.signal_node("n1", SIGKILL);
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 1);
  EXPECT_EQ(report["world"], 2) << "the world shrank from 4 to 2 ranks";
  // Restored from memory, not restarted. Not necessarily from `committed` itself: a worker that
  // had not yet heard of that commit may have rewritten it, keeping the commit before.
  EXPECT_GT(report["recoveries"][0]["restored_step"].get<std::uint64_t>(), 0u)
      << c.log("n0");
}

TEST(recovery, a_node_whose_daemon_stops_while_its_ranks_train_on_is_lost_and_the_job_restores_a_committed_step) {
  // n1's daemon stops (SIGSTOP) while its ranks go on training with n0's: no replica of theirs
  // reaches n0 and nothing new is committed, but the ranks on n0 keep overwriting their slots.
  // When n1 is found lost, the newest step every rank still holds on n0 is the last committed
  // one, because no slot overwrites it before a newer one is committed. (Without that, n0's
  // slots held only steps newer than any replica of n1's ranks, and training restarted from 0.)
  testing::local_cluster c{{.steps = 100000000}};
  c.start_all();
  wait_committed(c, 40);
  c.signal_node("n1", SIGSTOP);
  const auto stopped_at = c.status().value("committed_step", std::uint64_t{0});
  ASSERT_TRUE(c.wait_for([](const nlohmann::json& s) { return s.value("world", 0) == 2 && s.value("state", "") == "running"; },
                         60s))
      << c.status().dump(2) << c.log("n0");
  c.signal_node("n1", SIGCONT);
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) {
        const auto& r = s["recoveries"];
        return !r.empty() && r.back().value("done", false);
      },
      60s))
      << c.log("n0");
  const auto s = c.status();
  const auto& rec = s["recoveries"].back();
  EXPECT_NE(rec.value("source", ""), "none") << "restored from memory, not from scratch: " << rec.dump() << c.log("n0");
  EXPECT_GE(rec.value("restored_step", std::uint64_t{0}), stopped_at)
      << "at least the step committed when n1's daemon stopped: " << rec.dump() << c.log("n0");
  EXPECT_EQ(c.admin({"stop", "--yes"}).exit_code, 0);
}

TEST(recovery, a_restarted_supervisor_resumes_the_job_with_the_same_final_loss) {
  const testing::cluster_options o{.steps = steps};
  const double expected = reference_loss(o);
  testing::local_cluster c{o};
  c.start_all();
  ASSERT_TRUE(c.wait_step(20, 120s)) << c.log("n0");
  // A recovery before the restart stays in the job's history.
  const int pid = c.rank_pid(2);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) { return s["recoveries"].size() == 1 && s["recoveries"][0].value("done", false); },
      120s))
      << c.log("n0");
  ASSERT_TRUE(c.wait_step(40, 120s)) << c.log("n0");
  // A step held in the memory of two nodes before the supervisor's node goes must not be lost:
  // the restarted supervisor hears every node's copies before it chooses where to restart from.
  wait_committed(c, 30);
  const auto committed = c.status()["committed_step"].get<std::uint64_t>();
  c.signal_node("n0", SIGKILL);
  ASSERT_TRUE(c.wait_node("n0", 30s).has_value());
  c.start("n0");
  const auto report = c.wait_done(240s);
  expect_recovered(c, report, 2);
  EXPECT_EQ(report["recoveries"][0]["rank"], 2) << "the rank's recovery, from before the restart";
  EXPECT_NE(report["recoveries"][0]["cause"].get<std::string>().find("rank 2"), std::string::npos)
      << report["recoveries"][0].dump();
  const auto& r = report["recoveries"][1];
  EXPECT_EQ(r["cause"], "supervisor restarted") << r.dump();
  EXPECT_GE(r["restored_step"].get<std::uint64_t>(), committed) << r.dump() << c.log("n0");
  // The ranks trained on while the supervisor was away: what they did past the restore point is
  // counted as lost.
  EXPECT_GE(r["failed_at_step"].get<std::uint64_t>(), committed) << r.dump();
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected)) << c.log("n0");
}

TEST(recovery, past_the_restart_limit_the_job_stops_with_a_reason_and_exit_status_1) {
  testing::local_cluster c{{.steps = 2000, .extra = "\n[recovery]\nmax_restarts_per_rank = 1\nbackoff = \"0s\"\n"}};
  c.start_all();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.wait_for([&](const nlohmann::json& s) { return s.value("state", "") == "running" && s["epoch"] == i + 1; },
                           120s))
        << c.log("n0");
    ASSERT_TRUE(c.wait_step(static_cast<std::uint64_t>(10), 120s));
    auto r = c.admin({"kill", "rank", "3", "--yes"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const auto report = c.wait_done(120s);
  ASSERT_FALSE(report.is_null());
  EXPECT_EQ(report["state"], "failed");
  EXPECT_NE(report["reason"].get<std::string>().find("rank 3 failed 2 times (limit 1)"), std::string::npos)
      << report["reason"];
  auto st = c.wait_node("n0", 60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(*st, 1) << "a failed job exits with status 1";
}

}  // namespace
}  // namespace rekindle
