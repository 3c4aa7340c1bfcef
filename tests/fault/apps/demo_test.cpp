// `rekindle demo` as a new user runs it (through scripts/demo): a local job, a killed rank, a
// lost node, the report, and no process left behind.

#include <gtest/gtest.h>

#include <dirent.h>

#include <fstream>

#include "storage/snapshot_slot.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Processes whose command line mentions `needle`.
int processes_mentioning(const std::string& needle) {
  int count = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr)
    return -1;
  while (auto* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    std::ifstream in(std::string{"/proc/"} + e->d_name + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(needle) != std::string::npos && cmdline.find("rekindle") != std::string::npos)
      ++count;
  }
  closedir(proc);
  return count;
}

TEST(demo, kills_a_rank_and_a_node_recovers_both_and_leaves_nothing_running) {
  testing::temp_dir dir{"rekindle-demo"};
  const auto data = (dir.path() / "state").string();
  auto r = testing::run_process({(testing::bin_dir() / "rekindle").string(), "demo", "--steps", "150", "--data-dir", data},
                                std::chrono::seconds{400});
  ASSERT_FALSE(r.timed_out) << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 2 killed (SIGKILL)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node n1 lost (daemon killed)"), std::string::npos) << r.out;
  // The killed rank restores from its slot, or, killed while writing over its newest snapshot,
  // from that snapshot's replica.
  const auto from_buddy = [&] {
    std::size_t n = 0;
    for (auto at = r.out.find("(buddy memory on n0, step"); at != std::string::npos;
         at = r.out.find("(buddy memory on n0, step", at + 1))
      ++n;
    return n;
  }();
  EXPECT_TRUE(r.out.find("(local memory, step") != std::string::npos || from_buddy >= 2) << r.out;
  EXPECT_NE(r.out.find("(buddy memory on n0, step"), std::string::npos) << "the lost node's ranks from buddy memory\n"
                                                                        << r.out;
  EXPECT_NE(r.out.find("step 150/150"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("completed in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loss ┤"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all processes stopped"), std::string::npos) << r.out;
  EXPECT_EQ(processes_mentioning(data), 0) << "a daemon or worker of the demo is still running";
  // Nor any snapshot slot in shared memory, the killed node's included.
  for (const char* node : {"n0", "n1"}) {
    const auto prefix = storage::snapshot_slot::name_prefix(fs::path{data} / node, "demo");
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      EXPECT_FALSE(("/" + e.path().filename().string()).starts_with(prefix)) << e.path() << " was left behind";
  }
}

}  // namespace
}  // namespace rekindle
