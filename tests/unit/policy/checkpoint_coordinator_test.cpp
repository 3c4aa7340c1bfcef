// The persist cadence and the commit state machine of checkpoints on disk, with a fake clock.

#include <gtest/gtest.h>

#include "policy/checkpoint_coordinator.hpp"
#include "tests/support/actions.hpp"

namespace rekindle::policy {
namespace {

using namespace std::chrono_literals;

using testing::all_of;

constexpr std::uint32_t world = 3;

// Every rank reports `step` of epoch `e`; the step that became due, if any.
std::optional<step_t> all_report(checkpoint_coordinator& c, std::uint64_t step, epoch_t e = epoch_t{1}) {
  std::optional<step_t> due;
  for (std::uint32_t r = 0; r < world; ++r)
    if (auto d = c.on_slot_report(step_t{step}, e, world))
      due = d;
  return due;
}

shard_result shard(std::uint64_t step, std::uint32_t rank, bool ok = true, epoch_t e = epoch_t{1}) {
  return {e, step_t{step}, {rank_id{rank}, "s" + std::to_string(step) + "r" + std::to_string(rank), 1000, 7}, ok, false, "n1",
          ok ? "" : "No space left on device"};
}

// Begins the checkpoint of `step` (which must be due) and has the store accept it.
void begin(checkpoint_coordinator& c, std::uint64_t step, epoch_t e = epoch_t{1}) {
  ASSERT_EQ(all_report(c, step, e), step_t{step});
  const auto begun = all_of<begin_persist>(c.begin(step_t{step}, e, world));
  ASSERT_EQ(begun.size(), 1u);
  EXPECT_EQ(begun[0].step, step_t{step});
  EXPECT_EQ(begun[0].world, world);
  c.begun();
}

TEST(checkpoint_coordinator, the_first_anchor_every_rank_holds_is_persisted_then_every_persist_every_snapshots) {
  fake_clock clock;
  checkpoint_coordinator c{10, 5, clock};  // anchors every 20 steps; a checkpoint every 10 snapshots
  EXPECT_FALSE(all_report(c, 15)) << "not an anchor";
  EXPECT_FALSE(c.on_slot_report(step_t{20}, epoch_t{1}, world));
  EXPECT_FALSE(c.on_slot_report(step_t{20}, epoch_t{1}, world)) << "two of three ranks";
  EXPECT_EQ(c.on_slot_report(step_t{20}, epoch_t{1}, world), step_t{20});
  (void)c.begin(step_t{20}, epoch_t{1}, world);
  c.begun();
  EXPECT_EQ(c.writing(), step_t{20});
  EXPECT_FALSE(all_report(c, 40)) << "one checkpoint at a time";
  EXPECT_TRUE(all_of<commit_checkpoint>(c.on_shard(shard(20, 0))).empty());
  EXPECT_TRUE(all_of<commit_checkpoint>(c.on_shard(shard(20, 1))).empty());
  clock.advance(1500ms);
  const auto commit = all_of<commit_checkpoint>(c.on_shard(shard(20, 2)));
  ASSERT_EQ(commit.size(), 1u);
  EXPECT_EQ(commit[0].step, step_t{20});
  EXPECT_EQ(commit[0].shards.size(), 3u);
  EXPECT_EQ(commit[0].shards[2].file, "s20r2");
  const auto notes = all_of<checkpoint_note>(c.committed());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].kind, "checkpoint_committed");
  EXPECT_NE(notes[0].detail.find("3 shards"), std::string::npos) << notes[0].detail;
  EXPECT_NE(notes[0].detail.find("in 1.50 s"), std::string::npos) << notes[0].detail;
  EXPECT_EQ(c.last(), step_t{20});
  EXPECT_FALSE(c.writing());
  EXPECT_FALSE(all_report(c, 40)) << "10 snapshots after 20 is step 70: the next anchor from there is 80";
  EXPECT_FALSE(all_report(c, 60));
  EXPECT_EQ(all_report(c, 80), step_t{80});
  // The interval the simulator and the replay take for this cadence is the gap kept here.
  EXPECT_EQ(checkpoint_coordinator::interval_steps(10, 5), 80u - 20u);
  EXPECT_EQ(checkpoint_coordinator::interval_steps(1, 5), 20u) << "at most one an anchor";
  EXPECT_EQ(checkpoint_coordinator::interval_steps(4, 5), 20u);
  EXPECT_EQ(checkpoint_coordinator::interval_steps(0, 5), 0u) << "none written";
}

TEST(checkpoint_coordinator, a_failed_shard_abandons_the_checkpoint_and_its_late_shards_are_removed) {
  fake_clock clock;
  checkpoint_coordinator c{1, 1, clock};
  begin(c, 4);
  EXPECT_TRUE(c.on_shard(shard(4, 0)).empty());
  const auto a = c.on_shard(shard(4, 1, false));
  const auto drops = all_of<drop_checkpoint>(a);
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].step, step_t{4});
  const auto notes = all_of<checkpoint_note>(a);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].kind, "persist_failed");
  EXPECT_NE(notes[0].detail.find("rank 1 on n1: No space left on device"), std::string::npos) << notes[0].detail;
  EXPECT_NE(notes[0].detail.find("the newest checkpoint on disk is none"), std::string::npos) << notes[0].detail;
  EXPECT_EQ(c.error(), "checkpoint of step 4: rank 1 on n1: No space left on device");
  const auto late = all_of<remove_shard_file>(c.on_shard(shard(4, 2)));
  ASSERT_EQ(late.size(), 1u) << "a shard written for an abandoned checkpoint is removed";
  EXPECT_EQ(late[0].file, "s4r2");
  EXPECT_FALSE(all_report(c, 4)) << "not again";
  EXPECT_EQ(all_report(c, 8), step_t{8}) << "the next is due one snapshot later";
}

TEST(checkpoint_coordinator, a_superseded_or_ended_checkpoint_is_dropped_without_an_event) {
  fake_clock clock;
  checkpoint_coordinator c{1, 1, clock};
  begin(c, 4);
  auto a = c.on_shard({epoch_t{1}, step_t{4}, {rank_id{0}, "f", 0, 0}, false, true, "n0", "newer anchor"});
  EXPECT_EQ(all_of<drop_checkpoint>(a).size(), 1u);
  EXPECT_TRUE(all_of<checkpoint_note>(a).empty());
  EXPECT_TRUE(c.error().empty());
  EXPECT_EQ(all_report(c, 8), step_t{8}) << "the next anchor's reports start it again";
  (void)c.begin(step_t{8}, epoch_t{1}, world);
  c.begun();
  a = c.on_job_end();
  EXPECT_EQ(all_of<drop_checkpoint>(a).size(), 1u);
  EXPECT_TRUE(all_of<checkpoint_note>(a).empty());
  EXPECT_TRUE(c.on_job_end().empty()) << "nothing left to drop";
}

TEST(checkpoint_coordinator, a_new_epoch_abandons_an_older_epochs_checkpoint_and_its_counts) {
  fake_clock clock;
  checkpoint_coordinator c{1, 1, clock};
  begin(c, 4);
  EXPECT_TRUE(c.on_epoch(epoch_t{1}).empty()) << "the same epoch keeps it";
  auto a = c.on_epoch(epoch_t{2});
  ASSERT_EQ(all_of<checkpoint_note>(a).size(), 1u);
  EXPECT_NE(all_of<checkpoint_note>(a)[0].detail.find("epoch 2 began before every shard was written"), std::string::npos);
  EXPECT_TRUE(all_of<remove_shard_file>(c.on_shard(shard(4, 0))).size() == 1) << "its shards come too late";
  EXPECT_FALSE(c.on_slot_report(step_t{8}, epoch_t{2}, world));
  EXPECT_FALSE(c.on_slot_report(step_t{8}, epoch_t{2}, world));
  (void)c.on_epoch(epoch_t{3});
  EXPECT_FALSE(c.on_slot_report(step_t{8}, epoch_t{3}, world)) << "reports of the older epoch no longer count";
}

TEST(checkpoint_coordinator, a_store_that_refuses_leaves_the_previous_checkpoint_the_newest) {
  fake_clock clock;
  checkpoint_coordinator c{1, 1, clock};
  c.committed_before(step_t{4});
  EXPECT_FALSE(all_report(c, 4)) << "committed by an earlier run";
  ASSERT_EQ(all_report(c, 8), step_t{8});
  (void)c.begin(step_t{8}, epoch_t{1}, world);
  auto notes = all_of<checkpoint_note>(c.begin_failed("disk full"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].detail, "checkpoint of step 8 not begun: disk full");
  EXPECT_FALSE(c.writing());
  begin(c, 12);
  for (std::uint32_t r = 0; r < world; ++r)
    (void)c.on_shard(shard(12, r));
  auto a = c.commit_failed("I/O error");
  ASSERT_EQ(all_of<drop_checkpoint>(a).size(), 1u);
  notes = all_of<checkpoint_note>(a);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].detail.find("the commit record: I/O error"), std::string::npos) << notes[0].detail;
  EXPECT_NE(notes[0].detail.find("stays step 4"), std::string::npos) << notes[0].detail;
  EXPECT_EQ(c.last(), step_t{4});
}

TEST(checkpoint_coordinator, an_operator_request_writes_the_next_anchor_and_off_means_never) {
  fake_clock clock;
  checkpoint_coordinator c{10, 1, clock};
  begin(c, 4);
  for (std::uint32_t r = 0; r < world; ++r)
    (void)c.on_shard(shard(4, r));
  (void)c.committed();
  EXPECT_FALSE(all_report(c, 8)) << "due at step 44";
  EXPECT_TRUE(c.request_now());
  EXPECT_EQ(all_report(c, 12), step_t{12});
  (void)c.begin(step_t{12}, epoch_t{1}, world);
  c.begun();
  for (std::uint32_t r = 0; r < world; ++r)
    (void)c.on_shard(shard(12, r));
  (void)c.committed();
  EXPECT_FALSE(all_report(c, 16)) << "asked once, written once";
  checkpoint_coordinator off{0, 1, clock};
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.request_now());
  EXPECT_FALSE(all_report(off, 4));
}

}  // namespace
}  // namespace rekindle::policy
