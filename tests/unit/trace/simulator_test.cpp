// The simulator on cases whose answer can be worked out by hand, and its invariants.

#include <gtest/gtest.h>

#include <numeric>

#include "trace/cluster.hpp"
#include "trace/convert.hpp"
#include "trace/simulator.hpp"

namespace rekindle::trace {
namespace {

using namespace std::chrono_literals;

// 1 s steps, a snapshot every 10 steps that stalls 0.5 s: a 10.5 s cycle. A restarted process
// registers after 3 s, the rendezvous takes 2 s, restoring 1 GiB from memory 1 s.
model simple_model() {
  model m;
  m.step_time = 1s;
  m.state_size = std::uint64_t{1} << 30;
  m.snapshot_every = 10;
  m.snapshot_stall = 500ms;
  m.persist_every = 0;
  m.checkpoint_every = 20;
  m.process_start = 3s;
  m.rendezvous = 2s;
  m.memory_bandwidth = double(std::uint64_t{1} << 30);
  m.buddy_bandwidth = double(std::uint64_t{1} << 29);
  m.disk_bandwidth = double(std::uint64_t{1} << 28);
  m.persist_bandwidth = double(std::uint64_t{1} << 30);
  m.node_timeout = 1s;
  m.hang_timeout = 10s;
  m.collective_timeout = 5s;
  m.tick = 100ms;
  m.rendezvous_timeout = 30s;
  m.regrow_below = 0;
  // The restart-everything policy with the same costs, unless a test gives it its own.
  m.restart_all_exit_detection = 0s;
  m.restart_all_hang_detection = 5s;
  m.restart_all_process_start = 3s;
  m.restart_all_rendezvous = 2s;
  m.restart_all_rendezvous_per_rank = 0s;
  m.storage_bandwidth = 1e15;
  return m;
}

fault_trace trace_of(double duration, std::vector<fault_event> events = {}) {
  fault_trace t;
  t.header.duration = duration;
  t.events = std::move(events);
  return t;
}

fault_event at(double t, fault_kind k, fault_target target) {
  fault_event e;
  e.at = t;
  e.kind = k;
  e.target = std::move(target);
  return e;
}

sim_result run(const fault_trace& t, const cluster_shape& c, const model& m, policy_kind p = policy_kind::in_place) {
  auto r = simulate(t, c, m, p);
  EXPECT_TRUE(r.has_value()) << r.error();
  return r.has_value() ? *r : sim_result{};
}

double accounted(const sim_result& r) { return std::accumulate(r.lost_time.begin(), r.lost_time.end(), r.useful); }

TEST(simulator, without_failures_the_ratio_is_one_minus_the_snapshot_overhead) {
  auto cluster = cluster_shape::compact(4, 2);
  const auto r = run(trace_of(1050), *cluster, simple_model());
  // 100 cycles of 10 steps and one 0.5 s snapshot.
  EXPECT_DOUBLE_EQ(r.wall, 1050);
  EXPECT_EQ(r.steps, 1000u);
  EXPECT_NEAR(r.useful, 1000, 1e-9);
  EXPECT_NEAR(r.lost_in(lost::snapshots), 50, 1e-9);
  EXPECT_NEAR(r.ratio(), 1 - 0.5 / 10.5, 1e-12);
  EXPECT_EQ(r.recoveries, 0u);
  EXPECT_EQ(r.end_state, "running");
}

TEST(simulator, one_crash_costs_exactly_the_modelled_durations) {
  auto cluster = cluster_shape::compact(4, 2);
  // At 105.25 s step 101 has run 0.25 s (step 100's snapshot ended at 105 s).
  const auto r = run(trace_of(1056.25, {at(105.25, fault_kind::crash, fault_target::of_rank(3))}), *cluster, simple_model());
  EXPECT_EQ(r.hit, 1u);
  EXPECT_EQ(r.recoveries, 1u);
  EXPECT_EQ(r.rank_restarts, 1u);
  EXPECT_EQ(r.restores_memory, 1u);
  EXPECT_NEAR(r.lost_in(lost::detection), 0, 1e-9) << "the agent sees the exit at once";
  EXPECT_NEAR(r.lost_in(lost::restart), 3, 1e-9) << "only rank 3 restarts; the others keep their process";
  EXPECT_NEAR(r.lost_in(lost::rendezvous), 2, 1e-9);
  EXPECT_NEAR(r.lost_in(lost::restore), 1, 1e-9) << "1 GiB from the node's memory at 1 GiB/s";
  EXPECT_NEAR(r.lost_in(lost::recompute), 0.25, 1e-9) << "step 101's first 0.25 s";
  // The 6.25 s lost shift the rest: step 1000 ends with the trace.
  EXPECT_EQ(r.steps, 1000u);
  EXPECT_NEAR(r.useful, 1000, 1e-9);
  EXPECT_NEAR(accounted(r), r.wall, 1e-6);
}

TEST(simulator, a_hang_is_found_by_its_silence_and_only_the_stuck_rank_is_killed) {
  auto cluster = cluster_shape::compact(4, 2);
  const auto r = run(trace_of(2000, {at(105.25, fault_kind::hang, fault_target::of_rank(1))}), *cluster, simple_model());
  EXPECT_EQ(r.hit, 1u);
  EXPECT_EQ(r.recoveries, 1u);
  // The seven ranks that wait report their timed-out collective; the silent one is the stuck one,
  // as in a live job.
  EXPECT_EQ(r.notes.at("rank_hung"), 1u);
  EXPECT_EQ(r.notes.at("collective_error"), 1u);
  EXPECT_NEAR(r.lost_in(lost::detection), 5 + 10.0 / 4 + 0.1, 1e-9) << "collective timeout + a quarter of the hang timeout + one tick";
  EXPECT_NEAR(r.lost_in(lost::restart), 3, 1e-9);
  EXPECT_NEAR(r.lost_in(lost::rendezvous) + r.lost_in(lost::restore), 3, 1e-9);
  EXPECT_NEAR(accounted(r), r.wall, 1e-6);
}

TEST(simulator, a_slow_rank_stretches_only_the_compute_share_of_a_step) {
  auto cluster = cluster_shape::compact(4, 2);
  auto slow = at(100, fault_kind::slow, fault_target::of_rank(1));
  slow.factor = 3;
  slow.duration = 100;
  auto m = simple_model();
  m.snapshot_every = 1000000;  // no snapshot stalls in the way
  // All compute: a step takes 3 s while it lasts, two thirds of the 100 s are lost to it.
  auto r = run(trace_of(1000, {slow}), *cluster, m);
  EXPECT_NEAR(r.lost_in(lost::degraded), 100.0 * 2 / 3, 2.0);
  // Half compute: a step takes 1.5 + 0.5 = 2 s, half of the 100 s is lost.
  m.compute_share = 0.5;
  r = run(trace_of(1000, {slow}), *cluster, m);
  EXPECT_NEAR(r.lost_in(lost::degraded), 50.0, 2.0);
  EXPECT_NEAR(accounted(r), r.wall, 1e-6);
}

TEST(simulator, a_short_hang_resumes_by_itself) {
  auto cluster = cluster_shape::compact(4, 2);
  auto hang = at(105.25, fault_kind::hang, fault_target::of_rank(1));
  hang.duration = 2;
  const auto r = run(trace_of(1000, {hang}), *cluster, simple_model());
  EXPECT_EQ(r.recoveries, 0u);
  EXPECT_NEAR(r.lost_in(lost::detection), 2, 1e-9);
}

TEST(simulator, a_node_down_without_spares_shrinks_the_world) {
  auto cluster = cluster_shape::compact(4, 2);
  const auto r = run(trace_of(2000, {at(105.25, fault_kind::node_down, fault_target::of_node("n3"))}), *cluster, simple_model());
  EXPECT_EQ(r.hit, 1u);
  EXPECT_EQ(r.world_start, 8u);
  EXPECT_EQ(r.world_end, 6u);
  EXPECT_EQ(r.world_min, 6u);
  EXPECT_EQ(r.notes.at("world_shrinks"), 1u);
  EXPECT_NEAR(r.lost_in(lost::detection), 1.1, 1e-9) << "node timeout + one tick";
  EXPECT_NEAR(r.lost_in(lost::restart), 0, 1e-9) << "the survivors keep their processes";
  // n3's step-100 replica was still on its way to n0 (2 s at 0.5 GiB/s): the world restores
  // step 90, n3's ranks from their buddy's memory, resharded 8 -> 6 (4/3 GiB per rank).
  EXPECT_EQ(r.restores_buddy, 1u);
  EXPECT_NEAR(r.lost_in(lost::restore), (4.0 / 3.0) / 0.5, 1e-6);
  // Steps 91-100 again at 8/6 s each (6 ranks carry the global batch of 8), plus step 101's
  // first 0.25 s.
  EXPECT_NEAR(r.lost_in(lost::recompute), 10 * 8.0 / 6.0 + 0.25, 1e-6);
  EXPECT_GT(r.lost_in(lost::degraded), 0) << "every later step is slower";
  EXPECT_NEAR(accounted(r), r.wall, 1e-6);
}

TEST(simulator, a_spare_takes_over_and_a_repaired_node_returns) {
  auto cluster = cluster_shape::compact(4, 2, 1);
  auto down = at(105.25, fault_kind::node_down, fault_target::of_node("n3"));
  down.repair = 50;
  const auto r = run(trace_of(2000, {down}), *cluster, simple_model());
  EXPECT_EQ(r.world_end, 8u);
  EXPECT_EQ(r.notes.at("ranks_moved"), 1u);
  EXPECT_EQ(r.notes.at("node_up"), 6u) << "five nodes at the start, n3 after its repair";
  EXPECT_NEAR(r.lost_in(lost::restart), 3, 1e-9) << "the moved ranks start on the spare";
  EXPECT_NEAR(r.lost_in(lost::degraded), 0, 1e-9);
}

TEST(simulator, regrow_scales_back_when_the_node_returns) {
  auto cluster = cluster_shape::compact(4, 2);
  auto down = at(105.25, fault_kind::node_down, fault_target::of_node("n3"));
  down.repair = 50;
  auto m = simple_model();
  m.regrow_below = 1;
  const auto r = run(trace_of(2000, {down}), *cluster, m);
  EXPECT_EQ(r.world_min, 6u);
  EXPECT_EQ(r.world_end, 8u);
  EXPECT_EQ(r.notes.at("regrow"), 1u);
  EXPECT_EQ(r.recoveries, 2u) << "one to shrink, one to grow back";
}

TEST(simulator, a_step_triggered_fault_fires_when_the_step_completes) {
  auto cluster = cluster_shape::compact(4, 2);
  fault_event e;
  e.at_step = 55;
  e.kind = fault_kind::crash;
  e.target = fault_target::of_rank(0);
  fault_event never;
  never.at_step = 100000;
  never.kind = fault_kind::crash;
  never.target = fault_target::of_rank(0);
  const auto r = run(trace_of(500, {e, never}), *cluster, simple_model());
  EXPECT_EQ(r.hit, 1u);
  EXPECT_EQ(r.not_reached, 1u);
  EXPECT_NEAR(r.lost_in(lost::recompute), 5, 1e-9) << "steps 51-55 again, from the snapshot of step 50";
}

TEST(simulator, a_job_with_a_step_count_completes) {
  auto cluster = cluster_shape::compact(4, 2);
  auto m = simple_model();
  m.steps = 100;
  const auto r = run(trace_of(10000), *cluster, m);
  EXPECT_EQ(r.end_state, "completed");
  EXPECT_NEAR(r.wall, 100 + 9 * 0.5, 1e-9);
  EXPECT_EQ(r.steps, 100u);
}

TEST(simulator, restart_everything_restores_the_newest_disk_checkpoint) {
  auto cluster = cluster_shape::compact(4, 2);
  // Checkpoints every 20 steps, written at 1 GiB/s: a 1 s stall, so a 21 s cycle. At 105.25 s
  // step 101 runs (step 100's checkpoint ended at 105 s).
  const auto r = run(trace_of(2000, {at(105.25, fault_kind::crash, fault_target::of_rank(3))}), *cluster, simple_model(),
                     policy_kind::restart_all);
  EXPECT_EQ(r.restores_disk, 1u);
  EXPECT_NEAR(r.lost_in(lost::restart), 3, 1e-9);
  EXPECT_NEAR(r.lost_in(lost::restore), 4, 1e-9) << "1 GiB from disk at 0.25 GiB/s";
  EXPECT_NEAR(r.lost_in(lost::recompute), 0.25, 1e-9);
  EXPECT_EQ(r.lost_in(lost::snapshots), 0);
  EXPECT_GT(r.lost_in(lost::checkpoints), 90);
  EXPECT_NEAR(accounted(r), r.wall, 1e-6);
}

TEST(simulator, restart_everything_has_its_own_detection_and_restart_costs) {
  auto cluster = cluster_shape::compact(4, 2);
  auto m = simple_model();
  m.restart_all_exit_detection = 5s;
  m.restart_all_hang_detection = 600s;
  m.restart_all_process_start = 60s;
  m.restart_all_rendezvous = 10s;
  m.restart_all_rendezvous_per_rank = 500ms;
  // 8 ranks share 1 GiB/s of storage: 128 MiB/s each, below the 256 MiB/s a rank reads alone.
  m.storage_bandwidth = double(std::uint64_t{1} << 30);
  const auto crash = run(trace_of(2000, {at(105.25, fault_kind::crash, fault_target::of_rank(3))}), *cluster, m,
                         policy_kind::restart_all);
  EXPECT_EQ(crash.restores_disk, 1u);
  EXPECT_NEAR(crash.lost_in(lost::detection), 5, 1e-9) << "the launcher's poll";
  EXPECT_NEAR(crash.lost_in(lost::restart), 60, 1e-9) << "every process starts anew";
  EXPECT_NEAR(crash.lost_in(lost::rendezvous), 10 + 0.5 * 8, 1e-9) << "a fixed part and a part per rank";
  EXPECT_NEAR(crash.lost_in(lost::restore), 8, 1e-9) << "1 GiB per rank at 1 GiB/s shared by 8 ranks";
  EXPECT_NEAR(accounted(crash), crash.wall, 1e-6);
  // A lost node is found when the survivors' collective times out, not by heartbeats.
  const auto lost_node = run(trace_of(2000, {at(105.25, fault_kind::node_down, fault_target::of_node("n1"))}), *cluster, m,
                             policy_kind::restart_all);
  EXPECT_NEAR(lost_node.lost_in(lost::detection), 600 + 0.1, 0.1 + 1e-9);
  // The in-place policy keeps its own: the exit at once, only the failed rank started, and its
  // state from memory; the storage bound applies to both, the rest of restart_all_* to neither.
  const auto in_place = run(trace_of(2000, {at(105.25, fault_kind::crash, fault_target::of_rank(3))}), *cluster, m);
  EXPECT_NEAR(in_place.lost_in(lost::detection), 0, 1e-9);
  EXPECT_NEAR(in_place.lost_in(lost::restart), 3, 1e-9);
  EXPECT_NEAR(in_place.lost_in(lost::rendezvous), 2, 1e-9);
  const auto pm = policy_model(m, policy_kind::in_place, 8);
  EXPECT_DOUBLE_EQ(pm.disk_bandwidth, double(std::uint64_t{1} << 27));
  // The assumptions printed beside the results say the same.
  const auto ra = assumptions(m, policy_kind::restart_all, 8);
  const auto row = [&](const std::string& what) {
    for (const auto& a : ra)
      if (a.what == what)
        return a.value;
    return std::string{"(none)"};
  };
  EXPECT_EQ(row("a process exit, found after"), "5.00 s (the launcher's poll)");
  EXPECT_EQ(row("a lost node, found after"), "10 min 00 s (the collective timeout)");
  EXPECT_EQ(row("communicator ready after").substr(0, 7), "14.00 s");
  EXPECT_EQ(row("state read from disk").substr(0, 6), "8.00 s");
}

TEST(simulator, buddies_across_racks_keep_a_copy_through_a_rack_failure) {
  // Two racks of four nodes; the whole of rack0 goes down at once (its switch).
  auto cluster = cluster_shape::compact(8, 2, 0, 4);
  ASSERT_TRUE(cluster.has_value());
  std::vector<fault_event> rack;
  for (int n = 0; n < 4; ++n)
    rack.push_back(at(105.25, fault_kind::node_down, fault_target::of_node("n" + std::to_string(n))));
  auto m = simple_model();
  const auto across = run(trace_of(2000, rack), *cluster, m);
  ASSERT_EQ(across.restores.size(), 2u);
  EXPECT_EQ(across.restores_buddy, 1u) << "rack0's replicas are on rack1";
  EXPECT_EQ(across.restores_scratch, 0u);
  EXPECT_EQ(across.restores[1].step, 90u) << "step 100's replicas were still on their way (2 s after 105 s)";
  m.buddy_across_domains = 0;
  const auto next = run(trace_of(2000, rack), *cluster, m);
  EXPECT_EQ(next.restores_buddy, 0u);
  EXPECT_EQ(next.restores_scratch, 1u) << "n0-n2 kept their replicas in their own rack: both copies gone, nothing on disk";
  EXPECT_GT(next.lost_in(lost::recompute), across.lost_in(lost::recompute) + 90);
  EXPECT_LT(next.ratio(), across.ratio());
}

TEST(simulator, every_replay_ends_in_bounded_time) {
  auto cluster = cluster_shape::compact(4, 2);
  auto m = simple_model();
  m.step_time = 1ns;
  m.hang_timeout = 10s;
  auto r = simulate(trace_of(1e9), *cluster, m, policy_kind::in_place);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("step_time: 1ns steps over"), std::string::npos) << r.error();
  EXPECT_NE(r.error().message().find("at most 1,000,000,000"), std::string::npos) << r.error();
}

TEST(simulator, in_place_beats_restart_everything_on_the_same_trace) {
  auto cluster = cluster_shape::compact(16, 4);
  generate_options g;
  g.rate = 0.5;
  g.days = 2;
  g.seed = 11;
  g.repair_mean = 3600;
  g.mix = *parse_mix("gpu=1,software=2,hang=0.5,network=0.5,collective=0.5");
  auto t = generate(*cluster, g);
  ASSERT_TRUE(t.has_value());
  ASSERT_GT(t->events.size(), 30u);
  auto m = simple_model();
  m.regrow_below = 1;
  const auto a = run(*t, *cluster, m, policy_kind::in_place);
  const auto b = run(*t, *cluster, m, policy_kind::restart_all);
  EXPECT_GT(a.ratio(), b.ratio());
  EXPECT_GT(a.ratio(), 0.5);
  EXPECT_GT(b.ratio(), 0);
  EXPECT_LT(a.lost_in(lost::recompute), b.lost_in(lost::recompute));
  EXPECT_NEAR(accounted(a), a.wall, 1e-6 * a.wall);
  EXPECT_NEAR(accounted(b), b.wall, 1e-6 * b.wall);
  EXPECT_EQ(a.faults, t->events.size());
}

TEST(simulator, every_kind_is_accounted_for_and_runs_are_deterministic) {
  auto cluster = cluster_shape::compact(8, 4, 1);
  generate_options g;
  g.rate = 0.3;
  g.days = 3;
  g.seed = 5;
  g.repair_mean = 7200;
  g.outage_mean = 60;
  g.mix = *parse_mix("gpu=1,hbm=1,host=1,network=1,link=1,software=1,hang=1,slow=1,disk=1,collective=1,checkpoint=1");
  auto t = generate(*cluster, g);
  ASSERT_TRUE(t.has_value());
  for (auto p : {policy_kind::in_place, policy_kind::restart_all}) {
    const auto a = run(*t, *cluster, simple_model(), p);
    const auto b = run(*t, *cluster, simple_model(), p);
    EXPECT_NEAR(accounted(a), a.wall, 1e-6 * a.wall) << to_string(p);
    EXPECT_EQ(a.useful, b.useful);
    EXPECT_EQ(a.lost_time, b.lost_time);
    EXPECT_EQ(a.recoveries, b.recoveries);
    EXPECT_GT(a.ratio(), 0);
    EXPECT_LE(a.ratio(), 1);
    EXPECT_GT(a.hit, 0u);
  }
}

TEST(simulator, full_disks_fail_checkpoints) {
  auto cluster = cluster_shape::compact(4, 2);
  auto full = at(10, fault_kind::disk_full, fault_target::of_node("n1"));
  full.duration = 100;
  const auto r = run(trace_of(500, {full}), *cluster, simple_model(), policy_kind::restart_all);
  // 21 s cycles: the checkpoints of steps 20-100 are written within [10 s, 110 s) and fail; the
  // later ones commit.
  EXPECT_EQ(r.checkpoints_failed, 5u);
  EXPECT_GT(r.checkpoints, 20u);
}

TEST(simulator, bad_models_and_traces_without_a_duration) {
  auto cluster = cluster_shape::compact(4, 2);
  auto m = simple_model();
  m.hang_timeout = 1s;
  EXPECT_FALSE(simulate(trace_of(10), *cluster, m, policy_kind::in_place).has_value());
  fault_trace t;
  auto e = simulate(t, *cluster, simple_model(), policy_kind::in_place);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message().find("no duration"), std::string::npos);
}

}  // namespace
}  // namespace rekindle::trace
