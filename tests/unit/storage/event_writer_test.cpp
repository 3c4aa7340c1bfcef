#include "storage/event_writer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace rekindle::storage::detail {
namespace {

using namespace std::chrono_literals;

// A sink that records batches and fails the batch that contains `fail_at`.
struct recording_sink {
  std::mutex mu;
  std::vector<std::vector<std::uint64_t>> batches;
  std::uint64_t fail_at = 0;

  event_writer::sink get() {
    return [this](const std::vector<pending_event>& b) -> status {
      std::lock_guard lock{mu};
      std::vector<std::uint64_t> seqs;
      for (const auto& e : b)
        seqs.push_back(e.seq);
      if (fail_at != 0 && seqs.front() <= fail_at && fail_at <= seqs.back())
        return status{errc::io_error, "disk gone"};
      batches.push_back(seqs);
      return {};
    };
  }
};

expected<std::uint64_t> add(event_writer& w) {
  return w.append([](std::uint64_t seq) { return "e" + std::to_string(seq); });
}

TEST(event_writer, batches_in_order_and_flush_waits_for_durability) {
  recording_sink sink;
  event_writer w{sink.get(), 10, 4, std::chrono::hours{1}, 1000};
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(*add(w), 11u + static_cast<std::uint64_t>(i)) << "numbering continues after the durable 10";
  ASSERT_TRUE(w.flush().ok());
  EXPECT_EQ(w.durable_seq(), 19u);
  std::lock_guard lock{sink.mu};
  std::uint64_t next = 11;
  for (const auto& b : sink.batches)
    for (auto s : b)
      EXPECT_EQ(s, next++) << "batches hold consecutive numbers, in order";
  EXPECT_EQ(next, 20u);
}

TEST(event_writer, a_failed_batch_sticks_and_keeps_the_durable_prefix) {
  recording_sink sink;
  sink.fail_at = 3;
  event_writer w{sink.get(), 0, 1000, std::chrono::hours{1}, 1000};
  ASSERT_TRUE(add(w).has_value());
  ASSERT_TRUE(add(w).has_value());
  ASSERT_TRUE(w.flush().ok());
  ASSERT_TRUE(add(w).has_value());
  const auto st = w.flush();
  EXPECT_EQ(st.code(), errc::io_error) << st;
  EXPECT_EQ(w.durable_seq(), 2u);
  EXPECT_EQ(add(w).to_status().code(), errc::io_error) << "no append after a failed write";
  EXPECT_EQ(w.stop().code(), errc::io_error);
}

TEST(event_writer, stop_writes_what_is_pending) {
  recording_sink sink;
  event_writer w{sink.get(), 0, 1000, std::chrono::hours{1}, 1000};
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(add(w).has_value());
  ASSERT_TRUE(w.stop().ok());
  EXPECT_EQ(w.durable_seq(), 5u);
  EXPECT_TRUE(w.stop().ok()) << "idempotent";
  EXPECT_EQ(add(w).to_status().code(), errc::failed_precondition);
  EXPECT_TRUE(w.flush().ok()) << "everything appended is durable";
}

// A reader waits for the write only: while the log's sync hangs, flush_written returns and
// flush does not; once the sync ends, both have reached the event, and a failed sync is an error
// that sticks, as a failed write is.
TEST(event_writer, a_reader_waits_for_the_write_not_for_the_sync) {
  recording_sink sink;
  std::atomic<bool> release{false}, fail_sync{false};
  event_writer w{sink.get(), 0, 1000, std::chrono::hours{1}, 1000, [&]() -> status {
                   // A sync that takes until the test releases it (30 s at most).
                   for (int i = 0; i < 30000 && !release; ++i)
                     std::this_thread::sleep_for(1ms);
                   if (fail_sync)
                     return status{errc::io_error, "sync failed"};
                   return {};
                 }};
  ASSERT_TRUE(add(w).has_value());
  ASSERT_TRUE(add(w).has_value());
  ASSERT_TRUE(w.flush_written().ok());
  EXPECT_EQ(w.durable_seq(), 0u) << "the sync has not ended";
  std::atomic<bool> flushed{false};
  std::thread durable{[&] {
    EXPECT_TRUE(w.flush().ok());
    flushed = true;
  }};
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(flushed) << "flush returned before the sync";
  release = true;
  durable.join();
  EXPECT_EQ(w.durable_seq(), 2u);

  fail_sync = true;
  ASSERT_TRUE(add(w).has_value());
  EXPECT_EQ(w.flush().code(), errc::io_error);
  EXPECT_EQ(w.durable_seq(), 2u) << "written, never synced";
  EXPECT_EQ(add(w).to_status().code(), errc::io_error) << "no append after a failed sync";
}

}  // namespace
}  // namespace rekindle::storage::detail
