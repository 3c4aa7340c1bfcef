#include "storage/shard_writer.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/checksum.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::storage {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> bytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

// Collects what the writer reports.
struct collector {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<shard_done> done;

  void operator()(shard_done d) {
    std::lock_guard lock{mutex};
    done.push_back(std::move(d));
    cv.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock{mutex};
    return cv.wait_for(lock, 30s, [&] { return done.size() >= n; });
  }
};

shard_job job_for(const std::filesystem::path& dir, std::uint64_t step, std::uint32_t rank, std::vector<std::byte> p) {
  shard_job j{dir, step_t{step}, rank_id{rank}, {}, p.size(), 0};
  j.checksum = copy_and_checksum(j.buffer.reserve(p.size()), p);
  return j;
}

TEST(shard_writer, writes_jobs_in_order_into_verified_files) {
  testing::temp_dir dir;
  collector c;
  shard_writer w{[&](shard_done d) { c(std::move(d)); }};
  w.submit(job_for(dir.path(), 20, 0, bytes(100000, 1)));
  w.submit(job_for(dir.path(), 20, 1, bytes(3000, 2)));
  ASSERT_TRUE(c.wait_for(2));
  ASSERT_EQ(c.done[0].rank, rank_id{0});
  ASSERT_EQ(c.done[1].rank, rank_id{1});
  for (const auto& d : c.done) {
    ASSERT_TRUE(d.result.has_value()) << d.result.error().message();
    EXPECT_EQ(d.file, shard_file_name(step_t{20}, d.rank));
    auto v = verify_shard(dir.path() / d.file, {.step = step_t{20}, .rank = d.rank, .checksum = d.result->checksum});
    EXPECT_TRUE(v.has_value()) << v.error().message();
  }
  EXPECT_EQ(c.done[1].result->size, 3000u);
}

shard_job sourced_job(const std::filesystem::path& dir, std::uint64_t step, std::uint32_t rank,
                      const std::vector<std::byte>& p, std::function<bool()> valid, std::uint64_t published) {
  shard_job j{dir, step_t{step}, rank_id{rank}, {}, 0, 0, {}};
  j.source = shard_source{p, std::move(valid), published, "the snapshot of step " + std::to_string(step) + " in slot " +
                                                              std::to_string(rank)};
  return j;
}

TEST(shard_writer, copies_a_source_itself_and_writes_it_in_order_with_the_others) {
  testing::temp_dir dir;
  collector c;
  const auto a = bytes(200000, 3), b = bytes(5000, 4);
  shard_writer w{[&](shard_done d) { c(std::move(d)); }};
  w.submit(sourced_job(dir.path(), 30, 0, a, [] { return true; }, snapshot_checksum(a)));
  w.submit(job_for(dir.path(), 30, 1, bytes(3000, 5)));
  w.submit(sourced_job(dir.path(), 30, 2, b, nullptr, snapshot_checksum(b)));
  ASSERT_TRUE(c.wait_for(3));
  ASSERT_EQ(c.done[0].rank, rank_id{0});
  ASSERT_EQ(c.done[1].rank, rank_id{1});
  ASSERT_EQ(c.done[2].rank, rank_id{2});
  for (const auto& d : c.done)
    ASSERT_TRUE(d.result.has_value()) << d.result.error().message();
  EXPECT_EQ(c.done[0].result->size, a.size());
  EXPECT_EQ(c.done[0].result->checksum, snapshot_checksum(a));
  EXPECT_EQ(c.done[2].result->size, b.size());
  // The buffer the writer reserved comes back for the next checkpoint.
  EXPECT_GE(c.done[0].buffer.capacity, a.size());
  auto v = verify_shard(dir.path() / c.done[0].file, {.step = step_t{30}, .rank = rank_id{0}, .checksum = snapshot_checksum(a)});
  EXPECT_TRUE(v.has_value()) << v.error().message();
}

TEST(shard_writer, a_source_that_changed_while_copied_or_fails_its_checksum_leaves_no_file) {
  testing::temp_dir dir;
  collector c;
  const auto a = bytes(100000, 6);
  shard_writer w{[&](shard_done d) { c(std::move(d)); }};
  w.submit(sourced_job(dir.path(), 40, 0, a, [] { return false; }, snapshot_checksum(a)));
  w.submit(sourced_job(dir.path(), 40, 1, a, [] { return true; }, snapshot_checksum(a) ^ 1));
  ASSERT_TRUE(c.wait_for(2));
  ASSERT_FALSE(c.done[0].result.has_value());
  EXPECT_EQ(c.done[0].result.error().message(), "the snapshot of step 40 in slot 0 changed while it was copied");
  ASSERT_FALSE(c.done[1].result.has_value());
  EXPECT_EQ(c.done[1].result.error().message(), "the snapshot of step 40 in slot 1 fails its checksum");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / shard_file_name(step_t{40}, rank_id{0})));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / shard_file_name(step_t{40}, rank_id{1})));
}

TEST(shard_writer, submit_returns_while_a_source_is_still_being_copied) {
  // The checkpoint actor submits from its own thread: a copy that ran there held up every
  // snapshot report behind it. Here the copy cannot end before the test lets it; a submit that
  // copied in place would wait out the 30 s and the check would see it.
  testing::temp_dir dir;
  collector c;
  const auto a = bytes(10000, 7);
  std::mutex m;
  std::condition_variable cv;
  bool released = false, waited_out = false;
  auto hold = [&] {
    std::unique_lock lock{m};
    waited_out = !cv.wait_for(lock, 30s, [&] { return released; });
    return true;
  };
  shard_writer w{[&](shard_done d) { c(std::move(d)); }};
  w.submit(sourced_job(dir.path(), 50, 0, a, hold, snapshot_checksum(a)));
  {
    std::lock_guard lock{m};
    released = true;
  }
  cv.notify_all();
  ASSERT_TRUE(c.wait_for(1));
  ASSERT_TRUE(c.done[0].result.has_value()) << c.done[0].result.error().message();
  std::lock_guard lock{m};
  EXPECT_FALSE(waited_out);
}

// A disk that fills up in the middle of the payload.
struct full_disk : shard_file_hooks {
  int before_write(std::uint64_t offset, std::size_t size, std::size_t& partial) override {
    if (offset >= 64) {
      partial = size / 2;
      return ENOSPC;
    }
    return 0;
  }
};

TEST(shard_writer, a_full_disk_is_reported_and_leaves_no_file) {
  testing::temp_dir dir;
  collector c;
  full_disk hooks;
  shard_writer w{[&](shard_done d) { c(std::move(d)); }, &hooks};
  w.submit(job_for(dir.path(), 40, 3, bytes(1 << 20, 3)));
  ASSERT_TRUE(c.wait_for(1));
  ASSERT_FALSE(c.done[0].result.has_value());
  EXPECT_EQ(c.done[0].result.error().code(), errc::resource_exhausted) << c.done[0].result.error().message();
  EXPECT_NE(c.done[0].result.error().message().find(c.done[0].file), std::string::npos) << "names the file";
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "neither the shard nor its .tmp stays";
}

TEST(shard_writer, the_buffer_comes_back_for_the_next_job_and_is_reused_when_large_enough) {
  testing::temp_dir dir;
  collector c;
  shard_writer w{[&](shard_done d) { c(std::move(d)); }};
  w.submit(job_for(dir.path(), 60, 0, bytes(5000, 4)));
  ASSERT_TRUE(c.wait_for(1));
  ASSERT_TRUE(c.done[0].result.has_value()) << c.done[0].result.error().message();
  shard_buffer back = std::move(c.done[0].buffer);
  ASSERT_GE(back.capacity, 5000u);
  const auto* memory = back.bytes.get();
  EXPECT_EQ(back.reserve(3000).data(), memory) << "a smaller payload reuses the memory";
  EXPECT_NE(back.reserve(50000).data(), nullptr);
  EXPECT_GE(back.capacity, 50000u);
}

TEST(shard_writer, the_checksum_it_is_given_is_the_one_a_reader_checks) {
  // The writer trusts the checksum computed while the payload was copied in: a wrong one makes a
  // file that no reader accepts, so the copy's check (the checkpoint actor's) is what stands guard.
  testing::temp_dir dir;
  collector c;
  shard_writer w{[&](shard_done d) { c(std::move(d)); }};
  auto j = job_for(dir.path(), 60, 0, bytes(5000, 4));
  j.checksum ^= 1;
  w.submit(std::move(j));
  ASSERT_TRUE(c.wait_for(1));
  ASSERT_TRUE(c.done[0].result.has_value());
  auto v = verify_shard(dir.path() / c.done[0].file, {});
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code(), errc::data_loss) << v.error().message();
}

}  // namespace
}  // namespace rekindle::storage
