#include "actors/rank_session.hpp"

#include <spdlog/spdlog.h>

#include "actors/node_context.hpp"
#include "common/checksum.hpp"
#include "common/logging.hpp"
#include "common/text.hpp"
#include "storage/shard_file.hpp"

namespace rekindle::actors {

// ---- rank_process ------------------------------------------------------------------------------

expected<std::unique_ptr<rank_process>> rank_process::connect(const config::spec& spec, node_id node,
                                                              const std::string& label, const std::string& agent) {
  auto to = parse_host_port(agent);
  if (!to)
    return to.error().with_context("the agent's address");
  std::unique_ptr<rank_process> p{new rank_process};
  p->config_ = std::make_unique<caf::actor_system_config>();
  configure_actor_system(*p->config_, 1);
  p->system_ = std::make_unique<caf::actor_system>(*p->config_);
  auto b = bridge::start(*p->system_, messenger_options_for(spec, node, label));
  if (!b)
    return b.error().with_context("starting the transport");
  p->bridge_ = std::move(*b);
  auto peer = p->bridge_->connect_blocking(to->host, to->port, std::chrono::seconds{30});
  if (!peer)
    return peer.error().with_context("reaching the agent at " + agent);
  p->agent_ = peer->id;
  return p;
}

rank_process::~rank_process() {
  if (bridge_)
    bridge_->shutdown();
  bridge_.reset();
  system_.reset();
}

// ---- the session's actor -----------------------------------------------------------------------

using clock_type = std::chrono::steady_clock;

/// The session's actor: control messages in, heartbeats out.
class session_actor : public caf::event_based_actor {
 public:
  session_actor(caf::actor_config& cfg, rank_session* s) : caf::event_based_actor(cfg), s_(s) {}
  const char* name() const override { return "worker"; }

  caf::behavior make_behavior() override {
    s_->ctx_.bridge->expose("worker", this);
    s_->ctx_.bridge->watch_peers(this);
    s_->exposed_.set_value();
    send(this, tick_atom::value);
    return {
        [this](tick_atom) {
          if (const auto index = s_->heartbeat_index_.load(); index != rank_session::no_rank) {
            const auto at = s_->collectives.now();
            std::uint64_t epoch = 0;
            {
              std::lock_guard lock{s_->mutex_};
              epoch = s_->assigned_epoch_;
            }
            // The step reports made since the last tick go first, in the same wake-up.
            s_->to_agent(worker_heartbeat{index, epoch_t{epoch}, at.seq, at.kind, at.phase, at.for_how_long.count(),
                                          at.p2p.kind, at.p2p.phase, at.p2p.peer, at.p2p.for_how_long.count()});
          }
          delayed_send(this, s_->ctx_.spec.timeouts.keepalive(), tick_atom::value);
        },
        [this](const envelope&, const worker_activate& a) { s_->push(a); },
        [this](const envelope&, const worker_assignment& a) { s_->push(a); },
        [this](const envelope&, const start_training& st) { s_->push(st); },
        [this](const envelope&, const abort_epoch& a) {
          s_->abort(a.epoch);
          s_->push(a);
        },
        [this](const envelope&, const drill_request& d) {
          spdlog::warn("fault drill on this rank: {} (factor {})", to_string(d.kind), d.factor);
          if (d.kind == drill_kind::hang) {
            s_->hang = true;
          } else if (d.kind == drill_kind::slow) {
            s_->slow_factor = d.factor;
          } else if (d.kind == drill_kind::stall) {
            {
              std::lock_guard lock{s_->mutex_};
              s_->stall_epoch = s_->assigned_epoch_;
            }
            s_->stall_until_ns =
                (clock_type::now() + std::chrono::nanoseconds{static_cast<std::int64_t>(d.factor * 1e9)})
                    .time_since_epoch()
                    .count();
          }
        },
        [this](const envelope&, const job_finished& j) {
          s_->abort(epoch_t{~std::uint64_t{0}});
          s_->push(session_end{j.state});
        },
        [this](const envelope&, const bulk_payload& p, const state_reply& r) {
          if (r.ok && p.bytes.size() == r.length && snapshot_checksum(p.bytes.span()) == r.checksum)
            s_->deliver(r.id, p.bytes);
          else
            s_->deliver(r.id, status{errc::data_loss, "state " + std::to_string(r.id) + " arrived damaged (" +
                                                          std::to_string(p.bytes.size()) + " bytes)"});
        },
        [this](const envelope&, const state_reply& r) { s_->deliver(r.id, status{errc::not_found, r.error}); },
        [this](const peer_event& e) {
          if (!e.up && e.peer == s_->ctx_.agent) {
            // The node daemon is gone: this process has no one to report to.
            spdlog::error("rank lost its agent ({}); its session ends", e.reason);
            s_->abort(epoch_t{~std::uint64_t{0}});
            s_->exit_status_ = 4;
            s_->push(session_end{"agent lost"});
          }
        },
    };
  }

 private:
  rank_session* s_;
};

// ---- rank_session ------------------------------------------------------------------------------

rank_session::rank_session(caf::actor_system& sys, worker_context ctx, std::optional<storage::snapshot_slot> slot)
    : ctx_(std::move(ctx)), slot_(std::move(slot)), heartbeat_index_(ctx_.local_index.value_or(no_rank)) {
  auto exposed = exposed_.get_future();
  actor_ = sys.spawn<session_actor>(this);
  // Nothing may be sent before the actor can take the answer: a frame for an actor not yet
  // exposed is dropped.
  exposed.wait();
}

rank_session::~rank_session() {
  flush_progress();  // a program that ends without saying so: its last steps still count
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

void rank_session::on_abort(std::function<void(epoch_t)> hook) {
  std::lock_guard lock{mutex_};
  abort_hook_ = std::move(hook);
}

void rank_session::push(command c) {
  {
    std::lock_guard lock{mutex_};
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void rank_session::abort(epoch_t newer) {
  std::lock_guard lock{mutex_};
  if (abort_hook_ && assigned_epoch_ < newer.value())
    abort_hook_(newer);
}

rank_session::command rank_session::next() {
  std::unique_lock lock{mutex_};
  cv_.wait(lock, [&] { return !commands_.empty(); });
  auto c = std::move(commands_.front());
  commands_.pop_front();
  return c;
}

std::optional<rank_session::command> rank_session::next_for(std::chrono::nanoseconds timeout) {
  std::unique_lock lock{mutex_};
  if (!cv_.wait_for(lock, timeout, [&] { return !commands_.empty(); }))
    return std::nullopt;
  auto c = std::move(commands_.front());
  commands_.pop_front();
  return c;
}

bool rank_session::interrupted() const {
  std::lock_guard lock{mutex_};
  return !commands_.empty();
}

void rank_session::end(std::string why, int exit_status) {
  if (exit_status != 0)
    exit_status_ = exit_status;
  push(session_end{std::move(why)});
}

void rank_session::report(const progress_report& p) {
  std::lock_guard lock{progress_mutex_};
  const auto now = ctx_.time != nullptr ? ctx_.time->now() : real_clock{}.now();
  if (!progress_epoch_ || progress_epoch_->first != p.epoch) {
    send_progress();  // a batch holds one epoch's
    progress_epoch_.emplace(p.epoch, now);
  }
  progress_.push_back(p);
  if (now - progress_epoch_->second < progress_batching::prompt_for || progress_.size() >= progress_batching::max_batch)
    send_progress();
}

void rank_session::flush_progress() {
  std::lock_guard lock{progress_mutex_};
  send_progress();
}

void rank_session::send_progress() {
  if (progress_.empty())
    return;
  const auto epoch = progress_.front().epoch;
  ctx_.bridge->send(ctx_.agent, "worker", "agent", progress_batch{epoch, ctx_.node, std::move(progress_)});
  progress_.clear();
}

void rank_session::enter(const worker_assignment& a) {
  {
    std::lock_guard lock{mutex_};
    assigned_epoch_ = a.epoch.value();
  }
  set_log_rank(a.rank.value());
  collectives.reset();
  ctx_.bridge->set_epoch(a.epoch);
}

void rank_session::map_slots_ahead() {
  // Opening a slot faults in both halves (hundreds of MB for a large state): work that must not
  // wait for a failure.
  for (std::uint32_t i = 0; i < ctx_.spec.ranks_on(ctx_.node); ++i)
    if (auto s = storage::snapshot_slot::open(storage::snapshot_slot::name_for(ctx_.node_dir, ctx_.spec.job.name, i)))
      standby_slots_.emplace(i, std::move(*s));
  // Read page by page too (snapshot_slot::touch_pages), before the standby says it is ready: where
  // the first access to a page through a new mapping is slow (6.5 µs a page on the VM of
  // docs/PERFORMANCE.md), the restore would pay it, about 100 ms for 65 MB. Tried before and
  // dropped because a failure soon after a recovery lost up to 19 steps: the commits those
  // failures waited for were held up by the checkpoint actor's copies (now on storage/
  // shard_writer's thread), and with the reads back no kill of bench/recovery lost more than the
  // snapshot interval.
  for (const auto& [index, slot] : standby_slots_)
    slot.touch_pages();
}

status rank_session::activate(std::uint32_t index) {
  expected<storage::snapshot_slot> slot = status{errc::not_found, "not mapped ahead"};
  if (auto it = standby_slots_.find(index); it != standby_slots_.end())
    slot = std::move(it->second);
  else
    slot = storage::snapshot_slot::open(storage::snapshot_slot::name_for(ctx_.node_dir, ctx_.spec.job.name, index));
  standby_slots_.clear();
  if (!slot)
    return slot.error().with_context("opening the slot of local rank " + std::to_string(index));
  slot_ = std::move(*slot);
  ctx_.local_index = index;
  heartbeat_index_.store(index);
  return {};
}

expected<rank_session::snapshot_outcome> rank_session::snapshot(const storage::snapshot_meta& meta,
                                                                const snapshot_fill& fill) {
  RK_ASSIGN_OR_RETURN(auto begun, begin_snapshot(meta));
  if (begun.skipped())
    return snapshot_outcome{true, 0, 0};
  auto filled = fill(begun.half);
  if (!filled)
    return filled.error();
  return finish_snapshot(begun, filled->first, filled->second);
}

expected<rank_session::snapshot_begun> rank_session::begin_snapshot(const storage::snapshot_meta& meta) {
  if (!slot_ || !ctx_.local_index)
    return status{errc::failed_precondition, "this rank has no snapshot slot"};
  const auto& tag = meta.tag;
  auto t = slot_->begin_write(meta);
  if (!t)
    return t.error();
  if (t->skipped()) {
    to_checkpoint(snapshot_skipped{tag.epoch, tag.rank, *ctx_.local_index, tag.step, t->plan.pinned, t->plan.waiting});
    return snapshot_begun{meta, {}, std::nullopt};
  }
  return snapshot_begun{meta, t->half, t->plan.overwrites};
}

expected<rank_session::snapshot_outcome> rank_session::finish_snapshot(const snapshot_begun& begun, std::uint64_t length,
                                                                       std::uint64_t checksum) {
  if (!slot_ || !ctx_.local_index || begun.skipped())
    return status{errc::failed_precondition, "no snapshot was begun into this rank's slot"};
  if (auto st = slot_->publish(length, checksum); !st.ok())
    return st;
  std::vector<policy::copy_tag> dropped;
  if (begun.overwrites)
    dropped.push_back(*begun.overwrites);
  const auto& tag = begun.meta.tag;
  to_checkpoint(snapshot_taken{tag.epoch, tag.rank, *ctx_.local_index, tag.step, length, checksum, std::move(dropped)});
  return snapshot_outcome{false, length, checksum};
}

void rank_session::deliver(std::uint64_t id, expected<transport::shared_bytes> bytes) {
  std::lock_guard lock{mutex_};
  if (auto it = pending_.find(id); it != pending_.end()) {
    it->second.set_value(std::move(bytes));
    pending_.erase(it);
  }
}

expected<transport::shared_bytes> rank_session::fetch(const state_request& r, std::chrono::nanoseconds timeout) {
  std::future<expected<transport::shared_bytes>> f;
  state_request req = r;
  {
    std::lock_guard lock{mutex_};
    req.id = next_request_++;
    f = pending_[req.id].get_future();
  }
  to_checkpoint(req);
  if (f.wait_for(timeout) != std::future_status::ready) {
    std::lock_guard lock{mutex_};
    pending_.erase(req.id);
    return status{errc::timeout, "no answer for the state of rank " + std::to_string(r.rank.value()) + " step " +
                                     std::to_string(r.step.value())};
  }
  return f.get();
}

status rank_session::still_valid(const state_read& read, step_t step) const {
  if (read.view && slot_ && !slot_->still_valid(*read.view))
    return status{errc::unavailable, "the snapshot of step " + std::to_string(step.value()) +
                                         " was overwritten while it was read"};
  return {};
}

expected<rank_session::state_read> rank_session::read_state(const start_training& start, rank_id rank,
                                                            std::uint32_t world, std::optional<restore_source>& failed,
                                                            bool verified_by_reader) {
  const bool same_world = start.restore_world == world;
  state_read out;
  out.source = std::string{to_string(copy_kind::local_slot)};
  const auto step_text = std::to_string(start.restore_step.value());
  for (const auto& s : start.sources) {
    if (same_world && s.old_rank != rank)
      continue;  // this rank restores its own state only
    // Its own slot first: a survivor, or a rank restarted in place.
    if (s.kind == copy_kind::local_slot && s.holder == ctx_.node && slot_) {
      const bool reader_verifies = same_world && verified_by_reader;
      auto view = slot_->at_step(start.restore_step, !reader_verifies);
      if (view && view->rank == s.old_rank && view->world == start.restore_world) {
        if (same_world) {
          // Straight from the slot: nothing writes it while this rank restores, and a write that
          // raced the use is caught after it (still_valid).
          out.buffers.push_back(view->data);
          out.view = *view;
          if (reader_verifies)
            out.unverified = s;
          return out;
        }
        out.held.push_back(transport::shared_bytes::copy_of(view->data));
        if (!slot_->still_valid(*view))
          return status{errc::unavailable, "the snapshot of step " + step_text + " was overwritten while it was read"};
        out.buffers.push_back(out.held.back().span());
        continue;
      }
    }
    if (s.kind == copy_kind::disk) {
      // A committed checkpoint: the shard file, read and verified by this rank itself.
      const auto file = config::checkpoint_dir_for(ctx_.spec, ctx_.node_dir.parent_path()) /
                        storage::shard_file_name(start.restore_step, s.old_rank);
      std::vector<std::byte> payload;
      auto info = storage::read_shard(file, payload, {.step = start.restore_step, .rank = s.old_rank});
      if (!info) {
        failed = s;
        return info.error().with_context("restoring rank " + std::to_string(s.old_rank.value()) + " of step " +
                                         step_text + " from disk");
      }
      out.source = std::string{to_string(copy_kind::disk)};
      out.held.push_back(transport::shared_bytes{std::move(payload)});
      out.buffers.push_back(out.held.back().span());
      continue;
    }
    const auto holder_address =
        s.holder.value() < start.node_addresses.size() ? start.node_addresses[s.holder.value()] : std::string{};
    auto bytes = fetch(state_request{0, s.old_rank, start.restore_step, s.kind, s.holder, holder_address},
                       ctx_.spec.timeouts.rendezvous);
    if (!bytes) {
      failed = s;
      return bytes.error().with_context("restoring rank " + std::to_string(s.old_rank.value()) + " of step " +
                                        step_text);
    }
    // Another node's memory or disk: "buddy memory on n1", "memory on n1".
    out.source = std::string{s.kind == copy_kind::local_slot ? "memory" : to_string(s.kind)} + " on " +
                 ctx_.spec.nodes.at(s.holder.value()).name;
    out.held.push_back(std::move(*bytes));
    out.buffers.push_back(out.held.back().span());
  }
  if (out.buffers.empty())
    return status{errc::not_found,
                  "no source holds the state of rank " + std::to_string(rank.value()) + " at step " + step_text};
  return out;
}

}  // namespace rekindle::actors
