#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/clock.hpp"
#include "common/ids.hpp"

namespace rekindle::policy {

/// One rank's shard of a checkpoint, as its node wrote it.
struct shard_record {
  rank_id rank;
  /// File name inside the checkpoint directory.
  std::string file;
  std::uint64_t size = 0;
  std::uint64_t checksum = 0;
};

/// What a node says of one shard it was asked to write.
struct shard_result {
  epoch_t epoch;
  step_t step;
  shard_record shard;
  bool ok = false;
  /// Not written because the slot already holds a newer anchor (training outran the request).
  bool superseded = false;
  /// The node that wrote it, by name, and why it failed ("No space left on device").
  std::string node;
  std::string detail;
};

// ---- what the coordinator asks its owner to do ------------------------------------------------

/// Store a pending manifest of `step` (a synced write), then ask every node to persist its ranks'
/// shards of it; report the store's answer with `begun` or `begin_failed`.
struct begin_persist {
  epoch_t epoch;
  step_t step;
  std::uint32_t world = 0;
};
/// Every shard of `step` is durable: store the manifest and the synced commit record (and the
/// manifest file beside the shards); report the answer with `committed` or `commit_failed`.
struct commit_checkpoint {
  step_t step;
  std::uint32_t world = 0;
  std::vector<shard_record> shards;
};
/// Remove the pending manifest of `step` and the shard files written for it.
struct drop_checkpoint {
  step_t step;
  std::uint32_t world = 0;
};
/// Remove one shard file that no checkpoint will name (it was written for one given up on).
struct remove_shard_file {
  std::string file;
};
/// Something worth an event: "persist_failed", "checkpoint_committed".
struct checkpoint_note {
  std::string kind;
  std::string detail;
  /// Fields for the event log ("step", "bytes").
  std::vector<std::pair<std::string, std::string>> fields;
};
using checkpoint_action = std::variant<begin_persist, commit_checkpoint, drop_checkpoint, remove_shard_file, checkpoint_note>;

/// When a checkpoint on disk is written and when it counts: the persist cadence and the commit
/// state machine of the supervisor, without I/O (its owner stores the records and asks the nodes).
///
///           (1) an anchor due (persist_every snapshots after the last checkpoint, or asked for)
///               reported in every rank's own slot
///   idle ───────────────────────────────────────────────────► beginning(S): pending manifest
///    ▲  ▲ ▲ ◄──(2) the pending manifest could not be stored: not begun, event ──┘ │
///    │  │ │                                                       (3) stored, nodes asked
///    │  │ │                                                                      ▼
///    │  │ └──(6) a shard failed, a new epoch began: abandoned, event ──── writing(S, e)
///    │  └────(7) training outran it (superseded), or the job ended: dropped ───┘  │
///    │                                                        (4) every shard durable
///    │                                                                             ▼
///    ├───(5) the commit record is synced: S is the newest checkpoint ──── committing(S)
///    └───(6) the commit record failed: abandoned, event ─────────────────────────┘
///
/// After (2), (5) and (6) the next checkpoint is due `persist_every` snapshots later. Shards of a
/// checkpoint that was given up on are removed as they are reported.
///
/// Thread-safety: none; one owner (the supervisor actor, or the simulator).
class checkpoint_coordinator {
 public:
  /// `persist_every` snapshots between checkpoints (0: none), snapshots every `snapshot_every` steps.
  checkpoint_coordinator(std::uint64_t persist_every, std::uint64_t snapshot_every, const clock& time);

  [[nodiscard]] bool enabled() const noexcept { return persist_every_ > 0; }
  /// Steps from one checkpoint to the next while training keeps up: `persist_every` snapshots,
  /// rounded up to the next anchor, where a checkpoint is taken (0 when none is written).
  [[nodiscard]] static std::uint64_t interval_steps(std::uint64_t persist_every, std::uint64_t snapshot_every);
  /// The newest committed checkpoint.
  [[nodiscard]] std::optional<step_t> last() const noexcept { return last_; }
  /// The checkpoint being written (beginning, writing or committing).
  [[nodiscard]] std::optional<step_t> writing() const noexcept;
  /// The last failure ("" after a success).
  [[nodiscard]] const std::string& error() const noexcept { return error_; }

  /// A checkpoint committed by an earlier run (found at start).
  void committed_before(step_t step);
  /// An operator asked for a checkpoint: the next anchor every rank holds is written, even if it
  /// is not yet due. Returns false when checkpoints are off.
  bool request_now();

  /// A rank of a world of `world` ranks reported its own slot's copy of `step`, written in the
  /// current epoch `epoch`. Returns the step to check when the report makes one due and every rank
  /// has reported it: the owner confirms that every slot still holds it, then calls `begin`.
  [[nodiscard]] std::optional<step_t> on_slot_report(step_t step, epoch_t epoch, std::uint32_t world);
  /// The same for every rank of the world at once.
  [[nodiscard]] std::optional<step_t> on_slot_report_all(step_t step, epoch_t epoch, std::uint32_t world);
  /// (1) Begins the checkpoint of `step` that on_slot_report returned.
  [[nodiscard]] std::vector<checkpoint_action> begin(step_t step, epoch_t epoch, std::uint32_t world);
  /// (2) The pending manifest could not be stored.
  [[nodiscard]] std::vector<checkpoint_action> begin_failed(const std::string& why);
  /// (3) The pending manifest is stored and the nodes asked.
  void begun();
  /// (4) A node's word on one shard.
  [[nodiscard]] std::vector<checkpoint_action> on_shard(const shard_result& r);
  /// (4) The same word on every shard of the checkpoint being written, as one (the simulator's
  /// ranks are alike): every shard durable, or one failed on `node` for `why`. The commit it asks
  /// for names no shards.
  [[nodiscard]] std::vector<checkpoint_action> on_every_shard(bool ok, const std::string& node, const std::string& why);
  /// (5) The commit record is synced. Returns the note for the event.
  [[nodiscard]] std::vector<checkpoint_action> committed();
  /// (6) The commit record could not be stored.
  [[nodiscard]] std::vector<checkpoint_action> commit_failed(const std::string& why);
  /// (6) Epoch `e` began: a checkpoint of an older epoch is given up on (its shards may never all
  /// arrive), and reports counted so far no longer count.
  [[nodiscard]] std::vector<checkpoint_action> on_epoch(epoch_t e);
  /// (7) The job ended: a checkpoint being written is dropped.
  [[nodiscard]] std::vector<checkpoint_action> on_job_end();

 private:
  enum class phase : std::uint8_t { idle, beginning, writing, committing };
  struct in_progress {
    epoch_t epoch;
    step_t step;
    std::uint32_t world = 0;
    std::map<rank_id, shard_record> shards;
    clock::time_point started;
  };
  [[nodiscard]] bool due(step_t step) const;
  std::vector<checkpoint_action> give_up(const std::string& why, bool with_event);
  void next_after(step_t step);

  std::uint64_t persist_every_;
  std::uint64_t snapshot_every_;
  const clock& clock_;
  phase phase_ = phase::idle;
  std::optional<in_progress> current_;
  std::optional<step_t> last_;
  /// The first anchor at or after this step is persisted next.
  std::uint64_t next_step_ = 0;
  bool asked_ = false;
  /// Own-slot reports of anchors that may be persisted, by step (older ones go when one is due).
  std::map<step_t, std::uint32_t> reports_;
  std::string error_;
};

}  // namespace rekindle::policy
