#include <gtest/gtest.h>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using testing::run_process;

std::string rekindled() { return (testing::bin_dir() / "rekindled").string(); }

TEST(rekindled_check_config, prints_effective_config_of_local_example) {
  auto r = run_process({rekindled(), "--check-config", (testing::source_dir() / "config/examples/local.toml").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[[nodes]]\nname = \"n1\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max_restarts_per_rank = 5"), std::string::npos) << "defaults are filled in";
  EXPECT_NE(r.out.find("heartbeat = \"250ms\""), std::string::npos) << "a quarter of node = \"1s\"";
}

TEST(rekindled_check_config, embedded_default) {
  auto r = run_process({rekindled(), "--check-config", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<embedded config/examples/local.toml>"), std::string::npos);
}

TEST(rekindled_check_config, bad_config_lists_errors_and_exits_2) {
  testing::temp_dir dir;
  auto path = dir.write("bad.toml", "[cluster]\nsupervisor = \"n9\"\n[[nodes]]\nname = \"n0\"\n[job]\nstepz = 1\n");
  auto r = run_process({rekindled(), "--check-config", path.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << "nothing is printed as effective config: " << r.out;
  EXPECT_NE(r.err.find("2 errors in the configuration; nothing was started"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(path.string() + ":2:14: cluster.supervisor: 'n9' is not among the nodes (n0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(path.string() + ":6:1: job.stepz: unknown key (did you mean 'steps'?)"), std::string::npos) << r.err;
}

TEST(rekindled_check_config, unreadable_file) {
  auto r = run_process({rekindled(), "--check-config", "/nonexistent/cluster.toml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/cluster.toml: cannot read configuration file: No such file or directory"),
            std::string::npos) << r.err;
}

TEST(rekindled_check_config, help_and_version) {
  auto r = run_process({rekindled(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--check-config"), std::string::npos);
  r = run_process({rekindled(), "--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("rekindled 0."), std::string::npos);
}

}  // namespace
}  // namespace rekindle
