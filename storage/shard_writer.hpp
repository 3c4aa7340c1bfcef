#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
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

/// A payload the writer copies itself, from memory another process may write again (a rank's
/// snapshot slot): the bytes, whether they are still the snapshot once copied
/// (snapshot_slot::still_valid), and the checksum the snapshot was published with.
struct shard_source {
  std::span<const std::byte> bytes;
  std::function<bool()> still_valid;
  std::uint64_t published_checksum = 0;
  /// What the bytes are, for an error: "the snapshot of step 20 in slot 3".
  std::string what;
};

/// One shard to write: the first `size` bytes of `buffer` (a copy of a rank's snapshot, whose
/// snapshot_checksum is `checksum`, computed as it was copied: not hashed again) become
/// `dir`/shard_file_name(step, rank) by write_shard's protocol. With a `source`, the writer first
/// copies it into `buffer` (reserved to its size) and sets `size` and `checksum` itself.
struct shard_job {
  std::filesystem::path dir;
  step_t step;
  rank_id rank;
  shard_buffer buffer;
  std::size_t size = 0;
  std::uint64_t checksum = 0;
  std::optional<shard_source> source;
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

/// A queue of shard jobs and two threads: one copies the jobs' sources as they come, at the
/// normal priority (a source is overwritten a few snapshots later, sooner than a disk writes a
/// checkpoint), the other writes the jobs, in order, at a low priority: niceness 10 and the
/// lowest best-effort I/O priority, so that a checkpoint being written takes what the training
/// leaves of the cores and the disk (under contention, about a tenth of a core's share against a
/// training thread) instead of slowing its steps. Whoever submits never waits for either: a
/// checkpoint of 8 ranks' states copied on the checkpoint actor's own thread took 8 s on two
/// cores shared with the ranks, and the snapshot reports that queued behind it meanwhile held up
/// the commits a restore counts on.
///
/// A source that changed while it was copied, or whose copy does not match its published
/// checksum, ends its job at once with an error (no file).
///
/// Thread-safety: `submit` from any thread; `done` runs on one of the writer's threads.
class shard_writer {
 public:
  /// `hooks` (failure injection; may be null) must outlive the writer; so must the memory of
  /// every source submitted.
  explicit shard_writer(std::function<void(shard_done)> done, shard_file_hooks* hooks = nullptr);
  /// Finishes the copy and the write under way, drops the queued jobs (a crash would too) and
  /// joins.
  ~shard_writer();
  shard_writer(const shard_writer&) = delete;
  shard_writer& operator=(const shard_writer&) = delete;

  void submit(shard_job job);

 private:
  /// The next job of `queue`, waiting for one; none once the writer stops.
  std::optional<shard_job> take(std::deque<shard_job>& queue);
  void copy_loop();
  void write_loop();

  std::function<void(shard_done)> done_;
  shard_file_hooks* hooks_;
  std::mutex mutex_;
  std::condition_variable cv_;
  /// Jobs to copy (or pass on, without a source), then jobs to write.
  std::deque<shard_job> to_copy_;
  std::deque<shard_job> to_write_;
  bool stop_ = false;
  std::thread copier_;
  std::thread writer_;
};

}  // namespace rekindle::storage
