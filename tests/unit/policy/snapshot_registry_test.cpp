// snapshot_registry keeps one record for every group of ranks whose copies are alike. These tests
// hold it to the rank-by-rank reports it stands for: the same histories reported per rank to one
// registry and in bulk to another give the same answers to every question, and a change to one
// rank of a group does not reach the others.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "policy/snapshot_registry.hpp"
#include "tests/support/policy.hpp"

namespace rekindle::policy {
namespace {

constexpr std::uint32_t nodes = 6;
constexpr std::uint32_t ranks_per_node = 3;

std::vector<rank_slot> placement_of(std::uint32_t world, std::uint32_t first_node = 0) {
  std::vector<rank_slot> out;
  for (std::uint32_t r = 0; r < world; ++r)
    out.push_back(rank_slot{rank_id{r}, node_id{(first_node + r / ranks_per_node) % nodes}, r % ranks_per_node});
  return out;
}

// Change `c` to the copies of the ranks of every node of `placement`, in one pass: a slot's copy on
// the rank's node, a replica on replica_holder[its node].
bool change_everywhere(snapshot_registry& reg, std::span<const rank_slot> placement, const copy_change& c,
                       std::span<const node_id> replica_holder = {}) {
  return reg.on_changed_all(testing::change_on_every_node{c, nodes, replica_holder}, placement);
}

// Two registries fed the same history: `single` one report per rank, `bulk` the bulk calls.
struct pair_of_registries {
  snapshot_registry single{nodes};
  snapshot_registry bulk{nodes};
  std::vector<rank_slot> placement;

  void set_up(node_id n, bool up) {
    single.set_up(n, up);
    bulk.set_up(n, up);
  }
  void begin_epoch(epoch_t e, std::vector<rank_slot> p, bool renumbered) {
    placement = std::move(p);
    single.begin_epoch(e, static_cast<std::uint32_t>(placement.size()), renumbered);
    bulk.begin_epoch(e, static_cast<std::uint32_t>(placement.size()), renumbered);
  }
  // One change to the ranks of every node (a replica on holder_of_node[its node]; empty: on the
  // node itself), as changed_all.
  void held_all(epoch_t e, step_t s, copy_kind where, std::span<const node_id> holder_of_node) {
    one_change({e, s, where, true}, holder_of_node);
  }
  void dropped_all(epoch_t e, step_t s, copy_kind where, std::span<const node_id> holder_of_node) {
    one_change({e, s, where, false}, holder_of_node);
  }
  void one_change(const copy_change& c, std::span<const node_id> holder_of_node) {
    std::vector<node_id> replica_holder(nodes);
    for (std::uint32_t n = 0; n < nodes; ++n)
      replica_holder[n] = holder_of_node.empty() ? node_id{n} : holder_of_node[n];
    changed_all(std::span<const copy_change>{&c, 1}, {{c}}, std::vector<std::uint32_t>(nodes, 0), replica_holder);
  }
  // Each change of `universe` (dropped before held) in turn, rank by rank, to `single`; the sets
  // that hold some of them, node by node, in one pass to `bulk`.
  void changed_all(std::span<const copy_change> universe, const std::vector<std::vector<copy_change>>& sets,
                   const std::vector<std::uint32_t>& set_of_node, const std::vector<node_id>& replica_holder) {
    bool committed = false;
    for (const auto& u : universe)
      for (const auto& slot : placement) {
        const auto n = slot.node.value();
        if (!single.current_world(u.epoch) || n >= set_of_node.size() || set_of_node[n] >= sets.size())
          continue;
        const auto& set = sets[set_of_node[n]];
        if (std::find(set.begin(), set.end(), u) == set.end())
          continue;
        const auto h = u.where == copy_kind::local_slot ? slot.node : replica_holder[n];
        if (h.value() >= nodes)
          continue;
        const snapshot_report r{u.epoch, slot.rank, u.step, h, u.where};
        if (u.held)
          committed = single.on_held(r) || committed;
        else
          single.on_dropped(r);
      }
    EXPECT_EQ(bulk.on_changed_all({sets, set_of_node, replica_holder}, placement), committed);
  }
  // Node `holder` drops `copies` of `ranks`: one report per rank and copy to `single`, one call to
  // `bulk`.
  void dropped_ranks(std::span<const rank_id> ranks, std::span<const copy_change> copies, node_id holder) {
    for (const auto r : ranks)
      for (const auto& c : copies)
        single.on_dropped(snapshot_report{c.epoch, r, c.step, holder, c.where});
    bulk.on_dropped_ranks(ranks, copies, holder);
  }
  void held_one(const snapshot_report& r) { EXPECT_EQ(bulk.on_held(r), single.on_held(r)); }
  void dropped_one(const snapshot_report& r) {
    single.on_dropped(r);
    bulk.on_dropped(r);
  }

  void expect_same(const std::string& where) const {
    SCOPED_TRACE(where);
    EXPECT_EQ(bulk.committed(), single.committed());
    const auto a = single.choose_restore();
    const auto b = bulk.choose_restore();
    ASSERT_EQ(b.has_value(), a.has_value());
    if (a) {
      EXPECT_EQ(b->gen, a->gen);
      EXPECT_EQ(b->step, a->step);
      EXPECT_EQ(b->world, a->world);
      EXPECT_EQ(b->sources, a->sources);
    }
    EXPECT_EQ(bulk.missing_copies(), single.missing_copies());
    for (std::uint32_t r = 0; r < nodes * ranks_per_node; ++r)
      EXPECT_EQ(bulk.steps_of(rank_id{r}), single.steps_of(rank_id{r})) << "rank " << r;
    for (std::uint64_t s = 0; s <= 40; s += 5)
      EXPECT_EQ(bulk.held_in_every_slot(step_t{s}), single.held_in_every_slot(step_t{s})) << "step " << s;
  }
};

TEST(snapshot_registry, records_shared_by_alike_ranks_answer_as_rank_by_rank_reports_do) {
  // Random histories: snapshots held and dropped in bulk and one rank at a time, nodes lost and
  // back, worlds renumbered and pruned.
  for (std::uint32_t seed = 1; seed <= 25; ++seed) {
    std::mt19937 rng{seed};
    const auto pick = [&](std::uint32_t n) { return std::uniform_int_distribution<std::uint32_t>{0, n - 1}(rng); };
    pair_of_registries regs;
    for (std::uint32_t n = 0; n < nodes; ++n)
      regs.set_up(node_id{n}, true);
    std::uint64_t epoch = 1;
    regs.begin_epoch(epoch_t{epoch}, placement_of(nodes * ranks_per_node), true);
    std::uint64_t step = 0;
    for (int op = 0; op < 300; ++op) {
      const auto e = epoch_t{epoch - pick(2) % epoch};  // now and then a copy of the epoch before
      // The buddy of each node, or none for some.
      std::vector<node_id> buddy(nodes);
      for (std::uint32_t n = 0; n < nodes; ++n)
        buddy[n] = pick(6) == 0 ? node_id{~std::uint32_t{0}} : node_id{(n + 1 + pick(2)) % nodes};
      switch (pick(14)) {
        case 0:
        case 1:
        case 2:
          step += 5;
          regs.held_all(e, step_t{step}, copy_kind::local_slot, {});
          break;
        case 3:
          regs.held_all(e, step_t{step}, copy_kind::buddy_replica, buddy);
          break;
        case 4:
          regs.dropped_all(e, step_t{step - 5 * pick(4) % (step + 1)}, pick(2) ? copy_kind::local_slot : copy_kind::buddy_replica,
                           pick(2) ? std::span<const node_id>{} : std::span<const node_id>{buddy});
          break;
        case 5: {
          const auto r = rank_id{pick(static_cast<std::uint32_t>(regs.placement.size()))};
          const auto h = node_id{pick(nodes)};
          if (pick(2))
            regs.held_one(snapshot_report{e, r, step_t{step}, h, copy_kind::local_slot});
          else
            regs.dropped_one(snapshot_report{e, r, step_t{step - 5 * pick(3) % (step + 1)}, h, copy_kind::local_slot});
          break;
        }
        case 6: {
          const auto n = node_id{pick(nodes)};
          regs.set_up(n, !regs.single.up(n));
          break;
        }
        case 7: {
          // A new epoch: the same world (ranks restarted in place), or a renumbered one, shifted
          // onto other nodes and sometimes smaller.
          ++epoch;
          const bool renumber = pick(3) == 0;
          const auto world = renumber ? (nodes - pick(3)) * ranks_per_node : static_cast<std::uint32_t>(regs.placement.size());
          regs.begin_epoch(epoch_t{epoch}, placement_of(world, pick(nodes)), renumber);
          break;
        }
        case 8:
          EXPECT_EQ(regs.bulk.prune(), regs.single.prune());
          break;
        case 9:
        case 10:
        case 11: {
          // A report of many changes in one pass, as the simulator makes: a few sets of them, each
          // node's ranks taking one set (or none).
          step += 5;
          std::vector<copy_change> universe;
          for (const bool held : {false, true})
            for (std::uint64_t back = 0; back <= 20; back += 5)
              for (const auto where : {copy_kind::local_slot, copy_kind::buddy_replica})
                if (back <= step && (held ? back <= 5 : back >= 5) && pick(3) != 0)
                  universe.push_back(copy_change{e, step_t{step - back}, where, held});
          // Dropped before held, each part in one order.
          std::stable_sort(universe.begin(), universe.end(), [](const copy_change& a, const copy_change& b) {
            return std::tuple{a.held, a.epoch, a.step, a.where} < std::tuple{b.held, b.epoch, b.step, b.where};
          });
          std::vector<std::vector<copy_change>> sets(1 + pick(3));
          for (auto& set : sets)
            for (const auto& u : universe)
              if (pick(4) != 0)
                set.push_back(u);
          std::vector<std::uint32_t> set_of_node(nodes);
          for (auto& x : set_of_node)
            x = pick(static_cast<std::uint32_t>(sets.size()) + 1);  // sets.size(): none
          regs.changed_all(universe, sets, set_of_node, buddy);
          break;
        }
        case 12: {
          // An old buddy drops what it held of some ranks (their node has another buddy now).
          std::vector<rank_id> ranks;
          for (std::uint32_t r = 0; r < regs.placement.size(); ++r)
            if (pick(3) == 0)
              ranks.push_back(rank_id{r});
          std::vector<copy_change> copies;
          for (std::uint64_t back = 0; back <= 15 && back <= step; back += 5)
            if (pick(2) == 0)
              copies.push_back(copy_change{e, step_t{step - back}, pick(4) == 0 ? copy_kind::local_slot : copy_kind::buddy_replica, false});
          regs.dropped_ranks(ranks, copies, node_id{pick(nodes)});
          break;
        }
        default:
          regs.single.on_checkpoint_committed(step_t{step}, static_cast<std::uint32_t>(regs.placement.size()));
          regs.bulk.on_checkpoint_committed(step_t{step}, static_cast<std::uint32_t>(regs.placement.size()));
          break;
      }
      regs.expect_same("seed " + std::to_string(seed) + ", operation " + std::to_string(op));
      if (::testing::Test::HasFailure())
        return;
    }
  }
}

TEST(snapshot_registry, a_copy_dropped_by_one_rank_of_a_group_stays_with_the_others) {
  snapshot_registry reg{3};
  for (std::uint32_t n = 0; n < 3; ++n)
    reg.set_up(node_id{n}, true);
  const auto placement = placement_of(6);  // ranks 0-2 on n0, 3-5 on n1
  reg.begin_epoch(epoch_t{1}, 6, true);
  (void)change_everywhere(reg, placement, {epoch_t{1}, step_t{5}, copy_kind::local_slot, true});
  const std::vector<node_id> buddy{node_id{1}, node_id{2}, node_id{0}};
  EXPECT_TRUE(change_everywhere(reg, placement, {epoch_t{1}, step_t{5}, copy_kind::buddy_replica, true}, buddy));
  EXPECT_EQ(reg.committed(), step_t{5});
  // Rank 1's slot copy is dropped: ranks 0 and 2, which shared its record, keep theirs.
  reg.on_dropped(snapshot_report{epoch_t{1}, rank_id{1}, step_t{5}, node_id{0}, copy_kind::local_slot});
  EXPECT_TRUE(reg.held_in_every_slot(step_t{5}) == false);
  auto choice = reg.choose_restore();
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->sources[0], (state_source{rank_id{0}, node_id{0}, copy_kind::local_slot}));
  EXPECT_EQ(choice->sources[1], (state_source{rank_id{1}, node_id{1}, copy_kind::buddy_replica}));
  EXPECT_EQ(choice->sources[2], (state_source{rank_id{2}, node_id{0}, copy_kind::local_slot}));
  // Rank 1's replica goes too: no complete step is left, and the event says which rank lacks it.
  reg.on_dropped(snapshot_report{epoch_t{1}, rank_id{1}, step_t{5}, node_id{1}, copy_kind::buddy_replica});
  EXPECT_FALSE(reg.choose_restore().has_value());
  EXPECT_EQ(reg.steps_of(rank_id{1}), std::vector<step_t>{});
  EXPECT_EQ(reg.steps_of(rank_id{2}), std::vector<step_t>{step_t{5}});
  EXPECT_EQ(reg.missing_copies(), "of the 6-rank world, rank 0 holds steps 5 and rank 1 holds none on live nodes");
  // Losing n1 takes the replicas of ranks 0-2 and the slots of ranks 3-5, whatever record they share.
  reg.set_up(node_id{1}, false);
  EXPECT_EQ(reg.steps_of(rank_id{0}), std::vector<step_t>{step_t{5}});
  EXPECT_EQ(reg.steps_of(rank_id{3}), std::vector<step_t>{step_t{5}}) << "its replica on n2";
  reg.set_up(node_id{2}, false);
  EXPECT_EQ(reg.steps_of(rank_id{3}), std::vector<step_t>{});
  EXPECT_EQ(reg.steps_of(rank_id{0}), std::vector<step_t>{step_t{5}});
  // The event names every rank that lacks what rank 0 holds, not only the first.
  const auto missing = reg.missing_copies();
  EXPECT_NE(missing.find("rank 1 holds none; rank 3 holds none"), std::string::npos) << missing;
}

TEST(snapshot_registry, ranks_whose_buddy_changed_share_a_record_again_once_the_old_replicas_are_gone) {
  snapshot_registry reg{nodes};
  for (std::uint32_t n = 0; n < nodes; ++n)
    reg.set_up(node_id{n}, true);
  const auto placement = placement_of(nodes * ranks_per_node);
  reg.begin_epoch(epoch_t{1}, nodes * ranks_per_node, true);
  std::vector<node_id> buddy(nodes);
  for (std::uint32_t n = 0; n < nodes; ++n)
    buddy[n] = node_id{(n + 1) % nodes};
  const auto snapshot = [&](std::uint64_t s) {
    (void)change_everywhere(reg, placement, {epoch_t{1}, step_t{s}, copy_kind::local_slot, true});
    return change_everywhere(reg, placement, {epoch_t{1}, step_t{s}, copy_kind::buddy_replica, true}, buddy);
  };
  const auto drop = [&](std::uint64_t s, std::span<const node_id> holders) {
    (void)change_everywhere(reg, placement, {epoch_t{1}, step_t{s}, copy_kind::local_slot, false});
    (void)change_everywhere(reg, placement, {epoch_t{1}, step_t{s}, copy_kind::buddy_replica, false}, holders);
  };
  EXPECT_TRUE(snapshot(5));
  EXPECT_EQ(reg.records(), 1u) << "every rank's copies lie on its node and its node's buddy";
  // n2 gets n4 as its buddy; n3, its old buddy, drops their replicas of step 5 when a newer step
  // is pinned, rank by rank, as a checkpoint actor reports them.
  const auto old_buddy = buddy;
  buddy[2] = node_id{4};
  EXPECT_TRUE(snapshot(10));
  EXPECT_EQ(reg.records(), 2u) << "n2's ranks name n4 by its id";
  for (std::uint32_t r = 6; r < 9; ++r)
    reg.on_dropped(snapshot_report{epoch_t{1}, rank_id{r}, step_t{5}, node_id{3}, copy_kind::buddy_replica});
  drop(5, old_buddy);
  EXPECT_TRUE(snapshot(15));
  EXPECT_TRUE(snapshot(20));
  drop(10, buddy);
  EXPECT_EQ(reg.records(), 1u) << "n4 is the second home of n2's ranks now: one record again";
  for (std::uint32_t r = 0; r < nodes * ranks_per_node; ++r)
    EXPECT_EQ(reg.steps_of(rank_id{r}), (std::vector<step_t>{step_t{15}, step_t{20}})) << "rank " << r;
  // Their copies on n4 are theirs alone: losing n4 leaves n2's ranks their slots and n3's ranks
  // (whose buddy n4 is) theirs.
  reg.set_up(node_id{4}, false);
  const auto choice = reg.choose_restore();
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->step, step_t{20});
  EXPECT_EQ(choice->sources[6], (state_source{rank_id{6}, node_id{2}, copy_kind::local_slot}));
  EXPECT_EQ(choice->sources[12], (state_source{rank_id{12}, node_id{5}, copy_kind::buddy_replica}));
  EXPECT_FALSE(reg.held_in_every_slot(step_t{20})) << "n4's own ranks lost their slots";
}

}  // namespace
}  // namespace rekindle::policy
