#include <gtest/gtest.h>

#include <algorithm>

#include "policy/supervisor_policy.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/policy.hpp"

namespace rekindle::policy {
namespace {

using testing::all_of;

node_figures healthy(double gflops = 30) {
  node_figures f;
  f.gemm_gflops = gflops;
  f.memory_gbps = 10;
  f.disk_mbps = 400;
  return f;
}

policy_config preflight(std::uint32_t nodes, bool with_spare) {
  auto c = testing::small_cluster(nodes, with_spare);
  c.preflight = true;
  return c;
}

std::vector<note_event> notes(const std::vector<policy_action>& actions, const std::string& kind) {
  std::vector<note_event> out;
  for (const auto& n : all_of<note_event>(actions))
    if (n.kind == kind)
      out.push_back(n);
  return out;
}

bool places(const std::vector<rank_slot>& placement, std::uint32_t node) {
  return std::any_of(placement.begin(), placement.end(), [&](const rank_slot& s) { return s.node.value() == node; });
}

// Every node up and every rank ready: the job runs.
void start_running(supervisor_policy& p, std::uint32_t nodes) {
  for (std::uint32_t n = 0; n < nodes; ++n)
    (void)p.on_node_up(node_id{n});
  for (const auto& s : p.placement())
    (void)p.on_rank_ready(s.rank, p.epoch());
  ASSERT_EQ(p.state(), job_state::running);
}

TEST(quarantine, with_preflight_no_rank_is_placed_before_the_nodes_passed_their_checks) {
  fake_clock clock;
  supervisor_policy p{preflight(2, false), clock};
  (void)p.on_node_up(node_id{0});
  (void)p.on_node_up(node_id{1});
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  auto a = p.on_node_checked(node_id{0}, healthy());
  EXPECT_EQ(p.state(), job_state::waiting_for_nodes);
  EXPECT_TRUE(notes(a, "node_checked").empty());  // judged only once the fleet has reported
  a = p.on_node_checked(node_id{1}, healthy(28));
  EXPECT_EQ(p.state(), job_state::rendezvous);
  EXPECT_EQ(notes(a, "node_checked").size(), 2u);
  EXPECT_EQ(all_of<spawn_rank>(a).size(), 4u);
  ASSERT_TRUE(p.check_of(node_id{1}));
  EXPECT_TRUE(p.check_of(node_id{1})->passed);
}

TEST(quarantine, a_slow_worker_node_at_preflight_hands_its_ranks_to_the_spare_before_the_job_starts) {
  fake_clock clock;
  supervisor_policy p{preflight(3, true), clock};  // n0 n1 n2, spare s0 (node 3)
  for (std::uint32_t n = 0; n < 4; ++n)
    (void)p.on_node_up(node_id{n});
  (void)p.on_node_checked(node_id{3}, healthy(31));
  (void)p.on_node_checked(node_id{0}, healthy(30));
  (void)p.on_node_checked(node_id{2}, healthy(29));
  const auto a = p.on_node_checked(node_id{1}, healthy(12));
  ASSERT_EQ(p.state(), job_state::rendezvous);
  const auto q = notes(a, "node_quarantined");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].node, node_id{1});
  EXPECT_NE(q[0].detail.find("compute 12.00 GFLOP/s"), std::string::npos) << q[0].detail;
  EXPECT_FALSE(q[0].fields.empty());
  EXPECT_FALSE(places(p.placement(), 1));
  EXPECT_TRUE(places(p.placement(), 3));
  EXPECT_EQ(p.world(), 6u);  // the spare took n1's ranks with their numbers
  ASSERT_TRUE(p.quarantined(node_id{1}));
  EXPECT_FALSE(p.quarantined(node_id{0}));
}

TEST(quarantine, a_quarantined_spare_is_never_used_and_the_world_shrinks_instead) {
  fake_clock clock;
  supervisor_policy p{preflight(2, true), clock};
  for (std::uint32_t n = 0; n < 3; ++n)
    (void)p.on_node_up(node_id{n});
  (void)p.on_node_checked(node_id{0}, healthy(30));
  (void)p.on_node_checked(node_id{2}, healthy(5));  // the spare is slow
  (void)p.on_node_checked(node_id{1}, healthy(30));
  ASSERT_EQ(p.state(), job_state::rendezvous);
  EXPECT_TRUE(p.quarantined(node_id{2}));
  for (const auto& s : p.placement())
    (void)p.on_rank_ready(s.rank, p.epoch());
  ASSERT_EQ(p.state(), job_state::running);
  const auto a = p.on_node_lost(node_id{1}, "gone");
  EXPECT_EQ(notes(a, "world_shrinks").size(), 1u);
  EXPECT_FALSE(places(p.placement(), 2));
  EXPECT_EQ(p.world(), 2u);
}

TEST(quarantine, a_check_that_fails_while_training_moves_the_ranks_and_a_passing_one_releases_the_node) {
  fake_clock clock;
  supervisor_policy p{preflight(2, true), clock};
  for (std::uint32_t n = 0; n < 3; ++n) {
    (void)p.on_node_up(node_id{n});
    (void)p.on_node_checked(node_id{n}, healthy());
  }
  for (const auto& s : p.placement())
    (void)p.on_rank_ready(s.rank, p.epoch());
  ASSERT_EQ(p.state(), job_state::running);
  const auto before = p.epoch();
  auto a = p.on_node_checked(node_id{0}, healthy(9));
  EXPECT_EQ(notes(a, "node_quarantined").size(), 1u);
  EXPECT_EQ(notes(a, "ranks_moved").size(), 1u);
  EXPECT_GT(p.epoch(), before);
  EXPECT_FALSE(places(p.placement(), 0));
  EXPECT_TRUE(places(p.placement(), 2));
  // The node passes again: released (usable as a spare), its ranks stay where they are.
  a = p.on_node_checked(node_id{0}, healthy(30));
  EXPECT_EQ(notes(a, "node_released").size(), 1u);
  EXPECT_FALSE(p.quarantined(node_id{0}));
  EXPECT_FALSE(places(p.placement(), 0));
}

TEST(quarantine, without_preflight_nodes_are_placed_once_up_and_an_operators_check_still_quarantines) {
  fake_clock clock;
  auto c = testing::small_cluster(2, false);
  supervisor_policy p{c, clock};
  (void)p.on_node_up(node_id{0});
  (void)p.on_node_up(node_id{1});
  EXPECT_EQ(p.state(), job_state::rendezvous);
  (void)p.on_node_checked(node_id{0}, healthy(30));
  const auto a = p.on_node_checked(node_id{1}, healthy(30));
  EXPECT_EQ(notes(a, "node_checked").size(), 1u);
  EXPECT_FALSE(p.check_of(node_id{1}) && !p.check_of(node_id{1})->passed);
}

TEST(quarantine, a_quarantined_node_holds_no_buddy_replicas) {
  fake_clock clock;
  supervisor_policy p{preflight(3, false), clock};
  for (std::uint32_t n = 0; n < 3; ++n)
    (void)p.on_node_up(node_id{n});
  (void)p.on_node_checked(node_id{0}, healthy(30));
  (void)p.on_node_checked(node_id{1}, healthy(30));
  const auto a = p.on_node_checked(node_id{2}, healthy(3));
  const auto buddies = all_of<assign_buddies>(a);
  ASSERT_EQ(buddies.size(), 1u);
  for (const auto& b : buddies[0].buddy_of)
    EXPECT_NE(b, std::optional<node_id>{node_id{2}});
  EXPECT_FALSE(buddies[0].buddy_of[2]);
}

TEST(quarantine, a_node_quarantined_as_a_stragglers_moves_its_ranks_to_the_spare_until_a_check_passes) {
  fake_clock clock;
  supervisor_policy p{testing::small_cluster(2, true), clock};
  ASSERT_NO_FATAL_FAILURE(start_running(p, 3));
  EXPECT_TRUE(p.spare_available());
  auto a = p.quarantine(node_id{1}, "straggler", "rank 2 computes 4.00x as long as the others", {{"ratio", "4.00"}});
  const auto q = notes(a, "node_quarantined");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_NE(q[0].detail.find("(straggler)"), std::string::npos) << q[0].detail;
  EXPECT_EQ(notes(a, "ranks_moved").size(), 1u);
  EXPECT_FALSE(places(p.placement(), 1));
  EXPECT_TRUE(places(p.placement(), 2));
  EXPECT_FALSE(p.spare_available());
  EXPECT_TRUE(p.quarantine(node_id{1}, "straggler", "again").empty()) << "already quarantined";
  a = p.on_node_checked(node_id{1}, healthy());
  EXPECT_EQ(notes(a, "node_released").size(), 1u);
  EXPECT_FALSE(p.quarantined(node_id{1}));
  EXPECT_FALSE(places(p.placement(), 1)) << "released, not placed: a worker node takes ranks again through scale";
}

TEST(quarantine, a_node_quarantined_by_the_link_check_is_released_only_by_a_link_check) {
  fake_clock clock;
  supervisor_policy p{testing::small_cluster(2, true), clock};
  ASSERT_NO_FATAL_FAILURE(start_running(p, 3));
  auto a = p.quarantine(node_id{1}, "link", "n1 is slow on every link", {{"mbps", "9.8"}});
  ASSERT_EQ(notes(a, "node_quarantined").size(), 1u);
  EXPECT_FALSE(places(p.placement(), 1));
  // Its own figures are fine, but they say nothing of its links.
  a = p.on_node_checked(node_id{1}, healthy());
  EXPECT_TRUE(notes(a, "node_released").empty());
  EXPECT_TRUE(p.quarantined(node_id{1}));
  EXPECT_TRUE(p.release(node_id{1}, "compute", "passed").empty()) << "not what quarantined it";
  a = p.release(node_id{1}, "link", "its links are fast again");
  ASSERT_EQ(notes(a, "node_released").size(), 1u);
  EXPECT_NE(notes(a, "node_released")[0].detail.find("passed the link check"), std::string::npos);
  EXPECT_FALSE(p.quarantined(node_id{1}));
  EXPECT_TRUE(p.release(node_id{1}, "link", "again").empty()) << "not quarantined";
}

}  // namespace
}  // namespace rekindle::policy
