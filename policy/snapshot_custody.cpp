#include "policy/snapshot_custody.hpp"

#include <algorithm>
#include <tuple>

namespace rekindle::policy {

std::string to_string(const copy_tag& c) {
  return "rank " + std::to_string(c.rank.value()) + " step " + std::to_string(c.step.value()) + " (epoch " +
         std::to_string(c.epoch.value()) + ")";
}

std::optional<step_t> protected_step(custody_pin pin, epoch_t epoch, step_t restore_step) noexcept {
  if (pin.epoch >= epoch && pin.step > restore_step)
    return pin.step;
  if (restore_step.value() > 0)
    return restore_step;
  return std::nullopt;
}

slot_write plan_slot_write(const std::array<std::optional<copy_tag>, 2>& halves, std::optional<step_t> protect,
                           const copy_tag& what, std::uint64_t snapshot_every) noexcept {
  // A: the newest anchor this writer wrote in its epoch, when newer than the protected step.
  std::optional<step_t> anchor;
  for (const auto& h : halves)
    if (h && h->epoch == what.epoch && is_anchor(h->step, snapshot_every) && (!protect || h->step > *protect) &&
        (!anchor || h->step > *anchor))
      anchor = h->step;
  const bool holds_protected =
      protect && std::any_of(halves.begin(), halves.end(), [&](const auto& h) { return h && h->step == *protect; });
  // An anchor replaces an older anchor not committed yet (every rank writes every anchor), unless
  // that one is all the slot keeps; a snapshot between anchors replaces neither.
  const bool keep_anchor = !is_anchor(what.step, snapshot_every) || !holds_protected;
  // The protected step is kept once: a step retrained after a restore can be in both halves, and
  // only the newer copy is kept (else the slot could never be written again).
  std::optional<std::size_t> protected_half;
  for (std::size_t h = 0; h < 2; ++h)
    if (halves[h] && protect && halves[h]->step == *protect &&
        (!protected_half || halves[h]->epoch > halves[*protected_half]->epoch))
      protected_half = h;
  std::array<bool, 2> kept{};
  for (std::size_t h = 0; h < 2; ++h)
    kept[h] = halves[h] && (h == protected_half || (keep_anchor && anchor && halves[h]->step == *anchor));
  slot_write out;
  // An empty half first; else the older copy (a copy of an earlier epoch, then the older step).
  for (std::uint32_t h = 0; h < 2; ++h) {
    if (kept[h])
      continue;
    if (!halves[h]) {
      out.half = h;
      out.overwrites.reset();
      return out;
    }
    if (!out.half || std::tie(halves[h]->epoch, halves[h]->step) <
                         std::tie(halves[*out.half]->epoch, halves[*out.half]->step)) {
      out.half = h;
      out.overwrites = halves[h];
    }
  }
  if (!out.half) {
    out.pinned = protect.value_or(step_t{0});
    out.waiting = anchor.value_or(step_t{0});
  }
  return out;
}

slot_write slot_contents::write(const copy_tag& what, std::optional<step_t> protect, std::uint64_t snapshot_every) {
  auto plan = plan_slot_write(halves_, protect, what, snapshot_every);
  if (plan.half)
    halves_[*plan.half] = what;
  return plan;
}

std::vector<step_t> slot_contents::steps() const {
  std::vector<step_t> out;
  for (const auto& h : halves_)
    if (h)
      out.push_back(h->step);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<copy_tag> replica_window::add(const copy_tag& c) {
  std::erase_if(held_, [&](const copy_tag& x) { return x == c; });
  held_.push_back(c);
  std::vector<const copy_tag*> mine;
  for (const auto& x : held_)
    if (x.rank == c.rank)
      mine.push_back(&x);
  // The two newest anchors, then the oldest others make room.
  std::vector<step_t> anchors;
  for (auto x = mine.rbegin(); x != mine.rend() && anchors.size() < 2; ++x)
    if (is_anchor((*x)->step, every_) && std::find(anchors.begin(), anchors.end(), (*x)->step) == anchors.end())
      anchors.push_back((*x)->step);
  std::vector<copy_tag> evicted;
  std::size_t count = mine.size();
  for (const auto* x : mine) {
    if (count <= replicas_kept_per_rank)
      break;
    if ((pin_.step.value() > 0 && x->step == pin_.step) || std::find(anchors.begin(), anchors.end(), x->step) != anchors.end())
      continue;
    evicted.push_back(*x);
    --count;
  }
  std::erase_if(held_, [&](const copy_tag& x) { return std::find(evicted.begin(), evicted.end(), x) != evicted.end(); });
  return evicted;
}

bool outdated_by(std::span<const copy_tag> replicas, custody_pin pin) noexcept {
  return pin.step.value() > 0 && std::none_of(replicas.begin(), replicas.end(), [&](const copy_tag& x) { return x.step >= pin.step; });
}

std::vector<copy_tag> replica_window::pin(custody_pin p) {
  pin_ = p;
  // The ranks whose replicas here are all older than the pin are no longer guarded here.
  std::vector<rank_id> checked, outdated;
  for (const auto& x : held_) {
    if (std::find(checked.begin(), checked.end(), x.rank) != checked.end())
      continue;
    checked.push_back(x.rank);
    if (outdated_by(of(x.rank), p))
      outdated.push_back(x.rank);
  }
  std::vector<copy_tag> gone;
  std::erase_if(held_, [&](const copy_tag& x) {
    if (std::find(outdated.begin(), outdated.end(), x.rank) == outdated.end())
      return false;
    gone.push_back(x);
    return true;
  });
  return gone;
}

std::vector<copy_tag> replica_window::of(rank_id rank) const {
  std::vector<copy_tag> out;
  for (const auto& x : held_)
    if (x.rank == rank)
      out.push_back(x);
  return out;
}

std::vector<copy_tag> replica_window::all() const {
  auto out = held_;
  std::stable_sort(out.begin(), out.end(), [](const copy_tag& a, const copy_tag& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace rekindle::policy
