#include "policy/checkpoint_coordinator.hpp"

#include "common/text.hpp"
#include "policy/snapshot_custody.hpp"

namespace rekindle::policy {

namespace {
/// Own-slot reports counted for steps that are not due yet.
constexpr std::size_t counted_steps = 16;
}  // namespace

checkpoint_coordinator::checkpoint_coordinator(std::uint64_t persist_every, std::uint64_t snapshot_every,
                                               const clock& time)
    : persist_every_(persist_every), snapshot_every_(snapshot_every), clock_(time) {}

std::optional<step_t> checkpoint_coordinator::writing() const noexcept {
  return current_ ? std::optional<step_t>{current_->step} : std::nullopt;
}

void checkpoint_coordinator::committed_before(step_t step) {
  if (!last_ || step > *last_)
    last_ = step;
}

bool checkpoint_coordinator::request_now() {
  if (!enabled())
    return false;
  next_step_ = 0;
  asked_ = true;
  return true;
}

bool checkpoint_coordinator::due(step_t step) const {
  return enabled() && phase_ == phase::idle && is_anchor(step, snapshot_every_) &&
         (asked_ || step.value() >= next_step_) && (!last_ || step > *last_);
}

std::optional<step_t> checkpoint_coordinator::on_slot_report(step_t step, epoch_t, std::uint32_t world) {
  if (!due(step))
    return std::nullopt;
  // Counted first, checked once: the owner's check walks every rank, and each rank reports.
  if (++reports_[step] < world) {
    while (reports_.size() > counted_steps)
      reports_.erase(reports_.begin());
    return std::nullopt;
  }
  reports_.erase(reports_.begin(), reports_.upper_bound(step));
  return step;
}

std::optional<step_t> checkpoint_coordinator::on_slot_report_all(step_t step, epoch_t, std::uint32_t) {
  if (!due(step))
    return std::nullopt;
  reports_.erase(reports_.begin(), reports_.upper_bound(step));
  return step;
}

std::vector<checkpoint_action> checkpoint_coordinator::begin(step_t step, epoch_t epoch, std::uint32_t world) {
  phase_ = phase::beginning;
  current_ = in_progress{epoch, step, world, {}, clock_.now()};
  asked_ = false;
  return {begin_persist{epoch, step, world}};
}

std::vector<checkpoint_action> checkpoint_coordinator::begin_failed(const std::string& why) {
  if (!current_)
    return {};
  const auto step = current_->step;
  current_.reset();
  phase_ = phase::idle;
  error_ = why;
  next_after(step);
  return {checkpoint_note{"persist_failed", "checkpoint of step " + std::to_string(step.value()) + " not begun: " + why,
                          {{"step", std::to_string(step.value())}}}};
}

void checkpoint_coordinator::begun() {
  if (current_ && phase_ == phase::beginning)
    phase_ = phase::writing;
}

std::vector<checkpoint_action> checkpoint_coordinator::on_shard(const shard_result& r) {
  if (!current_ || phase_ != phase::writing || r.step != current_->step || r.epoch != current_->epoch) {
    // A shard of a checkpoint given up on: nothing will name it.
    if (r.ok && !(last_ && *last_ == r.step))
      return {remove_shard_file{r.shard.file}};
    return {};
  }
  if (!r.ok && r.superseded) {
    // Not a failure: the next anchor's reports start the checkpoint again.
    return give_up("", false);
  }
  if (!r.ok)
    return give_up("rank " + std::to_string(r.shard.rank.value()) + " on " + r.node + ": " + r.detail, true);
  current_->shards[r.shard.rank] = r.shard;
  if (current_->shards.size() < current_->world)
    return {};
  // Every shard is durable: the manifest, then the synced commit record; only then is it a
  // checkpoint (a crash before leaves the previous one the newest).
  phase_ = phase::committing;
  commit_checkpoint c{current_->step, current_->world, {}};
  for (const auto& [rank, shard] : current_->shards)
    c.shards.push_back(shard);
  return {std::move(c)};
}

std::vector<checkpoint_action> checkpoint_coordinator::on_every_shard(bool ok, const std::string& node,
                                                                     const std::string& why) {
  if (!current_ || phase_ != phase::writing)
    return {};
  if (!ok)
    return give_up("a shard on " + node + ": " + why, true);
  phase_ = phase::committing;
  return {commit_checkpoint{current_->step, current_->world, {}}};
}

std::vector<checkpoint_action> checkpoint_coordinator::committed() {
  if (!current_ || phase_ != phase::committing)
    return {};
  const auto& c = *current_;
  std::uint64_t bytes = 0;
  for (const auto& [rank, shard] : c.shards)
    bytes += shard.size;
  const auto took = clock_.now() - c.started;
  checkpoint_note note{"checkpoint_committed",
                       "checkpoint of step " + std::to_string(c.step.value()) + ": " + std::to_string(c.world) +
                           " shards, " + format_bytes(static_cast<double>(bytes)) + " in " + format_duration(took),
                       {{"step", std::to_string(c.step.value())}, {"bytes", std::to_string(bytes)}}};
  last_ = c.step;
  error_.clear();
  next_after(c.step);
  current_.reset();
  phase_ = phase::idle;
  return {std::move(note)};
}

std::vector<checkpoint_action> checkpoint_coordinator::commit_failed(const std::string& why) {
  return give_up("the commit record: " + why, true);
}

std::vector<checkpoint_action> checkpoint_coordinator::on_epoch(epoch_t e) {
  reports_.clear();
  if (current_ && current_->epoch != e)
    return give_up("epoch " + std::to_string(e.value()) + " began before every shard was written", true);
  return {};
}

std::vector<checkpoint_action> checkpoint_coordinator::on_job_end() { return current_ ? give_up("", false) : std::vector<checkpoint_action>{}; }

std::vector<checkpoint_action> checkpoint_coordinator::give_up(const std::string& why, bool with_event) {
  std::vector<checkpoint_action> out;
  if (!current_)
    return out;
  const auto step = current_->step;
  out.push_back(drop_checkpoint{step, current_->world});
  current_.reset();
  phase_ = phase::idle;
  if (!with_event)
    return out;
  error_ = "checkpoint of step " + std::to_string(step.value()) + ": " + why;
  next_after(step);
  out.push_back(checkpoint_note{"persist_failed",
                                error_ + "; training goes on from memory snapshots, the newest checkpoint on disk " +
                                    (last_ ? "stays step " + std::to_string(last_->value()) : std::string{"is none"}),
                                {{"step", std::to_string(step.value())}}});
  return out;
}

std::uint64_t checkpoint_coordinator::interval_steps(std::uint64_t persist_every, std::uint64_t snapshot_every) {
  const auto anchor = snapshot_every * snapshots_per_anchor;
  const auto due = persist_every * snapshot_every;
  return anchor == 0 ? 0 : (due + anchor - 1) / anchor * anchor;
}

void checkpoint_coordinator::next_after(step_t step) { next_step_ = step.value() + persist_every_ * snapshot_every_; }

}  // namespace rekindle::policy
