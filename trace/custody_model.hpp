#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/ids.hpp"
#include "policy/snapshot_custody.hpp"

namespace rekindle::trace {

/// The simulator's model of every node's slots and replica window, driven by the custody rule of a
/// live job (policy/snapshot_custody.hpp): the same slot rule, the same replica window, the same
/// pin. Every rank of a node writes the same steps at the same moments, so one slot stands for a
/// node's slots; nodes whose slots and windows hold the same copies share one *cohort*, of which a
/// job has few (the nodes that kept their memory, and those that came new into an epoch: a spare,
/// a repaired node, a node with a new buddy), so a snapshot costs one rule call per cohort rather
/// than one per node or rank. Copies are tagged with rank 0: within a node all ranks are alike.
///
/// Thread-safety: a value; one owner (the simulator).
class custody_model {
 public:
  explicit custody_model(std::uint64_t snapshot_every);

  /// Epoch `e` begins from `restore_step` (`new_world` when its ranks are numbered anew) on the
  /// nodes of `placement` (by node: nonzero when it runs ranks). `memory_kept[n]`: node n's slots
  /// survived since the last epoch; `same_buddy[n]`: its buddy is the one it had, which kept its
  /// memory. A node without them starts with empty slots, an empty window.
  void begin_epoch(epoch_t e, step_t restore_step, bool new_world, std::span<const std::uint8_t> placement,
                   std::span<const std::uint8_t> memory_kept, std::span<const std::uint8_t> same_buddy);
  /// Whether more than one node is up (a commit then needs a buddy's replica besides the slot).
  void set_multi_node(bool multi) noexcept { multi_node_ = multi; }

  /// Whether the slot rule writes the snapshot of `step` on some node (else it is skipped
  /// everywhere, and costs no stall).
  [[nodiscard]] bool would_write(step_t step) const;
  /// Every rank of the placement publishes its snapshot of `step` at `at_ns`; the replica reaches
  /// the buddy at `replica_done_ns`.
  void publish(step_t step, std::int64_t at_ns, std::int64_t replica_done_ns);
  /// Replicas whose copy finished by `now_ns` arrive, except those during which a node of the job
  /// was lost (`lost(from, to)` says whether one was).
  template <class Lost>
  void deliver(std::int64_t now_ns, Lost lost);

  /// The newest step committed by the registry's rule (every rank holds it in its slot and, with
  /// more than one node up, in its buddy's window), which every node pins.
  [[nodiscard]] policy::custody_pin pin() const noexcept { return pin_; }
  /// Whether every node of the placement holds `step` in its slots.
  [[nodiscard]] bool every_slot_holds(step_t step) const;

  /// A cohort's copies, for the reports to the policy: its nodes, and what their slots and windows
  /// hold.
  struct cohort_view {
    std::uint64_t id = 0;
    std::vector<std::uint32_t> nodes;
    std::vector<policy::copy_tag> slot;
    std::vector<policy::copy_tag> window;
  };
  [[nodiscard]] std::vector<cohort_view> cohorts() const;
  /// Changes with every change of what a node holds (and of the cohorts): reports need not look
  /// again while it stays.
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  /// The steps the slots and the windows of the largest cohort hold, oldest first.
  [[nodiscard]] std::vector<step_t> slot_steps() const;
  [[nodiscard]] std::vector<step_t> replica_steps() const;

 private:
  struct cohort {
    std::uint64_t id = 0;
    policy::slot_contents slot;
    policy::replica_window window;
    std::vector<std::uint32_t> nodes;
  };
  struct in_flight {
    policy::copy_tag tag;
    std::int64_t at = 0;
    std::int64_t done = 0;
    /// The cohorts whose nodes sent it.
    std::vector<std::uint64_t> from;
  };
  [[nodiscard]] std::optional<step_t> protect() const;
  void update_pin();
  void merge();
  [[nodiscard]] const cohort* largest() const;

  std::uint64_t every_;
  std::uint64_t version_ = 0;
  epoch_t epoch_;
  /// The first epoch of the current world: copies of older epochs belong to another numbering.
  epoch_t world_since_;
  step_t restore_;
  policy::custody_pin pin_;
  bool multi_node_ = true;
  std::uint64_t next_id_ = 1;
  std::vector<cohort> cohorts_;
  std::vector<in_flight> pending_;
};

template <class Lost>
void custody_model::deliver(std::int64_t now_ns, Lost lost) {
  bool any = false;
  std::erase_if(pending_, [&](const in_flight& r) {
    if (r.done > now_ns)
      return false;
    if (!lost(r.at, r.done))
      for (auto& c : cohorts_)
        if (std::find(r.from.begin(), r.from.end(), c.id) != r.from.end()) {
          (void)c.window.add(r.tag);
          any = true;
        }
    return true;
  });
  if (any) {
    ++version_;
    update_pin();
    merge();
  }
}

}  // namespace rekindle::trace
