#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/expected.hpp"

namespace rekindle::storage::detail {

/// An encoded event waiting for its batch.
struct pending_event {
  std::uint64_t seq = 0;
  std::string value;
};

/// Groups appended events into synced write batches on a background thread (private to storage/).
///
/// Protocol:
///   1. `append` assigns the next sequence number and encodes the event under the mutex, so
///      sequence order is queue order, and wakes the thread when `batch` events are pending.
///   2. The thread takes every pending event once `batch` are pending, the oldest has waited
///      `delay`, a flush is waiting, or the writer stops; it writes them with one write outside
///      the mutex, then (when it has a `sync`) syncs them, also outside the mutex.
///   3. After the write it advances the written sequence number, after the sync the durable one
///      (both at once without a `sync`), and wakes the flush waiters each time; on failure it
///      keeps the error, drops the batch and every later append fails with that error. Batches
///      are written one at a time in order, so written and durable events are always prefixes,
///      the durable one of the written one.
///
/// Thread-safety: `append`, `flush` and the readings may be called from any thread; `stop` (and the
/// destructor) must not race with them.
class event_writer {
 public:
  /// Writes one batch (readable once it returns; durable too when there is no `sync_sink`);
  /// called on the writer thread.
  using sink = std::function<status(const std::vector<pending_event>&)>;
  /// Makes every batch written before it durable; called on the writer thread.
  using sync_sink = std::function<status()>;

  /// Starts the thread. `durable_seq` is the last sequence number already in the log.
  event_writer(sink write, std::uint64_t durable_seq, std::size_t batch, std::chrono::milliseconds delay,
               std::size_t max_pending, sync_sink sync = {});
  event_writer(const event_writer&) = delete;
  event_writer& operator=(const event_writer&) = delete;
  ~event_writer();

  /// Queues the event that `encode(seq)` returns; returns seq.
  [[nodiscard]] expected<std::uint64_t> append(const std::function<std::string(std::uint64_t)>& encode);
  /// Waits until every event appended before the call is durable.
  [[nodiscard]] status flush();
  /// Waits until every event appended before the call is written: readable, not yet durable.
  [[nodiscard]] status flush_written();
  /// Writes what is pending and joins the thread. Idempotent; returns the writer's error if any.
  [[nodiscard]] status stop();

  [[nodiscard]] std::uint64_t last_seq() const;
  [[nodiscard]] std::uint64_t durable_seq() const;

 private:
  void run();
  [[nodiscard]] status wait_for(const std::uint64_t& reached);

  sink write_;
  sync_sink sync_;
  const std::size_t batch_;
  const std::chrono::milliseconds delay_;
  const std::size_t max_pending_;

  mutable std::mutex mu_;
  std::condition_variable wake_;  // the thread waits for work
  std::condition_variable done_;  // flushers wait for a write or a sync
  std::vector<pending_event> pending_;
  std::chrono::steady_clock::time_point oldest_{};
  std::uint64_t last_seq_;
  std::uint64_t written_seq_;
  std::uint64_t durable_seq_;
  int flushers_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;  // the thread has ended
  status error_;
  std::thread thread_;
};

}  // namespace rekindle::storage::detail
