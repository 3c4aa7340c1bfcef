// Processes killed with SIGKILL in the middle of storage writes, and what survives them:
// - a worker publishing snapshots, killed at random moments while a reader verifies every read;
// - a checkpoint writer stopped exactly at each sync point of a shard and then killed;
// - an event appender and an epoch bumper killed at random moments.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

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

// A seed for the kill moments, printed so a failure can be replayed by hand.
std::uint32_t seed() {
  const auto s = std::random_device{}();
  std::printf("kill-moment seed %u\n", s);
  return s;
}

// The number after the last `word ` in `text`, or -1.
long long last_number(const std::string& text, const std::string& word) {
  const auto at = text.rfind(word + " ");
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + word.size() + 1));
}

// True when process `pid` is stopped (state T in /proc/PID/stat).
bool stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

// ---- snapshot slots ----

TEST(slot_kill, readers_never_see_a_torn_snapshot_while_the_writer_is_killed) {
  testing::temp_dir dir{"rekindle-slot-kill"};
  const auto name = snapshot_slot::name_for(dir.path(), "fault", 0);
  ASSERT_TRUE(snapshot_slot::remove(name).ok());
  constexpr std::size_t max_bytes = 256 << 10;
  auto daemon = snapshot_slot::create(name, max_bytes);
  ASSERT_TRUE(daemon.has_value()) << daemon.to_status();

  std::atomic<bool> done{false};
  std::atomic<long> verified{0}, copies{0}, overwritten{0}, busy{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto failure = [&](std::string what) {
    std::lock_guard lock{mu};
    if (failures.size() < 10)
      failures.push_back(std::move(what));
  };
  // The daemon's reader: verified views in place, and verified copies, all the time.
  std::thread reader([&] {
    auto slot = snapshot_slot::open(name);
    if (!slot) {
      failure(slot.error().to_string());
      return;
    }
    std::vector<std::byte> buffer(slot->capacity());
    std::uint64_t last_step = 0;
    for (long i = 0; !done.load(); ++i) {
      if (i % 2 == 0) {
        auto v = slot->latest();
        if (!v) {
          if (v.error().code() == errc::unavailable)
            ++busy;
          else if (v.error().code() != errc::not_found)
            failure("latest: " + v.error().to_string());
          continue;
        }
        const bool matches = testing::snapshot_matches(v->step.value(), v->data, max_bytes);
        if (!slot->still_valid(*v)) {
          ++overwritten;  // reused by the writer after the check; the view says so
          continue;
        }
        if (!matches)
          failure("view of step " + std::to_string(v->step.value()) + " has wrong contents");
        if (v->step.value() < last_step)
          failure("step went back from " + std::to_string(last_step) + " to " + std::to_string(v->step.value()));
        last_step = v->step.value();
        ++verified;
      } else {
        auto c = slot->copy_latest(buffer);
        if (!c) {
          if (c.error().code() == errc::unavailable)
            ++busy;
          else if (c.error().code() != errc::not_found)
            failure("copy_latest: " + c.error().to_string());
          continue;
        }
        if (!testing::snapshot_matches(c->step.value(), std::span<const std::byte>{buffer.data(), c->length}, max_bytes))
          failure("copy of step " + std::to_string(c->step.value()) + " has wrong contents");
        ++copies;
      }
    }
  });

  std::mt19937 rng{seed()};
  constexpr int rounds = 30;
  for (int round = 0; round < rounds; ++round) {
    const auto log = dir.path() / ("writer-" + std::to_string(round) + ".log");
    testing::child_process writer({tool(), "slot-writer", "--name", name, "--max-bytes", std::to_string(max_bytes)},
                                  log);
    // Most rounds kill it while it publishes; some while it is still restoring.
    if (round % 4 != 3) {
      ASSERT_TRUE(testing::wait_for_text(log, "ready", 60s)) << testing::read_file(log);
    }
    std::this_thread::sleep_for(std::chrono::microseconds{rng() % 20000});
    writer.signal(SIGKILL);
    const auto st = writer.wait_for(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_TRUE(WIFSIGNALED(*st) || (WIFEXITED(*st) && WEXITSTATUS(*st) == 0)) << testing::read_file(log);
    EXPECT_EQ(testing::read_file(log).find("error"), std::string::npos)
        << "a restarted writer found a bad snapshot: " << testing::read_file(log);
  }
  done = true;
  reader.join();

  for (const auto& f : failures)
    ADD_FAILURE() << f;
  auto last = daemon->latest();
  ASSERT_TRUE(last.has_value()) << last.to_status();
  EXPECT_TRUE(testing::snapshot_matches(last->step.value(), last->data, max_bytes));
  EXPECT_GT(verified.load(), rounds) << "the reader verified too few snapshots to mean anything";
  EXPECT_GT(copies.load(), rounds);
  std::printf("verified views %ld, copies %ld, overwritten after reading %ld, busy %ld, last step %llu\n",
              verified.load(), copies.load(), overwritten.load(), busy.load(),
              static_cast<unsigned long long>(last->step.value()));
  EXPECT_TRUE(snapshot_slot::remove(name).ok());
}

// ---- shard files and checkpoint commits ----

struct shard_kill : ::testing::TestWithParam<std::tuple<shard_sync_point, std::uint32_t>> {};

TEST_P(shard_kill, a_writer_killed_at_a_sync_point_leaves_the_previous_checkpoint_intact) {
  const auto [point, stop_rank] = GetParam();
  testing::temp_dir dir{"rekindle-shard-kill"};
  const auto ckpt = dir.path() / "ckpt";
  const auto db = dir.path() / "db";
  fs::create_directories(ckpt);
  constexpr std::uint32_t ranks = 4;
  const std::string bytes = std::to_string(300000);
  auto shards_of = [&](std::string step, std::vector<std::string> extra) {
    std::vector<std::string> argv{tool(), "write-shards", "--dir", ckpt.string(), "--db", db.string(), "--step",
                                  step, "--ranks", std::to_string(ranks), "--bytes", bytes};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };

  // Checkpoint 10 completes.
  auto r = testing::run_process(shards_of("10", {}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // Checkpoint 20 stops at `point` of one rank's shard and is killed there.
  const auto log = dir.path() / "writer.log";
  {
    testing::child_process writer(
        shards_of("20", {"--stop-at", std::string{to_string(point)}, "--stop-rank", std::to_string(stop_rank)}), log);
    ASSERT_TRUE(testing::wait_for_text(log, "at " + std::string{to_string(point)}, 60s)) << testing::read_file(log);
    ASSERT_TRUE(testing::wait_until([&] { return stopped(writer.pid()); }, 30s));
    writer.signal(SIGKILL);
    const auto st = writer.wait_for(30s);
    ASSERT_TRUE(st.has_value() && WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL);
  }
  EXPECT_EQ(testing::read_file(log).find("committed"), std::string::npos);

  // The restarted supervisor: checkpoint 10 is the newest committed, and every shard verifies.
  auto store = state_store::open(db);
  ASSERT_TRUE(store.has_value()) << store.to_status();
  auto committed = (*store)->committed_checkpoints();
  ASSERT_TRUE(committed.has_value());
  ASSERT_EQ(committed->size(), 1u);
  const auto& m = committed->front();
  EXPECT_EQ(m.step, step_t{10});
  std::set<std::string> referenced;
  for (const auto& s : m.shards) {
    std::vector<std::byte> payload;
    auto info = read_shard(ckpt / s.file, payload, shard_expectation{m.step, s.rank, s.size, s.checksum});
    ASSERT_TRUE(info.has_value()) << info.to_status();
    EXPECT_TRUE(testing::shard_matches(10, s.rank.value(), payload));
    referenced.insert(s.file);
  }
  EXPECT_EQ((*store)->checkpoints()->size(), 1u) << "nothing of checkpoint 20 reached the store";

  // Whatever checkpoint 20 left: a file with a shard's name is complete; anything else is a .tmp.
  std::uint32_t complete = 0, temporary = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    const auto n = e.path().filename().string();
    if (referenced.count(n) != 0)
      continue;
    if (n.ends_with(".tmp")) {
      ++temporary;
      continue;
    }
    std::vector<std::byte> payload;
    auto info = read_shard(e.path(), payload);
    ASSERT_TRUE(info.has_value()) << n << " looks like a shard but is not whole: " << info.to_status();
    EXPECT_EQ(info->step, step_t{20});
    EXPECT_TRUE(testing::shard_matches(20, info->rank.value(), payload));
    ++complete;
  }
  const std::uint32_t expected_complete = stop_rank + (point == shard_sync_point::after_rename ? 1 : 0);
  EXPECT_EQ(complete, expected_complete);
  EXPECT_EQ(temporary, point == shard_sync_point::after_rename ? 0u : 1u);

  // Garbage collection removes exactly what checkpoint 20 left behind.
  auto gc = collect_garbage(ckpt, referenced);
  ASSERT_TRUE(gc.has_value()) << gc.to_status();
  EXPECT_EQ(gc->removed.size(), complete + temporary);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(ckpt))
    left.insert(e.path().filename().string());
  EXPECT_EQ(left, referenced);

  // And checkpoint 20, written again, commits.
  ASSERT_TRUE((*store)->close().ok());
  r = testing::run_process(shards_of("20", {}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  store = state_store::open(db);
  ASSERT_TRUE(store.has_value());
  EXPECT_EQ((*store)->committed_checkpoints()->front().step, step_t{20});
}

INSTANTIATE_TEST_SUITE_P(
    sync_points, shard_kill,
    ::testing::Combine(::testing::Values(shard_sync_point::after_write, shard_sync_point::after_fsync,
                                         shard_sync_point::after_rename),
                       ::testing::Values(0u, 2u)),
    [](const auto& p) {
      return std::string{to_string(std::get<0>(p.param))} + "_rank" + std::to_string(std::get<1>(p.param));
    });

// ---- event log and epochs ----

TEST(event_kill, every_flushed_event_survives_a_kill_in_order) {
  testing::temp_dir dir{"rekindle-event-kill"};
  const auto db = dir.path() / "db";
  std::mt19937 rng{seed()};
  long long flushed_total = 0;
  for (int round = 0; round < 5; ++round) {
    const auto log = dir.path() / ("appender-" + std::to_string(round) + ".log");
    {
      testing::child_process appender({tool(), "append-events", "--dir", db.string(), "--flush-every", "25"}, log);
      ASSERT_TRUE(testing::wait_for_text(log, "flushed", 60s)) << testing::read_file(log);
      std::this_thread::sleep_for(std::chrono::microseconds{rng() % 50000});
      appender.signal(SIGKILL);
      ASSERT_TRUE(appender.wait_for(30s).has_value());
    }
    const auto text = testing::read_file(log);
    EXPECT_EQ(text.find("error"), std::string::npos) << text;
    const long long flushed = last_number(text, "flushed");
    ASSERT_GT(flushed, flushed_total) << text;
    flushed_total = flushed;

    auto s = state_store::open(db);
    ASSERT_TRUE(s.has_value()) << s.to_status();
    auto all = (*s)->events_after(0, 100000000);
    ASSERT_TRUE(all.has_value()) << all.to_status();
    ASSERT_GE(static_cast<long long>(all->size()), flushed) << "a flushed event is missing";
    for (std::size_t i = 0; i < all->size(); ++i) {
      const auto& e = (*all)[i];
      ASSERT_EQ(e.seq, i + 1) << "events are gapless and in order";
      ASSERT_EQ(e.fields, testing::event_fields(e.seq)) << "event " << e.seq;
      ASSERT_EQ(e.kind, "tick");
    }
    EXPECT_EQ((*s)->last_event_seq(), all->size());
  }
}

TEST(epoch_kill, an_announced_epoch_is_never_handed_out_again) {
  testing::temp_dir dir{"rekindle-epoch-kill"};
  const auto db = dir.path() / "db";
  std::mt19937 rng{seed()};
  long long announced = 0;
  for (int round = 0; round < 3; ++round) {
    const auto log = dir.path() / ("bumper-" + std::to_string(round) + ".log");
    {
      testing::child_process bumper({tool(), "bump-epochs", "--dir", db.string()}, log);
      ASSERT_TRUE(testing::wait_for_text(log, "epoch " + std::to_string(announced + 5), 60s))
          << testing::read_file(log);
      std::this_thread::sleep_for(std::chrono::microseconds{rng() % 30000});
      bumper.signal(SIGKILL);
      ASSERT_TRUE(bumper.wait_for(30s).has_value());
    }
    announced = last_number(testing::read_file(log), "epoch");
    auto s = state_store::open(db);
    ASSERT_TRUE(s.has_value()) << s.to_status();
    EXPECT_GE(static_cast<long long>((*s)->epoch().value()), announced);
    announced = static_cast<long long>((*s)->epoch().value());
  }
}

}  // namespace
}  // namespace rekindle::storage
