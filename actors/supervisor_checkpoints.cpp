// The supervisor's part of checkpoints on disk: when to persist, the manifest and its commit
// record, retention and garbage collection (docs/RUNTIME.md, "Checkpoints on disk").

#include <spdlog/spdlog.h>


#include "actors/supervisor_actor.hpp"
#include "common/text.hpp"
#include "storage/manifest_file.hpp"
#include "storage/shard_file.hpp"
#include "training/state.hpp"

namespace rekindle::actors {

using namespace policy;

namespace {

void remove_files(const std::filesystem::path& dir, step_t step, std::uint32_t world) {
  std::error_code ec;
  for (std::uint32_t r = 0; r < world; ++r)
    std::filesystem::remove(dir / storage::shard_file_name(step, rank_id{r}), ec);
  std::filesystem::remove(dir / storage::manifest_file_name(step), ec);
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
    checkpoints_.committed_before(m.step);
    for (const auto& s : m.shards)
      referenced.insert(s.file);
    referenced.insert(storage::manifest_file_name(m.step));
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
  if (finished_ || policy_.state() != job_state::running)
    return;
  if (const auto due = checkpoints_.on_slot_report(step, policy_.epoch(), policy_.world());
      due && policy_.copies().held_in_every_slot(*due))
    carry_out(checkpoints_.begin(*due, policy_.epoch(), policy_.world()));
}

void supervisor_actor::on_shard_persisted(const shard_persisted& s) {
  carry_out(checkpoints_.on_shard({s.epoch, s.step, {s.rank, s.file, s.size, s.checksum}, s.ok, s.superseded,
                                   ctx_->spec.nodes.at(s.node.value()).name, s.detail}));
}

void supervisor_actor::carry_out(std::vector<checkpoint_action> actions) {
  for (auto& action : actions) {
    if (const auto* b = std::get_if<begin_persist>(&action)) {
      storage::checkpoint_manifest m;
      m.step = b->step;
      m.world_size = b->world;
      m.layout_version = training::state_version;
      if (auto st = store_->put_checkpoint(m); !st.ok()) {
        carry_out(checkpoints_.begin_failed(st.message()));
        continue;
      }
      checkpoints_.begun();
      persist_began_ns_ = now_ns(*ctx_->time);
      spdlog::debug("persisting step {} to {}", b->step.value(), checkpoint_dir().string());
      to_all_agents(persist_request{b->epoch, b->step});
    } else if (const auto* c = std::get_if<commit_checkpoint>(&action)) {
      storage::checkpoint_manifest m;
      m.step = c->step;
      m.world_size = c->world;
      m.layout_version = training::state_version;
      for (const auto& shard : c->shards)
        m.shards.push_back(storage::shard_entry{shard.rank, shard.file, shard.size, shard.checksum});
      auto st = store_->put_checkpoint(m);
      if (st.ok())
        st = store_->commit_checkpoint(m.step);
      if (!st.ok()) {
        carry_out(checkpoints_.commit_failed(st.message()));
        continue;
      }
      if (auto w = storage::write_manifest_file(checkpoint_dir(), m); !w.ok())
        spdlog::warn("checkpoint of step {} committed; its manifest file: {}", m.step.value(), w.message());
      policy_.on_checkpoint_committed(m.step, m.world_size);
      if (persist_began_ns_ > 0)
        persist_s_ = static_cast<double>(now_ns(*ctx_->time) - persist_began_ns_) / 1e9;
      ++persists_committed_;
      carry_out(checkpoints_.committed());
      apply_retention();
    } else if (const auto* d = std::get_if<drop_checkpoint>(&action)) {
      // The record goes first: a crash after it leaves files that start-up collects.
      (void)store_->delete_checkpoint(d->step);
      remove_files(checkpoint_dir(), d->step, d->world);
    } else if (const auto* r = std::get_if<remove_shard_file>(&action)) {
      std::error_code ec;
      std::filesystem::remove(checkpoint_dir() / r->file, ec);
    } else if (const auto* n = std::get_if<checkpoint_note>(&action)) {
      event(n->kind, n->detail, {}, {}, n->fields);
    }
  }
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
