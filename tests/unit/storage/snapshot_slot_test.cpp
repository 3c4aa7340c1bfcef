#include "storage/snapshot_slot.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/checksum.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::storage {
namespace {

namespace fs = std::filesystem;

// A slot name unique to this test (the daemon derives it from its data directory the same way),
// removed before and after.
struct slot_fixture : ::testing::Test {
  testing::temp_dir dir{"rekindle-slot"};
  std::string name = snapshot_slot::name_for(dir.path(), "unit", 0);

  void SetUp() override { ASSERT_TRUE(snapshot_slot::remove(name).ok()); }
  void TearDown() override { EXPECT_TRUE(snapshot_slot::remove(name).ok()); }

  snapshot_slot make(std::uint64_t capacity) {
    auto s = snapshot_slot::create(name, capacity);
    EXPECT_TRUE(s.has_value()) << s.to_status();
    return std::move(s).value();
  }
};

// Bytes that depend on the step, so a mix of two snapshots is visible.
std::vector<std::byte> pattern(std::uint64_t step, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((step * 131 + i * 7) & 0xff);
  return v;
}

std::vector<std::byte> bytes_of(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

snapshot_meta meta(std::uint64_t step) { return snapshot_meta::of_step(step_t{step}); }

// A snapshot of `step` written in `epoch` by a writer whose epoch restored `start`, snapshots every
// step (anchors every fourth).
snapshot_meta in_epoch(std::uint64_t epoch, std::uint64_t step, std::uint64_t start = 0) {
  return {{epoch_t{epoch}, rank_id{2}, step_t{step}}, 4, step_t{start}, 1};
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

TEST_F(slot_fixture, begin_write_names_the_copy_it_replaces_and_publish_records_who_wrote_it) {
  auto slot = make(4096);
  const auto put = [&](const snapshot_meta& m) {
    auto t = slot.begin_write(m);
    EXPECT_TRUE(t.has_value()) << t.to_status();
    if (t && !t->skipped()) {
      EXPECT_TRUE(slot.publish(16).ok());
    }
    return t ? t->plan : policy::slot_write{};
  };
  EXPECT_FALSE(put(in_epoch(3, 30)).overwrites) << "an empty slot loses nothing";
  EXPECT_FALSE(put(in_epoch(3, 31)).overwrites) << "the other half was still empty";
  const auto halves = slot.halves();
  ASSERT_TRUE(halves[0] && halves[1]);
  EXPECT_EQ(*halves[0], (policy::copy_tag{epoch_t{3}, rank_id{2}, step_t{30}}));
  // A rollback: epoch 4 restored step 20 from elsewhere; the epoch-3 copies are the older.
  const auto w = put(in_epoch(4, 21, 20));
  ASSERT_TRUE(w.overwrites);
  EXPECT_EQ(*w.overwrites, (policy::copy_tag{epoch_t{3}, rank_id{2}, step_t{30}}));
  EXPECT_EQ(slot.steps(), (std::vector<step_t>{step_t{21}, step_t{31}}));
  auto v = slot.at_step(step_t{21});
  ASSERT_TRUE(v.has_value()) << v.to_status();
  EXPECT_EQ(v->epoch, epoch_t{4});
  EXPECT_EQ(v->rank, rank_id{2});
  EXPECT_EQ(v->world, 4u);
}

TEST_F(slot_fixture, the_pinned_step_survives_any_number_of_newer_snapshots_and_a_new_writer) {
  auto slot = make(4096);
  ASSERT_TRUE(slot.write(in_epoch(1, 10), pattern(10, 1000)).has_value());
  ASSERT_TRUE(slot.write(in_epoch(1, 11), pattern(11, 1000)).has_value());
  // The node's checkpoint actor pins the committed step, in another handle (another process).
  auto custodian = snapshot_slot::open(name);
  ASSERT_TRUE(custodian.has_value()) << custodian.to_status();
  custodian->pin({epoch_t{1}, step_t{10}});
  EXPECT_EQ(slot.pinned(), (policy::custody_pin{epoch_t{1}, step_t{10}}));
  for (std::uint64_t step : {13u, 14u, 15u}) {
    auto t = slot.begin_write(in_epoch(1, step));
    ASSERT_TRUE(t.has_value()) << t.to_status();
    ASSERT_FALSE(t->skipped()) << step;
    // While the newer half is rewritten, readers see the pinned one as the newest.
    auto during = slot.latest();
    ASSERT_TRUE(during.has_value()) << during.to_status();
    EXPECT_EQ(during->step, step_t{10});
    const auto p = pattern(step, 1000);
    std::memcpy(t->half.data(), p.data(), p.size());
    ASSERT_TRUE(slot.publish(p.size()).ok());
    EXPECT_EQ(slot.steps(), (std::vector<step_t>{step_t{10}, step_t{step}}));
    auto kept = slot.at_step(step_t{10});
    ASSERT_TRUE(kept.has_value()) << kept.to_status();
    EXPECT_EQ(bytes_of(kept->data), pattern(10, 1000));
    EXPECT_EQ(slot.latest()->step, step_t{step});
  }
  // Anchor 16 is not committed: the snapshot after it waits rather than lose 10 or 16.
  const auto anchor = slot.write(in_epoch(1, 16), pattern(16, 10));
  ASSERT_TRUE(anchor.has_value() && anchor->overwrites) << anchor.to_status();
  EXPECT_EQ(anchor->overwrites->step, step_t{15});
  const auto skipped = slot.write(in_epoch(1, 17), pattern(17, 10));
  ASSERT_TRUE(skipped.has_value()) << skipped.to_status();
  EXPECT_FALSE(skipped->half);
  EXPECT_EQ(skipped->waiting, step_t{16});
  EXPECT_EQ(slot.steps(), (std::vector<step_t>{step_t{10}, step_t{16}}));
  // A restarted writer (a new handle) of the same epoch is held to the same pin.
  slot = snapshot_slot{std::move(*snapshot_slot::open(name))};
  EXPECT_FALSE(slot.write(in_epoch(1, 18), pattern(18, 10))->half);
  custodian->pin({epoch_t{1}, step_t{16}});
  const auto after = slot.write(in_epoch(1, 18), pattern(18, 10));
  ASSERT_TRUE(after.has_value() && after->overwrites);
  EXPECT_EQ(after->overwrites->step, step_t{10}) << "16 is committed: 10 may go";
}

TEST_F(slot_fixture, names_differ_by_data_dir_job_and_rank) {
  testing::temp_dir other{"rekindle-slot"};
  EXPECT_NE(snapshot_slot::name_for(dir.path(), "unit", 0), snapshot_slot::name_for(other.path(), "unit", 0));
  EXPECT_NE(snapshot_slot::name_for(dir.path(), "unit", 0), snapshot_slot::name_for(dir.path(), "unit2", 0));
  EXPECT_EQ(snapshot_slot::name_for(dir.path(), "unit", 3), snapshot_slot::name_prefix(dir.path(), "unit") + "3");
  const auto odd = snapshot_slot::name_for(dir.path(), "a/b c", 1);
  EXPECT_EQ(odd.find('/', 1), std::string::npos) << odd;
  EXPECT_EQ(snapshot_slot::create("no-slash", 4096).to_status().code(), errc::invalid_argument);
  EXPECT_EQ(snapshot_slot::create("/a/b", 4096).to_status().code(), errc::invalid_argument);
}

TEST_F(slot_fixture, a_published_snapshot_reads_back_verified) {
  auto slot = make(10000);
  EXPECT_EQ(slot.capacity(), 12288u) << "rounded up to whole pages";
  EXPECT_EQ(slot.latest().to_status().code(), errc::not_found);
  const auto a = pattern(7, 5000);
  ASSERT_TRUE(slot.write(meta(7), a).has_value());
  EXPECT_EQ(slot.generation(), 1u);

  auto reader = snapshot_slot::open(name);
  ASSERT_TRUE(reader.has_value()) << reader.to_status();
  EXPECT_EQ(reader->capacity(), slot.capacity());
  auto v = reader->latest();
  ASSERT_TRUE(v.has_value()) << v.to_status();
  EXPECT_EQ(v->step, step_t{7});
  EXPECT_EQ(bytes_of(v->data), a);
  EXPECT_EQ(v->checksum, snapshot_checksum(a));
  EXPECT_EQ(v->generation, 1u);
  EXPECT_TRUE(reader->still_valid(*v));

  std::vector<std::byte> out(slot.capacity());
  auto info = reader->copy_latest(out);
  ASSERT_TRUE(info.has_value()) << info.to_status();
  EXPECT_EQ(info->length, a.size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), out.begin()));
  std::vector<std::byte> small(100);
  EXPECT_EQ(reader->copy_latest(small).to_status().code(), errc::resource_exhausted);
}

TEST_F(slot_fixture, both_halves_can_be_read_by_step) {
  auto slot = make(10000);
  EXPECT_TRUE(slot.steps().empty());
  EXPECT_EQ(slot.at_step(step_t{5}).to_status().code(), errc::not_found);
  ASSERT_TRUE(slot.write(meta(5), pattern(5, 3000)).has_value());
  ASSERT_TRUE(slot.write(meta(10), pattern(10, 4000)).has_value());
  EXPECT_EQ(slot.steps(), (std::vector<step_t>{step_t{5}, step_t{10}}));
  auto older = slot.at_step(step_t{5});
  ASSERT_TRUE(older.has_value()) << older.to_status();
  EXPECT_EQ(bytes_of(older->data), pattern(5, 3000));
  ASSERT_TRUE(slot.write(meta(15), pattern(15, 4000)).has_value());
  auto gone = slot.at_step(step_t{5});
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code(), errc::not_found);
  EXPECT_NE(gone.error().message().find("it holds step 15, 10"), std::string::npos) << gone.error();
  EXPECT_FALSE(slot.still_valid(*older)) << "the half was overwritten";
  EXPECT_EQ(bytes_of(slot.at_step(step_t{10})->data), pattern(10, 4000));
}

TEST_F(slot_fixture, readers_see_the_previous_snapshot_until_the_next_is_published) {
  auto slot = make(4096);
  const auto a = pattern(1, 3000);
  ASSERT_TRUE(slot.write(meta(1), a).has_value());
  auto first = slot.latest();
  ASSERT_TRUE(first.has_value());

  // Export straight into the slot: begin_write, fill, publish.
  auto t = slot.begin_write(meta(2));
  ASSERT_TRUE(t.has_value()) << t.to_status();
  EXPECT_EQ(t->half.size(), 4096u);
  const auto b = pattern(2, 4000);
  std::memcpy(t->half.data(), b.data(), b.size());
  auto during = slot.latest();
  ASSERT_TRUE(during.has_value());
  EXPECT_EQ(during->step, step_t{1}) << "half-written data is never visible";
  EXPECT_EQ(bytes_of(during->data), a);
  EXPECT_TRUE(slot.still_valid(*first)) << "the writer writes the other half";

  ASSERT_TRUE(slot.publish(b.size()).ok()) << "the checksum is computed when not given";
  auto second = slot.latest();
  ASSERT_TRUE(second.has_value()) << second.to_status();
  EXPECT_EQ(second->step, step_t{2});
  EXPECT_EQ(bytes_of(second->data), b);
  EXPECT_NE(second->half, first->half);
  EXPECT_TRUE(slot.still_valid(*first)) << "published but not yet overwritten";

  ASSERT_TRUE(slot.begin_write(meta(3)).has_value());
  EXPECT_FALSE(slot.still_valid(*first)) << "the writer now reuses the first half";
  EXPECT_TRUE(slot.still_valid(*second));
  EXPECT_EQ(slot.publish(5000).code(), errc::resource_exhausted);
  EXPECT_EQ(slot.latest()->step, step_t{2});
}

TEST_F(slot_fixture, capacity_is_checked_with_a_precise_error) {
  auto slot = make(4096);
  const auto big = pattern(1, 4097);
  const auto st = slot.write(meta(9), big).to_status();
  EXPECT_EQ(st.code(), errc::resource_exhausted);
  EXPECT_NE(st.message().find("state of step 9 has 4097 bytes, more than the slot's capacity of 4096 bytes"),
            std::string::npos)
      << st;
  EXPECT_EQ(slot.publish(1).code(), errc::failed_precondition) << "publish needs begin_write";
  EXPECT_EQ(snapshot_slot::create(name + "x", 0).to_status().code(), errc::invalid_argument);
}

TEST_F(slot_fixture, a_corrupted_snapshot_fails_its_checksum) {
  auto slot = make(4096);
  ASSERT_TRUE(slot.write(meta(4), pattern(4, 1000)).has_value());
  auto v = slot.latest();
  ASSERT_TRUE(v.has_value());
  const_cast<std::byte&>(v->data[500]) ^= std::byte{1};
  const auto st = slot.latest().to_status();
  EXPECT_EQ(st.code(), errc::data_loss);
  EXPECT_NE(st.message().find("snapshot of step 4 fails its checksum"), std::string::npos) << st;
  EXPECT_TRUE(slot.latest(false).has_value()) << "unverified reads skip the checksum";
  std::vector<std::byte> out(4096);
  EXPECT_EQ(slot.copy_latest(out).to_status().code(), errc::data_loss);
  // The other half, intact, is still found by its step; the damaged one is named by its own.
  ASSERT_TRUE(slot.write(meta(8), pattern(8, 1000)).has_value());
  EXPECT_TRUE(slot.at_step(step_t{8}).has_value());
  const auto damaged = slot.at_step(step_t{4}).to_status();
  EXPECT_EQ(damaged.code(), errc::data_loss);
  EXPECT_NE(damaged.message().find("step 4"), std::string::npos) << damaged;
}

TEST_F(slot_fixture, create_refuses_an_existing_slot_and_stale_ones_are_removed) {
  auto slot = make(4096);
  EXPECT_EQ(snapshot_slot::create(name, 4096).to_status().code(), errc::already_exists);
  const auto prefix = snapshot_slot::name_prefix(dir.path(), "unit");
  const auto other = snapshot_slot::name_for(dir.path(), "unit", 1);
  const auto foreign = snapshot_slot::name_for(dir.path(), "other-job", 0);
  ASSERT_TRUE(snapshot_slot::create(other, 4096).has_value());
  ASSERT_TRUE(snapshot_slot::create(foreign, 4096).has_value());
  auto removed = snapshot_slot::remove_with_prefix(prefix);
  ASSERT_TRUE(removed.has_value()) << removed.to_status();
  std::sort(removed->begin(), removed->end());
  EXPECT_EQ(*removed, (std::vector<std::string>{name, other}));
  EXPECT_EQ(snapshot_slot::open(name).to_status().code(), errc::not_found);
  EXPECT_TRUE(snapshot_slot::open(foreign).has_value()) << "another job's slot stays";
  EXPECT_TRUE(snapshot_slot::remove(foreign).ok());
  EXPECT_TRUE(snapshot_slot::remove(foreign).ok()) << "removing a missing slot is fine";
  // The creator's mapping survives the unlink.
  EXPECT_TRUE(slot.write(meta(1), pattern(1, 10)).has_value());
}

// Writes `bytes` as a raw POSIX shared-memory object.
void raw_object(const std::string& name, const std::vector<std::byte>& bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

TEST_F(slot_fixture, open_checks_the_header) {
  EXPECT_EQ(snapshot_slot::open(name).to_status().code(), errc::not_found);

  raw_object(name, std::vector<std::byte>(100));
  auto st = snapshot_slot::open(name).to_status();
  EXPECT_EQ(st.code(), errc::data_loss);
  EXPECT_NE(st.message().find("object of 100 bytes is shorter than the 4096-byte header"), std::string::npos) << st;

  raw_object(name, std::vector<std::byte>(8192, std::byte{0x5a}));
  st = snapshot_slot::open(name).to_status();
  EXPECT_NE(st.message().find("byte 0: magic"), std::string::npos) << st;

  ASSERT_TRUE(snapshot_slot::remove(name).ok());
  { auto slot = make(4096); }
  // Grow the claimed capacity beyond the object.
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  const std::uint64_t huge = 1 << 20;
  ASSERT_EQ(pwrite(fd, &huge, sizeof huge, 16), 8);
  close(fd);
  st = snapshot_slot::open(name).to_status();
  EXPECT_EQ(st.code(), errc::data_loss);
  EXPECT_NE(st.message().find("byte 16: capacity 1048576 does not fit an object of 12288 bytes"), std::string::npos)
      << st;
}

TEST_F(slot_fixture, one_live_writer_at_a_time_and_a_dead_writer_is_replaced) {
  auto slot = make(4096);
  ASSERT_TRUE(slot.write(meta(1), pattern(1, 100)).has_value());
  auto second = snapshot_slot::open(name);
  ASSERT_TRUE(second.has_value());
  auto st = second->write(meta(2), pattern(2, 100)).to_status();
  EXPECT_EQ(st.code(), errc::unavailable);
  EXPECT_NE(st.message().find("live writer (pid " + std::to_string(getpid()) + ")"), std::string::npos) << st;

  // A writer that dies in the middle of a write: begin_write, then gone without publishing.
  {
    auto dying = std::move(slot);
    ASSERT_TRUE(dying.begin_write(meta(2)).has_value());
  }
  ASSERT_TRUE(second->write(meta(3), pattern(3, 200)).has_value()) << "the claim was released";
  auto v = second->latest();
  ASSERT_TRUE(v.has_value()) << v.to_status();
  EXPECT_EQ(v->step, step_t{3});
  EXPECT_EQ(bytes_of(v->data), pattern(3, 200));
  EXPECT_EQ(v->sequence % 2, 0u);

  // A claim left by a process that no longer exists is taken over.
  const pid_t child = fork();
  if (child == 0)
    _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  auto third = snapshot_slot::open(name);
  ASSERT_TRUE(third.has_value());
  {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    const auto dead = static_cast<std::uint64_t>(child);
    ASSERT_EQ(pwrite(fd, &dead, sizeof dead, 48), 8);
    close(fd);
  }
  second = snapshot_slot::open(name);  // the old handle releases nothing: its claim was overwritten
  EXPECT_TRUE(third->write(meta(4), pattern(4, 10)).has_value());
  EXPECT_EQ(third->latest()->step, step_t{4});
}

TEST_F(slot_fixture, the_first_copy_into_a_slot_takes_no_page_faults) {
  constexpr std::size_t bytes = 64 << 20;
  constexpr long pages = bytes / 4096;
  auto owner = make(bytes);
  auto worker = snapshot_slot::open(name);  // as the worker process maps it
  ASSERT_TRUE(worker.has_value());
  const std::vector<std::byte> state(bytes, std::byte{3});  // touched source

  const long before = minor_faults();
  ASSERT_TRUE(worker->write(meta(1), state).has_value());
  const long faults = minor_faults() - before;
  EXPECT_LT(faults, pages / 100) << faults << " page faults for " << pages << " pages";

  // The same copy into a mapping of the same memory made without pre-faulting faults on every page,
  // which is what the measurement above would show without MAP_POPULATE.
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  void* p = mmap(nullptr, snapshot_slot::header_bytes + 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  const long before_plain = minor_faults();
  std::memcpy(static_cast<std::byte*>(p) + snapshot_slot::header_bytes, state.data(), bytes);
  const long plain_faults = minor_faults() - before_plain;
  munmap(p, snapshot_slot::header_bytes + 2 * bytes);
  EXPECT_GT(plain_faults, pages / 4) << "the control copy should fault";
}

// The pass that reads every page once (for the VMs where a first access through a new mapping is
// slow) changes nothing a reader sees and takes no page faults.
TEST_F(slot_fixture, reading_every_page_changes_nothing_and_takes_no_page_faults) {
  constexpr std::size_t bytes = 8 << 20;
  auto owner = make(bytes);
  const auto state = pattern(7, bytes / 2);
  ASSERT_TRUE(owner.write(meta(7), state).has_value());
  auto worker = snapshot_slot::open(name);
  ASSERT_TRUE(worker.has_value());

  const long before = minor_faults();
  worker->touch_pages();
  EXPECT_LT(minor_faults() - before, static_cast<long>(bytes / 4096 / 100));
  auto read = worker->latest();
  ASSERT_TRUE(read.has_value()) << read.to_status();
  EXPECT_EQ(read->step, step_t{7});
  EXPECT_EQ(bytes_of(read->data), state);
}

}  // namespace
}  // namespace rekindle::storage
