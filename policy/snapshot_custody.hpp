#pragma once

// Snapshot custody: which snapshots of a rank's state a node keeps, in the rank's slot and as a
// buddy's replicas, which step is pinned, and what is reported as dropped. One rule, applied by
// the slot itself (storage/snapshot_slot.hpp: `begin_write`), by the checkpoint actor (its
// replicas) and by the simulator (trace/custody_model.hpp), so the three never disagree.
//
// Vocabulary. Every `snapshot_every` steps each rank publishes a snapshot into its slot (two
// halves). Every `snapshots_per_anchor`-th snapshot step is an *anchor*: the rule depends on the
// step alone, so every rank keeps the same steps however late a message arrives. A step is
// *committed* once every rank of the world holds it on enough live nodes (the supervisor decides,
// policy/snapshot_registry.hpp); the node's checkpoint actor writes the newest committed step into
// each of its slots as the *pin*. A writer's epoch starts from its *restore step* (0: from
// scratch). The *protected step* of a writer in epoch e is the newest of its restore step and a
// step pinned in epoch e or later: a node lost now restores from there at worst, so no slot
// overwrites it.
//
// The states of a slot as its writer sees them (P: the protected step; A: the newest anchor
// written in this epoch, when newer than P; x: any other copy, or an empty half), and where the
// snapshot s goes:
//
//               (1) s between anchors: x goes
//          ┌──────────────────────────────────┐
//          ▼                                  │
//       {P, x} ──(2) s an anchor: x goes──► {P, A} ──(3) s between anchors: skipped ──┐
//          ▲                                 │  ▲  └───────────────────────────────────┘
//          │                                 │  └──(4) s an anchor: A goes, s is the new A
//          └──(5) A is pinned: it becomes P──┘
//
//   Without P in the slot (a fresh job, or a state restored from another node):
//       {A, x} ──(1), (2): x goes; an anchor becomes the new A──► {A, s}
//       {x, y} ──(1), (2): an empty half, else the older copy goes──► {y, s}
//
// A buddy keeps `replicas_kept_per_rank` replicas of each rank: the oldest make room, except the
// pinned step and the two newest anchors (the owner's slot keeps the newest; the one before it
// covers a node lost while the newest was still on its way), which may hold it above that. The
// replicas of a rank that is no longer its to guard (none as new as the pinned step) go when the
// pin moves past them.
//
// Thread-safety: plain functions and values.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/ids.hpp"

namespace rekindle::policy {

/// Snapshots per anchor.
inline constexpr std::uint64_t snapshots_per_anchor = 4;
/// Replicas a buddy keeps of each rank (more while the pinned step and the two newest anchors are
/// among the oldest: they are never evicted).
inline constexpr std::size_t replicas_kept_per_rank = 4;
/// Reported copies the supervisor remembers per rank besides the committed step. Copies leave the
/// record when their holder reports them dropped; the window only bounds a lost notice, and is
/// wide because one node's reports may trail another's by several snapshots on a busy machine.
inline constexpr std::size_t reported_steps_kept_per_rank = 16;

/// Whether `step` is an anchor when snapshots are taken every `snapshot_every` steps.
[[nodiscard]] constexpr bool is_anchor(step_t step, std::uint64_t snapshot_every) noexcept {
  return snapshot_every > 0 && step.value() % (snapshot_every * snapshots_per_anchor) == 0;
}

/// One copy of one rank's state: the epoch it was written in (which names the world it belongs
/// to), the rank in that world, the step.
struct copy_tag {
  epoch_t epoch;
  rank_id rank;
  step_t step;
  auto operator<=>(const copy_tag&) const = default;
};
std::string to_string(const copy_tag& c);

/// The newest committed step, and the epoch whose supervisor announced it (0, 0: none yet).
struct custody_pin {
  epoch_t epoch;
  step_t step;
  bool operator==(const custody_pin&) const = default;
};

/// The step a writer in `epoch` that restored `restore_step` must not overwrite: `pin.step` when it
/// was pinned in that epoch or later and is newer than the restore step, else the restore step;
/// none for a writer that started from scratch before any commit.
[[nodiscard]] std::optional<step_t> protected_step(custody_pin pin, epoch_t epoch, step_t restore_step) noexcept;

/// What a slot does with the next snapshot.
struct slot_write {
  /// The half to overwrite; none: the snapshot is skipped.
  std::optional<std::uint32_t> half;
  /// The published copy that half held, reported as dropped once the new one is published.
  std::optional<copy_tag> overwrites;
  /// For a skipped snapshot: the protected step and the anchor that waits for its commit.
  step_t pinned;
  step_t waiting;
};

/// The slot rule: where the snapshot of `what` goes, given the published copies of the two halves
/// (none: empty, or not published), the writer's protected step and the snapshot interval (see the
/// diagram above). REQUIRES: snapshot_every > 0.
[[nodiscard]] slot_write plan_slot_write(const std::array<std::optional<copy_tag>, 2>& halves,
                                         std::optional<step_t> protect, const copy_tag& what,
                                         std::uint64_t snapshot_every) noexcept;

/// A slot's two halves as values, for the simulator and tests: the same rule as a real slot, no
/// memory. Thread-safety: a value.
class slot_contents {
 public:
  /// Applies plan_slot_write; returns the plan (the half written, or none when skipped).
  slot_write write(const copy_tag& what, std::optional<step_t> protect, std::uint64_t snapshot_every);
  [[nodiscard]] const std::array<std::optional<copy_tag>, 2>& halves() const noexcept { return halves_; }
  /// The steps held, oldest first.
  [[nodiscard]] std::vector<step_t> steps() const;
  /// Empties both halves (the node's memory is gone).
  void clear() noexcept { halves_ = {}; }

 private:
  std::array<std::optional<copy_tag>, 2> halves_;
};

/// Whether a buddy holding `replicas` of one rank, none as new as the pinned step, no longer guards
/// that rank: they go (replica_window::pin). False without a pin.
[[nodiscard]] bool outdated_by(std::span<const copy_tag> replicas, custody_pin pin) noexcept;

/// The replicas one buddy keeps of its peers' ranks: the window of the diagram above. Holds tags
/// only; the checkpoint actor keeps the bytes next to them. Thread-safety: a value.
class replica_window {
 public:
  explicit replica_window(std::uint64_t snapshot_every) : every_(snapshot_every) {}

  /// Takes `c` (replacing a copy of the same rank, step and epoch) and returns the replicas it
  /// evicts, oldest first.
  std::vector<copy_tag> add(const copy_tag& c);
  /// The step the checkpoint actor was told is committed: kept while newer replicas arrive.
  /// Returns the replicas that go with it: those of every rank none of whose replicas here is as
  /// new as the pinned step. This node is no longer that rank's buddy (its buddy changed, or the
  /// rank moved to another node), since the step was committed with a replica on the rank's
  /// buddy; no newer replica of it comes to evict them, and a restore reads the committed step
  /// or a newer one elsewhere (they were a fallback only should every copy of that step be lost).
  std::vector<copy_tag> pin(custody_pin p);
  [[nodiscard]] custody_pin pinned() const noexcept { return pin_; }
  /// The replicas of `rank`, oldest first.
  [[nodiscard]] std::vector<copy_tag> of(rank_id rank) const;
  /// Every replica held, by rank, oldest first.
  [[nodiscard]] std::vector<copy_tag> all() const;
  /// Forgets every replica (the node's memory is gone).
  void clear() noexcept { held_.clear(); }

 private:
  std::uint64_t every_;
  custody_pin pin_;
  std::vector<copy_tag> held_;  // arrival order
};

}  // namespace rekindle::policy
