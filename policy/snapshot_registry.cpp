#include "policy/snapshot_registry.hpp"

#include <algorithm>
#include <unordered_map>

#include "policy/snapshot_custody.hpp"

namespace rekindle::policy {

void snapshot_registry::begin_epoch(epoch_t e, std::uint32_t world, bool renumbered) {
  if (renumbered || gen_ == 0)
    ++gen_;
  gen_of_epoch_[e] = gen_;
  copies_[gen_].world = world;
}

void snapshot_registry::begin_world(epoch_t first, epoch_t last, std::uint32_t world) {
  ++gen_;
  const auto from = std::max(first.value(), last.value() >= max_adopted_epochs ? last.value() - max_adopted_epochs + 1 : 0);
  for (auto e = from; e <= last.value(); ++e)
    gen_of_epoch_[epoch_t{e}] = gen_;
  copies_[gen_].world = world;
}

void snapshot_registry::holder_list::insert(holder h) {
  const auto at = std::lower_bound(begin(), end(), h);
  if (at != end() && *at == h)
    return;
  const auto pos = static_cast<std::size_t>(at - begin());
  if (n_ == inline_capacity)
    spill_.assign(inline_.begin(), inline_.end());
  if (n_ >= inline_capacity) {
    spill_.insert(spill_.begin() + static_cast<std::ptrdiff_t>(pos), h);
  } else {
    std::move_backward(inline_.begin() + pos, inline_.begin() + n_, inline_.begin() + n_ + 1);
    inline_[pos] = h;
  }
  ++n_;
}

void snapshot_registry::holder_list::resize(std::size_t k) {
  if (n_ > inline_capacity && k <= inline_capacity) {
    std::copy(spill_.begin(), spill_.begin() + static_cast<std::ptrdiff_t>(k), inline_.begin());
    spill_.clear();
  } else if (k > inline_capacity) {
    spill_.resize(k);
  }
  n_ = static_cast<std::uint32_t>(k);
}

snapshot_registry::record_id snapshot_registry::record_pool::copy_of(record_id from) {
  record_id id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<record_id>(records_.size());
    records_.emplace_back();
    refs_.push_back(0);
    deferred_mark_.push_back(0);
  }
  records_[id] = records_[from];  // a freed record keeps its capacity
  return id;
}

void snapshot_registry::record_pool::unref(record_id id, std::uint32_t n, bool deferred) {
  if (id == no_copies)
    return;
  refs_[id] -= n;
  if (refs_[id] == 0) {
    if (!deferred) {
      release(id);
    } else if (deferred_mark_[id] == 0) {
      // Once, though a pass may leave it twice (a rank left it, another took it and left it too).
      deferred_mark_[id] = 1;
      deferred_.push_back(id);
    }
  }
}

void snapshot_registry::record_pool::release_deferred() {
  for (const auto id : deferred_) {
    deferred_mark_[id] = 0;
    if (refs_[id] == 0)
      release(id);
  }
  deferred_.clear();
}

void snapshot_registry::record_pool::release(record_id id) {
  records_[id].clear();
  free_.push_back(id);
}

snapshot_registry::rank_copies& snapshot_registry::own_record(world_copies& w, std::uint32_t r) {
  ensure_rank(w, r);
  const auto id = w.ranks[r];
  if (id == no_copies || pool_.refs(id) > 1) {
    const auto mine = pool_.copy_of(id);
    pool_.ref(mine);
    pool_.unref(id);
    w.ranks[r] = mine;
  }
  return pool_[w.ranks[r]];
}

void snapshot_registry::ensure_rank(world_copies& w, std::uint32_t r) {
  if (r >= w.ranks.size()) {
    w.ranks.resize(std::size_t{r} + 1, no_copies);
    w.home.resize(std::size_t{r} + 1, no_homes);
  }
}

snapshot_registry::holder snapshot_registry::encode(world_copies& w, std::uint32_t r, holder h, bool assign) {
  auto& hs = w.home[r];
  for (std::uint32_t k = 0; k < hs.size(); ++k) {
    if (hs[k] == h.node)
      return holder{node_id{home_marker + k}, h.where};
  }
  if (!assign)
    return h;
  for (std::uint32_t k = 0; k < hs.size(); ++k) {
    if (hs[k] == no_homes[k] || !names(pool_[w.ranks[r]], node_id{home_marker + k})) {
      rehome(w, r, k, h.node);
      return holder{node_id{home_marker + k}, h.where};
    }
  }
  return h;
}

void snapshot_registry::rehome(world_copies& w, std::uint32_t r, std::uint32_t k, node_id n) {
  w.home[r][k] = n;
  const auto id = w.ranks[r];
  if (!names(pool_[id], n))
    return;
  // The copies the record names by the node's id are named by the marker from now on.
  const auto mine = pool_.copy_of(id);
  for (auto& c : pool_[mine]) {
    std::vector<holder> moved;
    for (const auto& h : c.holders)
      if (h.node == n)
        moved.push_back(holder{node_id{home_marker + k}, h.where});
    c.holders.erase_if([&](const holder& h) { return h.node == n; });
    for (const auto& h : moved)
      c.holders.insert(h);
  }
  pool_.ref(mine);
  pool_.unref(id, 1, true);  // freed after the pass at the earliest: ids seen in it stay unique
  w.ranks[r] = mine;
}

bool snapshot_registry::names(const rank_copies& steps, node_id n) noexcept {
  return std::any_of(steps.begin(), steps.end(), [&](const step_copies& c) {
    return std::any_of(c.holders.begin(), c.holders.end(), [&](const holder& h) { return h.node == n; });
  });
}

std::uint64_t snapshot_registry::content_hash(const rank_copies& steps) noexcept {
  std::uint64_t x = 0xcbf29ce484222325ull;
  const auto mix = [&](std::uint64_t v) {
    x ^= v;
    x *= 0x100000001b3ull;
  };
  for (const auto& c : steps) {
    mix(c.step.value());
    for (const auto& h : c.holders)
      mix((std::uint64_t{h.node.value()} << 8) | static_cast<std::uint64_t>(h.where));
    mix(~std::uint64_t{0});
  }
  return x;
}

bool snapshot_registry::same_copies(const rank_copies& a, const rank_copies& b) noexcept {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const step_copies& x, const step_copies& y) {
    return x.step == y.step && std::equal(x.holders.begin(), x.holders.end(), y.holders.begin(), y.holders.end());
  });
}

snapshot_registry::record_id snapshot_registry::made_in_pass::shared(record_pool& pool, record_id id) {
  if (id == no_copies)
    return id;
  const auto h = content_hash(pool[id]);
  const auto [first, last] = made_.equal_range(h);
  for (auto it = first; it != last; ++it) {
    if (it->second != id && same_copies(pool[it->second], pool[id])) {
      pool.discard(id);
      return it->second;
    }
  }
  made_.emplace(h, id);
  return id;
}

template <class Apply>
snapshot_registry::record_id snapshot_registry::changed_copy(record_id from, Apply apply) {
  const auto id = pool_.copy_of(from);
  apply(pool_[id]);
  if (!pool_[id].empty())
    return id;
  pool_.discard(id);  // no copies left: the shared empty record
  return no_copies;
}

void snapshot_registry::move_ranks(record_id from, record_id to, std::uint32_t& ranks) {
  if (ranks == 0)
    return;
  pool_.ref(to, ranks);
  // An old record freed here is reused only after the pass: ids seen in it stay unique.
  pool_.unref(from, ranks, true);
  ranks = 0;
}

template <class Gone>
void snapshot_registry::erase_holders(rank_copies& steps, Gone gone) {
  std::erase_if(steps, [&](step_copies& c) {
    c.holders.erase_if(gone);
    return c.holders.empty();  // a step no live node holds any more is gone from the record
  });
}

void snapshot_registry::set_up(node_id n, bool up) {
  if (n.value() >= up_.size())
    return;
  up_[n.value()] = up;
  if (!up)
    forget_node(n);
}

void snapshot_registry::forget_node(node_id n) {
  // Copies a record names by the node's id: every rank sharing it loses them, so each record
  // changes once, in place.
  pool_.for_each_live([&](rank_copies& steps) { erase_holders(steps, [&](const holder& h) { return h.node == n; }); });
  // Copies on a home: only the ranks whose home the node is lose them (once per record they share).
  for (auto& [gen, w] : copies_) {
    auto last_old = ~record_id{0};
    std::uint32_t last_mask = 0;
    record_id last_new = no_copies;
    std::uint32_t moved = 0;
    made_in_pass made;
    for (std::uint32_t r = 0; r < w.ranks.size(); ++r) {
      const auto mask = (w.home[r][0] == n ? 1u : 0u) | (w.home[r][1] == n ? 2u : 0u);
      const auto id = w.ranks[r];
      if (mask == 0 || id == no_copies)
        continue;
      const auto gone = [&](const holder& h) {
        return h.node.value() >= home_marker && h.node.value() - home_marker < 2 &&
               (mask & (1u << (h.node.value() - home_marker))) != 0;
      };
      if (id != last_old || mask != last_mask) {
        move_ranks(last_old, last_new, moved);
        last_old = id;
        last_mask = mask;
        const bool any = std::any_of(pool_[id].begin(), pool_[id].end(), [&](const step_copies& c) {
          return std::any_of(c.holders.begin(), c.holders.end(), gone);
        });
        last_new = any ? made.shared(pool_, changed_copy(id, [&](rank_copies& steps) { erase_holders(steps, gone); })) : id;
      }
      if (last_new != id) {
        w.ranks[r] = last_new;
        ++moved;
      }
    }
    move_ranks(last_old, last_new, moved);
    pool_.release_deferred();
  }
}

const snapshot_registry::step_copies* snapshot_registry::find(const rank_copies& steps, step_t s) {
  const auto it = std::lower_bound(steps.begin(), steps.end(), s, [](const step_copies& c, step_t x) { return c.step < x; });
  return it != steps.end() && it->step == s ? &*it : nullptr;
}

bool snapshot_registry::live(const homes& hs, const step_copies& c) const {
  return std::any_of(c.holders.begin(), c.holders.end(), [&](const holder& h) { return up(resolve(hs, h.node)); });
}

void snapshot_registry::record(rank_copies& steps, std::uint32_t gen, step_t s, holder h) {
  auto it = std::lower_bound(steps.begin(), steps.end(), s, [](const step_copies& c, step_t x) { return c.step < x; });
  if (it != steps.end() && it->step == s) {
    it->holders.insert(h);
    return;
  }
  // The oldest steps make room, except the committed one: the slots keep it too. When the oldest
  // goes to make room for this one, its holder list is reused (16,384 ranks report at once in a
  // simulation).
  const auto kept = committed_ && committed_->first == gen ? std::optional<step_t>{committed_->second} : std::nullopt;
  if (steps.size() >= reported_steps_kept_per_rank && steps.front().step < s && steps.front().step != kept) {
    auto reused = std::move(steps.front());
    steps.erase(steps.begin());
    reused.step = s;
    reused.holders.assign(h);
    it = std::lower_bound(steps.begin(), steps.end(), s, [](const step_copies& c, step_t x) { return c.step < x; });
    steps.insert(it, std::move(reused));
    return;
  }
  if (steps.capacity() == 0) {
    steps.reserve(4);  // a rank holds a few steps at a time: one allocation, not three
    it = steps.end();
  }
  steps.insert(it, step_copies{s, holder_list{h}});
  for (auto x = steps.begin(); steps.size() > reported_steps_kept_per_rank && x != steps.end();)
    x = kept && x->step == *kept ? std::next(x) : steps.erase(x);
}

bool snapshot_registry::maybe_commit(std::uint32_t gen, step_t s) {
  if (gen != gen_ || (committed_ && committed_->first == gen && committed_->second >= s))
    return false;
  const auto up = std::count(up_.begin(), up_.end(), true);
  if (!held_everywhere(copies_[gen], s, up >= 2 ? 2 : 1))
    return false;
  committed_ = {gen, s};
  return true;
}

bool snapshot_registry::on_held(const snapshot_report& r) {
  const auto gen = gen_of_epoch_.find(r.epoch);
  if (gen == gen_of_epoch_.end() || r.holder.value() >= up_.size())
    return false;
  auto& w = copies_[gen->second];
  ensure_rank(w, r.rank.value());
  const holder h = encode(w, r.rank.value(), holder{r.holder, r.where}, true);
  pool_.release_deferred();
  const auto* known = rank_of(w, r.rank.value());
  const auto* at = known != nullptr ? find(*known, r.step) : nullptr;
  if (at == nullptr || !at->holders.contains(h))
    record(own_record(w, r.rank.value()), gen->second, r.step, h);
  return maybe_commit(gen->second, r.step);
}

void snapshot_registry::on_dropped(const snapshot_report& r) {
  if (auto gen = gen_of_epoch_.find(r.epoch); gen != gen_of_epoch_.end())
    forget_copy(gen->second, r.rank, r.step, {r.holder, r.where});
}

bool snapshot_registry::on_changed_all(const copy_changes& c, std::span<const rank_slot> placement) {
  const auto wit = copies_.find(gen_);
  if (gen_ == 0 || wit == copies_.end())
    return false;
  auto& w = wit->second;
  const auto gen = gen_;
  // Each set's changes of the current world, and what they need: a set with a change held may
  // give a rank its first copy; one without a change of a kind needs no holder of that kind.
  struct set_info {
    std::vector<copy_change> changes;
    bool grows = false, slots = false, replicas = false;
  };
  std::vector<set_info> sets(c.sets.size());
  for (std::size_t i = 0; i < c.sets.size(); ++i)
    for (const auto& ch : c.sets[i]) {
      if (!current_world(ch.epoch))
        continue;
      sets[i].changes.push_back(ch);
      sets[i].grows = sets[i].grows || ch.held;
      (ch.where == copy_kind::local_slot ? sets[i].slots : sets[i].replicas) = true;
    }
  // Whether some rank took each held change (with a holder), by set and index: only those steps
  // can have become committed.
  std::vector<std::vector<std::uint8_t>> took(sets.size());
  for (std::size_t i = 0; i < sets.size(); ++i)
    took[i].assign(sets[i].changes.size(), 0);
  constexpr node_id none{~std::uint32_t{0}};
  made_in_pass made;
  // The changes of one set applied to a copy of record `id`, each copy on `slot` or `replica` as
  // the record names it (none: that kind records nothing): the record it becomes.
  const auto changed = [&](record_id id, std::uint32_t set, node_id slot, node_id replica) {
    const auto mine = pool_.copy_of(id);
    auto& steps = pool_[mine];
    for (const auto& ch : sets[set].changes) {
      const holder h{ch.where == copy_kind::local_slot ? slot : replica, ch.where};
      if (h.node == none)
        continue;
      if (!ch.held) {
        forget_copy(steps, ch.step, h);
      } else if (const auto* at = find(steps, ch.step); at == nullptr || !at->holders.contains(h)) {
        record(steps, gen, ch.step, h);
      }
    }
    if (same_copies(steps, pool_[id])) {
      pool_.discard(mine);
      return id;
    }
    if (steps.empty()) {
      pool_.discard(mine);
      return no_copies;
    }
    return made.shared(pool_, mine);
  };
  // A rank whose holders are both its homes changes as every rank of its record, set and homes'
  // roles does: worked out once for all of them. Others (a holder not a home yet) change copy by
  // copy, as on_held and on_dropped would, once per record, holder and change.
  std::unordered_map<std::uint64_t, record_id> alike;
  struct one_key {
    std::uint64_t a, b;
    bool operator==(const one_key&) const = default;
  };
  struct one_hash {
    std::size_t operator()(const one_key& k) const noexcept { return std::hash<std::uint64_t>{}(k.a * 0x9E3779B97F4A7C15ull ^ k.b); }
  };
  std::unordered_map<one_key, record_id, one_hash> one_by_one;
  std::uint64_t last_key = ~std::uint64_t{0}, last_took = ~std::uint64_t{0};
  record_id last_new = no_copies;
  // Rank r takes record `to`. The counts move by runs of ranks that go from one record to the
  // same other (the ranks of a node, of a cohort), each run counted once; an old record freed is
  // released after the pass at the earliest, so that ids seen in it stay unique.
  record_id run_from = no_copies, run_to = no_copies;
  std::uint32_t run = 0;
  const auto count_run = [&] {
    if (run == 0)
      return;
    pool_.ref(run_to, run);
    pool_.unref(run_from, run, true);
    run = 0;
  };
  const auto take = [&](std::uint32_t r, record_id to) {
    const auto from = w.ranks[r];
    if (to == from)
      return;
    if (from != run_from || to != run_to) {
      count_run();
      run_from = from;
      run_to = to;
    }
    ++run;
    w.ranks[r] = to;
  };
  for (const auto& slot : placement) {
    const auto n = slot.node.value();
    if (n >= c.set_of_node.size() || c.set_of_node[n] >= sets.size())
      continue;
    const auto set = c.set_of_node[n];
    const auto& info = sets[set];
    if (info.changes.empty())
      continue;
    const auto r = slot.rank.value();
    if (r >= w.ranks.size()) {
      if (!info.grows)
        continue;  // nothing to drop
      ensure_rank(w, r);
    }
    const node_id slot_node = n < up_.size() && info.slots ? slot.node : none;
    node_id replica_node = n < c.replica_holder_of_node.size() ? c.replica_holder_of_node[n] : none;
    if (replica_node.value() >= up_.size() || !info.replicas)
      replica_node = none;
    if (const auto k = (std::uint64_t{set} << 2) | (slot_node != none ? 2u : 0u) | (replica_node != none ? 1u : 0u);
        k != last_took) {
      last_took = k;
      for (std::size_t i = 0; i < info.changes.size(); ++i)
        if (info.changes[i].held && (info.changes[i].where == copy_kind::local_slot ? slot_node : replica_node) != none)
          took[set][i] = 1;
    }
    const auto& hs = w.home[r];
    const auto role = [&](node_id x) -> std::uint32_t {
      if (x == none)
        return 3;
      return hs[0] == x ? 0 : hs[1] == x ? 1 : 2;
    };
    const auto slot_role = role(slot_node), replica_role = role(replica_node);
    if (slot_role != 2 && replica_role != 2 && set < (1u << 24)) {
      const auto id = w.ranks[r];
      const auto key = (std::uint64_t{id} << 32) | (std::uint64_t{set} << 4) | (slot_role << 2) | replica_role;
      if (key != last_key) {
        last_key = key;
        if (const auto done = alike.find(key); done != alike.end()) {
          last_new = done->second;
        } else {
          const auto marker = [&](std::uint32_t k) { return k < 2 ? node_id{home_marker + k} : none; };
          last_new = changed(id, set, marker(slot_role), marker(replica_role));
          alike.emplace(key, last_new);
        }
      }
      take(r, last_new);
      continue;
    }
    last_key = ~std::uint64_t{0};
    count_run();  // the copies one by one read and change the counts (a rehome)
    for (std::uint32_t i = 0; i < info.changes.size(); ++i) {
      const auto& ch = info.changes[i];
      const auto node = ch.where == copy_kind::local_slot ? slot_node : replica_node;
      if (node == none)
        continue;
      const holder h = encode(w, r, holder{node, ch.where}, ch.held);
      const auto id = w.ranks[r];
      const one_key key{(std::uint64_t{id} << 32) | h.node.value(), (std::uint64_t{set} << 32) | i};
      auto done = one_by_one.find(key);
      if (done == one_by_one.end()) {
        const auto* at = find(pool_[id], ch.step);
        const bool held_there = at != nullptr && at->holders.contains(h);
        record_id to = id;
        if (ch.held != held_there)
          to = made.shared(pool_, changed_copy(id, [&](rank_copies& steps) {
                             if (ch.held)
                               record(steps, gen, ch.step, h);
                             else
                               forget_copy(steps, ch.step, h);
                           }));
        done = one_by_one.emplace(key, to).first;
      }
      take(r, done->second);
      count_run();
    }
  }
  count_run();
  pool_.release_deferred();
  // The per-rank reports could commit only at a step some rank took: each checked once, oldest
  // first, after every change (one added holder never removes another).
  std::vector<step_t> held;
  for (std::size_t i = 0; i < sets.size(); ++i)
    for (std::size_t k = 0; k < sets[i].changes.size(); ++k)
      if (took[i][k])
        held.push_back(sets[i].changes[k].step);
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  bool committed = false;
  for (const auto s : held)
    committed = maybe_commit(gen, s) || committed;
  return committed;
}

void snapshot_registry::on_dropped_ranks(std::span<const rank_id> ranks, std::span<const copy_change> copies,
                                         node_id holder_node) {
  // The copies by world generation (their epochs'), each generation's ranks in one pass.
  std::map<std::uint32_t, std::vector<copy_change>> by_gen;
  for (const auto& c : copies)
    if (const auto gen = gen_of_epoch_.find(c.epoch); gen != gen_of_epoch_.end())
      by_gen[gen->second].push_back(c);
  for (const auto& entry : by_gen) {
    const auto& mine = entry.second;  // a plain reference: the lambdas below capture it
    const auto wit = copies_.find(entry.first);
    if (wit == copies_.end())
      continue;
    auto& w = wit->second;
    std::unordered_map<std::uint64_t, record_id> outcome;  // (record, holder as named) -> record
    for (const auto rank : ranks) {
      const auto r = rank.value();
      if (r >= w.ranks.size())
        continue;
      const auto id = w.ranks[r];
      const auto h = encode(w, r, holder{holder_node, copy_kind::local_slot}, false).node;
      const auto key = (std::uint64_t{id} << 32) | h.value();
      auto done = outcome.find(key);
      if (done == outcome.end()) {
        const bool any = std::any_of(mine.begin(), mine.end(), [&](const copy_change& c) {
          const auto* at = find(pool_[id], c.step);
          return at != nullptr && at->holders.contains(holder{h, c.where});
        });
        const auto to = any ? changed_copy(id,
                                           [&](rank_copies& steps) {
                                             for (const auto& c : mine)
                                               forget_copy(steps, c.step, holder{h, c.where});
                                           })
                            : id;
        done = outcome.emplace(key, to).first;
      }
      if (done->second != id) {
        pool_.ref(done->second);
        pool_.unref(id, 1, true);  // freed after the pass at the earliest: ids in `outcome` stay unique
        w.ranks[r] = done->second;
      }
    }
    pool_.release_deferred();
  }
}

void snapshot_registry::forget_restore_copy(rank_id old_rank, step_t step, node_id holder_node, copy_kind where) {
  forget_copy(restore_gen_, old_rank, step, {holder_node, where});
}

void snapshot_registry::forget_copy(std::uint32_t gen, rank_id r, step_t step, holder h) {
  auto w = copies_.find(gen);
  if (w == copies_.end() || r.value() >= w->second.ranks.size())
    return;
  h = encode(w->second, r.value(), h, false);
  const auto* at = find(pool_[w->second.ranks[r.value()]], step);
  if (at == nullptr || !at->holders.contains(h))
    return;
  auto& steps = own_record(w->second, r.value());
  forget_copy(steps, step, h);
  if (steps.empty()) {
    pool_.unref(w->second.ranks[r.value()]);
    w->second.ranks[r.value()] = no_copies;
  }
}

void snapshot_registry::forget_copy(rank_copies& steps, step_t step, holder h) {
  auto it = std::lower_bound(steps.begin(), steps.end(), step, [](const step_copies& c, step_t x) { return c.step < x; });
  if (it == steps.end() || it->step != step)
    return;
  it->holders.erase(h);
  if (it->holders.empty())
    steps.erase(it);
}

std::optional<step_t> snapshot_registry::committed() const {
  if (committed_ && committed_->first == gen_)
    return committed_->second;
  return std::nullopt;
}

bool snapshot_registry::held_in_every_slot(step_t step) const {
  auto w = copies_.find(gen_);
  if (w == copies_.end() || w->second.world == 0)
    return false;
  // Ranks with the same record and homes share the answer.
  auto checked = ~record_id{0};
  auto checked_homes = no_homes;
  for (std::uint32_t r = 0; r < w->second.world; ++r) {
    if (r < w->second.ranks.size() && w->second.ranks[r] == checked && w->second.home[r] == checked_homes)
      continue;
    const auto* steps = rank_of(w->second, r);
    const auto* c = steps != nullptr ? find(*steps, step) : nullptr;
    if (c == nullptr || std::none_of(c->holders.begin(), c->holders.end(), [&](const holder& h) {
          return h.where == copy_kind::local_slot && up(resolve(w->second.home[r], h.node));
        }))
      return false;
    checked = w->second.ranks[r];
    checked_homes = w->second.home[r];
  }
  return true;
}

std::vector<step_t> snapshot_registry::steps_of(rank_id r) const {
  std::vector<step_t> out;
  if (auto w = copies_.find(gen_); w != copies_.end())
    if (const auto* steps = rank_of(w->second, r.value()))
      for (const auto& c : *steps)
        out.push_back(c.step);
  return out;
}

void snapshot_registry::on_checkpoint_committed(step_t step, std::uint32_t world) {
  if (world > 0)
    checkpoints_[step] = world;
}

bool snapshot_registry::held_everywhere(const world_copies& w, step_t s, std::size_t copies) const {
  if (w.world == 0)
    return false;
  // Ranks with the same record and homes share the answer.
  auto checked = ~record_id{0};
  auto checked_homes = no_homes;
  std::vector<node_id> nodes;
  for (std::uint32_t r = 0; r < w.world; ++r) {
    if (r < w.ranks.size() && w.ranks[r] == checked && w.home[r] == checked_homes)
      continue;
    const auto* steps = rank_of(w, r);
    const auto* c = steps != nullptr ? find(*steps, s) : nullptr;
    if (c == nullptr)
      return false;
    // Distinct live holders (a home and a node id may name the same node).
    nodes.clear();
    for (const auto& h : c->holders) {
      const auto n = resolve(w.home[r], h.node);
      if (up(n) && std::find(nodes.begin(), nodes.end(), n) == nodes.end())
        nodes.push_back(n);
    }
    if (nodes.size() < copies)
      return false;
    checked = w.ranks[r];
    checked_homes = w.home[r];
  }
  return true;
}

std::optional<restore_choice> snapshot_registry::choose_restore(bool from_memory) const {
  auto memory = from_memory ? choose_from_memory() : std::nullopt;
  if (checkpoints_.empty() || (memory && memory->step >= checkpoints_.rbegin()->first))
    return memory;
  // The newest committed checkpoint is newer than anything in memory: every rank reads its shard
  // (or, in another world size, all of them) from the checkpoint directory.
  const auto& [step, world] = *checkpoints_.rbegin();
  node_id reader{0};
  for (std::uint32_t n = 0; n < up_.size(); ++n)
    if (up_[n]) {
      reader = node_id{n};
      break;
    }
  restore_choice c;
  c.gen = 0;
  c.step = step;
  c.world = world;
  for (std::uint32_t r = 0; r < world; ++r)
    c.sources.push_back(state_source{rank_id{r}, reader, copy_kind::disk});
  return c;
}

std::optional<restore_choice> snapshot_registry::choose_from_memory() const {
  for (auto gen = copies_.rbegin(); gen != copies_.rend(); ++gen) {
    const auto& w = gen->second;
    const auto* first = w.world == 0 ? nullptr : rank_of(w, 0);
    if (first == nullptr)
      continue;
    // Candidate steps: those of rank 0, newest first; a step counts when every rank of the world
    // has it on a live node.
    for (auto step = first->rbegin(); step != first->rend(); ++step) {
      restore_choice c;
      c.gen = gen->first;
      c.step = step->step;
      c.world = w.world;
      bool complete = true;
      c.sources.reserve(w.world);
      // Ranks with the same record and homes share the best holder.
      auto chosen_for = ~record_id{0};
      auto chosen_homes = no_homes;
      std::optional<holder> best;
      for (std::uint32_t r = 0; r < w.world && complete; ++r) {
        if (r >= w.ranks.size()) {
          complete = false;
          break;
        }
        if (w.ranks[r] != chosen_for || w.home[r] != chosen_homes) {
          chosen_for = w.ranks[r];
          chosen_homes = w.home[r];
          const auto* at = find(pool_[chosen_for], step->step);
          // Prefer the rank's own slot, then a replica, then disk, then the lowest node id;
          // always a live holder.
          best.reset();
          if (at != nullptr)
            for (const auto& h : at->holders) {
              const holder x{resolve(chosen_homes, h.node), h.where};
              if (up(x.node) && (!best || std::pair{x.where, x.node} < std::pair{best->where, best->node}))
                best = x;
            }
        }
        if (!best)
          complete = false;
        else
          c.sources.push_back(state_source{rank_id{r}, best->node, best->where});
      }
      if (complete)
        return c;
    }
  }
  return std::nullopt;
}

std::string snapshot_registry::missing_copies() const {
  auto gen = copies_.rbegin();
  while (gen != copies_.rend() && gen->second.world == 0)
    ++gen;
  if (gen == copies_.rend())
    return "none was ever reported";
  const auto& w = gen->second;
  const auto steps_of_rank = [&](std::uint32_t r) {
    std::string out;
    if (const auto* steps = rank_of(w, r))
      for (const auto& c : *steps)
        if (live(w.home[r], c))
          out += (out.empty() ? "" : ", ") + std::to_string(c.step.value());
    return out.empty() ? std::string{"none"} : out;
  };
  const auto* first = rank_of(w, 0);
  if (first == nullptr || first->empty())
    return "rank 0 of the " + std::to_string(w.world) + "-rank world holds none on a live node";
  // Every rank whose steps differ from rank 0's, up to a few: the step a restore lacked is the one
  // some of them miss, and it is rarely the first such rank alone.
  constexpr int named_at_most = 6;
  std::string differing;
  int named = 0;
  std::uint32_t more = 0;
  const auto rank0 = steps_of_rank(0);
  for (std::uint32_t r = 1; r < w.world; ++r) {
    if (r < w.ranks.size() && w.ranks[r] == w.ranks[0] && w.home[r] == w.home[0])
      continue;
    const auto mine = steps_of_rank(r);
    if (mine == rank0)
      continue;
    if (named == named_at_most) {
      ++more;
      continue;
    }
    differing += std::string{named == 0 ? "" : "; "} + "rank " + std::to_string(r) + " holds " + mine;
    ++named;
  }
  if (named == 0)
    return "rank 0 of the " + std::to_string(w.world) + "-rank world holds steps " + rank0;
  return "of the " + std::to_string(w.world) + "-rank world, rank 0 holds steps " + rank0 + " and " + differing +
         (more > 0 ? "; " + std::to_string(more) + " more ranks differ" : "") + " on live nodes";
}

std::optional<step_t> snapshot_registry::complete_step(const world_copies& w) const {
  const auto* first = w.world == 0 ? nullptr : rank_of(w, 0);
  if (first == nullptr)
    return std::nullopt;
  for (auto step = first->rbegin(); step != first->rend(); ++step) {
    bool all = true;
    // Ranks with the same record and homes share the answer.
    auto checked = ~record_id{0};
    auto checked_homes = no_homes;
    for (std::uint32_t r = 0; r < w.world && all; ++r) {
      const auto* steps = rank_of(w, r);
      if (steps == nullptr)
        return std::nullopt;
      if (w.ranks[r] == checked && w.home[r] == checked_homes)
        continue;
      const auto* at = find(*steps, step->step);
      all = at != nullptr && live(w.home[r], *at);
      checked = w.ranks[r];
      checked_homes = w.home[r];
    }
    if (all)
      return step->step;
  }
  return std::nullopt;
}

std::size_t snapshot_registry::prune() {
  // The restore point is in the newest complete generation (as choose_restore() finds it); keep
  // that one and the newest complete one before it.
  auto gen = copies_.rbegin();
  while (gen != copies_.rend() && !complete_step(gen->second))
    ++gen;
  if (gen == copies_.rend())
    return 0;
  auto keep_from = gen->first;
  for (++gen; gen != copies_.rend(); ++gen) {
    if (complete_step(gen->second)) {
      keep_from = gen->first;
      break;
    }
  }
  std::size_t forgotten = 0;
  for (auto it = copies_.begin(); it != copies_.end() && it->first < keep_from;) {
    it = erase_world(it);
    ++forgotten;
  }
  return forgotten;
}

std::map<std::uint32_t, snapshot_registry::world_copies>::iterator snapshot_registry::erase_world(
    std::map<std::uint32_t, world_copies>::iterator it) {
  for (const auto id : it->second.ranks)
    pool_.unref(id);
  return copies_.erase(it);
}

}  // namespace rekindle::policy
