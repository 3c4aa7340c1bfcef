#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/expected.hpp"
#include "common/ids.hpp"
#include "storage/shard_file.hpp"

/// Writes checkpoint shards on a thread of its own, so that whoever hands them over (the
/// checkpoint actor) never waits for a disk.

namespace rekindle::storage {

/// Memory a shard's payload is copied into, handed back with the job's shard_done so that the
/// next checkpoint reuses it: already faulted in, and never zero-filled (a snapshot of 100 MB
/// into a fresh zeroed vector cost a memset and 25,000 page faults on the training's cores).
struct shard_buffer {
  std::unique_ptr<std::byte[]> bytes;
  std::size_t capacity = 0;
  /// At least `size` bytes: this buffer when it is large enough, else a new one (not zeroed).
  [[nodiscard]] std::span<std::byte> reserve(std::size_t size);
};

/// One shard to write: the first `size` bytes of `buffer` (a copy of a rank's snapshot, whose
/// snapshot_checksum is `checksum`, computed as it was copied: not hashed again) become
/// `dir`/shard_file_name(step, rank) by write_shard's protocol.
struct shard_job {
  std::filesystem::path dir;
  step_t step;
  rank_id rank;
  shard_buffer buffer;
  std::size_t size = 0;
  std::uint64_t checksum = 0;
};

/// How a shard_job ended.
struct shard_done {
  step_t step;
  rank_id rank;
  /// The file name inside the directory.
  std::string file;
  /// What write_shard returned: the header it wrote, or why it failed (no file left then).
  expected<shard_info> result;
  /// Seconds the write took.
  double seconds = 0;
  /// The job's buffer, for the next job to reuse.
  shard_buffer buffer;
};

/// A queue of shard jobs and the thread that writes them, in order, at a low priority: the thread
/// runs at niceness 10 and the lowest best-effort I/O priority, so that a checkpoint being written
/// takes what the training leaves of the cores and the disk (under contention, about a tenth of a
/// core's share against a training thread) instead of slowing its steps.
///
/// Thread-safety: `submit` from any thread; `done` runs on the writer's thread.
class shard_writer {
 public:
  /// `hooks` (failure injection; may be null) must outlive the writer.
  explicit shard_writer(std::function<void(shard_done)> done, shard_file_hooks* hooks = nullptr);
  /// Finishes the job being written, drops the queued ones (a crash would too) and joins.
  ~shard_writer();
  shard_writer(const shard_writer&) = delete;
  shard_writer& operator=(const shard_writer&) = delete;

  void submit(shard_job job);

 private:
  void run();

  std::function<void(shard_done)> done_;
  shard_file_hooks* hooks_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<shard_job> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rekindle::storage
