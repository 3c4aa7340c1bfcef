#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "policy/link_screen.hpp"

namespace rekindle::policy {
namespace {

// A network of `n` nodes: every probe runs at 1000 MB/s (with a little noise), except those
// through a slow node or over a slow link; `probe` returns nullopt for a probe that fails.
struct network {
  std::uint32_t n = 4;
  std::set<std::uint32_t> slow_nodes;
  std::set<std::pair<std::uint32_t, std::uint32_t>> slow_links;
  std::set<std::uint32_t> dead;
  std::optional<double> probe(const link_pair& p, int i) const {
    if (dead.contains(p.from) || dead.contains(p.to))
      return std::nullopt;
    const bool slow = slow_nodes.contains(p.from) || slow_nodes.contains(p.to) ||
                      slow_links.contains({std::min(p.from, p.to), std::max(p.from, p.to)});
    return (slow ? 8.0 : 1000.0) * (1.0 - 0.05 * (i % 7) / 7.0);
  }
};

struct run_result {
  std::vector<link_verdict> verdicts;
  std::vector<std::vector<link_pair>> rounds;
  std::vector<std::uint32_t> cleared;
};

run_result run(const network& net, double min_link = 0.1) {
  std::vector<std::uint32_t> nodes;
  for (std::uint32_t i = 0; i < net.n; ++i)
    nodes.push_back(i);
  link_screen s{nodes, min_link};
  run_result out;
  int i = 0;
  while (!s.done()) {
    out.rounds.push_back(s.round());
    std::set<std::uint32_t> busy;
    for (const auto& p : s.round()) {
      // Disjoint: a node probes one partner at a time.
      EXPECT_TRUE(busy.insert(p.from).second && busy.insert(p.to).second) << "node twice in round " << s.round_number();
      EXPECT_NE(p.from, p.to);
      const auto mbps = net.probe(p, i++);
      EXPECT_TRUE(s.record(p, mbps, mbps ? "" : "no answer within 10 s"));
    }
    EXPECT_TRUE(s.round_complete());
    s.advance();
    EXPECT_LE(out.rounds.size(), 2u * net.n) << "the rounds must end";
    if (out.rounds.size() > 2u * net.n)
      break;
  }
  out.verdicts = s.verdicts();
  out.cleared = s.cleared();
  return out;
}

TEST(link_screen, a_healthy_fleet_gives_no_verdict_in_one_round) {
  for (std::uint32_t n : {2u, 4u, 8u}) {
    const auto r = run(network{.n = n});
    EXPECT_TRUE(r.verdicts.empty()) << n << " nodes";
    EXPECT_EQ(r.rounds.size(), 1u) << n << " nodes";
    EXPECT_EQ(r.cleared.size(), n);
  }
}

TEST(link_screen, an_odd_node_out_is_probed_with_a_fast_node_in_a_second_round) {
  const auto r = run(network{.n = 5});
  ASSERT_EQ(r.rounds.size(), 2u);
  ASSERT_EQ(r.rounds[1].size(), 1u);
  EXPECT_EQ(r.rounds[1][0].from, 4u);
  EXPECT_TRUE(r.verdicts.empty());
  EXPECT_EQ(r.cleared.size(), 5u);
}

TEST(link_screen, the_odd_node_out_slow_with_one_partner_is_probed_with_a_second) {
  // Slow itself: slow with both fast partners.
  const auto node = run(network{.n = 5, .slow_nodes = {4}});
  ASSERT_EQ(node.verdicts.size(), 1u);
  EXPECT_EQ(node.verdicts[0].what, link_verdict::kind::node);
  EXPECT_EQ(node.verdicts[0].a, 4u);
  EXPECT_EQ(node.rounds.size(), 3u);
  // Its link to its first partner (node 0) slow: fast with the second.
  const auto link = run(network{.n = 5, .slow_links = {{0, 4}}});
  ASSERT_EQ(link.verdicts.size(), 1u);
  EXPECT_EQ(link.verdicts[0].what, link_verdict::kind::link);
  EXPECT_EQ(link.verdicts[0].a, 4u);
  EXPECT_EQ(link.verdicts[0].b, 0u);
  EXPECT_EQ(link.cleared.size(), 5u);
}

TEST(link_screen, a_slow_node_is_named_and_not_its_partner) {
  for (std::uint32_t bad : {0u, 1u, 3u}) {
    const auto r = run(network{.n = 4, .slow_nodes = {bad}});
    ASSERT_EQ(r.verdicts.size(), 1u) << "slow node " << bad;
    EXPECT_EQ(r.verdicts[0].what, link_verdict::kind::node);
    EXPECT_EQ(r.verdicts[0].a, bad);
    ASSERT_TRUE(r.verdicts[0].mbps);
    EXPECT_LT(*r.verdicts[0].mbps, 10.0);
    EXPECT_NEAR(r.verdicts[0].reference, 1000.0, 50.0);
    EXPECT_NE(r.verdicts[0].detail.find("MB/s"), std::string::npos) << r.verdicts[0].detail;
    EXPECT_EQ(r.cleared.size(), 3u);
    EXPECT_EQ(std::count(r.cleared.begin(), r.cleared.end(), bad), 0);
  }
}

TEST(link_screen, a_slow_link_is_told_from_its_two_ends) {
  const auto r = run(network{.n = 6, .slow_links = {{2, 3}}});
  ASSERT_EQ(r.verdicts.size(), 1u);
  EXPECT_EQ(r.verdicts[0].what, link_verdict::kind::link);
  EXPECT_EQ(r.verdicts[0].a, 2u);
  EXPECT_EQ(r.verdicts[0].b, 3u);
  // Both ends were re-paired with fast partners, and both are cleared.
  EXPECT_EQ(r.cleared.size(), 6u);
  ASSERT_GE(r.rounds.size(), 2u);
}

TEST(link_screen, a_slow_link_between_nodes_that_are_not_paired_at_first_is_not_seen) {
  // The check probes a matching, not every link: a slow link between 1 and 2 is not in it.
  const auto r = run(network{.n = 4, .slow_links = {{1, 2}}});
  EXPECT_TRUE(r.verdicts.empty());
}

TEST(link_screen, with_no_fast_pair_to_lean_on_the_pair_is_named_undecided) {
  const auto r = run(network{.n = 2, .slow_nodes = {1}});
  // Two nodes: one probe, and a reference of its own (it is the best), so it is not slow...
  EXPECT_TRUE(r.verdicts.empty());
  // ...but one that fails is, and nothing tells which end.
  const auto dead = run(network{.n = 2, .dead = {1}});
  ASSERT_EQ(dead.verdicts.size(), 1u);
  EXPECT_EQ(dead.verdicts[0].what, link_verdict::kind::pair);
  EXPECT_FALSE(dead.verdicts[0].mbps);
  EXPECT_EQ(dead.verdicts[0].detail, "no answer within 10 s");
}

TEST(link_screen, a_dead_node_fails_its_probes_and_is_named) {
  const auto r = run(network{.n = 4, .dead = {2}});
  ASSERT_EQ(r.verdicts.size(), 1u);
  EXPECT_EQ(r.verdicts[0].what, link_verdict::kind::node);
  EXPECT_EQ(r.verdicts[0].a, 2u);
}

TEST(link_screen, two_slow_nodes_take_more_rounds_and_both_are_named) {
  const auto r = run(network{.n = 8, .slow_nodes = {1, 4}});
  std::set<std::uint32_t> named;
  for (const auto& v : r.verdicts) {
    EXPECT_EQ(v.what, link_verdict::kind::node);
    named.insert(v.a);
  }
  EXPECT_EQ(named, (std::set<std::uint32_t>{1, 4}));
}

TEST(link_screen, a_probe_that_never_came_back_counts_as_failed) {
  link_screen s{{0, 1, 2, 3}, 0.1};
  ASSERT_EQ(s.round().size(), 2u);
  EXPECT_TRUE(s.record(s.round()[0], 900.0));
  EXPECT_FALSE(s.round_complete());
  EXPECT_FALSE(s.record(link_pair{0, 3}, 900.0)) << "not asked";
  EXPECT_FALSE(s.record(s.round()[0], 900.0)) << "twice";
  EXPECT_TRUE(s.advance());  // (2,3) never answered: its ends are re-paired with 0 and 1
  ASSERT_EQ(s.round().size(), 2u);
  for (const auto p : std::vector<link_pair>{s.round()})
    EXPECT_TRUE(s.record(p, 950.0));
  EXPECT_FALSE(s.advance());
  ASSERT_EQ(s.verdicts().size(), 1u);
  EXPECT_EQ(s.verdicts()[0].what, link_verdict::kind::link);
  EXPECT_EQ(s.verdicts()[0].detail, "no answer");
}

TEST(link_screen, rotating_checks_probe_every_link_once_in_n_minus_one_checks) {
  for (std::uint32_t n : {2u, 3u, 4u, 5u, 8u}) {
    std::vector<std::uint32_t> nodes;
    for (std::uint32_t i = 0; i < n; ++i)
      nodes.push_back(10 + i);
    std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
    const std::uint32_t checks = n - 1 + n % 2;
    for (std::uint32_t k = 0; k < checks; ++k) {
      link_screen s{nodes, 0.1, k};
      std::set<std::uint32_t> busy;
      for (const auto& p : s.round()) {
        EXPECT_TRUE(busy.insert(p.from).second && busy.insert(p.to).second);
        EXPECT_TRUE(seen.insert({std::min(p.from, p.to), std::max(p.from, p.to)}).second)
            << n << " nodes: " << p.from << "-" << p.to << " probed twice in " << checks << " checks";
      }
      EXPECT_EQ(s.round().size(), n / 2);
    }
    EXPECT_EQ(seen.size(), n * (n - 1) / 2) << n << " nodes";
  }
  // A slow link outside the first pairing is found by a later rotation.
  network net{.n = 4, .slow_links = {{1, 2}}};
  bool found = false;
  for (std::uint64_t k = 0; k < 3 && !found; ++k) {
    link_screen s{{0, 1, 2, 3}, 0.1, k};
    while (!s.done()) {
      for (const auto p : std::vector<link_pair>{s.round()})
        s.record(p, net.probe(p, 0));
      s.advance();
    }
    for (const auto& v : s.verdicts())
      found = found || (v.what == link_verdict::kind::link && v.a == 1 && v.b == 2);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace rekindle::policy
