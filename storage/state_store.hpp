#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.hpp"
#include "common/expected.hpp"
#include "common/ids.hpp"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace rekindle::storage {

/// What the job is doing. The supervisor's policy decides the transitions; the store records them.
enum class job_state : std::uint8_t {
  /// Accepted, no rank has started yet.
  created = 1,
  /// Every rank of the current epoch trains.
  running = 2,
  /// A failure is being handled: a new epoch, respawns, rendezvous, restore.
  recovering = 3,
  /// Ended on purpose: all steps done, or stopped by an operator.
  stopped = 4,
  /// Ended because recovery gave up (restart limits, no snapshot to restore); `reason` says why.
  failed = 5,
};

/// "created", "running", "recovering", "stopped" or "failed".
[[nodiscard]] std::string_view to_string(job_state s) noexcept;

/// The job the supervisor runs.
struct job_record {
  std::string name;
  /// Where the configuration came from: a file path or "<embedded local.toml>".
  std::string config_source;
  /// xxHash64 of the configuration text, so a restarted supervisor notices a changed file.
  std::uint64_t config_hash = 0;
  job_state state = job_state::created;
  /// Why the job entered `state` (empty when there is nothing to say).
  std::string reason;
  /// When `state` was entered.
  clock::wall_time since{};

  bool operator==(const job_record&) const = default;
};

/// One rank of an epoch's world: where it runs and how peers reach it.
struct rank_member {
  rank_id rank;
  node_id node;
  /// Index of the rank among the ranks of its node (its snapshot slot, its GPU).
  std::uint32_t local_index = 0;
  /// "cpu", "cuda:0", ...
  std::string device;
  /// The rank's data-plane address (opaque bytes from transport/).
  std::vector<std::byte> address;

  bool operator==(const rank_member&) const = default;
};

/// The world of one epoch: rank placement and the spare nodes in use.
struct membership {
  epoch_t epoch;
  /// Sorted by rank; every rank appears once.
  std::vector<rank_member> ranks;
  /// Spare nodes that took over ranks of failed nodes.
  std::vector<node_id> spares_in_use;
  /// The pipeline split of this world: the blocks of each stage (empty: no pipeline). Stored from
  /// record version 2; a version 1 record reads as empty.
  std::vector<std::uint32_t> stages;

  bool operator==(const membership&) const = default;
};

/// What the supervisor counts per rank.
struct rank_record {
  rank_id rank;
  /// Times this rank was restarted.
  std::uint32_t restarts = 0;
  /// Newest step the rank reported a complete in-memory snapshot of.
  std::optional<step_t> snapshot_step;

  bool operator==(const rank_record&) const = default;
};

/// Restart counters after `state_store::record_restart`.
struct restart_counts {
  /// Restarts of the rank, this one included.
  std::uint32_t rank = 0;
  /// Restarts of all ranks together, this one included.
  std::uint64_t total = 0;
};

/// One shard file of a checkpoint.
struct shard_entry {
  rank_id rank;
  /// File name inside the checkpoint directory (no directory part).
  std::string file;
  /// Payload bytes (the file is larger by its header).
  std::uint64_t size = 0;
  /// xxHash64 of the payload.
  std::uint64_t checksum = 0;

  bool operator==(const shard_entry&) const = default;
};

/// A checkpoint: one shard per rank of a step.
struct checkpoint_manifest {
  step_t step;
  std::uint32_t world_size = 0;
  /// Version of the rank-state layout inside the shards (training::state_version).
  std::uint32_t layout_version = 0;
  /// Sorted by rank.
  std::vector<shard_entry> shards;
  /// True once `commit_checkpoint` has made it durable; only committed checkpoints are restored.
  bool committed = false;
  /// When it was committed (zero while pending).
  clock::wall_time commit_time{};

  bool operator==(const checkpoint_manifest&) const = default;
};

/// One entry of the event log: something the supervisor did or saw.
struct event {
  /// Position in the log: 1, 2, 3, ... without gaps. Assigned by `append_event`.
  std::uint64_t seq = 0;
  /// Calendar time. Stamped by `append_event` from the store's clock when left zero.
  clock::wall_time wall{};
  /// Monotonic time, for durations between events of one boot. Stamped like `wall`.
  clock::time_point steady{};
  /// What happened, snake_case: "epoch_bumped", "rank_exited", "checkpoint_committed". Required.
  std::string kind;
  /// The epoch it happened in.
  epoch_t epoch;
  std::optional<rank_id> rank;
  std::optional<node_id> node;
  /// Free-form details in order, e.g. {"signal", "9"}. Keys are non-empty.
  std::vector<std::pair<std::string, std::string>> fields;

  /// The value of the first field named `key`.
  [[nodiscard]] std::optional<std::string_view> field(std::string_view key) const;

  bool operator==(const event&) const = default;
};

/// Everything a restarted supervisor resumes from (see `state_store::load`).
struct store_contents {
  std::optional<job_record> job;
  epoch_t epoch;
  /// The membership of the newest epoch that has one.
  std::optional<membership> latest_membership;
  /// Sorted by rank; only ranks with a restart or a snapshot step.
  std::vector<rank_record> ranks;
  std::uint64_t total_restarts = 0;
  /// Committed and pending, newest step first.
  std::vector<checkpoint_manifest> checkpoints;
  /// The newest durable event's sequence number (0: none).
  std::uint64_t last_event_seq = 0;
};

/// Where a replica of a state store stands (docs/STORAGE.md, "Replication").
struct replica_position {
  /// The identity of the store followed (RocksDB's, one per database directory); empty before
  /// the first copy.
  std::string source;
  /// The next sequence number of the source's write-ahead log to apply.
  std::uint64_t next = 0;
  /// A full copy is under way; `copied` is the last key it holds ("" before the first).
  bool copying = false;
  std::string copied;

  /// The replica holds the whole source as it was at some moment: it may take over.
  [[nodiscard]] bool complete() const noexcept { return !source.empty() && !copying; }
};

/// What a replica at some position lacks, to apply in order (`state_replica::apply`).
struct replication_chunk {
  /// Clear the replica first: a full copy starts.
  bool reset = false;
  /// Write batches in RocksDB's encoding: the source's logged writes, or the puts of a part of a
  /// full copy.
  std::vector<std::string> batches;
  /// Where the replica stands once it has applied them.
  replica_position next;
};

struct state_store_options {
  /// Stamps events and commit times; must outlive the store. Default: nullptr (the machine's clock).
  const clock* clk = nullptr;
  /// Create the database when the directory holds none. Default: true.
  bool create_if_missing = true;
  /// Pending events that make the event writer write a batch at once. Default: 100.
  std::size_t event_batch = 100;
  /// Longest time an appended event waits before its batch is written and synced. Default: 5 ms.
  std::chrono::milliseconds event_delay{5};
  /// Appended events not yet written beyond which `append_event` fails with resource_exhausted.
  /// Default: 100000.
  std::size_t event_max_pending = 100000;
  /// The RocksDB environment (tests: a file system whose syncs are slow); must outlive the store.
  /// Default: nullptr (RocksDB's own).
  rocksdb::Env* env = nullptr;
  /// Failure injection for tests: called before every write with what it writes ("write of key
  /// 'epoch'", "event log: write of events 3..5"); an error it returns is the write's, nothing is
  /// written, as when the disk refuses. Default: none.
  std::function<status(std::string_view what)> refuse_write;
};

/// The supervisor's durable state in one RocksDB database per daemon data directory: the job, the
/// epoch, the membership of each epoch, per-rank counters, checkpoint manifests and an event log.
/// Opening an existing database resumes where the last process stopped. docs/STORAGE.md lists the
/// keys and the encoding of every value (versioned binary records with an xxHash64 each; a value
/// that fails its checks reads as errc::data_loss naming the key, the byte offset and the field).
///
/// Durability: `put_epoch`, `put_job`, `put_membership`, `record_restart`, `commit_checkpoint` and
/// `delete_checkpoint` return after a synced write (the epoch is durable before it is announced).
/// `set_snapshot_step` and `put_checkpoint` write without sync: they survive a process crash, and
/// the next synced write makes them durable on power loss too. Events are written by a background
/// writer in batches (at most `event_batch` events or `event_delay` apart), each written and then
/// the log synced outside the write path (other writes do not wait for that sync; a batch can be
/// read, and replicated, from its write, and is durable from the sync); `flush_events` returns
/// once every event appended before it is durable, `flush_events_readable` once it is written.
/// Durable events are always a prefix of the appended ones: a crash loses only a tail.
///
/// A checkpoint manifest moves through these states:
///
///   (absent) ──1──► pending ──2──► committed
///       ▲              │              │
///       └──────3───────┴──────4───────┘
///
///   1. put_checkpoint: stores the manifest uncommitted (a pending one may be replaced).
///   2. commit_checkpoint: requires one shard per rank 0..world_size-1; synced; stamps commit_time.
///   3. delete_checkpoint of a pending manifest (an abandoned checkpoint).
///   4. delete_checkpoint of a committed manifest (retention); delete the files after this returns.
///
/// put_checkpoint of a committed step fails with failed_precondition: a committed checkpoint never
/// changes.
///
/// Errors of RocksDB keep their meaning (see `from_rocksdb` in rocksdb_status.hpp): data_loss for
/// corruption, io_error / resource_exhausted / unavailable for what a retry may fix. After an
/// io_error or data_loss from a write, close the store and open it again.
///
/// Thread-safety: the supervisor actor is the single writer: calls that change state are made by
/// one thread at a time. `append_event` and `flush_events` may be called from any thread. Reads
/// (`job`, `epoch`, `latest_membership`, `events_after`, ...) may run concurrently with each other and
/// with the writer; each read sees a consistent value per key. `close` (and the destructor) must
/// not race with any other call.
class state_store {
 public:
  /// Opens (or creates) the database in `dir`, checks its format record and reads the epoch and
  /// the last event's sequence number. Errors: not_found (no directory and create_if_missing is
  /// false, or no database in it), unavailable (another process has it open), permission_denied,
  /// data_loss (a corrupt database or format record), io_error, unsupported (a newer format).
  [[nodiscard]] static expected<std::unique_ptr<state_store>> open(const std::filesystem::path& dir,
                                                                   state_store_options options = {});

  state_store(const state_store&) = delete;
  state_store& operator=(const state_store&) = delete;
  /// Closes the store like `close` and ignores its status.
  ~state_store();

  /// Writes the pending events, stops the event writer and closes the database. Idempotent: later
  /// calls return ok. Any other call after `close` fails with failed_precondition.
  [[nodiscard]] status close();

  /// The database directory.
  [[nodiscard]] const std::filesystem::path& path() const noexcept;

  // ---- job ----

  /// Stores the job record (synced).
  [[nodiscard]] status put_job(const job_record& job);
  /// The job record, or nullopt before the first `put_job`.
  [[nodiscard]] expected<std::optional<job_record>> job() const;

  // ---- epoch ----

  /// The newest epoch stored (0 before the first).
  [[nodiscard]] epoch_t epoch() const noexcept;
  /// Stores `e` as the current epoch with a synced write, when it is newer than the stored one (a
  /// compare-and-set: the supervisor's policy chooses epochs, the store makes them durable). Once
  /// this returns ok, no restart can choose `e` again: a restarted supervisor resumes past it.
  /// Errors: failed_precondition (the stored epoch is `e` or newer), the write's error (then
  /// nothing may announce `e`).
  [[nodiscard]] status put_epoch(epoch_t e);

  // ---- membership ----

  /// Stores the world of `m.epoch` (synced). REQUIRES: m.epoch <= epoch() (else
  /// failed_precondition); ranks unique (else invalid_argument). Sorts the ranks.
  [[nodiscard]] status put_membership(membership m);
  /// The world of the newest epoch that has one, or nullopt.
  [[nodiscard]] expected<std::optional<membership>> latest_membership() const;
  /// The oldest epoch of the newest run of stored worlds that number their ranks as the newest
  /// does (the same rank ids): the epochs whose snapshots a restarted supervisor may restore as
  /// the current world's. nullopt when no world is stored.
  [[nodiscard]] expected<std::optional<epoch_t>> world_since() const;

  // ---- per-rank counters ----

  /// Counts a restart of `rank`, in the rank's counter and the total, in one synced write.
  [[nodiscard]] expected<restart_counts> record_restart(rank_id rank);
  /// Records the newest complete snapshot step of `rank` (not synced; see the class comment).
  [[nodiscard]] status set_snapshot_step(rank_id rank, step_t step);
  /// The counters of `rank` (zeros when nothing was recorded).
  [[nodiscard]] expected<rank_record> rank(rank_id rank) const;
  /// The counters of every rank that has any, sorted by rank.
  [[nodiscard]] expected<std::vector<rank_record>> ranks() const;
  /// Restarts of all ranks together.
  [[nodiscard]] expected<std::uint64_t> total_restarts() const;

  // ---- checkpoints ----

  /// Stores `m` as a pending manifest (transition 1; m.committed is ignored). Errors:
  /// failed_precondition (step already committed), invalid_argument (a rank twice or out of
  /// range, an empty or path-like file name).
  [[nodiscard]] status put_checkpoint(checkpoint_manifest m);
  /// Commits the pending manifest of `step` with a synced write (transition 2). Errors: not_found,
  /// failed_precondition (already committed, or shards missing).
  [[nodiscard]] status commit_checkpoint(step_t step);
  /// The manifest of `step`, pending or committed. Errors: not_found.
  [[nodiscard]] expected<checkpoint_manifest> checkpoint(step_t step) const;
  /// Committed manifests, newest step first.
  [[nodiscard]] expected<std::vector<checkpoint_manifest>> committed_checkpoints() const;
  /// All manifests, newest step first.
  [[nodiscard]] expected<std::vector<checkpoint_manifest>> checkpoints() const;
  /// Removes the manifest of `step` (synced; transitions 3 and 4). Errors: not_found.
  [[nodiscard]] status delete_checkpoint(step_t step);

  // ---- event log ----

  /// Queues `e` for the event writer and returns its sequence number. Stamps `wall` and `steady`
  /// when they are zero. The event becomes durable within `event_delay`, or at `flush_events`.
  /// Errors: invalid_argument (empty kind or field key, over 1 MiB encoded), resource_exhausted
  /// (too many pending events), the writer's error after a failed batch write.
  [[nodiscard]] expected<std::uint64_t> append_event(event e);
  /// Returns once every event appended before this call is durable, or the writer's error.
  [[nodiscard]] status flush_events();
  /// Returns once every event appended before this call is written (`events_after` reads it),
  /// durable or not, or the writer's error: for a reader, who need not wait for the log's sync.
  [[nodiscard]] status flush_events_readable();
  /// The sequence number the last `append_event` returned (or the last durable one after open).
  [[nodiscard]] std::uint64_t last_event_seq() const noexcept;
  /// The newest durable event's sequence number.
  [[nodiscard]] std::uint64_t durable_event_seq() const noexcept;
  /// Durable events with first <= seq <= last, in order, at most `limit`.
  [[nodiscard]] expected<std::vector<event>> events(std::uint64_t first, std::uint64_t last,
                                                    std::size_t limit = 10000) const;
  /// Durable events after `seq`, in order, at most `limit`. To follow the log, call it again with
  /// the last sequence number returned.
  [[nodiscard]] expected<std::vector<event>> events_after(std::uint64_t seq, std::size_t limit = 10000) const;

  // ---- replication ----

  /// The store's identity: RocksDB's, one per database directory, never copied.
  [[nodiscard]] std::string identity() const;
  /// What a replica at `from` lacks, about `max_bytes` of it (at least one batch when there is
  /// any). The write-ahead log is kept for an hour (64 MiB at most); a replica of another store,
  /// one the log no longer reaches back to, or one ahead of this store gets a full copy instead,
  /// in parts, and then the writes logged since the copy began. Errors: the reads'.
  [[nodiscard]] expected<replication_chunk> changes_since(const replica_position& from, std::size_t max_bytes) const;

  // ---- everything ----

  /// Reads everything a restarted supervisor resumes from. Errors: the first value that fails to
  /// decode (data_loss naming its key) or a read error.
  [[nodiscard]] expected<store_contents> load() const;

 private:
  struct impl;
  explicit state_store(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> impl_;
};

}  // namespace rekindle::storage
