#include "trace/custody_model.hpp"

#include <map>
#include <tuple>

namespace rekindle::trace {

namespace {

bool holds(const std::array<std::optional<policy::copy_tag>, 2>& halves, step_t s, epoch_t since) {
  return std::any_of(halves.begin(), halves.end(), [&](const auto& h) { return h && h->step == s && h->epoch >= since; });
}

bool holds(const std::vector<policy::copy_tag>& copies, step_t s, epoch_t since) {
  return std::any_of(copies.begin(), copies.end(), [&](const auto& c) { return c.step == s && c.epoch >= since; });
}

std::vector<policy::copy_tag> sorted_halves(const policy::slot_contents& slot) {
  std::vector<policy::copy_tag> out;
  for (const auto& h : slot.halves())
    if (h)
      out.push_back(*h);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

custody_model::custody_model(std::uint64_t snapshot_every) : every_(snapshot_every) {}

void custody_model::begin_epoch(epoch_t e, step_t restore_step, bool new_world, std::span<const std::uint8_t> placement,
                                std::span<const std::uint8_t> memory_kept, std::span<const std::uint8_t> same_buddy) {
  epoch_ = e;
  restore_ = restore_step;
  if (new_world || world_since_.value() == 0)
    world_since_ = e;
  // The cohort each node was in.
  std::vector<const cohort*> was(placement.size(), nullptr);
  for (const auto& c : cohorts_)
    for (auto n : c.nodes)
      if (n < was.size())
        was[n] = &c;
  // Nodes that had the same cohort and keep the same things stay together.
  std::map<std::tuple<std::uint64_t, bool, bool>, std::size_t> made;
  std::vector<cohort> next;
  for (std::uint32_t n = 0; n < placement.size(); ++n) {
    if (placement[n] == 0)
      continue;
    const cohort* old = was[n];
    const bool memory = old != nullptr && n < memory_kept.size() && memory_kept[n] != 0;
    const bool buddy = old != nullptr && n < same_buddy.size() && same_buddy[n] != 0;
    const auto key = std::tuple{old != nullptr ? old->id : 0, memory, buddy};
    auto [at, fresh] = made.try_emplace(key, next.size());
    if (fresh) {
      // A cohort that keeps everything keeps its id: what the policy was told of it still holds.
      cohort c{memory && buddy ? old->id : next_id_++, {}, policy::replica_window{every_}, {}};
      if (memory)
        c.slot = old->slot;
      if (buddy)
        c.window = old->window;
      else
        (void)c.window.pin(pin_);  // a cohort's own ranks: it guards them all
      next.push_back(std::move(c));
      // Replicas on their way from the old cohort's nodes reach the same buddies.
      if (buddy && next.back().id != old->id)
        for (auto& r : pending_)
          if (std::find(r.from.begin(), r.from.end(), old->id) != r.from.end())
            r.from.push_back(next.back().id);
    }
    next[at->second].nodes.push_back(n);
  }
  cohorts_ = std::move(next);
  ++version_;
  std::erase_if(pending_, [&](in_flight& r) {
    std::erase_if(r.from, [&](std::uint64_t id) {
      return std::none_of(cohorts_.begin(), cohorts_.end(), [&](const cohort& c) { return c.id == id; });
    });
    return r.from.empty();
  });
  merge();
}

std::optional<step_t> custody_model::protect() const { return policy::protected_step(pin_, epoch_, restore_); }

bool custody_model::would_write(step_t step) const {
  const policy::copy_tag tag{epoch_, rank_id{0}, step};
  return std::any_of(cohorts_.begin(), cohorts_.end(), [&](const cohort& c) {
    return policy::plan_slot_write(c.slot.halves(), protect(), tag, every_).half.has_value();
  });
}

void custody_model::publish(step_t step, std::int64_t at_ns, std::int64_t replica_done_ns) {
  const policy::copy_tag tag{epoch_, rank_id{0}, step};
  const auto p = protect();
  in_flight f{tag, at_ns, replica_done_ns, {}};
  for (auto& c : cohorts_)
    if (c.slot.write(tag, p, every_).half)
      f.from.push_back(c.id);
  if (!f.from.empty()) {
    ++version_;
    pending_.push_back(std::move(f));
  }
  update_pin();
  merge();
}

void custody_model::update_pin() {
  if (cohorts_.empty())
    return;
  // A newer step of the current world that every node's slots hold, and with more than one node
  // up every node's buddy too.
  auto candidates = cohorts_.front().slot.steps();
  for (auto s = candidates.rbegin(); s != candidates.rend(); ++s) {
    if (pin_.epoch >= world_since_ && *s <= pin_.step)
      return;
    const bool everywhere = std::all_of(cohorts_.begin(), cohorts_.end(), [&](const cohort& c) {
      return holds(c.slot.halves(), *s, world_since_) && (!multi_node_ || holds(c.window.all(), *s, world_since_));
    });
    if (everywhere) {
      pin_ = {epoch_, *s};
      for (auto& c : cohorts_)
        (void)c.window.pin(pin_);  // a cohort's own ranks: it guards them all
      return;
    }
  }
}

bool custody_model::every_slot_holds(step_t step) const {
  return !cohorts_.empty() &&
         std::all_of(cohorts_.begin(), cohorts_.end(), [&](const cohort& c) { return holds(c.slot.halves(), step, world_since_); });
}

void custody_model::merge() {
  for (std::size_t i = 0; i < cohorts_.size(); ++i) {
    for (std::size_t j = cohorts_.size(); j-- > i + 1;) {
      auto& a = cohorts_[i];
      auto& b = cohorts_[j];
      // Equal copies behave alike whichever half holds each: the rule picks by the copies' tags.
      if (a.slot.steps() != b.slot.steps() || sorted_halves(a.slot) != sorted_halves(b.slot) ||
          a.window.all() != b.window.all() || a.window.pinned() != b.window.pinned())
        continue;
      a.nodes.insert(a.nodes.end(), b.nodes.begin(), b.nodes.end());
      for (auto& r : pending_) {
        const bool from_b = std::erase(r.from, b.id) > 0;
        if (from_b && std::find(r.from.begin(), r.from.end(), a.id) == r.from.end())
          r.from.push_back(a.id);
      }
      cohorts_.erase(cohorts_.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
}

std::vector<custody_model::cohort_view> custody_model::cohorts() const {
  std::vector<cohort_view> out;
  for (const auto& c : cohorts_) {
    cohort_view v{c.id, c.nodes, {}, c.window.all()};
    for (const auto& h : c.slot.halves())
      if (h)
        v.slot.push_back(*h);
    out.push_back(std::move(v));
  }
  return out;
}

const custody_model::cohort* custody_model::largest() const {
  const cohort* best = nullptr;
  for (const auto& c : cohorts_)
    if (best == nullptr || c.nodes.size() > best->nodes.size())
      best = &c;
  return best;
}

std::vector<step_t> custody_model::slot_steps() const {
  const auto* c = largest();
  return c != nullptr ? c->slot.steps() : std::vector<step_t>{};
}

std::vector<step_t> custody_model::replica_steps() const {
  std::vector<step_t> out;
  if (const auto* c = largest())
    for (const auto& r : c->window.all())
      out.push_back(r.step);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace rekindle::trace
