// The custody rule: which steps a slot and a buddy keep, what is protected, what is dropped.

#include <gtest/gtest.h>

#include "policy/snapshot_custody.hpp"

namespace rekindle::policy {
namespace {

copy_tag tag(std::uint64_t epoch, std::uint64_t step, std::uint32_t rank = 0) {
  return {epoch_t{epoch}, rank_id{rank}, step_t{step}};
}

std::vector<step_t> steps(std::initializer_list<std::uint64_t> s) {
  std::vector<step_t> out;
  for (auto x : s)
    out.push_back(step_t{x});
  return out;
}

TEST(snapshot_custody, anchors_are_every_fourth_snapshot_step) {
  EXPECT_TRUE(is_anchor(step_t{0}, 5));
  EXPECT_FALSE(is_anchor(step_t{5}, 5));
  EXPECT_FALSE(is_anchor(step_t{15}, 5));
  EXPECT_TRUE(is_anchor(step_t{20}, 5));
  EXPECT_TRUE(is_anchor(step_t{40}, 5));
  EXPECT_FALSE(is_anchor(step_t{21}, 5));
  EXPECT_TRUE(is_anchor(step_t{4}, 1));
  EXPECT_FALSE(is_anchor(step_t{4}, 0)) << "no snapshots, no anchors";
}

TEST(snapshot_custody, the_protected_step_is_the_restore_step_until_a_newer_commit_of_the_epoch) {
  EXPECT_EQ(protected_step({}, epoch_t{1}, step_t{0}), std::nullopt) << "from scratch, nothing committed";
  EXPECT_EQ(protected_step({}, epoch_t{3}, step_t{40}), step_t{40});
  EXPECT_EQ(protected_step({epoch_t{2}, step_t{60}}, epoch_t{3}, step_t{40}), step_t{40})
      << "a commit announced before this epoch began belongs to an abandoned timeline";
  EXPECT_EQ(protected_step({epoch_t{3}, step_t{60}}, epoch_t{3}, step_t{40}), step_t{60});
  EXPECT_EQ(protected_step({epoch_t{3}, step_t{20}}, epoch_t{3}, step_t{40}), step_t{40})
      << "an older step committed late does not replace the restore step";
  EXPECT_EQ(protected_step({epoch_t{1}, step_t{8}}, epoch_t{1}, step_t{0}), step_t{8});
}

TEST(snapshot_custody, a_slot_keeps_its_newest_anchor_while_snapshots_rotate_through_the_other_half) {
  slot_contents slot;
  for (std::uint64_t s = 1; s <= 5; ++s)
    ASSERT_TRUE(slot.write(tag(1, s), std::nullopt, 1).half);
  EXPECT_EQ(slot.steps(), steps({4, 5}));
  auto w = slot.write(tag(1, 6), std::nullopt, 1);
  ASSERT_TRUE(w.overwrites);
  EXPECT_EQ(w.overwrites->step, step_t{5}) << "the newest snapshot between anchors goes, the anchor stays";
  EXPECT_EQ(slot.steps(), steps({4, 6}));
  (void)slot.write(tag(1, 7), std::nullopt, 1);
  w = slot.write(tag(1, 8), std::nullopt, 1);
  EXPECT_EQ(w.overwrites->step, step_t{7});
  EXPECT_EQ(slot.steps(), steps({4, 8}));
  w = slot.write(tag(1, 9), std::nullopt, 1);
  EXPECT_EQ(w.overwrites->step, step_t{4}) << "anchor 8 is the newest now";
  EXPECT_EQ(slot.steps(), steps({8, 9}));
}

TEST(snapshot_custody, the_protected_step_is_never_overwritten_and_snapshots_wait_for_the_newest_anchors_commit) {
  // Restored step 8 in epoch 2; the slot still holds step 9 of epoch 1 (an abandoned timeline).
  slot_contents slot;
  (void)slot.write(tag(1, 8), std::nullopt, 1);
  (void)slot.write(tag(1, 9), std::nullopt, 1);
  custody_pin pin{epoch_t{1}, step_t{4}};
  const auto protect = [&] { return protected_step(pin, epoch_t{2}, step_t{8}); };
  auto w = slot.write(tag(2, 9), protect(), 1);
  ASSERT_TRUE(w.overwrites);
  EXPECT_EQ(*w.overwrites, tag(1, 9)) << "the abandoned timeline's copy goes, with its own epoch";
  for (std::uint64_t s = 10; s <= 12; ++s)
    ASSERT_TRUE(slot.write(tag(2, s), protect(), 1).half) << s;
  EXPECT_EQ(slot.steps(), steps({8, 12})) << "anchor 12 took the place of 11; the restore step stays";
  w = slot.write(tag(2, 13), protect(), 1);
  EXPECT_FALSE(w.half) << "13 would overwrite the restore step or anchor 12 before 12 is committed";
  EXPECT_EQ(w.pinned, step_t{8});
  EXPECT_EQ(w.waiting, step_t{12});
  EXPECT_EQ(slot.steps(), steps({8, 12}));
  w = slot.write(tag(2, 16), protect(), 1);
  ASSERT_TRUE(w.half) << "every rank writes every anchor";
  EXPECT_EQ(w.overwrites->step, step_t{12}) << "a newer anchor replaces one not committed yet";
  EXPECT_EQ(slot.steps(), steps({8, 16}));
  pin = {epoch_t{2}, step_t{16}};
  w = slot.write(tag(2, 17), protect(), 1);
  ASSERT_TRUE(w.half);
  EXPECT_EQ(w.overwrites->step, step_t{8}) << "16 is committed: the restore step may go";
  EXPECT_EQ(slot.steps(), steps({16, 17}));
}

TEST(snapshot_custody, a_committed_step_between_anchors_is_kept_in_place_of_an_older_anchor) {
  slot_contents slot;
  for (std::uint64_t s = 1; s <= 6; ++s)
    (void)slot.write(tag(1, s), std::nullopt, 1);
  EXPECT_EQ(slot.steps(), steps({4, 6}));
  const custody_pin pin{epoch_t{1}, step_t{6}};
  const auto protect = protected_step(pin, epoch_t{1}, step_t{0});
  auto w = slot.write(tag(1, 7), protect, 1);
  ASSERT_TRUE(w.half);
  EXPECT_EQ(w.overwrites->step, step_t{4}) << "anchor 4 is older than the committed step 6";
  EXPECT_EQ(slot.steps(), steps({6, 7}));
}

TEST(snapshot_custody, a_slot_that_lacks_the_protected_step_keeps_its_newest_anchor) {
  // Restored from a buddy (step 40): the slot holds nothing of that step.
  slot_contents slot;
  const auto protect = protected_step({}, epoch_t{5}, step_t{40});
  for (std::uint64_t s = 41; s <= 45; ++s)
    ASSERT_TRUE(slot.write(tag(5, s), protect, 1).half);
  EXPECT_EQ(slot.steps(), steps({44, 45}));
  (void)slot.write(tag(5, 48), protect, 1);
  EXPECT_EQ(slot.steps(), steps({44, 48})) << "an anchor keeps the older anchor when the slot has no protected step";
}

TEST(snapshot_custody, a_protected_step_written_in_two_epochs_is_kept_once) {
  // Step 8 was written in epoch 1, restored from, and written again in epoch 2 after a restore
  // of step 4: both halves hold step 8. Protecting step 8 keeps the newer copy only.
  slot_contents slot;
  (void)slot.write(tag(1, 8), std::nullopt, 1);
  (void)slot.write(tag(2, 8), std::nullopt, 1);
  EXPECT_EQ(slot.steps(), steps({8, 8}));
  const auto w = slot.write(tag(3, 9), protected_step({}, epoch_t{3}, step_t{8}), 1);
  ASSERT_TRUE(w.half) << "the slot must not lock itself up";
  EXPECT_EQ(*w.overwrites, tag(1, 8));
  EXPECT_EQ(slot.steps(), steps({8, 9}));
}

TEST(snapshot_custody, in_any_history_anchors_are_written_and_the_protected_step_survives) {
  // Random histories: training forward, restores to a step the slot holds or not, commits of
  // written steps arriving late or never. Whatever happens, an anchor is always written, the
  // protected step (when the slot held it) is never overwritten, and a skip only ever waits for
  // an anchor newer than the protected step.
  std::uint64_t seed = 12345;
  const auto next = [&](std::uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  for (int run = 0; run < 200; ++run) {
    slot_contents slot;
    const std::uint64_t every = 1 + next(3);
    custody_pin pin;
    std::uint64_t epoch = 1, restore = 0, step = 0;
    for (int i = 0; i < 300; ++i) {
      const auto r = next(100);
      if (r < 3) {
        // A restore: to a step the slot holds, or an older one from elsewhere.
        const auto held = slot.steps();
        ++epoch;
        restore = !held.empty() && next(2) == 0 ? held[next(held.size())].value() : step / 2;
        step = restore;
        continue;
      }
      if (r < 30 && !slot.steps().empty()) {
        // A commit of a step this epoch wrote.
        for (const auto& h : slot.halves())
          if (h && h->epoch == epoch_t{epoch} && h->step > pin.step)
            pin = {epoch_t{epoch}, h->step};
        continue;
      }
      step += every;
      const auto protect = protected_step(pin, epoch_t{epoch}, step_t{restore});
      const auto steps_before = slot.steps();
      const bool held_protected =
          protect && std::find(steps_before.begin(), steps_before.end(), *protect) != steps_before.end();
      const auto w = slot.write(tag(epoch, step), protect, every);
      if (is_anchor(step_t{step}, every)) {
        ASSERT_TRUE(w.half) << "run " << run << ": anchor " << step << " not written";
      } else if (!w.half) {
        ASSERT_TRUE(protect.has_value()) << "run " << run << ": a skip without a protected step";
        ASSERT_GT(w.waiting, *protect) << "run " << run;
      }
      if (held_protected) {
        const auto after = slot.steps();
        ASSERT_NE(std::find(after.begin(), after.end(), *protect), after.end())
            << "run " << run << ": protected step " << protect->value() << " overwritten by " << step << " (every "
            << every << ", epoch " << epoch << ", restore " << restore << ", pin " << pin.step.value() << "/"
            << pin.epoch.value() << ", before " << ::testing::PrintToString(steps_before) << ")";
      }
    }
  }
}

TEST(snapshot_custody, a_buddy_keeps_four_replicas_a_rank_never_evicting_the_pinned_step_or_the_two_newest_anchors) {
  replica_window w{1};
  for (std::uint64_t s = 1; s <= 4; ++s)
    EXPECT_TRUE(w.add(tag(1, s)).empty());
  w.pin({epoch_t{1}, step_t{2}});
  auto evicted = w.add(tag(1, 5));
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].step, step_t{1});
  evicted = w.add(tag(1, 6));
  EXPECT_TRUE(evicted.size() == 1 && evicted[0].step == step_t{3}) << "2 is pinned, 4 is an anchor";
  for (std::uint64_t s = 7; s <= 12; ++s)
    (void)w.add(tag(1, s));
  std::vector<step_t> held;
  for (const auto& c : w.of(rank_id{0}))
    held.push_back(c.step);
  EXPECT_EQ(held, steps({2, 8, 11, 12})) << "four: pinned 2, anchors 8 and 12, and the newest other";
  EXPECT_TRUE(w.add(tag(1, 1, 3)).empty()) << "each rank has its own window";
  EXPECT_TRUE(w.add(tag(1, 12)).empty()) << "the same copy again replaces itself";
  EXPECT_EQ(w.of(rank_id{0}).size(), 4u);
  const auto again = w.add(tag(2, 12));
  EXPECT_TRUE(again.size() == 1 && again[0] == tag(1, 11)) << "a retrained step of a new epoch is a new copy";
  EXPECT_EQ(w.all().size(), 5u);
}

TEST(snapshot_custody, a_buddy_drops_the_replicas_of_a_rank_it_no_longer_guards_when_the_pin_passes_them) {
  replica_window w{1};
  // Rank 0 was guarded here up to step 4, then its buddy changed; rank 1 is still guarded.
  for (std::uint64_t s = 1; s <= 4; ++s)
    (void)w.add(tag(1, s, 0));
  for (std::uint64_t s = 3; s <= 6; ++s)
    (void)w.add(tag(1, s, 1));
  EXPECT_TRUE(w.pin({epoch_t{1}, step_t{4}}).empty()) << "rank 0 holds the pinned step 4 here: kept";
  EXPECT_EQ(w.of(rank_id{0}).size(), 4u);
  const auto gone = w.pin({epoch_t{2}, step_t{6}});
  ASSERT_EQ(gone.size(), 4u) << "every replica of rank 0 is older than the pin: all go";
  for (const auto& c : gone)
    EXPECT_EQ(c.rank, rank_id{0});
  EXPECT_TRUE(w.of(rank_id{0}).empty());
  EXPECT_EQ(w.of(rank_id{1}).size(), 4u) << "rank 1 holds step 6: all its replicas stay, the older ones too";
  EXPECT_EQ(w.pinned(), (custody_pin{epoch_t{2}, step_t{6}}));
  EXPECT_TRUE(w.pin({epoch_t{0}, step_t{0}}).empty()) << "no pin: nothing goes";
  EXPECT_EQ(w.all().size(), 4u);
}

}  // namespace
}  // namespace rekindle::policy
