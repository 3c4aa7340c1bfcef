// Checkpoints on disk with real daemons: committed only when every shard is durable, restored
// after a whole-job restart, never half-written when a daemon dies in the middle, and training
// goes on when the disk refuses them.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>

#include "storage/shard_file.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/faults.hpp"
#include "tests/support/values.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr std::uint64_t steps = 1500;

// Every anchor (4 snapshots of 5 steps) is persisted: steps 20, 40, 60, ...
testing::cluster_options options() { return {.steps = steps, .persist_every = 2, .keep = 3}; }

using testing::bits;

double reference_loss() {
  static std::optional<double> cached;
  if (!cached) {
    testing::local_cluster c{options()};
    c.start_all();
    const auto report = c.wait_done(240s);
    EXPECT_EQ(report.value("state", ""), "completed");
    cached = report.is_null() ? 0.0 : testing::final_loss(report);
  }
  return *cached;
}

// The committed checkpoints' manifest files in `dir`, by step.
std::map<std::uint64_t, nlohmann::json> manifests(const fs::path& dir) {
  std::map<std::uint64_t, nlohmann::json> out;
  if (!fs::exists(dir))
    return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().ends_with(".manifest.json")) {
      // Retention may delete it between the listing and the read.
      std::ifstream in(e.path());
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("step"))
        out[j["step"].get<std::uint64_t>()] = j;
    }
  return out;
}

// Kills every daemon (their workers die with them) and waits for them to be gone.
void kill_all(testing::local_cluster& c) {
  for (const auto& n : c.node_names())
    c.signal_node(n, SIGKILL);
  for (const auto& n : c.node_names())
    ASSERT_TRUE(c.wait_node(n, 30s).has_value()) << n << " did not exit";
}

// Runs the job until `count` checkpoints are committed, then kills every daemon. (Training may
// outrun a request, so which anchors get persisted depends on the machine's speed.)
void run_until_checkpoints_then_kill(testing::local_cluster& c, std::size_t count) {
  c.start_all();
  const auto dir = c.data_dir() / "checkpoints";
  EXPECT_TRUE(c.wait_for([&](const nlohmann::json&) { return manifests(dir).size() >= count; }, 120s))
      << "fewer than " << count << " checkpoints committed\n" << c.log("n0");
  kill_all(c);
}

TEST(checkpoint, every_shard_is_durable_before_commit_and_only_keep_remain) {
  testing::local_cluster c{options()};
  c.start_all();
  const auto report = c.wait_done(240s);
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  // What stays on disk once every daemon has gone: the report is written before the other nodes
  // hear of the end, and a shard they are writing then is still a temporary file.
  for (const auto& n : c.node_names())
    ASSERT_TRUE(c.wait_node(n, 60s).has_value()) << n << " did not exit";
  const auto dir = c.data_dir() / "checkpoints";
  const auto found = manifests(dir);
  ASSERT_EQ(found.size(), 3u) << "keep = 3";
  const auto newest = found.rbegin()->first;
  // A commit waits for every rank's shard; on a loaded machine it lags the training by a second
  // or more (hundreds of steps of this model), so "late in the job" is the second half.
  EXPECT_GE(newest, steps / 2) << "checkpoints went on through the job";
  // 4 shards and a manifest per checkpoint; besides, at most shards of a newer checkpoint that
  // was being written when the job ended (the next start collects them).
  std::set<std::string> named;
  for (const auto& [step, m] : found) {
    named.insert(storage::shard_file_name(step_t{step}, rank_id{0}).substr(0, 17) + ".manifest.json");
    for (const auto& sh : m["shards"])
      named.insert(sh["file"].get<std::string>());
  }
  EXPECT_EQ(named.size(), 3u * 5u);
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (named.contains(name))
      continue;
    EXPECT_TRUE(name.ends_with(".shard") && name > storage::shard_file_name(step_t{newest}, rank_id{9999}))
        << name << " belongs to no checkpoint";
  }
  for (const auto& [step, m] : found) {
    ASSERT_EQ(m["world_size"], 4);
    ASSERT_EQ(m["shards"].size(), 4u);
    for (const auto& s : m["shards"]) {
      auto v = storage::verify_shard(dir / s["file"].get<std::string>(),
                                     {.step = step_t{step},
                                      .rank = rank_id{s["rank"].get<std::uint32_t>()},
                                      .size = s["size"].get<std::uint64_t>(),
                                      .checksum = s["checksum"].get<std::uint64_t>()});
      EXPECT_TRUE(v.has_value()) << v.error().message();
    }
  }
  EXPECT_NE(c.log("n0").find("checkpoint_committed"), std::string::npos);

  // The offline tool agrees, and finds a damaged shard, naming it.
  const auto rekindle = (testing::bin_dir() / "rekindle").string();
  auto ok = testing::run_process({rekindle, "checkpoint", "verify", dir.string(), "--json"});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  const auto verdict = nlohmann::json::parse(ok.out);
  ASSERT_EQ(verdict["checkpoints"].size(), 3u);
  for (const auto& v : verdict["checkpoints"])
    EXPECT_TRUE(v["ok"].get<bool>()) << v.dump();
  const auto victim = dir / storage::shard_file_name(step_t{found.begin()->first}, rank_id{2});
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(storage::shard_header_bytes + 7));
    f.put('\x7f');
  }
  auto bad = testing::run_process({rekindle, "checkpoint", "verify", dir.string()});
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.out.find(victim.filename().string()), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("2 of 3 checkpoint(s) intact"), std::string::npos) << bad.out;
  auto listed = testing::run_process({rekindle, "checkpoint", "list", dir.string(), "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(nlohmann::json::parse(listed.out)["checkpoints"][0]["step"], found.rbegin()->first);
  auto missing = testing::run_process({rekindle, "checkpoint", "list", (dir / "nope").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("is not a directory"), std::string::npos) << missing.err;
  // The built-in model's checkpoints are not a torch program's: export says so (where it can run).
  if (std::filesystem::exists(testing::bin_dir() / ".." / "python" / "rekindle" / "export.py") &&
      testing::run_process({"/usr/bin/python3", "-c", "import torch"}).exit_code == 0) {
    testing::temp_dir out;
    auto exported = testing::run_process({rekindle, "checkpoint", "export", dir.string(), "--out", out.path().string()});
    EXPECT_EQ(exported.exit_code, 1) << exported.out << exported.err;
    EXPECT_NE(exported.err.find("not of a program on the worker API"), std::string::npos) << exported.err;
    EXPECT_FALSE(std::filesystem::exists(out.path() / "rank-0.pt"));
  }
}

TEST(checkpoint, a_whole_job_restart_resumes_from_the_newest_checkpoint_with_the_same_final_loss) {
  const double expected = reference_loss();
  testing::local_cluster c{options()};
  run_until_checkpoints_then_kill(c, 1);
  const auto newest = manifests(c.data_dir() / "checkpoints").rbegin()->first;
  c.start_all();
  const auto report = c.wait_done(240s);
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  ASSERT_GE(report["recoveries"].size(), 1u) << report.dump(2);
  const auto& r = report["recoveries"][0];
  EXPECT_EQ(r["source"], "disk") << r.dump() << c.log("n0");
  EXPECT_GE(r["restored_step"].get<std::uint64_t>(), newest) << r.dump();
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

// recovery.policy = "restart-all": a killed rank starts every rank's process again (no warm
// standby), and the job restores the newest checkpoint on disk, not the newer copies in memory.
TEST(checkpoint, restart_all_starts_every_process_again_from_the_newest_checkpoint_with_the_same_final_loss) {
  const double expected = reference_loss();
  auto o = options();
  o.extra = "[recovery]\npolicy = \"restart-all\"\n";
  testing::local_cluster c{o};
  c.start_all();
  const auto dir = c.data_dir() / "checkpoints";
  ASSERT_TRUE(c.wait_for([&](const nlohmann::json&) { return !manifests(dir).empty(); }, 120s)) << c.log("n0");
  std::vector<int> before;
  for (int r = 0; r < 4; ++r)
    before.push_back(c.rank_pid(r));
  for (int pid : before)
    ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(before[2], SIGKILL), 0);
  // Every rank runs in a process of its own again, none of the old ones.
  const bool moved = c.wait_for(
      [&](const nlohmann::json& s) {
        if (!s.contains("epoch") || s["epoch"].get<std::uint64_t>() < 2 || s.value("state", "") != "running")
          return false;
        for (int r = 0; r < 4; ++r) {
          const int pid = c.rank_pid(r);
          if (pid <= 0 || std::find(before.begin(), before.end(), pid) != before.end())
            return false;
        }
        return true;
      },
      120s);
  EXPECT_TRUE(moved) << c.log("n0") << c.log("n1");
  const auto report = c.wait_done(240s);
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  ASSERT_GE(report["recoveries"].size(), 1u) << report.dump(2);
  const auto& r = report["recoveries"][0];
  EXPECT_EQ(r["source"], "disk") << r.dump() << c.log("n0");
  EXPECT_GT(r["restored_step"].get<std::uint64_t>(), 0u) << r.dump();
  EXPECT_EQ(r["restored_step"].get<std::uint64_t>() % 20, 0u) << "an anchor persisted to disk: " << r.dump();
  EXPECT_NE(c.log("n1").find("starts every rank's process again"), std::string::npos) << c.log("n1");
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

TEST(checkpoint, a_corrupted_shard_falls_back_to_the_previous_checkpoint) {
  const double expected = reference_loss();
  testing::local_cluster c{options()};
  run_until_checkpoints_then_kill(c, 2);
  const auto dir = c.data_dir() / "checkpoints";
  const auto found = manifests(dir);
  ASSERT_GE(found.size(), 2u);
  const auto newest = found.rbegin()->first;
  const auto previous = std::next(found.rbegin())->first;
  // One byte in the middle of rank 1's payload.
  const auto shard = dir / storage::shard_file_name(step_t{newest}, rank_id{1});
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(storage::shard_header_bytes + 100));
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(storage::shard_header_bytes + 100));
    f.write(&b, 1);
  }
  c.start_all();
  const auto report = c.wait_done(240s);
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  const auto log = c.log("n0");
  EXPECT_NE(log.find("restore_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("payload checksum mismatch"), std::string::npos) << "the event says why: " << log;
  EXPECT_NE(log.find("train from step " + std::to_string(previous)), std::string::npos) << log;
  EXPECT_EQ(bits(testing::final_loss(report)), bits(expected));
}

class killed_mid_persist : public ::testing::TestWithParam<const char*> {};

TEST_P(killed_mid_persist, leaves_the_previous_checkpoint_the_newest_and_collects_the_rest) {
  const double expected = reference_loss();
  testing::local_cluster c{options()};
  // Once the arm file exists, a daemon dies when its next shard write reaches the sync point.
  const auto arm = c.data_dir().parent_path() / "arm-persist-fault";
  ::setenv("REKINDLE_FAULT_PERSIST", (std::string{GetParam()} + "@" + arm.string()).c_str(), 1);
  c.start_all();
  ::unsetenv("REKINDLE_FAULT_PERSIST");
  const auto dir = c.data_dir() / "checkpoints";
  ASSERT_TRUE(c.wait_for([&](const nlohmann::json&) { return !manifests(dir).empty(); }, 120s)) << c.log("n0");
  std::ofstream(arm) << "armed\n";
  // The first daemon to write a shard dies in the middle of it; then the whole job goes down.
  std::optional<std::string> died;
  for (int i = 0; i < 600 && !died; ++i)
    for (const auto& n : c.node_names())
      if (c.wait_node(n, 100ms)) {
        died = n;
        break;
      }
  ASSERT_TRUE(died.has_value()) << "no daemon died at " << GetParam() << "\n" << c.log("n0");
  EXPECT_NE(c.log(*died).find("dies at " + std::string{GetParam()}), std::string::npos) << c.log(*died);
  kill_all(c);
  std::filesystem::remove(arm);
  const auto found = manifests(dir);
  ASSERT_FALSE(found.empty());
  const auto newest = found.rbegin()->first;
  c.start_all();
  const auto report = c.wait_done(240s);
  ASSERT_EQ(report.value("state", ""), "completed") << c.log("n0");
  const auto log = c.log("n0");
  EXPECT_NE(log.find("train from step " + std::to_string(newest)), std::string::npos)
      << "the newest committed checkpoint, never the half-written one: " << log;
  EXPECT_NE(log.find("checkpoint_gc"), std::string::npos) << "the half-written files were collected: " << log;
  // In the same world the run ends bit for bit as one without failures. When the first death
  // shrank the world before the rest went down, the restarted job resumes that membership and
  // reshards the checkpoint: the loss curve continues, equal up to the reduction order.
  if (found.rbegin()->second["world_size"] == 4 && report["world"] == 4)
    EXPECT_EQ(bits(testing::final_loss(report)), bits(expected)) << log;
  else
    EXPECT_NEAR(testing::final_loss(report), expected, 2e-2 * std::abs(expected)) << log;
}

INSTANTIATE_TEST_SUITE_P(sync_points, killed_mid_persist, ::testing::Values("after_write", "after_fsync", "after_rename"));

TEST(checkpoint, a_refused_disk_does_not_stop_training_and_says_so) {
  testing::temp_dir scratch;
  // A "directory" that is a file: every shard write fails.
  const auto blocked = scratch.write("not-a-directory", "x");
  auto o = options();
  o.steps = 300;
  o.checkpoint_dir = (blocked / "checkpoints").string();
  testing::local_cluster c{o};
  c.start_all();
  EXPECT_TRUE(c.wait_for([](const nlohmann::json& s) {
    return s.contains("checkpoint") && s["checkpoint"]["error"].is_string();
  }, 120s)) << "status names the failure\n" << c.log("n0");
  const auto report = c.wait_done(240s);
  EXPECT_EQ(report.value("state", ""), "completed") << c.log("n0");
  EXPECT_EQ(report["step"], 300);
  const auto log = c.log("n0");
  EXPECT_NE(log.find("persist_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("training goes on from memory snapshots"), std::string::npos) << log;
}

TEST(checkpoint, a_full_disk_keeps_the_previous_checkpoint_and_training_goes_on) {
  testing::temp_dir scratch;
  const auto dir = scratch.path() / "disk";
  // Room for one checkpoint of this model (4 shards of about 200 KiB) and part of a second.
  testing::small_disk disk{dir, "1200k"};
  if (!disk.mounted())
    GTEST_SKIP() << "a small tmpfs cannot be mounted here (it needs root): " << disk.why();
  auto o = options();
  o.steps = 600;
  o.checkpoint_dir = dir.string();
  testing::local_cluster c{o};
  c.start_all();
  const auto report = c.wait_done(240s);
  EXPECT_EQ(report.value("state", ""), "completed") << c.log("n0");
  EXPECT_EQ(report["step"], 600);
  const auto log = c.log("n0");
  EXPECT_NE(log.find("persist_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << "the event says why: " << log;
  // The first checkpoint is whole; no half-written file of the failed ones is left.
  const auto found = manifests(dir);
  ASSERT_EQ(found.size(), 1u) << log;
  auto verify = testing::run_process({(testing::bin_dir() / "rekindle").string(), "checkpoint", "verify", dir.string()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
}

}  // namespace
}  // namespace rekindle
