#include <gtest/gtest.h>
#include <sys/wait.h>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

// Every rank is its own process; the tool checks each result against the exact sum.
void run_ring_processes(int n, std::size_t count, std::size_t chunk) {
  testing::temp_dir dir{"rekindle-ring"};
  std::vector<testing::child_process> ranks;
  std::vector<std::filesystem::path> logs;
  for (int r = 0; r < n; ++r) {
    logs.push_back(dir.path() / ("rank-" + std::to_string(r) + ".log"));
    ranks.emplace_back(std::vector<std::string>{(testing::bin_dir() / "tools/collective_peer").string(), "--rank",
                                                std::to_string(r), "--size", std::to_string(n), "--dir",
                                                dir.path().string(), "--count", std::to_string(count), "--iters", "20",
                                                "--chunk", std::to_string(chunk), "--timeout-ms", "60000"},
                       logs.back());
  }
  for (int r = 0; r < n; ++r) {
    auto st = ranks[static_cast<std::size_t>(r)].wait_for(240s);
    ASSERT_TRUE(st.has_value()) << "rank " << r << " did not finish";
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0)
        << "rank " << r << ":\n" << testing::read_file(logs[static_cast<std::size_t>(r)]);
    EXPECT_NE(testing::read_file(logs[static_cast<std::size_t>(r)]).find("done"), std::string::npos);
  }
}

TEST(ring_processes, two_ranks) { run_ring_processes(2, (8 << 20) + 3, 1 << 20); }
TEST(ring_processes, three_ranks_small_chunks) { run_ring_processes(3, 1000003, 64 << 10); }
TEST(ring_processes, four_ranks) { run_ring_processes(4, 4 << 20, 1 << 20); }
TEST(ring_processes, four_ranks_one_element) { run_ring_processes(4, 1, 1 << 20); }

}  // namespace
}  // namespace rekindle
