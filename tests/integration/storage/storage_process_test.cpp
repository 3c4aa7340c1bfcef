// The storage layer across real processes: a store written by one process and resumed by
// another, the database lock between processes, a snapshot slot written by a worker process and
// read by the daemon, and shard writes that hit real file-size, permission and disk-space limits.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "storage/shard_file.hpp"
#include "storage/snapshot_slot.hpp"
#include "storage/state_store.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"
#include "tests/tools/storage/patterns.hpp"

namespace rekindle::storage {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string tool() { return (testing::bin_dir() / "tools/storage_tool").string(); }

testing::process_result run_tool(std::vector<std::string> args) {
  args.insert(args.begin(), tool());
  return testing::run_process(args, 120s);
}

// The uid a root test drops to so permission checks apply; without root the test's own uid.
constexpr const char* nobody = "65534";

TEST(store_process, a_store_written_by_one_process_is_resumed_by_another) {
  testing::temp_dir dir{"rekindle-store-proc"};
  const auto db = (dir.path() / "db").string();
  const auto r = run_tool({"fill-store", "--dir", db});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  auto s = state_store::open(db);
  ASSERT_TRUE(s.has_value()) << s.to_status();
  auto c = (*s)->load();
  ASSERT_TRUE(c.has_value()) << c.to_status();
  ASSERT_TRUE(c->job.has_value());
  EXPECT_EQ(c->job->name, "fill");
  EXPECT_EQ(c->job->state, job_state::running);
  EXPECT_EQ(c->epoch, epoch_t{3});
  ASSERT_TRUE(c->latest_membership.has_value());
  EXPECT_EQ(c->latest_membership->epoch, epoch_t{3});
  EXPECT_EQ(c->latest_membership->ranks.size(), 4u);
  EXPECT_EQ(c->latest_membership->spares_in_use, std::vector<node_id>{node_id{9}});
  EXPECT_EQ(c->total_restarts, 3u);
  EXPECT_EQ((*s)->rank(rank_id{1})->restarts, 2u);
  ASSERT_EQ(c->checkpoints.size(), 2u);
  EXPECT_EQ(c->checkpoints[0].step, step_t{20});
  EXPECT_TRUE(c->checkpoints[0].committed);
  EXPECT_EQ(c->checkpoints[0].shards[3].size, 2003u);
  EXPECT_EQ(c->last_event_seq, 250u) << "close() wrote every pending event";
  auto events = (*s)->events_after(0);
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), 250u);
  EXPECT_EQ(events->back().field("i"), "250");
  EXPECT_EQ((*s)->put_epoch(epoch_t{3}).code(), errc::failed_precondition) << "epoch 3 was handed out";
  EXPECT_TRUE((*s)->put_epoch(epoch_t{4}).ok()) << "the resumed supervisor moves past every epoch handed out";
}

TEST(store_process, a_database_held_by_a_live_process_is_unavailable_until_it_dies) {
  testing::temp_dir dir{"rekindle-store-proc"};
  const auto db = dir.path() / "db";
  const auto log = dir.path() / "hold.log";
  testing::child_process holder({tool(), "hold-store", "--dir", db.string()}, log);
  ASSERT_TRUE(testing::wait_for_text(log, "ready", 60s)) << testing::read_file(log);

  auto busy = state_store::open(db);
  ASSERT_FALSE(busy.has_value());
  EXPECT_EQ(busy.error().code(), errc::unavailable) << busy.error();

  holder.kill_all();
  auto s = state_store::open(db);
  EXPECT_TRUE(s.has_value()) << "the lock dies with its process: " << s.to_status();
}

TEST(store_process, a_database_the_process_may_not_write_is_permission_denied) {
  testing::temp_dir dir{"rekindle-store-proc"};
  const auto db = dir.path() / "db";
  { ASSERT_TRUE(state_store::open(db).has_value()); }
  // Readable and searchable by everyone, writable only by its owner.
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(db, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                          fs::perms::others_exec);
  if (geteuid() != 0)
    fs::permissions(db, fs::perms::owner_write, fs::perm_options::remove);
  const auto r = run_tool({"open-store", "--dir", db.string(), "--as-user", nobody});
  if (r.exit_code == 77)
    GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("error permission_denied state store " + db.string()), std::string::npos) << r.out;
  fs::permissions(db, fs::perms::owner_write, fs::perm_options::add);
}

struct slot_process : ::testing::Test {
  testing::temp_dir dir{"rekindle-slot-proc"};
  std::string name = snapshot_slot::name_for(dir.path(), "proc", 0);
  void SetUp() override { ASSERT_TRUE(snapshot_slot::remove(name).ok()); }
  void TearDown() override { EXPECT_TRUE(snapshot_slot::remove(name).ok()); }
};

TEST_F(slot_process, the_daemon_reads_what_a_worker_process_published_and_a_new_worker_resumes) {
  constexpr std::size_t max_bytes = 1 << 20;
  auto slot = snapshot_slot::create(name, max_bytes);  // the daemon's side
  ASSERT_TRUE(slot.has_value()) << slot.to_status();

  auto r = run_tool({"slot-writer", "--name", name, "--count", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resumed 0"), std::string::npos) << r.out;
  auto v = slot->latest();
  ASSERT_TRUE(v.has_value()) << v.to_status();
  EXPECT_EQ(v->step, step_t{50});
  EXPECT_TRUE(testing::snapshot_matches(50, v->data, max_bytes));
  EXPECT_EQ(slot->generation(), 50u);

  // The worker crashed and restarts: it restores step 50 from the slot and continues from there.
  r = run_tool({"slot-writer", "--name", name, "--count", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resumed 50"), std::string::npos) << r.out;
  EXPECT_EQ(slot->latest()->step, step_t{60});

  // A new daemon removes the previous daemon's slots by prefix.
  auto removed = snapshot_slot::remove_with_prefix(snapshot_slot::name_prefix(dir.path(), "proc"));
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(*removed, std::vector<std::string>{name});
  EXPECT_EQ(snapshot_slot::open(name).to_status().code(), errc::not_found);
}

// What `write-shard` printed last: "written W files F verified V tmp T".
struct shard_outcome {
  int written = -1, files = -1, verified = -1, tmp = -1;
};

shard_outcome outcome(const std::string& out) {
  shard_outcome o;
  const auto at = out.rfind("written ");
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "written %d files %d verified %d tmp %d", &o.written, &o.files, &o.verified,
                &o.tmp);
  return o;
}

TEST(shard_process, a_file_size_limit_fails_the_write_and_leaves_nothing) {
  testing::temp_dir dir{"rekindle-shard-proc"};
  const auto r = run_tool({"write-shard", "--dir", dir.path().string(), "--bytes", "1000000", "--fsize-limit", "65536"});
  if (r.exit_code == 77)
    GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("error resource_exhausted shard file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("at offset 65536: File too large"), std::string::npos) << r.out;
  const auto o = outcome(r.out);
  EXPECT_EQ(o.files, 0) << r.out;
  EXPECT_EQ(o.tmp, 0) << r.out;
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(shard_process, a_directory_the_process_may_not_write_is_permission_denied) {
  testing::temp_dir dir{"rekindle-shard-proc"};
  const auto ckpt = dir.path() / "ckpt";
  fs::create_directories(ckpt);
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(ckpt, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  const auto r = run_tool({"write-shard", "--dir", ckpt.string(), "--as-user", nobody});
  fs::permissions(ckpt, fs::perms::owner_all);
  if (r.exit_code == 77)
    GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("error permission_denied shard file " + ckpt.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1 (create"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(ckpt));
}

TEST(shard_process, a_full_disk_fails_a_write_and_every_complete_shard_still_verifies) {
  testing::temp_dir dir{"rekindle-shard-proc"};
  // A 256 KiB tmpfs in the tool's own mount namespace: shards of 40000 bytes fill it in a few writes.
  const auto r = run_tool({"write-shard", "--dir", dir.path().string(), "--private-tmpfs", "256k", "--bytes", "40000",
                           "--repeat"});
  if (r.exit_code == 77)
    GTEST_SKIP() << "needs a private mount namespace to mount a small tmpfs (root): " << r.out;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("error resource_exhausted shard file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  const auto o = outcome(r.out);
  EXPECT_GT(o.written, 0) << r.out;
  EXPECT_EQ(o.files, o.written) << "the failed shard left no file: " << r.out;
  EXPECT_EQ(o.verified, o.files) << r.out;
  EXPECT_EQ(o.tmp, 0) << r.out;
}

}  // namespace
}  // namespace rekindle::storage
