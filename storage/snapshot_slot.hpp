#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.hpp"
#include "common/expected.hpp"
#include "common/ids.hpp"
#include "policy/snapshot_custody.hpp"

namespace rekindle::storage {

/// What a writer is about to publish, and what the custody rule needs to place it
/// (policy/snapshot_custody.hpp).
struct snapshot_meta {
  /// The epoch it is written in, the rank that writes it, its step.
  policy::copy_tag tag;
  /// The world size of that epoch.
  std::uint32_t world = 0;
  /// The step the writer's epoch restored (0: from scratch): protected until a newer one is pinned.
  step_t epoch_start;
  /// Steps between snapshots (0: no anchors).
  std::uint64_t snapshot_every = 0;

  /// Epoch 0, rank 0, world 0: a snapshot of `step` with nothing else known about it.
  [[nodiscard]] static snapshot_meta of_step(step_t step) { return {{epoch_t{0}, rank_id{0}, step}, 0, {}, 0}; }
};

/// A published snapshot as a reader found it.
struct snapshot_view {
  step_t step;
  /// The epoch it was written in and the rank and world size that wrote it.
  epoch_t epoch;
  rank_id rank;
  std::uint32_t world = 0;
  /// The snapshot's bytes inside the shared mapping. They stay the snapshot's only while
  /// `snapshot_slot::still_valid(view)` holds: the writer reuses the half two publishes later.
  std::span<const std::byte> data;
  /// snapshot_checksum (common/checksum.hpp) of `data`, as published.
  std::uint64_t checksum = 0;
  /// Which half (0 or 1) holds it.
  std::uint32_t half = 0;
  /// The half's sequence number when it was read (even).
  std::uint64_t sequence = 0;
  /// Publishes into the slot so far, this one included.
  std::uint64_t generation = 0;
};

/// What `begin_write` decided.
struct write_ticket {
  /// The half to fill (capacity() bytes); empty when the custody rule skips this snapshot.
  std::span<std::byte> half;
  /// The rule's decision: the copy the half held (dropped once the new one is published), or why
  /// the snapshot is skipped.
  policy::slot_write plan;
  [[nodiscard]] bool skipped() const noexcept { return !plan.half.has_value(); }
};

/// A published snapshot copied out of the slot.
struct snapshot_info {
  step_t step;
  std::uint64_t length = 0;
  std::uint64_t checksum = 0;
  std::uint64_t generation = 0;
};

/// A double-buffered snapshot of one rank's state in POSIX shared memory.
///
/// The node daemon creates (sizes, pre-faults) and removes one slot per local rank; the rank's
/// worker process opens it and publishes a snapshot after the optimizer step; a reader (the daemon
/// persisting or replicating it, or a restarted worker restoring from it) takes the newest
/// complete one. The slot outlives the worker, so a crashed rank restarts from memory.
///
/// Layout (little-endian; docs/STORAGE.md, "Snapshot slots"):
///
///   bytes [0, 4096)                          header: magic "RKSLOT\0\0", version, capacity,
///                                            generation, active half, writer claim, the pin
///                                            (the newest committed step), and one 128-byte
///                                            descriptor per half (sequence, step, epoch, rank,
///                                            world, length, checksum, state)
///   bytes [4096, 4096 + capacity)            half 0
///   bytes [4096 + capacity, 4096 + 2·cap)    half 1
///
/// Custody. Which half a snapshot overwrites, or whether it is skipped, is the custody rule's
/// (policy::plan_slot_write), from the copies the halves hold, the pin and the writer's epoch and
/// restore step: the slot never loses the protected step, whoever writes it. The node's checkpoint
/// actor writes the pin (`pin`) when the supervisor announces a commit; the writer only writes.
///
/// Publish protocol. The active half holds the newest published snapshot:
///   1. begin_write: the custody rule picks half h (or skips). When h is the active half, the other
///      one (published) is stored as the active half first (release), so readers always find a
///      complete snapshot. Make h's sequence odd (+1, or +2 when it is odd already because an
///      earlier writer died there) and mark it "writing". Release fence.
///   2. Copy the state into half h (one memcpy; `write` hashes each chunk while it is in cache).
///   3. publish: store step, epoch, rank, world, length, checksum and "published" in h's descriptor.
///   4. Store h's sequence + 1 (even) with release semantics: the half is stable again.
///   5. Store h as the active half, then the generation + 1, with release semantics.
/// A writer killed anywhere before 5 leaves the active half untouched; one killed after 5 has
/// published completely.
///
/// Read protocol (`latest`, `copy_latest`):
///   1. Load the active half a (acquire); none yet: not_found.
///   2. Load a's sequence s1 (acquire); odd means the writer has begun to overwrite a: start over.
///   3. Read a's descriptor and its bytes (verify the checksum, or copy them out).
///   4. Acquire fence; load a's sequence s2. s1 != s2: the writer overwrote a meanwhile, start
///      over (at most 1000 times, then unavailable).
///   5. A checksum mismatch with s1 == s2 is corruption: data_loss.
/// So a reader gets either the previous complete snapshot or the new one, never a mix.
///
/// Thread-safety: one writer at a time per slot, across processes: the first `begin_write` or
/// `write` of a handle claims the slot (its process id and a per-handle nonce) and fails with
/// unavailable while another handle of a live process holds it; the claim of a process that no
/// longer exists is taken over (a killed writer must have been reaped, as a zombie still counts as
/// alive). The destructor releases the claim. Readers, and one pinning process (the node's
/// checkpoint actor), may run concurrently with the writer and each other, in any process. One
/// handle must not be used by two threads at once.
class snapshot_slot {
 public:
  /// Bytes of the header page before half 0.
  static constexpr std::size_t header_bytes = 4096;

  /// The slot name of local rank `local_rank` of `job` for the daemon whose data directory is
  /// `data_dir`: name_prefix(data_dir, job) + the rank. Distinct data directories give distinct
  /// names, so parallel daemons (and tests) never share a slot.
  [[nodiscard]] static std::string name_for(const std::filesystem::path& data_dir, std::string_view job,
                                            std::uint32_t local_rank);
  /// "/rekindle-<job, up to 32 of [A-Za-z0-9_.-]>-<16 hex digits of a hash of the absolute
  /// data_dir and the job>-r".
  [[nodiscard]] static std::string name_prefix(const std::filesystem::path& data_dir, std::string_view job);

  /// Creates the shared-memory object `name` with room for snapshots of `capacity` bytes (rounded
  /// up to whole pages), reserves its memory (so a full /dev/shm fails here, not with SIGBUS later)
  /// and maps it with every page faulted in. Errors: already_exists (remove stale slots first),
  /// invalid_argument (a bad name, capacity 0), resource_exhausted (no memory), permission_denied.
  [[nodiscard]] static expected<snapshot_slot> create(const std::string& name, std::uint64_t capacity);
  /// Maps an existing slot, every page faulted in, after checking its header. Errors: not_found,
  /// data_loss (not a slot, or a header that contradicts the object's size; names the field and
  /// byte offset), permission_denied.
  [[nodiscard]] static expected<snapshot_slot> open(const std::string& name);
  /// Reads one byte of every page through this mapping.
  /// MAP_POPULATE fills the page tables, but on some virtual machines the first access to each
  /// page through a new mapping still costs microseconds (6.5 us a page on the VM of
  /// docs/PERFORMANCE.md: 120 ms per 98 MB), which the first snapshot into each half, or a restore,
  /// would otherwise pay. A worker calls it before it trains (a standby does not: see
  /// rank_session::map_slots_ahead).
  void touch_pages() const noexcept;
  /// Removes the slot `name`; mappings stay valid until unmapped. Ok when it does not exist.
  [[nodiscard]] static status remove(const std::string& name);
  /// Removes every slot whose name starts with `prefix` (a previous daemon's leftovers, found in
  /// /dev/shm). Returns the removed names.
  [[nodiscard]] static expected<std::vector<std::string>> remove_with_prefix(std::string_view prefix);

  snapshot_slot(snapshot_slot&& other) noexcept;
  snapshot_slot& operator=(snapshot_slot&& other) noexcept;
  snapshot_slot(const snapshot_slot&) = delete;
  snapshot_slot& operator=(const snapshot_slot&) = delete;
  /// Releases the writer claim and unmaps. Never removes the object.
  ~snapshot_slot();

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Largest snapshot in bytes.
  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }
  /// Publishes so far.
  [[nodiscard]] std::uint64_t generation() const noexcept;

  // ---- custody ----

  /// Stores the newest committed step (a seqlock: a writer in another process reads it whole).
  void pin(policy::custody_pin p) noexcept;
  [[nodiscard]] policy::custody_pin pinned() const noexcept;

  // ---- writer ----

  /// Step 1 of the publish protocol: where the snapshot `meta` describes goes, by the custody rule.
  /// Fill the ticket's half (e.g. by exporting the state straight into it), then `publish`; a
  /// skipped snapshot needs neither. Errors: unavailable (another live writer).
  [[nodiscard]] expected<write_ticket> begin_write(const snapshot_meta& meta);
  /// Steps 3–5: publishes the first `length` bytes of the half `begin_write` returned, as the
  /// snapshot it described. Computes the checksum when none is given. Errors: failed_precondition
  /// (no begin_write, or it skipped), resource_exhausted (length > capacity()).
  [[nodiscard]] status publish(std::uint64_t length, std::optional<std::uint64_t> checksum = {});
  /// The whole protocol for a state in a buffer: one pass copies and hashes. Returns the custody
  /// rule's decision (a skipped snapshot writes nothing). Errors: resource_exhausted (the state is
  /// larger than the slot), unavailable (another live writer).
  [[nodiscard]] expected<policy::slot_write> write(const snapshot_meta& meta, std::span<const std::byte> state);

  // ---- reader ----

  /// The newest published snapshot, its checksum verified when `verify` (steps 1–5 of the read
  /// protocol). Errors: not_found (nothing published yet), unavailable (the writer kept
  /// overwriting it), data_loss (checksum mismatch, or a descriptor out of range).
  [[nodiscard]] expected<snapshot_view> latest(bool verify = true) const;
  /// The published snapshot of `step` in either half (the newest, or the one before it), checked
  /// like `latest`. Errors: not_found (naming the steps the slot holds), data_loss, unavailable.
  [[nodiscard]] expected<snapshot_view> at_step(step_t step, bool verify = true) const;
  /// Steps of the published snapshots in the two halves, oldest first (unverified).
  [[nodiscard]] std::vector<step_t> steps() const;
  /// The copies the two halves hold, by half (none: empty, or not published); unverified.
  [[nodiscard]] std::array<std::optional<policy::copy_tag>, 2> halves() const;
  /// True while the bytes of `view` are still the snapshot it describes. Check after using them.
  [[nodiscard]] bool still_valid(const snapshot_view& view) const noexcept;
  /// Copies the newest published snapshot into `out` and verifies the copy. Errors: as `latest`,
  /// and resource_exhausted when `out` is smaller than the snapshot.
  [[nodiscard]] expected<snapshot_info> copy_latest(std::span<std::byte> out) const;

 private:
  snapshot_slot(std::string name, std::byte* base, std::size_t size, std::uint64_t capacity) noexcept;
  void release() noexcept;
  [[nodiscard]] status claim_writer();
  /// Steps 2–5 of the read protocol for half `h`.
  [[nodiscard]] expected<snapshot_view> read_half(std::uint32_t h, bool verify) const;
  [[nodiscard]] std::byte* half_data(std::uint32_t h) const noexcept;

  std::string name_;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t capacity_ = 0;
  bool writer_ = false;
  std::uint64_t claim_ = 0;  // the value this handle stored in the header's writer claim
  std::optional<std::uint32_t> writing_;  // the half begin_write handed out
  snapshot_meta pending_;                 // what begin_write was told it is
};

}  // namespace rekindle::storage
