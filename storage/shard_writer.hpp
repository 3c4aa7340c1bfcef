#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/expected.hpp"
#include "common/ids.hpp"
#include "storage/shard_file.hpp"

/// Writes checkpoint shards on a thread of its own, so that whoever hands them over (the
/// checkpoint actor) never waits for a disk.

namespace rekindle::storage {

/// One shard to write: `payload` (a copy of a rank's snapshot, whose xxHash64 is `checksum`)
/// becomes `dir`/shard_file_name(step, rank) by write_shard's protocol.
struct shard_job {
  std::filesystem::path dir;
  step_t step;
  rank_id rank;
  std::vector<std::byte> payload;
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
};

/// A queue of shard jobs and the thread that writes them, in order.
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
