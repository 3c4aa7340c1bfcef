#include "policy/snapshot_registry.hpp"

#include <algorithm>

#include "policy/snapshot_custody.hpp"

namespace rekindle::policy {

void snapshot_registry::begin_epoch(epoch_t e, std::uint32_t world, bool renumbered) {
  if (renumbered || gen_ == 0)
    ++gen_;
  gen_of_epoch_[e] = gen_;
  copies_[gen_].world = world;
}

void snapshot_registry::set_up(node_id n, bool up) {
  if (n.value() >= up_.size())
    return;
  up_[n.value()] = up;
  if (!up)
    forget_node(n);
}

void snapshot_registry::forget_node(node_id n) {
  for (auto& [gen, w] : copies_)
    for (auto& [rank, steps] : w.ranks)
      for (auto& [step, h] : steps)
        std::erase_if(h, [&](const auto& holder) { return holder.first == n; });
}

void snapshot_registry::record(std::map<step_t, holders>& steps, std::uint32_t gen, step_t s, node_id holder,
                               state_source::kind where) {
  if (auto at = steps.find(s); at != steps.end()) {
    at->second.insert({holder, where});
    return;
  }
  // The oldest steps make room, except the committed one: the slots keep it too. When the oldest
  // goes to make room for this one, its tree node is reused (16,384 ranks report at once in a
  // simulation).
  const auto kept = committed_ && committed_->first == gen ? std::optional<step_t>{committed_->second} : std::nullopt;
  if (steps.size() >= reported_steps_kept_per_rank && steps.begin()->first < s && steps.begin()->first != kept) {
    auto old = steps.extract(steps.begin());
    old.key() = s;
    old.mapped().clear();
    old.mapped().insert({holder, where});
    steps.insert(std::move(old));
    return;
  }
  steps[s].insert({holder, where});
  for (auto it = steps.begin(); steps.size() > reported_steps_kept_per_rank && it != steps.end();)
    it = kept && it->first == *kept ? std::next(it) : steps.erase(it);
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
  record(copies_[gen->second].ranks[r.rank], gen->second, r.step, r.holder, r.where);
  return maybe_commit(gen->second, r.step);
}

bool snapshot_registry::on_held_all(epoch_t e, step_t s, state_source::kind where, std::span<const rank_slot> placement,
                                    std::span<const node_id> holder_of_node) {
  const auto gen = gen_of_epoch_.find(e);
  if (gen == gen_of_epoch_.end())
    return false;
  auto& ranks = copies_[gen->second].ranks;
  bool any = false;
  // The placement is in rank order, like the map: step through it, searching only on a gap.
  auto it = ranks.begin();
  for (const auto& slot : placement) {
    const node_id holder = holder_of_node.empty()                          ? slot.node
                           : slot.node.value() < holder_of_node.size() ? holder_of_node[slot.node.value()]
                                                                           : node_id{~std::uint32_t{0}};
    if (holder.value() >= up_.size())
      continue;
    if (it == ranks.end() || it->first != slot.rank)
      it = ranks.try_emplace(slot.rank).first;
    record(it->second, gen->second, s, holder, where);
    any = true;
    ++it;
  }
  // The per-rank reports could commit only at the last one that completes the step: one check.
  return any && maybe_commit(gen->second, s);
}

void snapshot_registry::on_dropped(const snapshot_report& r) {
  if (auto gen = gen_of_epoch_.find(r.epoch); gen != gen_of_epoch_.end())
    forget_copy(gen->second, r.rank, r.step, r.holder, r.where);
}

void snapshot_registry::on_dropped_all(epoch_t e, step_t s, state_source::kind where, std::span<const rank_slot> placement,
                                       std::span<const node_id> holder_of_node) {
  const auto gen = gen_of_epoch_.find(e);
  if (gen == gen_of_epoch_.end())
    return;
  for (const auto& slot : placement) {
    const node_id holder = holder_of_node.empty()                          ? slot.node
                           : slot.node.value() < holder_of_node.size() ? holder_of_node[slot.node.value()]
                                                                           : node_id{~std::uint32_t{0}};
    forget_copy(gen->second, slot.rank, s, holder, where);
  }
}

void snapshot_registry::forget_restore_copy(rank_id old_rank, step_t step, node_id holder, state_source::kind where) {
  forget_copy(restore_gen_, old_rank, step, holder, where);
}

void snapshot_registry::forget_copy(std::uint32_t gen, rank_id r, step_t step, node_id holder, state_source::kind where) {
  auto w = copies_.find(gen);
  if (w == copies_.end())
    return;
  auto rank = w->second.ranks.find(r);
  if (rank == w->second.ranks.end())
    return;
  auto at = rank->second.find(step);
  if (at == rank->second.end())
    return;
  at->second.erase({holder, where});
  if (at->second.empty())
    rank->second.erase(at);
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
  for (std::uint32_t r = 0; r < w->second.world; ++r) {
    auto rank = w->second.ranks.find(rank_id{r});
    if (rank == w->second.ranks.end())
      return false;
    auto at = rank->second.find(step);
    if (at == rank->second.end() || std::none_of(at->second.begin(), at->second.end(), [&](const auto& h) {
          return h.second == state_source::kind::local_slot && up(h.first);
        }))
      return false;
  }
  return true;
}

std::vector<step_t> snapshot_registry::steps_of(rank_id r) const {
  std::vector<step_t> out;
  if (auto w = copies_.find(gen_); w != copies_.end())
    if (auto rank = w->second.ranks.find(r); rank != w->second.ranks.end())
      for (const auto& [s, h] : rank->second)
        out.push_back(s);
  return out;
}

void snapshot_registry::on_checkpoint_committed(step_t step, std::uint32_t world) {
  if (world > 0)
    checkpoints_[step] = world;
}

bool snapshot_registry::held_everywhere(const world_copies& w, step_t s, std::size_t copies) const {
  if (w.world == 0)
    return false;
  for (std::uint32_t r = 0; r < w.world; ++r) {
    auto rank = w.ranks.find(rank_id{r});
    if (rank == w.ranks.end())
      return false;
    auto at = rank->second.find(s);
    if (at == rank->second.end())
      return false;
    std::set<node_id> live;
    for (const auto& [holder, kind] : at->second)
      if (up(holder))
        live.insert(holder);
    if (live.size() < copies)
      return false;
  }
  return true;
}

std::optional<restore_choice> snapshot_registry::choose_restore() const {
  auto memory = choose_from_memory();
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
    c.sources.push_back(state_source{rank_id{r}, reader, state_source::kind::disk});
  return c;
}

std::optional<restore_choice> snapshot_registry::choose_from_memory() const {
  for (auto gen = copies_.rbegin(); gen != copies_.rend(); ++gen) {
    const auto& w = gen->second;
    if (w.world == 0)
      continue;
    // Candidate steps: those of rank 0, newest first; a step counts when every rank of the world
    // has it on a live node.
    auto first = w.ranks.find(rank_id{0});
    if (first == w.ranks.end())
      continue;
    for (auto step = first->second.rbegin(); step != first->second.rend(); ++step) {
      restore_choice c;
      c.gen = gen->first;
      c.step = step->first;
      c.world = w.world;
      bool complete = true;
      for (std::uint32_t r = 0; r < w.world && complete; ++r) {
        auto rank = w.ranks.find(rank_id{r});
        if (rank == w.ranks.end()) {
          complete = false;
          break;
        }
        auto at = rank->second.find(step->first);
        if (at == rank->second.end()) {
          complete = false;
          break;
        }
        // Prefer the rank's own slot, then a replica, then disk; always a live holder.
        std::optional<state_source> best;
        for (const auto& [holder, kind] : at->second) {
          if (!up(holder))
            continue;
          if (!best || kind < best->where)
            best = state_source{rank_id{r}, holder, kind};
        }
        if (!best)
          complete = false;
        else
          c.sources.push_back(*best);
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
  const auto steps_of_rank = [&](rank_id r) {
    std::string out;
    if (auto it = w.ranks.find(r); it != w.ranks.end())
      for (const auto& [s, copies] : it->second)
        if (std::any_of(copies.begin(), copies.end(), [&](const auto& h) { return up(h.first); }))
          out += (out.empty() ? "" : ", ") + std::to_string(s.value());
    return out.empty() ? std::string{"none"} : out;
  };
  const auto first = w.ranks.find(rank_id{0});
  if (first == w.ranks.end() || first->second.empty())
    return "rank 0 of the " + std::to_string(w.world) + "-rank world holds none on a live node";
  for (std::uint32_t r = 1; r < w.world; ++r)
    if (steps_of_rank(rank_id{r}) != steps_of_rank(rank_id{0}))
      return "of the " + std::to_string(w.world) + "-rank world, rank 0 holds steps " + steps_of_rank(rank_id{0}) +
             " and rank " + std::to_string(r) + " holds " + steps_of_rank(rank_id{r}) + " on live nodes";
  return "rank 0 of the " + std::to_string(w.world) + "-rank world holds steps " + steps_of_rank(rank_id{0});
}

std::optional<step_t> snapshot_registry::complete_step(const world_copies& w) const {
  if (w.world == 0)
    return std::nullopt;
  auto first = w.ranks.find(rank_id{0});
  if (first == w.ranks.end())
    return std::nullopt;
  for (auto step = first->second.rbegin(); step != first->second.rend(); ++step) {
    bool all = true;
    auto rank = w.ranks.begin();
    for (std::uint32_t r = 0; r < w.world && all; ++r) {
      if (rank == w.ranks.end() || rank->first != rank_id{r})
        rank = w.ranks.find(rank_id{r});
      if (rank == w.ranks.end())
        return std::nullopt;
      auto at = rank->second.find(step->first);
      all = at != rank->second.end() &&
            std::any_of(at->second.begin(), at->second.end(), [&](const auto& holder) { return up(holder.first); });
      ++rank;
    }
    if (all)
      return step->first;
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
    it = copies_.erase(it);
    ++forgotten;
  }
  return forgotten;
}

}  // namespace rekindle::policy
