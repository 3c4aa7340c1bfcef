#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <regex>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
using testing::child_process;

// N collective_peer processes allreducing forever on loopback.
struct ring_group {
  testing::temp_dir dir{"rekindle-ring"};
  std::vector<child_process> ranks;
  std::vector<std::filesystem::path> logs;

  ring_group(int n, long timeout_ms) {
    for (int r = 0; r < n; ++r) {
      logs.push_back(dir.path() / ("rank-" + std::to_string(r) + ".log"));
      ranks.emplace_back(std::vector<std::string>{(testing::bin_dir() / "tools/collective_peer").string(), "--rank",
                                                  std::to_string(r), "--size", std::to_string(n), "--dir",
                                                  dir.path().string(), "--count", std::to_string(1 << 20),
                                                  "--timeout-ms", std::to_string(timeout_ms), "--forever"},
                         logs.back());
    }
  }
  bool all_running() {
    for (const auto& log : logs)
      if (!testing::wait_for_text(log, "ok 50", 120s))
        return false;
    return true;
  }
};

// "error ITER MILLIS CODE MESSAGE" from a survivor's log.
struct reported_error {
  long millis = -1;
  std::string code;
  std::string line;
};

reported_error error_of(const std::filesystem::path& log) {
  const auto text = testing::read_file(log);
  std::smatch m;
  if (!std::regex_search(text, m, std::regex{R"(error \d+ (\d+) (\w+) ([^\n]*))"}))
    return {};
  return {std::stol(m[1]), m[2], m[0]};
}

void expect_survivors_fail_within_deadline(ring_group& g, int victim, long timeout_ms) {
  for (int r = 0; r < static_cast<int>(g.ranks.size()); ++r) {
    if (r == victim)
      continue;
    auto st = g.ranks[static_cast<std::size_t>(r)].wait_for(60s);
    ASSERT_TRUE(st.has_value()) << "rank " << r << " hangs:\n" << testing::read_file(g.logs[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 3) << "rank " << r;
    const auto e = error_of(g.logs[static_cast<std::size_t>(r)]);
    ASSERT_GE(e.millis, 0) << testing::read_file(g.logs[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(e.code == "timeout" || e.code == "peer_failed") << e.line;
    // The call that failed returned by its deadline (plus scheduling noise).
    EXPECT_LE(e.millis, timeout_ms + 1500) << e.line;
    std::printf("rank %d: %s\n", r, e.line.c_str());
  }
}

TEST(ring_fault, sigkill_of_a_rank_mid_allreduce_fails_every_survivor_by_the_deadline) {
  const long timeout_ms = 1500;
  ring_group g{3, timeout_ms};
  ASSERT_TRUE(g.all_running());
  g.ranks[1].signal(SIGKILL);
  expect_survivors_fail_within_deadline(g, 1, timeout_ms);
}

TEST(ring_fault, sigstop_of_a_rank_fails_every_survivor_by_the_deadline) {
  const long timeout_ms = 1500;
  ring_group g{3, timeout_ms};
  ASSERT_TRUE(g.all_running());
  g.ranks[2].signal(SIGSTOP);
  expect_survivors_fail_within_deadline(g, 2, timeout_ms);
}

TEST(ring_fault, four_ranks_survive_a_kill_of_rank_0) {
  const long timeout_ms = 2000;
  ring_group g{4, timeout_ms};
  ASSERT_TRUE(g.all_running());
  g.ranks[0].signal(SIGKILL);
  expect_survivors_fail_within_deadline(g, 0, timeout_ms);
}

}  // namespace
}  // namespace rekindle
