#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "policy/supervisor_policy.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/policy.hpp"

namespace rekindle::policy {
namespace {

using namespace std::chrono_literals;

policy_config two_nodes(bool with_spare = false) {
  auto c = testing::small_cluster(2, with_spare);
  c.max_restarts_per_rank = 2;
  c.max_restarts = 10;
  c.backoff = 100ms;
  c.backoff_max = 1s;
  return c;
}

using testing::all_of;

// Brings every node up and every rank through rendezvous; returns the start action.
start_epoch start_job(supervisor_policy& p, std::uint32_t nodes) {
  for (std::uint32_t n = 0; n < nodes; ++n)
    (void)p.on_node_up(node_id{n});
  EXPECT_EQ(p.state(), job_state::rendezvous);
  std::vector<policy_action> last;
  for (const auto& s : p.placement())
    last = p.on_rank_ready(s.rank, p.epoch());
  auto starts = all_of<start_epoch>(last);
  EXPECT_EQ(starts.size(), 1u);
  return starts.empty() ? start_epoch{} : starts[0];
}

// Every rank reports a snapshot of `step` in its own slot.
void snapshot_all(supervisor_policy& p, std::uint64_t step) {
  for (const auto& s : p.placement())
    p.on_snapshot({p.epoch(), s.rank, step_t{step}, s.node, copy_kind::local_slot});
}

// Every rank of the placement registers; the start it leads to (none or one).
std::vector<start_epoch> all_ready(supervisor_policy& p) {
  std::vector<policy_action> last;
  for (const auto& s : p.placement())
    last = p.on_rank_ready(s.rank, p.epoch());
  return all_of<start_epoch>(last);
}

// Four nodes of one device each, in a plan (job.plan) of two replicas of two stages: rank r on
// node r.
policy_config four_nodes_in_a_plan() {
  auto config = testing::small_cluster(4, false);
  config.world_multiple = 2;
  config.initial = {{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}, {rank_id{2}, node_id{2}, 0},
                    {rank_id{3}, node_id{3}, 0}};
  return config;
}

TEST(supervisor_policy, starts_once_every_worker_node_is_up) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  auto a = p.on_node_up(node_id{0});
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  EXPECT_TRUE(all_of<spawn_rank>(a).empty());
  a = p.on_node_up(node_id{1});
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_EQ(p.epoch(), epoch_t{1});
  ASSERT_EQ(all_of<persist_epoch>(a).size(), 1u);
  auto spawns = all_of<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 4u);
  EXPECT_EQ(spawns[2].slot, (rank_slot{rank_id{2}, node_id{1}, 0}));
  EXPECT_EQ(spawns[2].world, 4u);
  // The epoch is persisted before anything announces it.
  std::size_t persist_at = 0, spawn_at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::holds_alternative<persist_epoch>(a[i]) && persist_at == 0)
      persist_at = i + 1;
    if (std::holds_alternative<spawn_ranks>(a[i]) && spawn_at == 0)
      spawn_at = i + 1;
  }
  EXPECT_LT(persist_at, spawn_at);
}

TEST(supervisor_policy, first_start_is_from_scratch_and_progress_completes) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  auto start = start_job(p, 2);
  EXPECT_EQ(p.state(), job_state::running);
  EXPECT_EQ(start.restore_step, step_t{0});
  EXPECT_EQ(start.placement.size(), 4u);
  for (std::uint32_t r = 0; r < 3; ++r)
    EXPECT_TRUE(all_of<finish_job>(p.on_progress(rank_id{r}, p.epoch(), step_t{100})).empty());
  auto done = all_of<finish_job>(p.on_progress(rank_id{3}, p.epoch(), step_t{100}));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].state, job_state::completed);
}

TEST(supervisor_policy, a_failed_rank_restarts_in_place_from_the_newest_common_snapshot) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  snapshot_all(p, 5);
  snapshot_all(p, 10);
  // Rank 2 crashed while writing step 15: only the others have it.
  for (std::uint32_t r : {0u, 1u, 3u})
    p.on_snapshot({p.epoch(), rank_id{r}, step_t{15}, node_id{r / 2}, copy_kind::local_slot});
  const auto old_epoch = p.epoch();
  auto a = p.on_rank_failed(rank_id{2}, old_epoch, "exited with signal 9");
  EXPECT_EQ(p.epoch(), old_epoch.next());
  EXPECT_EQ(all_of<abort_ranks>(a).size(), 1u);
  auto spawns = all_of<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 4u);
  EXPECT_EQ(spawns[2].slot, (rank_slot{rank_id{2}, node_id{1}, 0})) << "in place";
  EXPECT_EQ(spawns[2].delay, 0ns) << "a first failure restarts at once";
  // Stale messages of the old epoch change nothing.
  EXPECT_TRUE(p.on_rank_ready(rank_id{0}, old_epoch).empty());
  EXPECT_TRUE(p.on_rank_failed(rank_id{3}, old_epoch, "collective aborted").empty());
  EXPECT_EQ(p.restarts(), 1u);
  std::vector<policy_action> last;
  for (std::uint32_t r = 0; r < 4; ++r)
    last = p.on_rank_ready(rank_id{r}, p.epoch());
  auto start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{10});
  ASSERT_EQ(start[0].sources.size(), 4u);
  EXPECT_EQ(start[0].sources[2], (state_source{rank_id{2}, node_id{1}, copy_kind::local_slot}));
}

TEST(supervisor_policy, repeated_failures_back_off_and_hit_the_limit) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  auto a = p.on_rank_failed(rank_id{1}, p.epoch(), "segfault");
  for (std::uint32_t r = 0; r < 4; ++r)
    a = p.on_rank_ready(rank_id{r}, p.epoch());
  a = p.on_rank_failed(rank_id{1}, p.epoch(), "segfault");
  auto spawns = all_of<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 4u);
  EXPECT_EQ(spawns[1].delay, 100ms) << "a second failure waits the back-off";
  EXPECT_EQ(spawns[0].delay, 0ns) << "survivors are not delayed";
  a = p.on_rank_failed(rank_id{1}, p.epoch(), "segfault");
  EXPECT_EQ(p.state(), job_state::failed);
  auto fin = all_of<finish_job>(a);
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].reason, "rank 1 failed 3 times (limit 2); last: segfault");
}

TEST(supervisor_policy, a_failure_after_training_on_restarts_at_once_again) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  (void)p.on_rank_failed(rank_id{1}, p.epoch(), "segfault");
  (void)all_ready(p);
  // Every rank trains past the restore point and a snapshot.
  for (std::uint32_t r = 0; r < 4; ++r)
    (void)p.on_progress(rank_id{r}, p.epoch(), step_t{5});
  auto spawns = all_of<spawn_rank>(p.on_rank_failed(rank_id{1}, p.epoch(), "segfault"));
  ASSERT_EQ(spawns.size(), 4u);
  EXPECT_EQ(spawns[1].delay, 0ns) << "not a crash loop: no back-off";
  EXPECT_EQ(p.restarts_of(rank_id{1}), 2u) << "the restart limit still counts every failure";
}

TEST(supervisor_policy, a_lost_node_moves_its_ranks_to_a_spare_and_restores_from_buddy_replicas) {
  fake_clock clock;
  supervisor_policy p{two_nodes(true), clock};
  (void)start_job(p, 3);
  snapshot_all(p, 10);
  // n0 holds replicas of n1's ranks, n1 of n0's.
  for (std::uint32_t r = 0; r < 4; ++r)
    p.on_snapshot({p.epoch(), rank_id{r}, step_t{10}, node_id{r < 2 ? 1u : 0u}, copy_kind::buddy_replica});
  auto a = p.on_node_lost(node_id{1}, "daemon killed");
  auto spawns = all_of<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 4u);
  EXPECT_EQ(spawns[2].slot, (rank_slot{rank_id{2}, node_id{2}, 0}));
  EXPECT_EQ(spawns[3].slot, (rank_slot{rank_id{3}, node_id{2}, 1}));
  EXPECT_EQ(p.world(), 4u);
  std::vector<policy_action> last;
  for (std::uint32_t r = 0; r < 4; ++r)
    last = p.on_rank_ready(rank_id{r}, p.epoch());
  auto start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{10});
  EXPECT_EQ(start[0].sources[0], (state_source{rank_id{0}, node_id{0}, copy_kind::local_slot}));
  EXPECT_EQ(start[0].sources[2], (state_source{rank_id{2}, node_id{0}, copy_kind::buddy_replica}));
}

TEST(supervisor_policy, without_a_spare_the_world_shrinks_and_restores_the_old_world) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  snapshot_all(p, 20);
  for (std::uint32_t r = 2; r < 4; ++r)
    p.on_snapshot({p.epoch(), rank_id{r}, step_t{20}, node_id{0}, copy_kind::buddy_replica});
  auto a = p.on_node_lost(node_id{1}, "no heartbeat");
  EXPECT_EQ(p.world(), 2u);
  std::vector<policy_action> last;
  for (std::uint32_t r = 0; r < 2; ++r)
    last = p.on_rank_ready(rank_id{r}, p.epoch());
  auto start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].placement.size(), 2u);
  EXPECT_EQ(start[0].restore_world, 4u) << "the state of the old 4-rank world is resharded";
  EXPECT_EQ(start[0].restore_step, step_t{20});
  ASSERT_EQ(start[0].sources.size(), 4u);
  EXPECT_EQ(start[0].sources[3].holder, node_id{0});
  // Snapshots of the new world take over once every rank has one.
  snapshot_all(p, 25);
  auto b = p.on_rank_failed(rank_id{1}, p.epoch(), "crash");
  for (std::uint32_t r = 0; r < 2; ++r)
    last = p.on_rank_ready(rank_id{r}, p.epoch());
  start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{25});
  EXPECT_EQ(start[0].restore_world, 2u);
}

TEST(supervisor_policy, with_pipelines_the_world_shrinks_and_scales_in_whole_pipelines) {
  fake_clock clock;
  auto config = testing::small_cluster(3, false);  // 6 ranks: 2 pipelines of 3 stages
  config.world_multiple = 3;
  supervisor_policy p{config, clock};
  (void)start_job(p, 3);
  auto refused = all_of<note_event>(p.scale(4));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].kind, "scale_refused");
  EXPECT_NE(refused[0].detail.find("pipelines of 3 stages need a multiple of 3"), std::string::npos) << refused[0].detail;
  EXPECT_EQ(p.world(), 6u);
  snapshot_all(p, 10);
  auto notes = all_of<note_event>(p.on_node_lost(node_id{1}, "gone"));
  const auto shrink = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "world_shrinks"; });
  ASSERT_NE(shrink, notes.end());
  EXPECT_NE(shrink->detail.find("from 6 to 3 ranks"), std::string::npos) << shrink->detail;
  EXPECT_NE(shrink->detail.find("1 rank(s) idle, short of a whole pipeline of 3 stages"), std::string::npos)
      << shrink->detail;
  EXPECT_EQ(p.world(), 3u);
  for (const auto& s : p.placement())
    EXPECT_NE(s.node, node_id{1});
}

TEST(supervisor_policy, a_planned_placement_starts_without_the_nodes_it_leaves_out_which_then_stand_by) {
  fake_clock clock;
  auto config = testing::small_cluster(3, false);
  config.world_multiple = 2;
  // A plan (job.plan): replica 0 is n2's device 1 then n0's device 0; n1 is not in it.
  config.initial = {{rank_id{0}, node_id{2}, 1}, {rank_id{1}, node_id{0}, 0}};
  supervisor_policy p{config, clock};
  (void)p.on_node_up(node_id{0});
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  (void)p.on_node_up(node_id{2});
  ASSERT_EQ(p.state(), job_state::rendezvous) << "n1 is not needed";
  EXPECT_EQ(p.placement(), config.initial);
  ASSERT_EQ(all_ready(p).size(), 1u);
  (void)p.on_node_up(node_id{1});
  snapshot_all(p, 10);
  auto a = p.on_node_lost(node_id{2}, "gone");
  const auto notes = all_of<note_event>(a);
  const auto moved = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "ranks_moved"; });
  ASSERT_NE(moved, notes.end());
  EXPECT_NE(moved->detail.find("move to spare n1"), std::string::npos) << moved->detail;
  EXPECT_EQ(p.placement(), (std::vector<rank_slot>{{rank_id{0}, node_id{1}, 0}, {rank_id{1}, node_id{0}, 0}}))
      << "rank numbers, and so the stages, are kept";
}

TEST(supervisor_policy, with_no_node_free_a_replanner_gives_the_new_world_and_its_error_keeps_the_shrink) {
  fake_clock clock;
  auto config = testing::small_cluster(3, false);
  config.world_multiple = 2;
  supervisor_policy p{config, clock};
  std::vector<std::pair<std::size_t, node_id>> asked;
  bool refuse = false;
  p.set_replanner([&](const std::vector<rank_slot>& placement, node_id lost) -> expected<replanned> {
    asked.emplace_back(placement.size(), lost);
    if (refuse)
      return status{errc::failed_precondition, "the plan is tensor parallel"};
    // Three ranks of one stage each on the nodes left.
    return replanned{{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{0}, 1}, {rank_id{2}, node_id{1}, 0}}, 1, "d=3 p=1"};
  });
  (void)start_job(p, 3);
  snapshot_all(p, 10);
  auto notes = all_of<note_event>(p.on_node_lost(node_id{2}, "gone"));
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::pair<std::size_t, node_id>{6, node_id{2}}));
  auto it = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "replanned"; });
  ASSERT_NE(it, notes.end());
  EXPECT_NE(it->detail.find("re-planned from 6 to 3 ranks; d=3 p=1"), std::string::npos) << it->detail;
  EXPECT_EQ(p.world(), 3u);
  EXPECT_EQ(p.world_multiple(), 1u) << "the new plan's stages";
  // A re-plan that fails: the rule without one, and why.
  ASSERT_EQ(all_ready(p).size(), 1u);
  snapshot_all(p, 20);
  p.set_world_multiple(2);
  refuse = true;
  notes = all_of<note_event>(p.on_node_lost(node_id{1}, "gone"));
  it = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "world_shrinks"; });
  ASSERT_NE(it, notes.end());
  EXPECT_NE(it->detail.find("no re-plan: the plan is tensor parallel"), std::string::npos) << it->detail;
  EXPECT_EQ(p.world(), 2u);
}

TEST(supervisor_policy, a_re_planned_world_returns_to_the_plan_once_its_nodes_are_back) {
  fake_clock clock;
  const auto config = four_nodes_in_a_plan();
  supervisor_policy p{config, clock};
  p.set_replanner([&](const std::vector<rank_slot>&, node_id) -> expected<replanned> {
    return replanned{{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}, {rank_id{2}, node_id{2}, 0}}, 1, "d=3 p=1"};
  });
  int restored = 0;
  p.set_plan_return([&] { ++restored; });
  (void)start_job(p, 4);
  snapshot_all(p, 10);
  (void)p.on_node_lost(node_id{3}, "gone");
  ASSERT_EQ(p.world(), 3u);
  ASSERT_EQ(all_ready(p).size(), 1u);
  snapshot_all(p, 20);
  // A node that was never gone reconnects: the plan's n3 is still down, nothing changes.
  EXPECT_TRUE(all_of<note_event>(p.on_node_up(node_id{0})).empty());
  EXPECT_EQ(p.world(), 3u);
  EXPECT_EQ(restored, 0);
  // n3 is back: the plan's placement and stages, in a new epoch that restores the 3-rank world.
  const auto before = p.epoch();
  const auto notes = all_of<note_event>(p.on_node_up(node_id{3}));
  EXPECT_EQ(restored, 1);
  const auto it = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "replanned"; });
  ASSERT_NE(it, notes.end());
  EXPECT_EQ(it->detail, "n3 is back: returned to the plan, from 3 to 4 ranks in 2-stage pipelines");
  EXPECT_EQ(p.placement(), config.initial);
  EXPECT_EQ(p.world_multiple(), 2u);
  EXPECT_EQ(p.epoch(), before.next());
  const auto starts = all_ready(p);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{20});
  EXPECT_EQ(starts[0].restore_world, 3u);
  // Back in the plan, a node coming up again changes nothing.
  EXPECT_TRUE(all_of<note_event>(p.on_node_up(node_id{3})).empty());
  EXPECT_EQ(restored, 1);
}

TEST(supervisor_policy, nodes_that_come_back_one_by_one_re_plan_upwards_then_return_to_the_plan) {
  fake_clock clock;
  const auto config = four_nodes_in_a_plan();
  supervisor_policy p{config, clock};
  // Down: one rank of one stage per node up.
  p.set_replanner([&](const std::vector<rank_slot>& placement, node_id lost) -> expected<replanned> {
    std::vector<rank_slot> out;
    for (const auto& s : placement)
      if (s.node != lost && p.node_up(s.node))
        out.push_back({rank_id{static_cast<std::uint32_t>(out.size())}, s.node, 0});
    return replanned{out, 1, "d=" + std::to_string(out.size()) + " p=1"};
  });
  int asked_up = 0;
  bool faster = true;
  p.set_upward_replanner([&]() -> std::optional<replanned> {
    ++asked_up;
    if (!faster)
      return std::nullopt;
    std::vector<rank_slot> out;
    for (std::uint32_t n = 0; n < 4; ++n)
      if (p.node_up(node_id{n}))
        out.push_back({rank_id{static_cast<std::uint32_t>(out.size())}, node_id{n}, 0});
    return replanned{out, 1, "d=" + std::to_string(out.size()) + " p=1"};
  });
  int restored = 0;
  p.set_plan_return([&] { ++restored; });
  (void)start_job(p, 4);
  snapshot_all(p, 10);
  (void)p.on_node_lost(node_id{3}, "gone");
  ASSERT_EQ(p.world(), 3u);
  ASSERT_EQ(all_ready(p).size(), 1u);
  snapshot_all(p, 20);
  (void)p.on_node_lost(node_id{2}, "gone");
  ASSERT_EQ(p.world(), 2u);
  ASSERT_EQ(all_ready(p).size(), 1u);
  snapshot_all(p, 30);
  EXPECT_EQ(asked_up, 0) << "no node came back yet";
  // n2 is back while n3 is still down: a plan over the three nodes up, in a new epoch.
  const auto before = p.epoch();
  auto notes = all_of<note_event>(p.on_node_up(node_id{2}));
  EXPECT_EQ(asked_up, 1);
  auto it = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "replanned"; });
  ASSERT_NE(it, notes.end());
  EXPECT_EQ(it->detail, "n2 is back: re-planned up from 2 to 3 ranks; d=3 p=1");
  EXPECT_EQ(p.world(), 3u);
  EXPECT_EQ(p.world_multiple(), 1u);
  EXPECT_EQ(p.epoch(), before.next());
  EXPECT_EQ(restored, 0) << "not the plan yet";
  auto starts = all_ready(p);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{30});
  EXPECT_EQ(starts[0].restore_world, 2u);
  snapshot_all(p, 40);
  // A node the plan does not name, or one that never left, asks nothing of the planner.
  (void)p.on_node_up(node_id{0});
  EXPECT_EQ(asked_up, 1);
  // n3 is back: every node of the plan is, and the job returns to it.
  notes = all_of<note_event>(p.on_node_up(node_id{3}));
  EXPECT_EQ(asked_up, 1);
  EXPECT_EQ(restored, 1);
  it = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "replanned"; });
  ASSERT_NE(it, notes.end());
  EXPECT_EQ(it->detail, "n3 is back: returned to the plan, from 3 to 4 ranks in 2-stage pipelines");
  EXPECT_EQ(p.placement(), config.initial);
  ASSERT_EQ(all_ready(p).size(), 1u);
  // Lost again, and back while paused with nothing faster: resuming keeps the world.
  snapshot_all(p, 50);
  (void)p.on_node_lost(node_id{3}, "gone");
  ASSERT_EQ(all_ready(p).size(), 1u);
  (void)p.on_node_lost(node_id{2}, "gone");
  ASSERT_EQ(all_ready(p).size(), 1u);
  ASSERT_EQ(p.world(), 2u);
  (void)p.pause();
  (void)p.on_node_up(node_id{2});
  EXPECT_EQ(asked_up, 1) << "a paused job re-plans as it resumes";
  faster = false;
  notes = all_of<note_event>(p.resume());
  EXPECT_EQ(asked_up, 2);
  EXPECT_EQ(p.world(), 2u) << "nothing faster: the world stays";
  EXPECT_TRUE(std::none_of(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "replanned"; }));
  EXPECT_EQ(p.state(), job_state::rendezvous);
}

TEST(supervisor_policy, a_better_plan_for_the_same_nodes_is_adopted_only_while_the_job_trains) {
  fake_clock clock;
  auto config = testing::small_cluster(2, false);
  supervisor_policy p{config, clock};
  (void)start_job(p, 2);
  snapshot_all(p, 10);
  // Two ranks of one stage each become one pipeline of two stages over both nodes.
  const replanned better{{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}}, 2, "d=1 p=2"};
  const auto before = p.epoch();
  const auto notes = all_of<note_event>(p.adopt_plan(better, "the full re-search found a faster plan"));
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0].kind, "replanned");
  EXPECT_EQ(notes[0].detail, "the full re-search found a faster plan");
  EXPECT_EQ(p.epoch(), before.next());
  EXPECT_EQ(p.placement(), better.placement);
  EXPECT_EQ(p.world_multiple(), 2u);
  const auto starts = all_ready(p);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{10}) << "from the newest snapshot of the world before";
  EXPECT_EQ(starts[0].restore_world, 4u);
  // Paused: nothing.
  (void)p.pause();
  EXPECT_TRUE(p.adopt_plan(better, "again").empty());
  EXPECT_EQ(p.state(), job_state::paused);
}

TEST(supervisor_policy, the_return_to_the_plan_waits_for_a_quarantine_to_end_and_for_a_paused_job_to_resume) {
  fake_clock clock;
  auto config = testing::small_cluster(2, false);
  config.initial = {{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}};
  supervisor_policy p{config, clock};
  int restored = 0;
  p.set_plan_return([&] { ++restored; });
  (void)start_job(p, 2);
  snapshot_all(p, 10);
  (void)p.on_node_lost(node_id{1}, "gone");
  ASSERT_EQ(p.world(), 1u) << "shrunk without a re-planner";
  // Back while the shrunk world is still in its rendezvous: not yet.
  (void)p.on_node_up(node_id{1});
  EXPECT_EQ(restored, 0);
  EXPECT_EQ(p.world(), 1u);
  ASSERT_EQ(all_ready(p).size(), 1u);
  // Quarantined, it does not count as back; released (a check it passed), it does.
  (void)p.quarantine(node_id{1}, "straggler", "slow");
  (void)p.on_node_up(node_id{1});
  EXPECT_EQ(restored, 0);
  (void)p.release(node_id{1}, "straggler", "fast again");
  EXPECT_EQ(restored, 1);
  EXPECT_EQ(p.world(), 2u);
  // Paused, a return waits for the resume.
  ASSERT_EQ(all_ready(p).size(), 1u);
  snapshot_all(p, 20);
  (void)p.on_node_lost(node_id{1}, "gone again");
  ASSERT_EQ(all_ready(p).size(), 1u);
  (void)p.pause();
  (void)p.on_node_up(node_id{1});
  EXPECT_EQ(restored, 1);
  const auto notes = all_of<note_event>(p.resume());
  EXPECT_EQ(restored, 2);
  EXPECT_EQ(p.world(), 2u);
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0].detail, "resumed with every node of the plan up: returned to the plan, from 1 to 2 ranks in 1-stage pipelines");
}

TEST(supervisor_policy, no_surviving_snapshot_restarts_from_step_zero_and_says_so) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  snapshot_all(p, 10);
  (void)p.on_progress(rank_id{0}, p.epoch(), step_t{12});
  auto a = p.on_node_lost(node_id{1}, "gone");  // no replicas were reported
  std::vector<policy_action> last;
  for (std::uint32_t r = 0; r < 2; ++r)
    last = p.on_rank_ready(rank_id{r}, p.epoch());
  auto start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{0});
}

TEST(supervisor_policy, restart_all_starts_every_process_anew_and_restores_only_from_disk) {
  fake_clock clock;
  auto c = two_nodes();
  c.restart_all = true;
  supervisor_policy p{c, clock};
  (void)start_job(p, 2);
  // Newer steps in every slot than on disk, and none on disk at first.
  snapshot_all(p, 10);
  for (const auto& s : p.placement())
    (void)p.on_progress(s.rank, p.epoch(), step_t{12});
  auto a = p.on_rank_failed(rank_id{1}, p.epoch(), "killed by signal 9");
  auto spawns = all_of<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 4u);
  for (const auto& s : spawns)
    EXPECT_TRUE(s.new_process) << "rank " << s.slot.rank.value() << " keeps its process";
  EXPECT_EQ(p.restarts(), 1u) << "only the failed rank counts as restarted";
  std::vector<policy_action> last;
  for (const auto& s : p.placement())
    last = p.on_rank_ready(s.rank, p.epoch());
  auto start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{0}) << "step 10 is only in memory";
  const auto notes = all_of<note_event>(last);
  const auto none = std::find_if(notes.begin(), notes.end(), [](const note_event& n) { return n.kind == "no_snapshot"; });
  ASSERT_NE(none, notes.end());
  EXPECT_NE(none->detail.find("no checkpoint is committed on disk"), std::string::npos) << none->detail;
  // A checkpoint on disk older than the copies in memory is the restore point.
  p.on_checkpoint_committed(step_t{20}, 4);
  snapshot_all(p, 30);
  (void)p.on_rank_failed(rank_id{3}, p.epoch(), "exited with status 1");
  start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{20});
  ASSERT_EQ(start[0].sources.size(), 4u);
  for (const auto& s : start[0].sources)
    EXPECT_EQ(s.where, copy_kind::disk);
  // The in-place policy, on the same events, keeps the processes and restores step 30.
  supervisor_policy q{two_nodes(), clock};
  (void)start_job(q, 2);
  q.on_checkpoint_committed(step_t{20}, 4);
  snapshot_all(q, 30);
  a = q.on_rank_failed(rank_id{3}, q.epoch(), "exited with status 1");
  for (const auto& s : all_of<spawn_rank>(a))
    EXPECT_FALSE(s.new_process);
  start = all_ready(q);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{30});
}

TEST(supervisor_policy, hung_ranks_are_killed_and_lost_nodes_found_by_ticks) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  for (int i = 0; i < 6; ++i) {
    clock.advance(900ms);
    p.on_heartbeat(node_id{0});
    p.on_heartbeat(node_id{1});
    for (std::uint32_t r : {0u, 1u, 3u})
      (void)p.on_progress(rank_id{r}, p.epoch(), step_t{static_cast<std::uint64_t>(i + 1)});
    auto a = p.on_tick();
    if (i < 5) {
      EXPECT_TRUE(all_of<kill_rank>(a).empty()) << i;
    } else {
      auto kills = all_of<kill_rank>(a);
      ASSERT_EQ(kills.size(), 1u);
      EXPECT_EQ(kills[0].rank, rank_id{2});
    }
  }
  clock.advance(1500ms);
  p.on_heartbeat(node_id{0});
  auto a = p.on_tick();
  EXPECT_FALSE(p.node_up(node_id{1}));
  EXPECT_EQ(p.world(), 2u);
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_FALSE(all_of<spawn_rank>(a).empty());
}

TEST(supervisor_policy, rendezvous_timeout_restarts_the_missing_rank) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  for (std::uint32_t n = 0; n < 2; ++n)
    (void)p.on_node_up(node_id{n});
  for (std::uint32_t r : {0u, 1u, 2u})
    (void)p.on_rank_ready(rank_id{r}, p.epoch());
  clock.advance(11s);
  p.on_heartbeat(node_id{0});
  p.on_heartbeat(node_id{1});
  auto a = p.on_tick();
  auto kills = all_of<kill_rank>(a);
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].rank, rank_id{3});
  EXPECT_EQ(p.epoch(), epoch_t{2});
  EXPECT_EQ(p.restarts_of(rank_id{3}), 1u);
}

TEST(supervisor_policy, each_node_replicates_to_the_next_node_up_that_is_not_drained) {
  fake_clock clock;
  auto config = two_nodes(true);
  config.nodes.push_back({"n2", 2, false});
  supervisor_policy p{config, clock};
  (void)start_job(p, 4);
  // n0 → n1 → s0 → n2 → n0: a spare that is up keeps replicas too.
  auto buddies = all_of<assign_buddies>(p.on_rank_failed(rank_id{0}, p.epoch(), "segfault"));
  ASSERT_EQ(buddies.size(), 1u);
  EXPECT_EQ(buddies[0].epoch, p.epoch());
  const std::vector<std::optional<node_id>> ring{node_id{1}, node_id{2}, node_id{3}, node_id{0}};
  EXPECT_EQ(buddies[0].buddy_of, ring);
  // n1 lost (its ranks move to the spare), n2 drained: n0 and s0 keep each other's.
  (void)all_ready(p);
  buddies = all_of<assign_buddies>(p.on_node_lost(node_id{1}, "gone"));
  ASSERT_EQ(buddies.size(), 1u);
  EXPECT_EQ(buddies[0].buddy_of[0], node_id{2});
  (void)all_ready(p);
  buddies = all_of<assign_buddies>(p.drain(node_id{3}));
  ASSERT_EQ(buddies.size(), 1u);
  const std::vector<std::optional<node_id>> two{node_id{2}, std::nullopt, node_id{0}, std::nullopt};
  EXPECT_EQ(buddies[0].buddy_of, two) << "a usable node's replicas go to another usable node; others have none";
}

// Two racks of three nodes and a spare in each: a node's buddy is in the other rack, at its own
// position there; a lost node's ranks go to the spare outside its rack.
policy_config two_racks() {
  auto c = testing::small_cluster(0, false);
  for (std::uint32_t n = 0; n < 6; ++n)
    c.nodes.push_back({"n" + std::to_string(n), 2, false, n < 3 ? "rack0" : "rack1"});
  c.nodes.push_back({"s0", 0, true, "rack0"});
  c.nodes.push_back({"s1", 0, true, "rack1"});
  return c;
}

TEST(supervisor_policy, buddies_are_in_another_failure_domain) {
  fake_clock clock;
  supervisor_policy p{two_racks(), clock};
  (void)start_job(p, 8);
  auto buddies = all_of<assign_buddies>(p.on_rank_failed(rank_id{0}, p.epoch(), "segfault"));
  ASSERT_EQ(buddies.size(), 1u);
  // rack0: n0 n1 n2 s0; rack1: n3 n4 n5 s1 (in node order). Position i of one rack keeps its
  // replicas on position i of the other.
  const std::vector<std::optional<node_id>> across{node_id{3}, node_id{4}, node_id{5}, node_id{0}, node_id{1},
                                                   node_id{2}, node_id{7}, node_id{6}};
  EXPECT_EQ(buddies[0].buddy_of, across);
  // n4 lost: its ranks go to s0, the spare outside rack1. Rack0 is n0 n1 n2 s0, rack1 n3 n5 s1.
  (void)all_ready(p);
  auto lost = p.on_node_lost(node_id{4}, "gone");
  auto moved = all_of<note_event>(lost);
  EXPECT_TRUE(std::any_of(moved.begin(), moved.end(), [](const note_event& n) { return n.detail.find("move to spare s0") != std::string::npos; }));
  buddies = all_of<assign_buddies>(lost);
  ASSERT_EQ(buddies.size(), 1u);
  EXPECT_EQ(buddies[0].buddy_of[1], node_id{5}) << "n1 is second in rack0; rack1's second usable node is n5";
  EXPECT_EQ(buddies[0].buddy_of[4], std::nullopt) << "a lost node has no buddy";
  EXPECT_EQ(buddies[0].buddy_of[6], node_id{3}) << "s0 is fourth in rack0: rack1 has three, so its first";
  EXPECT_EQ(buddies[0].buddy_of[7], node_id{2}) << "s1 is third in rack1";
}

TEST(supervisor_policy, buddy_across_domains_off_is_the_next_node) {
  fake_clock clock;
  auto c = two_racks();
  c.buddy_across_domains = false;
  supervisor_policy p{c, clock};
  (void)start_job(p, 8);
  auto buddies = all_of<assign_buddies>(p.on_rank_failed(rank_id{0}, p.epoch(), "segfault"));
  ASSERT_EQ(buddies.size(), 1u);
  for (std::uint32_t n = 0; n < 8; ++n)
    EXPECT_EQ(buddies[0].buddy_of[n], node_id{(n + 1) % 8}) << n;
}

TEST(supervisor_policy, a_repaired_node_is_back_in_the_pool) {
  fake_clock clock;
  supervisor_policy p{two_nodes(true), clock};
  (void)start_job(p, 3);
  // n1 lost: its ranks move to the spare.
  auto lost = all_of<note_event>(p.on_node_lost(node_id{1}, "gone"));
  EXPECT_TRUE(std::any_of(lost.begin(), lost.end(), [](const note_event& n) { return n.detail.find("move to spare s0") != std::string::npos; }));
  (void)all_ready(p);
  // n1 is repaired and holds nothing; when n0 is lost, its ranks move to n1 as to a spare.
  (void)p.on_node_up(node_id{1});
  EXPECT_TRUE(p.spare_available());
  auto again = all_of<note_event>(p.on_node_lost(node_id{0}, "gone"));
  EXPECT_TRUE(std::any_of(again.begin(), again.end(), [](const note_event& n) { return n.detail.find("move to spare n1") != std::string::npos; }));
  EXPECT_EQ(p.world(), 4u) << "the world keeps its size";
}

TEST(supervisor_policy, a_node_alone_has_no_buddy) {
  fake_clock clock;
  policy_config config = two_nodes();
  config.nodes.resize(1);
  supervisor_policy p{config, clock};
  auto a = p.on_node_up(node_id{0});
  const auto buddies = all_of<assign_buddies>(a);
  ASSERT_EQ(buddies.size(), 1u);
  EXPECT_EQ(buddies[0].buddy_of, std::vector<std::optional<node_id>>{std::nullopt});
}

TEST(supervisor_policy, a_job_without_progress_reports_completes_when_every_rank_completed_and_is_never_hung) {
  fake_clock clock;
  auto config = two_nodes();
  config.reports_progress = false;
  supervisor_policy p{config, clock};
  (void)start_job(p, 2);
  // No step is ever reported: silence is not a hang.
  clock.advance(config.hang_timeout * 3);
  for (std::uint32_t n = 0; n < 2; ++n)
    p.on_heartbeat(node_id{n});
  EXPECT_TRUE(all_of<kill_rank>(p.on_tick()).empty());
  EXPECT_TRUE(all_of<finish_job>(p.on_rank_completed(rank_id{0}, p.epoch())).empty());
  EXPECT_TRUE(p.on_rank_completed(rank_id{1}, epoch_t{99}).empty()) << "another epoch's completion";
  EXPECT_TRUE(all_of<finish_job>(p.on_rank_completed(rank_id{1}, p.epoch())).empty());
  // A failure starts a new epoch: completions of the old one no longer count.
  (void)p.on_rank_failed(rank_id{3}, p.epoch(), "killed by signal 9");
  ASSERT_TRUE(all_ready(p).size() == 1u);
  for (std::uint32_t r = 0; r < 3; ++r)
    EXPECT_TRUE(all_of<finish_job>(p.on_rank_completed(rank_id{r}, p.epoch())).empty());
  const auto done = all_of<finish_job>(p.on_rank_completed(rank_id{3}, p.epoch()));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].state, job_state::completed);
  EXPECT_EQ(p.state(), job_state::completed);
}

TEST(supervisor_policy, pause_resume_stop_scale_and_drain) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  auto a = p.pause();
  EXPECT_EQ(p.state(), job_state::paused);
  EXPECT_TRUE(all_of<spawn_rank>(a).empty());
  a = p.resume();
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_EQ(all_of<spawn_rank>(a).size(), 4u);
  a = p.scale(9);
  EXPECT_EQ(all_of<note_event>(a).at(0).kind, "scale_refused");
  a = p.scale(3);
  EXPECT_EQ(p.world(), 3u);
  a = p.drain(node_id{0});
  EXPECT_EQ(p.world(), 1u);
  EXPECT_EQ(p.placement()[0].node, node_id{1});
  a = p.stop("operator");
  EXPECT_EQ(p.state(), job_state::stopped);
  EXPECT_EQ(all_of<finish_job>(a).at(0).reason, "operator");
}

TEST(supervisor_policy, restart_epoch_keeps_every_rank_on_its_slot_and_restores_the_newest_common_snapshot) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  EXPECT_TRUE(p.restart_epoch("shares").empty()) << "not before the job trains";
  (void)start_job(p, 2);
  snapshot_all(p, 20);
  const auto before = p.placement();
  auto a = p.restart_epoch("the micro-batch shares change");
  EXPECT_EQ(p.epoch(), epoch_t{2});
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_EQ(p.placement(), before);
  EXPECT_EQ(p.restarts(), 0u) << "nothing failed";
  ASSERT_EQ(all_of<note_event>(a).size(), 1u);
  EXPECT_NE(all_of<note_event>(a)[0].detail.find("the micro-batch shares change"), std::string::npos);
  for (const auto& s : all_of<spawn_rank>(a))
    EXPECT_EQ(s.delay, std::chrono::nanoseconds::zero());
  const auto starts = all_ready(p);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].restore_step, step_t{20});
  for (const auto& src : starts[0].sources)
    EXPECT_EQ(src.where, copy_kind::local_slot) << "each rank from its own memory";
  (void)p.pause();
  EXPECT_TRUE(p.restart_epoch("shares").empty()) << "not while paused";
}

TEST(supervisor_policy, a_restarted_supervisor_starts_a_new_epoch_once_nodes_return) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  std::vector<rank_slot> placement{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}};
  (void)p.recover_after_restart(epoch_t{7}, placement, step_t{40});
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  (void)p.on_node_up(node_id{0});
  (void)p.on_node_up(node_id{1});
  // Up is not enough: a restore point chosen before the nodes said what they hold would miss it.
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  EXPECT_EQ(p.epoch(), epoch_t{7});
  // The nodes report again what they hold from the reloaded epoch, then that they are done.
  p.on_snapshot({epoch_t{7}, rank_id{0}, step_t{40}, node_id{1}, copy_kind::buddy_replica});
  p.on_snapshot({epoch_t{7}, rank_id{1}, step_t{40}, node_id{1}, copy_kind::local_slot});
  EXPECT_TRUE(p.on_holdings_reported(node_id{1}).empty());
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes) << "n0 has not reported";
  auto a = p.on_holdings_reported(node_id{0});
  EXPECT_EQ(p.epoch(), epoch_t{8});
  EXPECT_EQ(all_of<spawn_rank>(a).size(), 2u);
  std::vector<policy_action> last;
  for (std::uint32_t r = 0; r < 2; ++r)
    last = p.on_rank_ready(rank_id{r}, p.epoch());
  auto start = all_of<start_epoch>(last);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{40});
  EXPECT_EQ(start[0].sources[0].where, copy_kind::buddy_replica);
}

// The committed step was written in an earlier epoch of the same world (the ranks restored it and
// trained on, one rank failing and restarting in place): a restarted supervisor must count the
// copies of that epoch, or it restarts from scratch while every node holds the step.
TEST(supervisor_policy, a_restarted_supervisor_counts_copies_of_every_epoch_of_the_reloaded_world) {
  fake_clock clock;
  std::vector<rank_slot> placement{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}};
  const auto restart = [&](supervisor_policy& p, std::optional<epoch_t> since) {
    (void)p.recover_after_restart(epoch_t{7}, placement, step_t{50}, {}, 0, since);
    for (std::uint32_t n = 0; n < 2; ++n)
      (void)p.on_node_up(node_id{n});
    // n0's daemon restarted with empty slots; n1 still holds its rank's slot and n0's replicas,
    // all written in epoch 6. Rank 1 also wrote step 55 in epoch 7, not yet replicated.
    p.on_snapshot({epoch_t{6}, rank_id{0}, step_t{50}, node_id{1}, copy_kind::buddy_replica});
    p.on_snapshot({epoch_t{6}, rank_id{1}, step_t{50}, node_id{1}, copy_kind::local_slot});
    p.on_snapshot({epoch_t{7}, rank_id{1}, step_t{55}, node_id{1}, copy_kind::local_slot});
    (void)p.on_holdings_reported(node_id{0});
    (void)p.on_holdings_reported(node_id{1});
    std::vector<policy_action> last;
    for (std::uint32_t r = 0; r < 2; ++r)
      last = p.on_rank_ready(rank_id{r}, p.epoch());
    return all_of<start_epoch>(last);
  };
  supervisor_policy p{two_nodes(), clock};
  auto start = restart(p, epoch_t{5});
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{50}) << "epoch 6 is of the reloaded world (it began in 5)";
  EXPECT_EQ(start[0].sources[0].where, copy_kind::buddy_replica);
  EXPECT_EQ(start[0].sources[1].where, copy_kind::local_slot);
  // Without the world's first epoch, only the reloaded epoch's copies count (an older store).
  supervisor_policy q{two_nodes(), clock};
  start = restart(q, std::nullopt);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{0});
}

TEST(supervisor_policy, a_collective_error_without_a_culprit_restarts_everyone_after_the_hang_timeout) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  auto a = p.on_collective_error(rank_id{0}, p.epoch(), "timeout");
  EXPECT_EQ(all_of<note_event>(a).at(0).kind, "collective_error");
  EXPECT_EQ(p.state(), job_state::running);
  clock.advance(6s);
  p.on_heartbeat(node_id{0});
  p.on_heartbeat(node_id{1});
  for (std::uint32_t r = 0; r < 4; ++r)
    (void)p.on_progress(rank_id{r}, p.epoch(), step_t{1});
  a = p.on_tick();
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_EQ(p.epoch(), epoch_t{2});
}

TEST(supervisor_policy, the_silent_rank_its_peers_wait_for_is_the_one_killed_as_hung) {
  fake_clock clock;
  auto config = two_nodes();
  config.collective_timeout = 3s;  // margin: a quarter of the 5 s hang timeout
  supervisor_policy p{config, clock};
  (void)start_job(p, 2);
  for (std::uint32_t r = 0; r < 4; ++r)
    (void)p.on_progress(rank_id{r}, p.epoch(), step_t{1});
  // Rank 2 stops; the others wait in the next collective, which times out after 3 s.
  const auto tick = [&](std::chrono::nanoseconds d) {
    clock.advance(d);
    p.on_heartbeat(node_id{0});
    p.on_heartbeat(node_id{1});
    return all_of<kill_rank>(p.on_tick());
  };
  EXPECT_TRUE(tick(3s).empty());
  for (std::uint32_t r : {0u, 1u, 3u})
    (void)p.on_collective_error(rank_id{r}, p.epoch(), "collective #2 did not complete within 3000 ms");
  // Within the margin nothing happens: a peer still in its step may not have timed out yet.
  EXPECT_TRUE(tick(1s).empty());
  const auto kills = tick(500ms);
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].rank, rank_id{2});
  EXPECT_EQ(p.state(), job_state::running);  // its exit starts the recovery
  EXPECT_TRUE(tick(1s).empty());              // and it is not killed twice
}

TEST(supervisor_policy, a_hung_ranks_event_names_the_collective_and_who_never_entered_it) {
  fake_clock clock;
  auto config = two_nodes();
  config.collective_timeout = 3s;
  supervisor_policy p{config, clock};
  (void)start_job(p, 2);
  for (std::uint32_t r = 0; r < 4; ++r)
    (void)p.on_progress(rank_id{r}, p.epoch(), step_t{1});
  // Rank 2 finished collective 6 and computes; the others entered 7 and time out in it.
  for (std::uint32_t r : {0u, 1u, 3u})
    p.on_position(rank_id{r}, p.epoch(), {7, collective_kind::allreduce, collective_phase::failed, 1s});
  p.on_position(rank_id{2}, p.epoch(), {6, collective_kind::allreduce, collective_phase::done, 4s});
  // A position of an older epoch is not this one's.
  p.on_position(rank_id{2}, epoch_t{p.epoch().value() - 1}, {9, collective_kind::barrier, collective_phase::inside, 1s});
  for (std::uint32_t r : {0u, 1u, 3u})
    (void)p.on_collective_error(rank_id{r}, p.epoch(), "collective #7 did not complete within 3000 ms");
  std::vector<note_event> hung;
  for (int i = 0; i < 10 && hung.empty(); ++i) {
    clock.advance(1s);
    p.on_heartbeat(node_id{0});
    p.on_heartbeat(node_id{1});
    for (auto& n : all_of<note_event>(p.on_tick()))
      if (n.kind == "rank_hung")
        hung.push_back(n);
  }
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].rank, rank_id{2});
  EXPECT_NE(hung[0].detail.find("rank 2 never entered collective #7 (allreduce)"), std::string::npos) << hung[0].detail;
  EXPECT_NE(hung[0].detail.find("ranks 0, 1, 3 waited in collective #7"), std::string::npos) << hung[0].detail;
  const std::map<std::string, std::string> fields(hung[0].fields.begin(), hung[0].fields.end());
  EXPECT_EQ(fields.at("collective"), "7");
  EXPECT_EQ(fields.at("waiting"), "0,1,3");
  EXPECT_EQ(fields.at("missing"), "2");
  EXPECT_EQ(fields.at("unknown"), "");
}

TEST(supervisor_policy, no_rank_counts_as_hung_before_its_peers_collectives_could_time_out) {
  fake_clock clock;
  auto config = two_nodes();
  config.collective_timeout = 8s;  // longer than the 5 s hang timeout
  supervisor_policy p{config, clock};
  (void)start_job(p, 2);
  const auto tick = [&](std::chrono::nanoseconds d) {
    clock.advance(d);
    p.on_heartbeat(node_id{0});
    p.on_heartbeat(node_id{1});
    return all_of<kill_rank>(p.on_tick());
  };
  EXPECT_TRUE(tick(6s).empty());
  EXPECT_TRUE(tick(3s).empty());          // 9 s: still within 8 s + 1.25 s
  EXPECT_EQ(tick(500ms).size(), 4u);      // nobody reported: every rank is stuck
}

// Rank r's buddy node: the other of two nodes.
node_id buddy_of(node_id n) { return node_id{n.value() == 0 ? 1u : 0u}; }

TEST(supervisor_policy, a_step_commits_once_every_rank_holds_it_locally_and_on_its_buddy) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  EXPECT_FALSE(p.copies().committed());
  for (const auto& s : p.placement())
    EXPECT_FALSE(p.on_snapshot({p.epoch(), s.rank, step_t{5}, s.node, copy_kind::local_slot}))
        << "one copy is not enough with two nodes up";
  const auto& last = p.placement().back();
  for (const auto& s : p.placement()) {
    const bool commits = p.on_snapshot({p.epoch(), s.rank, step_t{5}, buddy_of(s.node), copy_kind::buddy_replica});
    EXPECT_EQ(commits, s.rank == last.rank) << "the last replica commits step 5";
  }
  ASSERT_TRUE(p.copies().committed());
  EXPECT_EQ(*p.copies().committed(), step_t{5});
  // Repeated or older reports commit nothing new.
  EXPECT_FALSE(p.on_snapshot({p.epoch(), last.rank, step_t{5}, last.node, copy_kind::local_slot}));
  // Newer uncommitted steps do not push the committed one out of the record.
  for (std::uint64_t step = 10; step <= 40; step += 5)
    snapshot_all(p, step);
  EXPECT_EQ(*p.copies().committed(), step_t{5});
  // n1 is lost: the ranks of n1 must come from replicas of the committed step on n0.
  auto a = p.on_node_lost(node_id{1}, "gone");
  auto start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{5});
  EXPECT_EQ(start[0].restore_world, 4u);
  EXPECT_FALSE(p.copies().committed()) << "a new world commits its own steps";
}

TEST(supervisor_policy, with_one_node_up_a_local_copy_commits) {
  fake_clock clock;
  auto config = two_nodes();
  config.nodes.pop_back();
  supervisor_policy p{config, clock};
  (void)start_job(p, 1);
  const auto& placement = p.placement();
  ASSERT_EQ(placement.size(), 2u);
  EXPECT_FALSE(p.on_snapshot({p.epoch(), rank_id{0}, step_t{5}, node_id{0}, copy_kind::local_slot}));
  EXPECT_TRUE(p.on_snapshot({p.epoch(), rank_id{1}, step_t{5}, node_id{0}, copy_kind::local_slot}));
  EXPECT_EQ(*p.copies().committed(), step_t{5});
}

TEST(supervisor_policy, a_copy_that_cannot_be_read_is_forgotten_and_the_restore_point_chosen_again) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  (void)start_job(p, 2);
  snapshot_all(p, 5);
  snapshot_all(p, 10);
  (void)p.on_rank_failed(rank_id{2}, p.epoch(), "killed by signal 9");
  auto start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  ASSERT_EQ(start[0].restore_step, step_t{10});
  // Rank 2's slot no longer holds step 10 (say it was overwritten).
  const auto e = p.epoch();
  EXPECT_TRUE(p.on_restore_failed(rank_id{2}, epoch_t{e.value() - 1}, rank_id{2}, step_t{10}, node_id{1},
                                  copy_kind::local_slot, "gone")
                  .empty())
      << "a stale epoch's report changes nothing";
  auto a = p.on_restore_failed(rank_id{2}, e, rank_id{2}, step_t{10}, node_id{1}, copy_kind::local_slot,
                               "rank 2 step 10 is not held on node n1");
  ASSERT_EQ(p.epoch(), e.next());
  auto notes = all_of<note_event>(a);
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0].kind, "restore_failed");
  EXPECT_NE(notes[0].detail.find("step 10"), std::string::npos) << notes[0].detail;
  EXPECT_EQ(p.restarts(), 1u) << "no rank failed again";
  start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{5}) << "the newest step every rank still holds";
}

TEST(supervisor_policy, a_newer_checkpoint_on_disk_is_the_restore_point_and_a_bad_one_falls_back) {
  fake_clock clock;
  {
    supervisor_policy live{two_nodes(), clock};
    (void)start_job(live, 2);
    snapshot_all(live, 10);
    EXPECT_FALSE(live.copies().held_in_every_slot(step_t{15}));
    EXPECT_TRUE(live.copies().held_in_every_slot(step_t{10}));
  }
  // A whole-job restart: no daemon kept any memory; the store names two committed checkpoints.
  supervisor_policy p{two_nodes(), clock};
  p.on_checkpoint_committed(step_t{20}, 4);
  p.on_checkpoint_committed(step_t{40}, 4);
  std::vector<rank_slot> placement{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{0}, 1},
                                   {rank_id{2}, node_id{1}, 0}, {rank_id{3}, node_id{1}, 1}};
  (void)p.recover_after_restart(epoch_t{3}, placement, step_t{42});
  (void)p.on_node_up(node_id{0});
  (void)p.on_node_up(node_id{1});
  (void)p.on_holdings_reported(node_id{0});
  (void)p.on_holdings_reported(node_id{1});
  auto start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{40});
  ASSERT_EQ(start[0].sources.size(), 4u);
  for (const auto& s : start[0].sources)
    EXPECT_EQ(s.where, copy_kind::disk);
  // Rank 1's shard of step 40 is damaged: that checkpoint is dropped, step 20 is next.
  const auto e = p.epoch();
  auto a = p.on_restore_failed(rank_id{1}, e, rank_id{1}, step_t{40}, node_id{0}, copy_kind::disk,
                               "payload checksum mismatch");
  ASSERT_FALSE(all_of<note_event>(a).empty());
  EXPECT_NE(all_of<note_event>(a)[0].detail.find("from disk"), std::string::npos) << all_of<note_event>(a)[0].detail;
  EXPECT_EQ(p.copies().checkpoints().count(step_t{40}), 0u);
  start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{20});
  // A newer step in memory wins over an older checkpoint.
  snapshot_all(p, 25);
  (void)p.on_rank_failed(rank_id{3}, p.epoch(), "killed by signal 9");
  start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{25});
  EXPECT_EQ(start[0].sources[0].where, copy_kind::local_slot);
}

// After a takeover the nodes' epoch may be ahead of the replica's, and the supervisor's own node
// may never come back.
TEST(supervisor_policy, after_a_takeover_the_next_epoch_is_past_every_one_the_nodes_saw) {
  fake_clock clock;
  supervisor_policy p{two_nodes(), clock};
  std::vector<rank_slot> placement{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{1}, 0}};
  (void)p.recover_after_restart(epoch_t{7}, placement, step_t{40});
  p.on_epoch_seen(epoch_t{9});
  p.on_epoch_seen(epoch_t{8});
  for (std::uint32_t n = 0; n < 2; ++n) {
    (void)p.on_node_up(node_id{n});
    (void)p.on_holdings_reported(node_id{n});
  }
  EXPECT_EQ(p.epoch(), epoch_t{10});
  p.on_epoch_seen(epoch_t{20});
  EXPECT_EQ(p.epoch(), epoch_t{10}) << "only while waiting for the nodes";
}

TEST(supervisor_policy, a_node_that_does_not_return_after_a_restart_is_lost_and_its_ranks_move_to_the_spare) {
  fake_clock clock;
  auto config = two_nodes(true);
  supervisor_policy p{config, clock};
  std::vector<rank_slot> placement{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{0}, 1},
                                   {rank_id{2}, node_id{1}, 0}, {rank_id{3}, node_id{1}, 1}};
  (void)p.recover_after_restart(epoch_t{4}, placement, step_t{30});
  // Nothing is lost before any node is back: the supervisor may be the one that was away.
  clock.advance(config.node_timeout * 10);
  EXPECT_TRUE(all_of<spawn_rank>(p.on_tick()).empty());
  for (std::uint32_t n : {1u, 2u}) {
    (void)p.on_node_up(node_id{n});
    (void)p.on_holdings_reported(node_id{n});
  }
  EXPECT_TRUE(all_of<spawn_rank>(p.on_tick()).empty());
  // The nodes that came back keep beating.
  const auto later = [&](std::chrono::nanoseconds d) {
    clock.advance(d);
    p.on_heartbeat(node_id{1});
    p.on_heartbeat(node_id{2});
    return p.on_tick();
  };
  EXPECT_TRUE(all_of<spawn_rank>(later(config.node_timeout / 2)).empty()) << "n0 still has time";
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  auto a = later(config.node_timeout);
  auto spawns = all_of<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 4u);
  EXPECT_EQ(p.epoch(), epoch_t{5});
  EXPECT_EQ(spawns[0].slot, (rank_slot{rank_id{0}, node_id{2}, 0}));
  EXPECT_EQ(spawns[1].slot, (rank_slot{rank_id{1}, node_id{2}, 1}));
  EXPECT_EQ(spawns[2].slot, (rank_slot{rank_id{2}, node_id{1}, 0}));
  bool noted = false;
  for (const auto& e : all_of<note_event>(a))
    noted = noted || e.detail.find("did not come back") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(supervisor_policy, without_a_spare_a_node_that_does_not_return_shrinks_the_world_which_reshards_the_old_one) {
  fake_clock clock;
  auto config = two_nodes();
  supervisor_policy p{config, clock};
  std::vector<rank_slot> placement{{rank_id{0}, node_id{0}, 0}, {rank_id{1}, node_id{0}, 1},
                                   {rank_id{2}, node_id{1}, 0}, {rank_id{3}, node_id{1}, 1}};
  (void)p.recover_after_restart(epoch_t{4}, placement, step_t{30});
  (void)p.on_node_up(node_id{1});
  // n1 holds its own ranks' states and the replicas of n0's.
  for (std::uint32_t r = 0; r < 4; ++r)
    p.on_snapshot({epoch_t{4}, rank_id{r}, step_t{30}, node_id{1}, r < 2 ? copy_kind::buddy_replica : copy_kind::local_slot});
  (void)p.on_holdings_reported(node_id{1});
  clock.advance(config.node_timeout * 2);
  p.on_heartbeat(node_id{1});
  auto spawns = all_of<spawn_rank>(p.on_tick());
  ASSERT_EQ(spawns.size(), 2u);
  EXPECT_EQ(spawns[0].slot, (rank_slot{rank_id{0}, node_id{1}, 0}));
  EXPECT_EQ(spawns[1].slot, (rank_slot{rank_id{1}, node_id{1}, 1}));
  auto start = all_ready(p);
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].restore_step, step_t{30});
  EXPECT_EQ(start[0].restore_world, 4u) << "the old world's states, resharded";
  EXPECT_EQ(start[0].sources.size(), 4u);
}

}  // namespace
}  // namespace rekindle::policy
