#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include "common/ids.hpp"

namespace rekindle::policy {

/// Where one rank of an epoch runs.
struct rank_slot {
  rank_id rank;
  node_id node;
  /// Index among the node's ranks: selects its device and snapshot slot.
  std::uint32_t local_index = 0;
  bool operator==(const rank_slot&) const = default;
};

/// Where the state of one rank of the previous world can be read at the restore step.
struct state_source {
  /// The rank in the world that wrote it.
  rank_id old_rank;
  /// The node that holds it in memory (its own node's slot, or a buddy's replica).
  node_id holder;
  copy_kind where = copy_kind::local_slot;
  bool operator==(const state_source&) const = default;
};

/// A copy of one rank's state that a node holds: its own rank's slot, a buddy's replica, or a
/// checkpoint on disk.
struct snapshot_report {
  /// The epoch in which the rank wrote it (names the world it belongs to).
  epoch_t epoch;
  rank_id rank;
  step_t step;
  node_id holder;
  copy_kind where = copy_kind::local_slot;
};

/// One change of a bulk report of copies: a copy of step `step`, written in epoch `epoch`, held
/// now (`held`) or no longer.
struct copy_change {
  epoch_t epoch;
  step_t step;
  copy_kind where = copy_kind::local_slot;
  bool held = true;
  bool operator==(const copy_change&) const = default;
};

/// The changes a bulk report makes to the copies of the ranks of some nodes: `sets[set_of_node[n]]`
/// for node n (none when set_of_node[n] is past `sets`), in the order they apply. A slot's copy
/// lies on the node itself, a replica on `replica_holder_of_node[n]` (a node id past the nodes:
/// none, and those changes record nothing).
struct copy_changes {
  std::span<const std::vector<copy_change>> sets;
  std::span<const std::uint32_t> set_of_node;
  std::span<const node_id> replica_holder_of_node;
};

/// Where a restore reads every rank's state: a step of one world, and each rank's source.
struct restore_choice {
  /// The world generation it belongs to (0: a checkpoint on disk).
  std::uint32_t gen = 0;
  step_t step;
  std::uint32_t world = 0;
  std::vector<state_source> sources;
};

/// The supervisor's record of the copies of rank states, and the decisions made from it: which
/// step is committed, whether a step can be persisted, where a restore reads from.
///
/// Copies are kept by world generation (a new one begins whenever the ranks are numbered anew: a
/// node lost without a spare, a scale, a drain), rank and step, with the nodes holding them and
/// how. A copy enters when its holder reports it (`on_held`) and leaves when its holder reports it
/// dropped (by the custody rule, policy/snapshot_custody.hpp) or is lost; besides, each rank keeps
/// at most `reported_steps_kept_per_rank` steps, never the committed one.
///
///   reported ──(1) held on its own node's slot and a buddy's replica, for every rank──► committed
///   any ──(2) its holder drops it, or is lost──► gone (a restore no longer counts on it)
///
/// Thread-safety: none; one owner (supervisor_policy).
class snapshot_registry {
 public:
  explicit snapshot_registry(std::size_t nodes) : up_(nodes, false) {}

  // ---- the world and the nodes ----

  /// Epoch `e` begins with a world of `world` ranks; `renumbered` when the ranks are numbered anew
  /// (the first world, a resize): a new world generation, whose copies are kept apart. Copies
  /// reported with an epoch the registry was not told of record nothing.
  void begin_epoch(epoch_t e, std::uint32_t world, bool renumbered);
  /// A new world generation of `world` ranks whose epochs are `first` to `last`: after a restart
  /// of the supervisor, the epochs of the reloaded world (storage's world_since) whose copies the
  /// nodes report again. At most `max_adopted_epochs` of them, the newest.
  void begin_world(epoch_t first, epoch_t last, std::uint32_t world);
  static constexpr std::uint64_t max_adopted_epochs = 1u << 16;
  /// Whether epoch `e` belongs to the current world generation (the ranks numbered as now).
  [[nodiscard]] bool current_world(epoch_t e) const {
    const auto it = gen_of_epoch_.find(e);
    return it != gen_of_epoch_.end() && it->second == gen_;
  }
  void set_up(node_id n, bool up);
  /// A lost node's copies are gone.
  void forget_node(node_id n);
  [[nodiscard]] bool up(node_id n) const noexcept { return n.value() < up_.size() && up_[n.value()]; }

  // ---- copies ----

  /// A node holds a copy. Returns true when this commits a newer step of the current world: every
  /// rank holds it on enough live nodes (two when two or more nodes are up, else one).
  bool on_held(const snapshot_report& r);
  /// Every change of `c` to the ranks of `placement`, of the current world's epochs (others
  /// record nothing), in one pass: exactly on_dropped and on_held for each change in turn and
  /// each rank of a node whose set names it (in placement order), when every set lists its changes
  /// dropped before held, each part in one order common to all sets. Returns true when it commits
  /// a newer step.
  bool on_changed_all(const copy_changes& c, std::span<const rank_slot> placement);
  /// Node `holder` no longer holds `copies` (each a step of its epoch, as its `where`; `held` is
  /// not read) of any rank of `ranks`: exactly on_dropped for each rank and copy, in one pass per
  /// world generation, each record and role of the holder worked out once.
  void on_dropped_ranks(std::span<const rank_id> ranks, std::span<const copy_change> copies, node_id holder);
  /// A node no longer holds a copy it reported.
  void on_dropped(const snapshot_report& r);
  /// The copy a restore of the current epoch named could not be read: forgotten.
  void forget_restore_copy(rank_id old_rank, step_t step, node_id holder, copy_kind where);
  /// The newest committed step of the current world, if any.
  [[nodiscard]] std::optional<step_t> committed() const;
  /// Whether every rank of the current world holds `step` in its own slot on a live node: what
  /// persisting that step needs.
  [[nodiscard]] bool held_in_every_slot(step_t step) const;
  /// The steps the record holds for `r` in the current world, oldest first (for tests).
  [[nodiscard]] std::vector<step_t> steps_of(rank_id r) const;
  /// The number of records some rank has (for tests: ranks whose copies lie alike share one).
  [[nodiscard]] std::size_t records() const noexcept { return pool_.live(); }

  // ---- checkpoints on disk ----

  /// A checkpoint of `step` for a world of `world` ranks is committed on disk: a restore may use
  /// it when no newer step survives in memory.
  void on_checkpoint_committed(step_t step, std::uint32_t world);
  /// The checkpoint of `step` is gone (retention) or unreadable: restores no longer count on it.
  void forget_checkpoint(step_t step) { checkpoints_.erase(step); }
  /// Committed checkpoints a restore may use, step → world size.
  [[nodiscard]] const std::map<step_t, std::uint32_t>& checkpoints() const noexcept { return checkpoints_; }

  // ---- restores ----

  /// The newest step whose state every rank of one world can still read from a live node (its
  /// own slot, then a replica), or the newest committed checkpoint on disk when that is newer.
  /// `memory` false: only the newest committed checkpoint (the restart-all policy).
  [[nodiscard]] std::optional<restore_choice> choose_restore(bool memory = true) const;
  /// The current epoch restores from `c`: a copy of it that fails is looked up there.
  void restoring_from(const restore_choice& c) noexcept { restore_gen_ = c.gen; }
  /// Why no restore point exists, for the event: the steps the ranks still hold.
  [[nodiscard]] std::string missing_copies() const;
  /// Forgets the copies recorded for world generations a restore is unlikely to need: those
  /// older than both the generation a restore would use now (the newest with a step that every
  /// rank can read from a live node) and the newest older generation that is complete too, kept
  /// as the fallback should the first lose its step. Returns how many generations it forgot.
  /// Without it the record grows by one generation per change of the world (at 16,384 ranks
  /// megabytes each) and every node loss walks all of them.
  std::size_t prune();

 private:
  /// A node holding a copy, and how.
  struct holder {
    node_id node;
    copy_kind where = copy_kind::local_slot;
    auto operator<=>(const holder&) const = default;
  };
  /// The holders of one copy, sorted, each once: a few (its own node's slot and a buddy's replica,
  /// rarely more), kept inline; a longer list moves to the heap. A snapshot of 16,384 ranks records
  /// 16,384 of them at once, and a heap list each was a third of a simulated replay.
  class holder_list {
   public:
    holder_list() = default;
    explicit holder_list(holder h) : n_(1) { inline_[0] = h; }
    [[nodiscard]] const holder* begin() const noexcept { return data(); }
    [[nodiscard]] const holder* end() const noexcept { return data() + n_; }
    [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
    [[nodiscard]] std::size_t size() const noexcept { return n_; }
    [[nodiscard]] bool contains(holder h) const noexcept { return std::find(begin(), end(), h) != end(); }
    /// Adds `h` in order unless it is there.
    void insert(holder h);
    /// Removes the holders `pred` holds for.
    template <class Pred>
    void erase_if(Pred pred) {
      holder* d = data();
      std::size_t k = 0;
      for (std::size_t i = 0; i < n_; ++i)
        if (!pred(d[i]))
          d[k++] = d[i];
      resize(k);
    }
    void erase(holder h) {
      erase_if([&](const holder& x) { return x == h; });
    }
    /// Just `h`.
    void assign(holder h) {
      spill_.clear();
      n_ = 1;
      inline_[0] = h;
    }

   private:
    static constexpr std::size_t inline_capacity = 3;
    [[nodiscard]] holder* data() noexcept { return n_ > inline_capacity ? spill_.data() : inline_.data(); }
    [[nodiscard]] const holder* data() const noexcept { return n_ > inline_capacity ? spill_.data() : inline_.data(); }
    void resize(std::size_t k);
    std::array<holder, inline_capacity> inline_{};
    std::uint32_t n_ = 0;
    /// All the holders once there are more than inline_capacity.
    std::vector<holder> spill_;
  };
  /// One step of one rank: who holds it.
  struct step_copies {
    step_t step;
    holder_list holders;
  };
  /// A rank's steps, oldest first (a few: the window bounds them).
  using rank_copies = std::vector<step_copies>;

  /// The copies of a rank are kept in a record that every rank with the same copies shares: the
  /// ranks of one node report the same steps to the same holders, so a world of 65,536 ranks on
  /// 8,192 nodes has about 8,192 distinct records, and a change that reaches them all (a node
  /// lost, a step held everywhere) costs one update per record and one id per rank. A record
  /// shared by several ranks is copied before a change that reaches only some of them.
  using record_id = std::uint32_t;
  /// The record of a rank without copies; never changed, not counted.
  static constexpr record_id no_copies = 0;
  class record_pool {
   public:
    record_pool() : records_(1), refs_(1, 0), deferred_mark_(1, 0) {}
    [[nodiscard]] const rank_copies& operator[](record_id id) const noexcept { return records_[id]; }
    [[nodiscard]] rank_copies& operator[](record_id id) noexcept { return records_[id]; }
    /// A new record holding a copy of `from`'s steps, with no rank counted yet.
    record_id copy_of(record_id from);
    void ref(record_id id, std::uint32_t n = 1) noexcept {
      if (id != no_copies)
        refs_[id] += n;
    }
    /// One rank fewer has `id`; the last one frees it (unless `deferred`: then once
    /// release_deferred() runs, so that an id freed in a bulk pass is not reused within it).
    void unref(record_id id, std::uint32_t n = 1, bool deferred = false);
    void release_deferred();
    /// Frees `id`, which no rank has (a record made and found empty).
    void discard(record_id id) {
      if (id != no_copies && refs_[id] == 0)
        release(id);
    }
    [[nodiscard]] std::uint32_t refs(record_id id) const noexcept { return refs_[id]; }
    [[nodiscard]] std::size_t live() const noexcept {
      return static_cast<std::size_t>(std::count_if(refs_.begin() + 1, refs_.end(), [](std::uint32_t n) { return n > 0; }));
    }
    /// f(rank_copies&) for every record some rank has.
    template <class F>
    void for_each_live(F&& f) {
      for (std::size_t id = 1; id < records_.size(); ++id)
        if (refs_[id] > 0)
          f(records_[id]);
    }

   private:
    void release(record_id id);
    std::vector<rank_copies> records_;
    std::vector<std::uint32_t> refs_;
    std::vector<record_id> free_;
    /// Ids whose last rank left them in a pass, each once (marked), freed after it.
    std::vector<record_id> deferred_;
    std::vector<std::uint8_t> deferred_mark_;
  };
  /// A holder in a record is a node id, or one of a rank's two home nodes: ranks of different
  /// nodes whose copies lie alike (each on its own node's slot and its node's buddy) share a
  /// record that names their homes, and each rank reads its own.
  static constexpr std::uint32_t home_marker = 0xFFFFFFF0u;
  using homes = std::array<node_id, 2>;
  static constexpr homes no_homes{node_id{~std::uint32_t{0}}, node_id{~std::uint32_t{0}}};
  struct world_copies {
    std::uint32_t world = 0;
    /// Each rank's record, by rank id (0 .. world - 1; shorter until every rank reported).
    std::vector<record_id> ranks;
    /// Each rank's home nodes: the first two nodes that held a copy of it, for good.
    std::vector<homes> home;
  };
  /// Rank r has a record (no copies) and homes (none yet).
  static void ensure_rank(world_copies& w, std::uint32_t r);
  /// `h` as rank r's record names it: a home of r as its marker, another node by its id. With
  /// `assign`, a node becomes a home of r while r has fewer than two, or in place of a home that
  /// no copy of r's record names any more (its node was lost, or a buddy that r no longer has and
  /// whose replicas left the record): a rank whose buddy changed shares a record again with the
  /// ranks whose copies lie alike, instead of a record of its own for the rest of the world.
  [[nodiscard]] holder encode(world_copies& w, std::uint32_t r, holder h, bool assign);
  /// Node `n` becomes home `k` of rank r (a home no copy of r names); copies r's record names by
  /// n's id are named by the marker instead (in a copy of the record, the old one freed after the
  /// pass at the earliest).
  void rehome(world_copies& w, std::uint32_t r, std::uint32_t k, node_id n);
  /// Whether some step of `steps` names holder node `n` (a node id, or a home's marker).
  [[nodiscard]] static bool names(const rank_copies& steps, node_id n) noexcept;
  /// Records made by one bulk pass, by content: a record made equal to one made before in the
  /// same pass is dropped for it, so ranks whose copies came to lie alike again (an old buddy's
  /// replicas gone, a spare's first steps aged out) share one record again and later passes work
  /// on it once. Without it records only ever split, and a world that lives through hundreds of
  /// recoveries ends with a record per node, each changed at every report.
  class made_in_pass {
   public:
    /// `id` (just made, no rank has it yet), or an equal record made before in this pass, in
    /// which case `id` is freed.
    record_id shared(record_pool& pool, record_id id);

   private:
    std::unordered_multimap<std::uint64_t, record_id> made_;
  };
  [[nodiscard]] static std::uint64_t content_hash(const rank_copies& steps) noexcept;
  [[nodiscard]] static bool same_copies(const rank_copies& a, const rank_copies& b) noexcept;
  /// The node a holder of rank r's record names.
  [[nodiscard]] static node_id resolve(const homes& hs, node_id n) noexcept {
    return n.value() >= home_marker && n.value() - home_marker < hs.size() ? hs[n.value() - home_marker] : n;
  }
  /// Whether some holder of `c`, read with homes `hs`, is up.
  [[nodiscard]] bool live(const homes& hs, const step_copies& c) const;

  /// Records one copy among a rank's steps, keeping the rank's window.
  void record(rank_copies& steps, std::uint32_t gen, step_t s, holder h);
  /// Commits `s` when every rank of the current world holds it on enough live nodes.
  bool maybe_commit(std::uint32_t gen, step_t s);
  void forget_copy(std::uint32_t gen, rank_id r, step_t step, holder h);
  static void forget_copy(rank_copies& steps, step_t step, holder h);
  /// Rank r's record, made its own (copied when other ranks share it, made when it has none).
  rank_copies& own_record(world_copies& w, std::uint32_t r);
  /// A new record: `from`'s steps changed by `apply(rank_copies&)`; no_copies when none are left.
  template <class Apply>
  record_id changed_copy(record_id from, Apply apply);
  /// `ranks` ranks (a run of a pass over many) took record `to` instead of `from`: counts them,
  /// and frees `from` after the pass when no rank has it. Sets `ranks` to 0.
  void move_ranks(record_id from, record_id to, std::uint32_t& ranks);
  /// Removes the holders `gone` names from every step, and the steps left without one.
  template <class Gone>
  static void erase_holders(rank_copies& steps, Gone gone);
  /// The entry of `s` among `steps`, or null.
  [[nodiscard]] static const step_copies* find(const rank_copies& steps, step_t s);
  [[nodiscard]] const rank_copies* rank_of(const world_copies& w, std::uint32_t r) const {
    return r < w.ranks.size() ? &pool_[w.ranks[r]] : nullptr;
  }
  [[nodiscard]] std::optional<restore_choice> choose_from_memory() const;
  [[nodiscard]] std::optional<step_t> complete_step(const world_copies& w) const;
  [[nodiscard]] bool held_everywhere(const world_copies& w, step_t s, std::size_t copies) const;
  /// Drops world generation `it` and its ranks' hold on their records.
  std::map<std::uint32_t, world_copies>::iterator erase_world(std::map<std::uint32_t, world_copies>::iterator it);

  record_pool pool_;
  std::vector<bool> up_;
  /// A new world generation begins with every change of the rank numbering.
  std::uint32_t gen_ = 0;
  std::map<epoch_t, std::uint32_t> gen_of_epoch_;
  std::map<std::uint32_t, world_copies> copies_;
  /// The newest committed step and its generation.
  std::optional<std::pair<std::uint32_t, step_t>> committed_;
  /// The generation the current epoch restored from.
  std::uint32_t restore_gen_ = 0;
  /// Committed checkpoints on disk: step → world size.
  std::map<step_t, std::uint32_t> checkpoints_;
};

}  // namespace rekindle::policy
