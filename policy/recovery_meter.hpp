#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.hpp"

namespace rekindle::policy {

/// One recovery as measured: what failed, where the state came from, and how long each phase took
/// (times are CLOCK_MONOTONIC nanoseconds).
struct recovery_record {
  std::uint64_t epoch = 0;
  std::string cause;
  std::optional<rank_id> rank;
  std::optional<node_id> node;
  /// Step the job had reached when the failure was seen.
  std::uint64_t failed_at_step = 0;
  std::uint64_t restored_step = 0;
  /// "none", "local memory", "buddy memory on n0", "disk".
  std::string source;
  /// When the fault was injected through rekindle (0: it came from outside).
  std::int64_t injected_ns = 0;
  std::int64_t detected_ns = 0;
  /// Every rank of the new world registered.
  std::int64_t ready_ns = 0;
  /// start_training was sent.
  std::int64_t started_ns = 0;
  /// The slowest rank's connection to its peers, and its restore, as the ranks measured them.
  std::int64_t connect_ns = 0;
  std::int64_t restore_ns = 0;
  /// Every rank finished a step past the restore step.
  std::int64_t first_step_ns = 0;
  /// The slowest rank's first step after the restore, as the ranks measured it.
  std::int64_t first_step_took_ns = 0;
  bool done = false;

  /// Injection to detection (0 for a failure from outside), detection to every rank registered,
  /// rendezvous, restore, the first step after it, and injection (or detection) to that first
  /// step, in seconds.
  [[nodiscard]] double detect_s() const;
  [[nodiscard]] double respawn_s() const;
  [[nodiscard]] double rendezvous_s() const;
  [[nodiscard]] double restore_s() const;
  [[nodiscard]] double first_step_s() const;
  [[nodiscard]] double total_s() const;
  /// What the phases leave of the total: the messages between them (start_training to the ranks,
  /// their reports back) and the time the slowest ranks of two phases were not the same. The
  /// phases and this add up to total_s(); negative when the slowest ranks' phases overlapped.
  [[nodiscard]] double between_s() const;
  /// Steps done past the restore point when it failed, as far as the supervisor knew (its count of
  /// finished steps can trail the snapshots a restore uses: then none counts as lost).
  [[nodiscard]] std::uint64_t steps_lost() const {  // every step trained again
    return failed_at_step > restored_step ? failed_at_step - restored_step : 0;
  }
  /// "detect 12ms · respawn 1.2s · rendezvous 40ms · restore 3ms (local memory, step 40) · first
  /// step 45ms · between 2ms · total 1.3s · lost 2 step(s)".
  [[nodiscard]] std::string summary() const;
};

/// Event fields ("name", "value") that keep a finished recovery in the state store with the
/// "recovered" event, so that a restarted supervisor (or a standby that takes over) still lists it.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> to_fields(const recovery_record& r);
/// The recovery kept by `to_fields` (its rank and node are the event's own); nullopt when the
/// fields are not one (a field missing, or a number out of range: an event of an older version).
[[nodiscard]] std::optional<recovery_record> from_fields(const std::vector<std::pair<std::string, std::string>>& fields,
                                                         std::optional<rank_id> rank, std::optional<node_id> node);

/// Times the job's recoveries: opened by a failure, through the new epoch's registration,
/// rendezvous and restore, closed by the first step every rank takes past the restore step.
///
///     (none) --failure--> open --every rank ready--> ready --start_training--> started
///                           ^                                                     |
///                           +-- a failure while open folds into it   every rank past the restore step
///                                                                                 v
///                                                                               done
///
/// A failure while a recovery is open folds into it (it is one outage). Plain class: the caller
/// passes the clock's readings. Thread-safety: none; one owner.
class recovery_meter {
 public:
  /// A failure seen at `now_ns` with the job at `step`. Returns false when it folded into the open
  /// recovery.
  bool open(std::string cause, std::optional<rank_id> rank, std::optional<node_id> node, std::uint64_t step,
            std::int64_t injected_ns, std::int64_t now_ns);
  /// The recovery's epoch (the newest one it started).
  void on_epoch(epoch_t epoch);
  /// A rank reported reaching `step` before the recovery started its ranks (survivors train on
  /// until told; after a supervisor restart the ranks report how far they got): what they
  /// trained past the restore step counts as lost.
  void on_reached(std::uint64_t step);
  /// Every rank of the new world registered (the first time counts).
  void on_ready(std::int64_t now_ns);
  /// The ranks were told to start from `restore_step`, reading their state from `source`.
  void on_start(step_t restore_step, std::string source, std::int64_t now_ns);
  /// A rank restored: its rendezvous and restore time; a source other than "none" or local memory
  /// names where the restore read from.
  void on_restored(std::int64_t connect_ns, std::int64_t restore_ns, const std::string& source);
  /// A rank finished `step` in `took_ns`: the first step past the restore step counts (the slowest
  /// rank's).
  void on_step(std::uint64_t step, std::int64_t took_ns);
  /// The slowest rank of the world is at `slowest_step`: past the restore step, the recovery is
  /// done, and it is returned (once).
  const recovery_record* on_progress(std::uint64_t slowest_step, std::int64_t now_ns);

  /// The recoveries a supervisor before this one finished (read back from the event log): they
  /// come first in records(). Only before the first `open`.
  void restore(std::vector<recovery_record> done);

  /// Whether a recovery is open (not done).
  [[nodiscard]] bool recovering() const noexcept { return open_ && !records_[*open_].done; }
  /// Every recovery so far, oldest first.
  [[nodiscard]] const std::vector<recovery_record>& records() const noexcept { return records_; }

 private:
  recovery_record* current();
  std::vector<recovery_record> records_;
  std::optional<std::size_t> open_;
};

}  // namespace rekindle::policy
