#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/expected.hpp"

namespace rekindle {

/// Everything a program reads from a path it was given goes through here. The path must name a
/// regular file (a directory, a FIFO or a device such as /dev/zero is refused at once, never read
/// or waited on) of at most `max_bytes`. `what` names it in errors, which leave the path to the
/// caller: "cannot read configuration file: No such file or directory", "is a directory, not a
/// configuration file", "is 2.00 GiB; the limit for a configuration file is 16.0 MiB".
/// Codes: not_found (missing), invalid_argument (not a regular file, too large), io_error.
expected<std::string> read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes,
                                        std::string_view what);

/// Replaces the file at `path` with `text` so that a reader sees the old content or the new, never
/// a part: written to "<path>.tmp", then renamed over it. Errors: io_error naming the path.
status write_file_atomically(const std::filesystem::path& path, std::string_view text);

/// write_file_atomically on a thread of its own, for a caller that must not wait for the disk (the
/// supervisor's status file, every tick). On ext4 a rename over an existing file waits for the
/// journal, and the journal for the data other writers dirtied: a 20 KB file took 0.83 s to replace
/// while 3 GB were written back, and a supervisor that replaced its status file inline stalled for
/// up to 5.6 s beside a profiler writing its data. The newest text handed over for a path wins; one
/// not written yet is replaced, never queued behind. Failures are logged (once a path until it is
/// written again). A write that never returns (a hung disk) holds up only the writer's thread,
/// which is left behind when the writer goes.
/// Thread-safety: write and flush may be called from any thread.
class background_file_writer {
 public:
  /// `stop_wait`: how long the destructor waits for what was handed over to be written.
  explicit background_file_writer(std::chrono::milliseconds stop_wait = default_stop_wait);
  /// Waits up to stop_wait for what was handed over to be written, then stops (a thread still in
  /// a write is left to end on its own).
  ~background_file_writer();
  background_file_writer(const background_file_writer&) = delete;
  background_file_writer& operator=(const background_file_writer&) = delete;

  /// Hands `text` over for `path`: written soon, unless newer text for the same path comes first.
  void write(std::filesystem::path path, std::string text);
  /// Waits until everything handed over before the call is written (or failed), for at most
  /// `timeout`; false when the time ran out.
  bool flush(std::chrono::milliseconds timeout);

  static constexpr std::chrono::milliseconds default_stop_wait{5000};

 private:
  struct state {
    std::mutex mutex;
    std::condition_variable work, done;
    std::map<std::filesystem::path, std::string> pending;
    std::uint64_t handed = 0;
    std::uint64_t written = 0;
    bool stopping = false;
    bool ended = false;
  };
  /// The thread's loop; it owns a share of the state, so that it may outlive the writer.
  static void run(const std::shared_ptr<state>& s);

  std::shared_ptr<state> state_;
  std::chrono::milliseconds stop_wait_;
};

/// The limits of the files rekindle reads, in one place.
namespace file_limits {
inline constexpr std::uint64_t config = 16ull << 20;    // configurations, cluster and model files, plans
inline constexpr std::uint64_t token = 64ull << 10;     // token files
inline constexpr std::uint64_t trace = 1ull << 30;      // fault traces and the records they come from
inline constexpr std::uint64_t manifest = 64ull << 20;  // checkpoint manifests
inline constexpr std::uint64_t small = 4ull << 10;      // files rekindle writes itself (addresses)
}  // namespace file_limits

}  // namespace rekindle
