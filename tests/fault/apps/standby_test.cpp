// The supervisor's standby (docs/RELIABILITY.md): a replica of the supervisor's state on another
// node, a lease in a real etcd, and a takeover when the supervisor's daemon is lost. Each run must
// end with the job done and the final loss bitwise equal to a run without failures.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <iostream>

#include "tests/support/cluster.hpp"
#include "tests/support/etcd.hpp"
#include "tests/support/values.hpp"
#include "tests/support/wait.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
using testing::bits;

constexpr std::uint64_t steps = 1500;

// Two worker nodes and a spare; n1 keeps the standby.
testing::cluster_options options(const std::string& etcd) {
  testing::cluster_options o{.spare = true, .steps = steps};
  if (!etcd.empty())
    o.cluster_extra = "standby = \"n1\"\netcd = \"" + etcd + "\"\nlease = \"2s\"\n";
  return o;
}

double reference_loss() {
  static std::optional<double> cached;
  if (!cached) {
    testing::local_cluster c{options("")};
    c.start_all();
    const auto report = c.wait_done(240s);
    EXPECT_EQ(report.value("state", ""), "completed");
    cached = report.is_null() ? 0.0 : testing::final_loss(report);
  }
  return *cached;
}

struct standby : ::testing::Test {
  testing::temp_dir dir{"rekindle-standby"};
  std::unique_ptr<testing::etcd_server> etcd;

  void SetUp() override {
    if (auto why = testing::etcd_server::missing())
      GTEST_SKIP() << *why;
    etcd = std::make_unique<testing::etcd_server>(dir.path() / "etcd");
    ASSERT_TRUE(etcd->ready()) << testing::read_file(etcd->log());
  }

  static std::string logs(const testing::local_cluster& c) {
    std::string out;
    for (const auto& n : c.node_names())
      out += "---- " + n + "\n" + c.log(n);
    return out;
  }
  static bool logged(const testing::local_cluster& c, const std::string& node, const std::string& text) {
    return testing::wait_until([&] { return c.log(node).find(text) != std::string::npos; }, 60s);
  }
  // Starts the cluster and waits until it trains and the standby holds a whole copy.
  static void start_replicated(testing::local_cluster& c) {
    c.start_all();
    ASSERT_TRUE(c.wait_step(40, 120s)) << logs(c);
    ASSERT_TRUE(logged(c, "n1", "holds a whole copy")) << logs(c);
  }
  // The job finished with every step and the loss of the run without failures, to the bit.
  static void expect_same_end(const testing::local_cluster& c, double expected) {
    const auto report = c.wait_done(240s);
    ASSERT_FALSE(report.is_null()) << logs(c);
    EXPECT_EQ(report.value("state", ""), "completed") << report.dump(2) << logs(c);
    EXPECT_EQ(report["step"], steps);
    std::size_t unknown = 0;
    for (const auto& l : report.value("losses", nlohmann::json::array()))
      unknown += l.get<double>() == 0.0 ? 1 : 0;
    EXPECT_EQ(bits(testing::final_loss(report)), bits(expected))
        << report.value("losses", nlohmann::json::array()).size() << " losses, " << unknown << " of them unknown\n"
        << logs(c);
  }
};

TEST_F(standby, the_standby_takes_over_when_the_supervisors_node_is_killed_and_the_job_ends_with_the_same_loss) {
  const double expected = reference_loss();
  testing::local_cluster c{options(etcd->endpoint())};
  ASSERT_NO_FATAL_FAILURE(start_replicated(c));
  const auto old_address = testing::read_file(c.data_dir() / "supervisor.addr");
  // The whole node goes: its daemon, with it the supervisor, and its ranks.
  const auto killed = std::chrono::steady_clock::now();
  c.signal_node("n0", SIGKILL);
  ASSERT_TRUE(c.wait_node("n0", 30s).has_value());
  ASSERT_TRUE(logged(c, "n1", "this daemon leads the supervisor now")) << logs(c);
  std::cout << "takeover: the standby leads " << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count()
            << " s after the kill (lease 2 s)\n";
  // The admin shell finds the new leader through etcd, not the address file (which another
  // host's leader could not have written): the file is made to point nowhere.
  const auto addr_file = c.data_dir() / "supervisor.addr";
  ASSERT_TRUE(testing::wait_until([&] { return testing::read_file(addr_file) != old_address; }, 30s)) << logs(c);
  testing::temp_dir scratch;
  std::filesystem::rename(scratch.write("addr", "127.0.0.1:1\n"), addr_file);
  const auto shell = c.admin({"status", "--json"});
  EXPECT_EQ(shell.exit_code, 0) << shell.out << shell.err;
  EXPECT_NE(shell.out.find("\"job\""), std::string::npos) << shell.out;
  // Same world size (n0's ranks moved to the spare): the same loss, to the bit.
  ASSERT_NO_FATAL_FAILURE(expect_same_end(c, expected));
  // The takeover as the new leader measured it (docs/RELIABILITY.md quotes these).
  const auto report = c.report();
  EXPECT_FALSE(report.value("recoveries", nlohmann::json::array()).empty()) << report.dump(2);
  for (const auto& r : report.value("recoveries", nlohmann::json::array()))
    std::cout << "recovery: " << r.dump() << "\n";
}

// A crude partition: the leader's daemon stops (SIGSTOP), so neither etcd nor any node hears from
// it, while its ranks keep running. The standby takes over; when the old leader runs again, its
// lease has run out, so its supervisor carries out nothing, and it stops it once it reads the new
// term in etcd. The job ends as if nothing had happened.
TEST_F(standby, a_leader_cut_off_stops_acting_and_only_the_new_one_is_obeyed) {
  const double expected = reference_loss();
  testing::local_cluster c{options(etcd->endpoint())};
  ASSERT_NO_FATAL_FAILURE(start_replicated(c));
  c.signal_node("n0", SIGSTOP);
  ASSERT_TRUE(logged(c, "n1", "this daemon leads the supervisor now")) << logs(c);
  // The new leader gives n0 up and moves its ranks to the spare before the old one wakes.
  ASSERT_TRUE(logged(c, "n1", "move to spare s0")) << logs(c);
  c.signal_node("n0", SIGCONT);
  ASSERT_TRUE(logged(c, "n0", "this daemon stops leading the supervisor")) << logs(c);
  ASSERT_NO_FATAL_FAILURE(expect_same_end(c, expected));
}

// Without a spare the world shrinks after the takeover, and the ranks left reshard the lost ranks'
// optimizer state from the copies the standby's node holds of them.
TEST_F(standby, without_a_spare_the_world_shrinks_after_the_takeover_and_the_job_finishes) {
  auto o = options(etcd->endpoint());
  o.spare = false;
  testing::local_cluster c{o};
  ASSERT_NO_FATAL_FAILURE(start_replicated(c));
  c.signal_node("n0", SIGKILL);
  ASSERT_TRUE(logged(c, "n1", "the world shrinks from 4 to 2 ranks")) << logs(c);
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << logs(c);
  EXPECT_EQ(report.value("state", ""), "completed") << report.dump(2) << logs(c);
  EXPECT_EQ(report["step"], steps);
}

// A rank dies while nobody leads: its exit has no supervisor to go to, and the new leader's first
// epoch starts it again with the others.
TEST_F(standby, a_rank_killed_during_the_takeover_is_restarted_by_the_new_leader) {
  const double expected = reference_loss();
  testing::local_cluster c{options(etcd->endpoint())};
  ASSERT_NO_FATAL_FAILURE(start_replicated(c));
  const int victim = c.rank_pid(3);  // on n1, the standby's node
  ASSERT_GT(victim, 0);
  c.signal_node("n0", SIGKILL);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(logged(c, "n1", "this daemon leads the supervisor now")) << logs(c);
  ASSERT_NO_FATAL_FAILURE(expect_same_end(c, expected));
}

}  // namespace
}  // namespace rekindle
