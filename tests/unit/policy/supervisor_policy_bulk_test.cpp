// The bulk events of supervisor_policy (on_ranks_ready, on_progress_all, on_copies_changed_all) against
// the per-rank calls they stand for: the same decisions on the same inputs.

#include <gtest/gtest.h>

#include "policy/supervisor_policy.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/policy.hpp"

namespace rekindle::policy {
namespace {

using namespace std::chrono_literals;

policy_config three_nodes(bool with_spare) { return testing::small_cluster(3, with_spare); }

using testing::all_of;

std::vector<rank_id> ranks_of(const supervisor_policy& p) {
  std::vector<rank_id> out;
  for (const auto& s : p.placement())
    out.push_back(s.rank);
  return out;
}

void nodes_up(supervisor_policy& p, std::uint32_t nodes) {
  std::vector<node_id> all;
  for (std::uint32_t n = 0; n < nodes; ++n)
    all.push_back(node_id{n});
  (void)p.on_nodes_up(all);
}

TEST(supervisor_policy_bulk, nodes_up_starts_like_node_by_node) {
  fake_clock clock;
  supervisor_policy one_by_one{three_nodes(true), clock};
  supervisor_policy bulk{three_nodes(true), clock};
  std::vector<policy_action> a;
  for (std::uint32_t n = 0; n < 4; ++n) {
    auto more = one_by_one.on_node_up(node_id{n});
    a.insert(a.end(), more.begin(), more.end());
  }
  auto b = bulk.on_nodes_up(std::vector<node_id>{node_id{0}, node_id{1}, node_id{2}, node_id{3}});
  EXPECT_EQ(bulk.state(), job_state::rendezvous);
  EXPECT_EQ(bulk.epoch(), one_by_one.epoch());
  EXPECT_EQ(all_of<note_event>(b).size(), all_of<note_event>(a).size());
  auto spawns_a = all_of<spawn_rank>(a);
  auto spawns_b = all_of<spawn_rank>(b);
  ASSERT_EQ(spawns_b.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(spawns_b[i].slot, spawns_a[i].slot);
  EXPECT_TRUE(bulk.node_up(node_id{3}));
}

TEST(supervisor_policy_bulk, nodes_up_waits_for_every_worker_node) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  auto a = p.on_nodes_up(std::vector<node_id>{node_id{0}, node_id{2}, node_id{9}});
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  EXPECT_TRUE(all_of<spawn_rank>(a).empty());
  EXPECT_EQ(all_of<note_event>(a).size(), 2u) << "node 9 is not in the configuration";
  a = p.on_nodes_up(std::vector<node_id>{node_id{1}});
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_EQ(all_of<spawn_rank>(a).size(), 6u);
}

TEST(supervisor_policy_bulk, ranks_ready_starts_like_rank_by_rank_registration) {
  fake_clock clock;
  supervisor_policy one_by_one{three_nodes(false), clock};
  supervisor_policy bulk{three_nodes(false), clock};
  nodes_up(one_by_one, 3);
  nodes_up(bulk, 3);
  std::vector<policy_action> last;
  for (auto r : ranks_of(one_by_one))
    last = one_by_one.on_ranks_ready(std::vector<rank_id>{r}, one_by_one.epoch());
  const auto all = ranks_of(bulk);
  auto a = bulk.on_ranks_ready(all, bulk.epoch());
  auto expected = all_of<start_epoch>(last);
  auto got = all_of<start_epoch>(a);
  ASSERT_EQ(expected.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].placement, expected[0].placement);
  EXPECT_EQ(got[0].restore_step, expected[0].restore_step);
  EXPECT_EQ(bulk.state(), job_state::running);
}

TEST(supervisor_policy_bulk, ranks_ready_waits_for_every_rank_and_ignores_stale_epochs) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  nodes_up(p, 3);
  const std::vector<rank_id> some{rank_id{0}, rank_id{1}, rank_id{2}, rank_id{3}, rank_id{4}};
  EXPECT_TRUE(all_of<start_epoch>(p.on_ranks_ready(some, p.epoch())).empty());
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_TRUE(p.on_ranks_ready(std::vector<rank_id>{rank_id{5}}, epoch_t{p.epoch().value() + 1}).empty())
      << "a registration for another epoch counts for nothing";
  EXPECT_EQ(p.state(), job_state::rendezvous);
  auto a = p.on_ranks_ready(std::vector<rank_id>{rank_id{5}}, p.epoch());
  EXPECT_EQ(all_of<start_epoch>(a).size(), 1u);
  EXPECT_EQ(p.state(), job_state::running);
}

TEST(supervisor_policy_bulk, progress_all_moves_the_step_resets_hang_detection_and_completes) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  nodes_up(p, 3);
  (void)p.on_ranks_ready(ranks_of(p), p.epoch());
  clock.advance(4s);
  EXPECT_TRUE(p.on_progress_all(p.epoch(), step_t{40}).empty());
  EXPECT_EQ(p.step(), step_t{40});
  clock.advance(4s);  // 8 s after the start, 4 s after the progress: not hung (timeout 5 s)
  for (std::uint32_t n = 0; n < 3; ++n)
    p.on_heartbeat(node_id{n});
  EXPECT_TRUE(all_of<kill_rank>(p.on_tick()).empty());
  EXPECT_TRUE(p.on_progress_all(epoch_t{p.epoch().value() + 1}, step_t{100}).empty());
  EXPECT_EQ(p.step(), step_t{40}) << "progress of another epoch is dropped";
  auto done = all_of<finish_job>(p.on_progress_all(p.epoch(), step_t{100}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].state, job_state::completed);
  EXPECT_EQ(p.state(), job_state::completed);
}

TEST(supervisor_policy_bulk, progress_all_is_the_lowest_step_of_any_rank) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  nodes_up(p, 3);
  (void)p.on_ranks_ready(ranks_of(p), p.epoch());
  (void)p.on_progress(rank_id{3}, p.epoch(), step_t{30});
  (void)p.on_progress_all(p.epoch(), step_t{20});
  EXPECT_EQ(p.step(), step_t{20});
  (void)p.on_progress_all(p.epoch(), step_t{25});
  EXPECT_EQ(p.step(), step_t{25}) << "rank 3 keeps its step 30; the others are at 25";
}

// Reports one snapshot round rank by rank or in bulk, then loses node n1 and returns the start.
start_epoch restore_after_losing_n1(bool bulk, bool with_spare, bool buddy_of_n1_missing) {
  fake_clock clock;
  supervisor_policy p{three_nodes(with_spare), clock};
  nodes_up(p, with_spare ? 4 : 3);
  (void)p.on_ranks_ready(ranks_of(p), p.epoch());
  // Buddies: n0 -> n1, n1 -> n2, n2 -> n0. Step 10 everywhere, then step 15 with n1's replica
  // missing when asked.
  std::vector<node_id> buddy{node_id{1}, node_id{2}, node_id{0}, node_id{3}};
  for (std::uint64_t step : {10u, 15u}) {
    auto buddies = buddy;
    if (step == 15 && buddy_of_n1_missing)
      buddies[1] = node_id{99};
    if (bulk) {
      testing::copy_on_every_node(p, true, p.epoch(), step_t{step}, copy_kind::local_slot);
      testing::copy_on_every_node(p, true, p.epoch(), step_t{step}, copy_kind::buddy_replica, buddies);
    } else {
      for (const auto& s : p.placement()) {
        p.on_snapshot({p.epoch(), s.rank, step_t{step}, s.node, copy_kind::local_slot});
        p.on_snapshot({p.epoch(), s.rank, step_t{step}, buddies[s.node.value()], copy_kind::buddy_replica});
      }
    }
  }
  (void)p.on_node_lost(node_id{1}, "gone");
  std::vector<policy_action> a = p.on_ranks_ready(ranks_of(p), p.epoch());
  auto starts = all_of<start_epoch>(a);
  EXPECT_EQ(starts.size(), 1u);
  return starts.empty() ? start_epoch{} : starts[0];
}

TEST(supervisor_policy_bulk, copies_changed_all_records_what_per_rank_reports_record) {
  for (bool spare : {false, true}) {
    for (bool missing : {false, true}) {
      auto one_by_one = restore_after_losing_n1(false, spare, missing);
      auto bulk = restore_after_losing_n1(true, spare, missing);
      EXPECT_EQ(bulk.restore_step, one_by_one.restore_step) << spare << missing;
      EXPECT_EQ(bulk.restore_world, one_by_one.restore_world) << spare << missing;
      EXPECT_EQ(bulk.sources, one_by_one.sources) << spare << missing;
      EXPECT_EQ(bulk.placement, one_by_one.placement) << spare << missing;
    }
  }
  // The decisions themselves: n1's ranks restore from n2's replicas at step 15, or at step 10
  // when n1's step-15 replica was never made.
  auto full = restore_after_losing_n1(true, false, false);
  EXPECT_EQ(full.restore_step, step_t{15});
  ASSERT_EQ(full.sources.size(), 6u);
  EXPECT_EQ(full.sources[2], (state_source{rank_id{2}, node_id{2}, copy_kind::buddy_replica}));
  EXPECT_EQ(full.sources[0], (state_source{rank_id{0}, node_id{0}, copy_kind::local_slot}));
  EXPECT_EQ(restore_after_losing_n1(true, false, true).restore_step, step_t{10});
}

TEST(supervisor_policy_bulk, copies_changed_all_records_an_older_epoch_of_the_same_world_but_not_of_another) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  nodes_up(p, 3);
  (void)p.on_ranks_ready(ranks_of(p), p.epoch());
  const auto first = p.epoch();
  (void)p.on_rank_failed(rank_id{0}, first, "crash");
  // A copy written in the epoch before the restart in place is a copy of the same world, as a
  // per-rank report of it would say.
  EXPECT_FALSE(testing::copy_on_every_node(p, true, first, step_t{10}, copy_kind::local_slot));
  auto starts = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{10});
  // After a resize the placement numbers the ranks anew: a bulk report of the old world is refused.
  const auto old_world = p.epoch();
  (void)p.scale(4);
  (void)testing::copy_on_every_node(p, true, old_world, step_t{20}, copy_kind::local_slot);
  starts = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{10}) << "step 20 of the six-rank world was not recorded";
  EXPECT_EQ(starts[0].restore_world, 6u);
}

TEST(supervisor_policy_bulk, copies_held_and_dropped_in_bulk_commit_and_forget_as_per_rank_reports_do) {
  // The same history per rank and in bulk: the committed step, the window of reported steps (the
  // committed one kept past it), and the copies dropped.
  const std::vector<node_id> buddy{node_id{1}, node_id{2}, node_id{0}};
  const auto run = [&](bool bulk) {
    fake_clock clock;
    auto p = std::make_unique<supervisor_policy>(three_nodes(false), clock);
    nodes_up(*p, 3);
    (void)p->on_ranks_ready(ranks_of(*p), p->epoch());
    std::vector<std::optional<step_t>> committed;
    std::vector<step_t> at_90;
    const auto held = [&](std::uint64_t step, copy_kind where, std::span<const node_id> holders) {
      if (bulk)
        return testing::copy_on_every_node(*p, true, p->epoch(), step_t{step}, where, holders);
      bool any = false;
      for (const auto& s : p->placement())
        any = p->on_snapshot({p->epoch(), s.rank, step_t{step}, holders.empty() ? s.node : holders[s.node.value()], where}) || any;
      return any;
    };
    for (std::uint64_t step = 5; step <= 100; step += 5) {
      EXPECT_FALSE(held(step, copy_kind::local_slot, {})) << "one copy commits nothing on three nodes";
      // Replicas of step 5 arrive, then none until step 95: step 5 stays committed past the window.
      if (step == 5 || step >= 95) {
        EXPECT_TRUE(held(step, copy_kind::buddy_replica, buddy)) << step;
      }
      committed.push_back(p->copies().committed());
      if (step == 90)
        at_90 = p->copies().steps_of(rank_id{0});
      if (step == 80 || step == 100) {
        if (bulk) {
          testing::copy_on_every_node(*p, false, p->epoch(), step_t{step - 5}, copy_kind::local_slot);
        } else {
          for (const auto& s : p->placement())
            p->on_snapshot_dropped({p->epoch(), s.rank, step_t{step - 5}, s.node, copy_kind::local_slot});
        }
      }
    }
    std::vector<std::vector<step_t>> steps;
    for (const auto& s : p->placement())
      steps.push_back(p->copies().steps_of(s.rank));
    return std::tuple{committed, steps, at_90};
  };
  const auto [committed, steps, at_90] = run(false);
  const auto [bulk_committed, bulk_steps, bulk_at_90] = run(true);
  EXPECT_EQ(bulk_committed, committed);
  EXPECT_EQ(bulk_steps, steps);
  EXPECT_EQ(bulk_at_90, at_90);
  ASSERT_EQ(at_90.size(), 16u);
  EXPECT_EQ(at_90.front(), step_t{5}) << "the committed step outlives the window until a newer one commits";
  EXPECT_EQ(at_90[1], step_t{15}) << "step 10 made room";
  EXPECT_EQ(std::count(at_90.begin(), at_90.end(), step_t{75}), 0) << "its holders dropped it";
  EXPECT_EQ(committed.back(), step_t{100});
}

// World 1: six ranks on n0-n2 with step 10 in every slot and replicas on the next node; then
// scaled to world 2, four ranks on n0-n1, restored from world 1, with step 20 in the slots only.
void two_worlds(supervisor_policy& p) {
  nodes_up(p, 3);
  (void)p.on_ranks_ready(ranks_of(p), p.epoch());
  const std::vector<node_id> buddy{node_id{1}, node_id{2}, node_id{0}};
  testing::copy_on_every_node(p, true, p.epoch(), step_t{10}, copy_kind::local_slot);
  testing::copy_on_every_node(p, true, p.epoch(), step_t{10}, copy_kind::buddy_replica, buddy);
  (void)p.scale(4);
  auto start = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_world, 6u);
  EXPECT_EQ(p.prune_snapshots(), 0u) << "world 1 is the restore point";
  testing::copy_on_every_node(p, true, p.epoch(), step_t{20}, copy_kind::local_slot);
}

TEST(supervisor_policy_bulk, prune_keeps_the_restore_point_and_one_fallback) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  EXPECT_EQ(p.prune_snapshots(), 0u) << "nothing to restore yet: nothing is forgotten";
  two_worlds(p);
  EXPECT_EQ(p.prune_snapshots(), 0u) << "world 2 is the restore point, world 1 the fallback";
  // Losing n1 loses world 2's step 20 of ranks 2 and 3 (no replicas): the fallback serves.
  (void)p.on_node_lost(node_id{1}, "gone");
  auto start = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{10});
  EXPECT_EQ(start[0].restore_world, 6u);
  EXPECT_EQ(start[0].sources[2], (state_source{rank_id{2}, node_id{2}, copy_kind::buddy_replica}));
}

TEST(supervisor_policy_bulk, prune_forgets_what_lies_behind_the_fallback) {
  fake_clock clock;
  supervisor_policy p{three_nodes(false), clock};
  two_worlds(p);
  (void)p.scale(2);
  auto start = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{20});
  testing::copy_on_every_node(p, true, p.epoch(), step_t{30}, copy_kind::local_slot);
  EXPECT_EQ(p.prune_snapshots(), 1u) << "world 3 is the restore point, world 2 the fallback: world 1 goes";
  (void)p.on_rank_failed(rank_id{1}, p.epoch(), "crash");
  start = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{30});
  EXPECT_EQ(start[0].restore_world, 2u);
}

TEST(supervisor_policy_bulk, sixteen_thousand_ranks_recover_from_a_lost_node) {
  fake_clock clock;
  policy_config c;
  for (std::uint32_t n = 0; n < 2048; ++n)
    c.nodes.push_back({"n" + std::to_string(n), 8, false});
  c.nodes.push_back({"spare", 0, true});
  c.total_steps = 1'000'000;
  supervisor_policy p{c, clock};
  nodes_up(p, 2049);
  (void)p.on_ranks_ready(ranks_of(p), p.epoch());
  ASSERT_EQ(p.world(), 16384u);
  (void)p.on_progress_all(p.epoch(), step_t{50});
  std::vector<node_id> buddy;
  for (std::uint32_t n = 0; n < 2049; ++n)
    buddy.push_back(node_id{(n + 1) % 2048});
  testing::copy_on_every_node(p, true, p.epoch(), step_t{50}, copy_kind::local_slot);
  testing::copy_on_every_node(p, true, p.epoch(), step_t{50}, copy_kind::buddy_replica, buddy);
  auto lost = p.on_node_lost(node_id{7}, "gone");
  EXPECT_EQ(all_of<spawn_rank>(lost).size(), 16384u);
  auto starts = all_of<start_epoch>(p.on_ranks_ready(ranks_of(p), p.epoch()));
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{50});
  EXPECT_EQ(starts[0].placement[56].node, node_id{2048}) << "rank 56 (n7's first) moved to the spare";
  EXPECT_EQ(starts[0].sources[56], (state_source{rank_id{56}, node_id{8}, copy_kind::buddy_replica}));
}

}  // namespace
}  // namespace rekindle::policy
