// One sequence of snapshots, replicas, commits and a node loss fed through the live classes (real
// shared-memory slots applying the custody rule, the checkpoint actor's replica windows, the
// supervisor policy) and through the simulator: the same kept steps, the same committed step and
// the same restore choice.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "policy/supervisor_policy.hpp"
#include "storage/snapshot_slot.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/temp_dir.hpp"
#include "trace/cluster.hpp"
#include "trace/simulator.hpp"

namespace rekindle::trace {
namespace {

using namespace std::chrono_literals;
using policy::state_source;

constexpr std::uint32_t nodes = 2;
constexpr std::uint32_t ranks_per_node = 2;
constexpr std::uint64_t state_bytes = 1 << 20;

// What the live classes and the simulator are compared on.
struct outcome {
  std::vector<std::uint64_t> slot_steps;     // rank 0's slot
  std::vector<std::uint64_t> replica_steps;  // rank 0's replicas on its buddy
  std::optional<std::uint64_t> committed;
  std::optional<sim_result::restore_record> restore;  // after losing n1
};

// The live classes, as a two-node job drives them: every rank writes each step into its slot (the
// slot's custody rule decides), each node's checkpoint actor reports held and dropped copies and
// sends replicas to the buddy, whose window keeps them; the supervisor's policy commits and the
// checkpoint actors pin. Replicas of step s arrive just before step s + lag is written; at step
// `last` node n1 is lost (replicas still on their way with it).
outcome live(std::uint64_t last, std::uint64_t lag, bool lose_n1) {
  testing::temp_dir dir{"rekindle-custody"};
  fake_clock clock;
  policy::policy_config config;
  for (std::uint32_t n = 0; n < nodes; ++n)
    config.nodes.push_back({"n" + std::to_string(n), ranks_per_node, false});
  config.total_steps = 1000000;
  config.snapshot_every = 1;
  config.hang_timeout = 10s;
  policy::supervisor_policy p{config, clock};
  std::vector<std::uint32_t> buddies;
  for (std::uint32_t n = 0; n < nodes; ++n)
    for (const auto& b : testing::all_of<policy::assign_buddies>(p.on_node_up(node_id{n})))
      for (const auto& of : b.buddy_of)
        buddies.push_back(of ? of->value() : n);
  EXPECT_EQ(buddies, (std::vector<std::uint32_t>{1, 0})) << "each node's buddy is the other";
  std::vector<policy::policy_action> started;
  for (const auto& s : p.placement())
    started = p.on_rank_ready(s.rank, p.epoch());
  EXPECT_EQ(testing::all_of<policy::start_epoch>(started).size(), 1u);
  const auto epoch = p.epoch();
  const auto placement = p.placement();

  std::vector<storage::snapshot_slot> slots;
  for (const auto& s : placement) {
    const auto name = storage::snapshot_slot::name_for(dir.path(), "agree-n" + std::to_string(s.node.value()), s.local_index);
    EXPECT_TRUE(storage::snapshot_slot::remove(name).ok());
    auto slot = storage::snapshot_slot::create(name, state_bytes);
    EXPECT_TRUE(slot.has_value()) << slot.to_status();
    slots.push_back(std::move(*slot));
  }
  std::vector<policy::replica_window> windows(nodes, policy::replica_window{1});
  const auto commit = [&](bool committed) {
    if (!committed)
      return;
    const policy::custody_pin pin{p.epoch(), *p.copies().committed()};
    for (auto& s : slots)
      s.pin(pin);
    for (auto& w : windows)
      (void)w.pin(pin);
  };
  const std::vector<std::byte> state(state_bytes / 2, std::byte{7});
  std::set<std::pair<rank_id, step_t>> published;
  for (std::uint64_t step = 1; step <= last; ++step) {
    if (step > lag) {
      // The replicas of step - lag arrive at their buddies (of the ranks that published it).
      const step_t s{step - lag};
      for (const auto& r : placement) {
        if (!published.contains({r.rank, s}))
          continue;
        const auto buddy = buddies[r.node.value()];
        for (const auto& gone : windows[buddy].add({epoch, r.rank, s}))
          p.on_snapshot_dropped({gone.epoch, gone.rank, gone.step, node_id{buddy}, copy_kind::buddy_replica});
        commit(p.on_snapshot({epoch, r.rank, s, node_id{buddy}, copy_kind::buddy_replica}));
      }
    }
    for (std::size_t i = 0; i < placement.size(); ++i) {
      const auto& r = placement[i];
      const auto w = slots[i].write({{epoch, r.rank, step_t{step}}, static_cast<std::uint32_t>(placement.size()), {}, 1}, state);
      EXPECT_TRUE(w.has_value()) << w.to_status();
      if (!w || !w->half)
        continue;  // skipped: nothing published, nothing replicated
      published.insert({r.rank, step_t{step}});
      if (w->overwrites)
        p.on_snapshot_dropped({w->overwrites->epoch, w->overwrites->rank, w->overwrites->step, r.node,
                               copy_kind::local_slot});
      commit(p.on_snapshot({epoch, r.rank, step_t{step}, r.node, copy_kind::local_slot}));
    }
  }
  outcome out;
  for (auto s : slots[0].steps())
    out.slot_steps.push_back(s.value());
  for (const auto& c : windows[1].of(rank_id{0}))
    out.replica_steps.push_back(c.step.value());
  std::sort(out.replica_steps.begin(), out.replica_steps.end());
  if (const auto c = p.copies().committed())
    out.committed = c->value();
  if (lose_n1) {
    (void)p.on_node_lost(node_id{1}, "lost");
    std::vector<policy::policy_action> a;
    for (const auto& s : p.placement())
      a = p.on_rank_ready(s.rank, p.epoch());
    const auto starts = testing::all_of<policy::start_epoch>(a);
    EXPECT_EQ(starts.size(), 1u);
    if (!starts.empty()) {
      int worst = starts[0].sources.empty() ? -1 : 0;
      for (const auto& src : starts[0].sources)
        worst = std::max(worst, static_cast<int>(src.where));
      out.restore = sim_result::restore_record{p.epoch().value(), starts[0].restore_step.value(), worst};
    }
  }
  for (const auto& s : slots)
    EXPECT_TRUE(storage::snapshot_slot::remove(s.name()).ok());
  return out;
}

// The simulator on the same job: 1 s steps, a snapshot each step without a stall, replicas that
// take lag - 0.5 s; node n1 goes down half a step after step `last` (or the run ends there).
outcome simulated(std::uint64_t last, std::uint64_t lag, bool lose_n1) {
  auto cluster = cluster_shape::compact(nodes, ranks_per_node);
  EXPECT_TRUE(cluster.has_value());
  model m;
  m.step_time = 1s;
  m.state_size = state_bytes;
  m.snapshot_every = 1;
  m.snapshot_stall = 0ms;
  m.persist_every = 0;
  m.buddy_bandwidth = static_cast<double>(state_bytes) / (static_cast<double>(lag) - 0.5);
  m.node_timeout = 1s;
  m.tick = 100ms;
  m.regrow_below = 0;
  fault_trace t;
  const double loss_at = static_cast<double>(last) + 0.5;
  t.header.duration = lose_n1 ? loss_at + 60 : static_cast<double>(last) + 0.4;
  if (lose_n1) {
    fault_event e;
    e.at = loss_at;
    e.kind = fault_kind::node_down;
    e.target = fault_target::of_node("n1");
    t.events.push_back(e);
  }
  auto r = simulate(t, *cluster, m, policy_kind::in_place);
  EXPECT_TRUE(r.has_value()) << r.error();
  outcome out;
  if (!r)
    return out;
  out.slot_steps = r->slot_steps;
  out.replica_steps = r->replica_steps;
  out.committed = r->committed;
  if (lose_n1 && r->restores.size() >= 2)
    out.restore = r->restores[1];
  return out;
}

TEST(custody_agreement, replicas_that_keep_up_give_the_same_kept_steps_commit_and_restore) {
  for (std::uint64_t last : {9u, 10u, 11u, 13u}) {
    const auto a = live(last, 1, false);
    const auto b = simulated(last, 1, false);
    EXPECT_EQ(b.slot_steps, a.slot_steps) << "after step " << last;
    EXPECT_EQ(b.replica_steps, a.replica_steps) << "after step " << last;
    EXPECT_EQ(b.committed, a.committed) << "after step " << last;
    EXPECT_TRUE(a.committed.has_value());
    const auto la = live(last, 1, true);
    const auto lb = simulated(last, 1, true);
    ASSERT_TRUE(la.restore && lb.restore) << "after step " << last;
    EXPECT_EQ(lb.restore->step, la.restore->step) << "after step " << last;
    EXPECT_EQ(lb.restore->source, la.restore->source) << "after step " << last;
    EXPECT_EQ(la.restore->source, 1) << "n1's ranks restore from their replicas on n0";
  }
}

TEST(custody_agreement, replicas_that_lag_make_snapshots_wait_alike) {
  // Replicas take 2.5 s: commits trail by three steps, and snapshots between anchors wait.
  for (std::uint64_t last : {7u, 12u, 17u}) {
    const auto a = live(last, 3, false);
    const auto b = simulated(last, 3, false);
    EXPECT_EQ(b.slot_steps, a.slot_steps) << "after step " << last;
    EXPECT_EQ(b.replica_steps, a.replica_steps) << "after step " << last;
    EXPECT_EQ(b.committed, a.committed) << "after step " << last;
    if (last == 17) {
      EXPECT_EQ(a.slot_steps, (std::vector<std::uint64_t>{12, 16})) << "17 waits for anchor 16's commit";
      EXPECT_EQ(a.committed, 12u);
    }
    const auto la = live(last, 3, true);
    const auto lb = simulated(last, 3, true);
    ASSERT_TRUE(la.restore && lb.restore) << "after step " << last;
    EXPECT_EQ(lb.restore->step, la.restore->step) << "after step " << last;
    EXPECT_EQ(lb.restore->source, la.restore->source) << "after step " << last;
  }
}

}  // namespace
}  // namespace rekindle::trace
