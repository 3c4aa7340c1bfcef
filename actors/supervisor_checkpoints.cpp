// The supervisor's part of checkpoints on disk: when to persist, the manifest and its commit
// record, retention and garbage collection (docs/RUNTIME.md, "Checkpoints on disk").

#include <spdlog/spdlog.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/supervisor_actor.hpp"
#include "common/text.hpp"
#include "storage/shard_file.hpp"
#include "training/state.hpp"

namespace rekindle::actors {

using namespace policy;

namespace {

// The manifest beside the shards, for tools that read the directory alone (rekindle checkpoint).
std::string manifest_file_name(step_t step) {
  auto name = storage::shard_file_name(step, rank_id{0});
  return name.substr(0, name.find("-r")) + ".manifest.json";
}

status write_manifest_file(const std::filesystem::path& dir, const storage::checkpoint_manifest& m) {
  nlohmann::json j;
  j["step"] = m.step.value();
  j["world_size"] = m.world_size;
  j["layout_version"] = m.layout_version;
  j["shards"] = nlohmann::json::array();
  for (const auto& s : m.shards)
    j["shards"].push_back({{"rank", s.rank.value()}, {"file", s.file}, {"size", s.size}, {"checksum", s.checksum}});
  const auto path = dir / manifest_file_name(m.step);
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    out.flush();
    if (!out)
      return status{errc::io_error, "cannot write " + tmp};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return status{errc::io_error, "cannot rename " + tmp + ": " + ec.message()};
  return {};
}

void remove_files(const std::filesystem::path& dir, step_t step, std::uint32_t world) {
  std::error_code ec;
  for (std::uint32_t r = 0; r < world; ++r)
    std::filesystem::remove(dir / storage::shard_file_name(step, rank_id{r}), ec);
  std::filesystem::remove(dir / manifest_file_name(step), ec);
}

}  // namespace

std::filesystem::path supervisor_actor::checkpoint_dir() const {
  return config::checkpoint_dir_for(ctx_->spec, ctx_->data_dir);
}

void supervisor_actor::load_checkpoints() {
  auto all = store_->checkpoints();
  if (!all) {
    spdlog::error("checkpoint manifests cannot be read: {}", all.error().message());
    return;
  }
  std::set<std::string> referenced;
  for (const auto& m : *all) {
    if (!m.committed) {
      // A checkpoint an earlier run began and never committed: not a restore point, ever.
      if (auto s = store_->delete_checkpoint(m.step); !s.ok())
        spdlog::error("the pending checkpoint of step {} cannot be dropped: {}", m.step.value(), s.message());
      continue;
    }
    policy_.on_checkpoint_committed(m.step, m.world_size);
    if (!last_checkpoint_ || m.step.value() > *last_checkpoint_)
      last_checkpoint_ = m.step.value();
    for (const auto& s : m.shards)
      referenced.insert(s.file);
    referenced.insert(manifest_file_name(m.step));
  }
  const auto dir = checkpoint_dir();
  if (!std::filesystem::exists(dir))
    return;
  // Manifest files of steps that never committed go too: only committed steps keep theirs.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if ((name.ends_with(".manifest.json") || name.ends_with(".manifest.json.tmp")) && !referenced.contains(name))
      std::filesystem::remove(entry.path(), ec);
  }
  auto gc = storage::collect_garbage(dir, referenced);
  if (!gc)
    spdlog::warn("checkpoint directory {} not cleaned: {}", dir.string(), gc.error().message());
  else if (!gc->removed.empty())
    event("checkpoint_gc", "removed " + std::to_string(gc->removed.size()) + " file(s) of checkpoints that never committed (" +
                               format_bytes(static_cast<double>(gc->bytes)) + ") from " + dir.string());
}

void supervisor_actor::maybe_persist(step_t step) {
  const auto& c = ctx_->spec.checkpoint;
  if (c.persist_every == 0 || persist_ || finished_ || policy_.state() != job_state::running)
    return;
  if (!policy::is_anchor(step, c.snapshot_every) || (!checkpoint_now_ && step.value() < next_persist_step_) ||
      (last_checkpoint_ && step.value() <= *last_checkpoint_))
    return;
  // Counted first, checked once: the full check walks every rank, and each rank reports the step.
  if (++slot_reports_[step] < policy_.world()) {
    while (slot_reports_.size() > 16)
      slot_reports_.erase(slot_reports_.begin());
    return;
  }
  slot_reports_.erase(slot_reports_.begin(), slot_reports_.upper_bound(step));
  if (!policy_.copies().held_in_every_slot(step))
    return;
  storage::checkpoint_manifest m;
  m.step = step;
  m.world_size = policy_.world();
  m.layout_version = training::state_version;
  if (auto s = store_->put_checkpoint(m); !s.ok()) {
    persist_error_ = s.message();
    event("persist_failed", "checkpoint of step " + std::to_string(step.value()) + " not begun: " + s.message());
    next_persist_step_ = step.value() + c.persist_every * c.snapshot_every;
    return;
  }
  persist_ = persist_progress{policy_.epoch(), step, policy_.world(), {}, now_ns(*ctx_->time)};
  checkpoint_now_ = false;
  spdlog::debug("persisting step {} to {}", step.value(), checkpoint_dir().string());
  to_all_agents(policy_.epoch(), caf::make_message(persist_request{policy_.epoch(), step}));
}

void supervisor_actor::on_shard_persisted(const shard_persisted& s) {
  if (!persist_ || s.step != persist_->step || s.epoch != persist_->epoch) {
    // A shard of a checkpoint given up on: nothing will name it.
    if (s.ok && !(last_checkpoint_ && *last_checkpoint_ == s.step.value())) {
      std::error_code ec;
      std::filesystem::remove(checkpoint_dir() / s.file, ec);
    }
    return;
  }
  if (!s.ok && s.superseded) {
    // Not a failure: the next anchor's reports start the checkpoint again.
    spdlog::debug("checkpoint of step {} superseded: {}", s.step.value(), s.detail);
    drop_persist_in_progress();
    return;
  }
  if (!s.ok) {
    abandon_persist("rank " + std::to_string(s.rank.value()) + " on " + ctx_->spec.nodes.at(s.node.value()).name +
                    ": " + s.detail);
    return;
  }
  persist_->shards[s.rank] = storage::shard_entry{s.rank, s.file, s.size, s.checksum};
  if (persist_->shards.size() < persist_->world)
    return;
  // Every shard is durable: the manifest, then the synced commit record; only then is it a
  // checkpoint (a crash before leaves the previous one the newest).
  storage::checkpoint_manifest m;
  m.step = persist_->step;
  m.world_size = persist_->world;
  m.layout_version = training::state_version;
  std::uint64_t bytes = 0;
  for (const auto& [r, e] : persist_->shards) {
    m.shards.push_back(e);
    bytes += e.size;
  }
  auto st = store_->put_checkpoint(m);
  if (st.ok())
    st = store_->commit_checkpoint(m.step);
  if (!st.ok()) {
    abandon_persist("the commit record: " + st.message());
    return;
  }
  if (auto w = write_manifest_file(checkpoint_dir(), m); !w.ok())
    spdlog::warn("checkpoint of step {} committed; its manifest file: {}", m.step.value(), w.message());
  const double seconds = static_cast<double>(now_ns(*ctx_->time) - persist_->started_ns) / 1e9;
  last_checkpoint_ = m.step.value();
  persist_error_.clear();
  policy_.on_checkpoint_committed(m.step, m.world_size);
  const auto& c = ctx_->spec.checkpoint;
  next_persist_step_ = m.step.value() + c.persist_every * c.snapshot_every;
  persist_.reset();
  event("checkpoint_committed",
        "checkpoint of step " + std::to_string(m.step.value()) + ": " + std::to_string(m.world_size) + " shards, " +
            format_bytes(static_cast<double>(bytes)) + " in " + format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(seconds * 1e9)}),
        {}, {}, {{"step", std::to_string(m.step.value())}, {"bytes", std::to_string(bytes)}});
  apply_retention();
}

void supervisor_actor::drop_persist_in_progress() {
  if (!persist_)
    return;
  (void)store_->delete_checkpoint(persist_->step);
  remove_files(checkpoint_dir(), persist_->step, persist_->world);
  persist_.reset();
}

void supervisor_actor::abandon_persist(const std::string& why) {
  if (!persist_)
    return;
  const auto step = persist_->step;
  drop_persist_in_progress();
  persist_error_ = "checkpoint of step " + std::to_string(step.value()) + ": " + why;
  const auto& c = ctx_->spec.checkpoint;
  next_persist_step_ = step.value() + c.persist_every * c.snapshot_every;
  event("persist_failed", persist_error_ + "; training goes on from memory snapshots, the newest checkpoint on disk " +
                              (last_checkpoint_ ? "stays step " + std::to_string(*last_checkpoint_) : std::string{"is none"}));
}

void supervisor_actor::apply_retention() {
  auto committed = store_->committed_checkpoints();
  if (!committed)
    return;
  for (std::size_t i = ctx_->spec.checkpoint.keep; i < committed->size(); ++i) {
    const auto& m = (*committed)[i];
    // The record goes first: a crash after it leaves files that start-up collects.
    if (auto s = store_->delete_checkpoint(m.step); !s.ok()) {
      spdlog::warn("checkpoint of step {} not deleted: {}", m.step.value(), s.message());
      continue;
    }
    policy_.forget_checkpoint(m.step);
    remove_files(checkpoint_dir(), m.step, m.world_size);
    spdlog::debug("checkpoint of step {} deleted (keep = {})", m.step.value(), ctx_->spec.checkpoint.keep);
  }
}

}  // namespace rekindle::actors
