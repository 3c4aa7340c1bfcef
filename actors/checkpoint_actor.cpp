#include "actors/checkpoint_actor.hpp"

#include <spdlog/spdlog.h>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <tuple>

#include "common/checksum.hpp"
#include "common/text.hpp"

namespace rekindle::actors {
/// Work to finish inside the actor after a transport callback.
struct checkpoint_continuation {
  std::function<void(checkpoint_actor*)> fn;
};
}  // namespace rekindle::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rekindle::actors::checkpoint_continuation)

namespace rekindle::actors {

namespace {

/// Snapshots skipped in a row after which the wait is logged.
constexpr std::uint64_t long_wait = 2 * policy::snapshots_per_anchor;

// REKINDLE_FAULT_PERSIST="<sync point>[@<n> | @<file>]": the daemon kills itself with SIGKILL when
// its n-th shard write (default: the first), or any shard write once <file> exists, reaches the
// sync point, as a crash there would. For fault tests.
class crash_at_sync_point : public storage::shard_file_hooks {
 public:
  crash_at_sync_point(storage::shard_sync_point point, std::uint64_t nth, std::filesystem::path armed_by)
      : point_(point), nth_(nth), armed_by_(std::move(armed_by)) {}
  status at(storage::shard_sync_point point, const std::filesystem::path& file) override {
    if (point == storage::shard_sync_point::after_write)
      ++writes_;  // every write passes this point first, once
    if (point != point_)
      return {};
    if (armed_by_.empty() ? writes_ != nth_ : !std::filesystem::exists(armed_by_))
      return {};
    spdlog::warn("REKINDLE_FAULT_PERSIST: the daemon dies at {} of {}", storage::to_string(point), file.string());
    ::kill(::getpid(), SIGKILL);
    return {};
  }

 private:
  storage::shard_sync_point point_;
  std::uint64_t nth_;
  std::filesystem::path armed_by_;
  std::uint64_t writes_ = 0;
};

std::unique_ptr<storage::shard_file_hooks> persist_hooks_from_env() {
  const char* v = std::getenv("REKINDLE_FAULT_PERSIST");
  if (v == nullptr || *v == '\0')
    return nullptr;
  const std::string text{v};
  const auto at = text.find('@');
  auto point = storage::parse_shard_sync_point(text.substr(0, at));
  if (!point) {
    spdlog::error("REKINDLE_FAULT_PERSIST ignored: {}", point.error().message());
    return nullptr;
  }
  const std::string arg = at == std::string::npos ? std::string{} : text.substr(at + 1);
  if (arg.starts_with("/"))
    return std::make_unique<crash_at_sync_point>(*point, 0, arg);
  return std::make_unique<crash_at_sync_point>(*point, arg.empty() ? 1 : std::strtoull(arg.c_str(), nullptr, 10),
                                               std::filesystem::path{});
}

}  // namespace

checkpoint_actor::~checkpoint_actor() = default;

void checkpoint_actor::on_exit() {
  writer_.reset();
  persist_hooks_.reset();
}

checkpoint_actor::checkpoint_actor(caf::actor_config& cfg, node_context* ctx, std::vector<storage::snapshot_slot> slots)
    : caf::event_based_actor(cfg),
      ctx_(ctx),
      slots_(std::move(slots)),
      window_(ctx->spec.checkpoint.snapshot_every) {}

caf::behavior checkpoint_actor::make_behavior() {
  ctx_->bridge->expose("checkpoint", this);
  // Connections to other daemons end (a partition, a restart): the peer ids kept for them must go.
  ctx_->bridge->watch_peers(this);
  return {
      [this](const envelope&, const snapshot_taken& s) {
        if (s.local_index >= slots_.size())
          return;
        if (const auto n = std::exchange(skipped_[s.local_index], 0); n >= long_wait)
          spdlog::info("rank {}: snapshots go on after {} skipped", s.rank.value(), n);
        for (const auto& d : s.dropped)
          ctx_->supervisor->send("checkpoint", snapshot_dropped{d.epoch, d.rank, d.step, ctx_->node, copy_kind::local_slot});
        ctx_->supervisor->send("checkpoint", snapshot_held{s.epoch, s.rank, s.step, ctx_->node, copy_kind::local_slot});
        replicate(s.local_index, {s.epoch, s.rank, s.step});
      },
      [this](const envelope&, const snapshot_skipped& s) {
        if (s.local_index >= slots_.size())
          return;
        // A short wait is the replica's usual latency; a long one is worth a line in the log.
        const auto n = ++skipped_[s.local_index];
        if (n == long_wait)
          spdlog::warn("rank {}: snapshots wait: {} skipped, the last of step {}, to keep step {} (protected) and step {} "
                       "(not committed yet: its replicas lag)",
                       s.rank.value(), n, s.step.value(), s.pinned.value(), s.waiting.value());
        // The anchor's replica may never have been made (the buddy not known yet, a copy
        // overtaken): once an anchor interval, send it again, or the commit it waits for never comes.
        if (n % policy::snapshots_per_anchor == 0 && s.waiting.value() > 0)
          replicate(s.local_index, {s.epoch, s.rank, s.waiting});
      },
      [this](const envelope& from, const bulk_payload& p, const replica_header& h) {
        const auto sum = snapshot_checksum(p.bytes.span());
        if (p.bytes.size() != h.length || sum != h.checksum) {
          spdlog::warn("replica of rank {} step {} from node {} dropped: {} bytes, checksum {:016x}, expected {} and {:016x}",
                       h.rank.value(), h.step.value(), from.node.value(), p.bytes.size(), sum, h.length, h.checksum);
          return;
        }
        const policy::copy_tag tag{h.epoch, h.rank, h.step};
        std::erase_if(replicas_, [&](const replica& x) { return x.tag == tag; });
        replicas_.push_back({tag, h.checksum, p.bytes});
        for (const auto& gone : window_.add(tag))
          drop_replica(gone);
        ctx_->supervisor->send("checkpoint", snapshot_held{h.epoch, h.rank, h.step, ctx_->node, copy_kind::buddy_replica});
      },
      [this](const envelope& from, const state_request& r) {
        if (r.holder == ctx_->node)
          serve(from, r);
        else
          forward(from, r);
      },
      [this](const envelope&, const bulk_payload& p, const state_reply& r) {
        auto it = forwarded_.find(r.id);
        if (it == forwarded_.end())
          return;
        auto f = it->second;
        forwarded_.erase(it);
        state_reply out = r;
        out.id = f.requester_id;
        ctx_->bridge->send_bulk(f.requester, "checkpoint", f.requester_actor, out, p.bytes);
      },
      [this](const envelope&, const state_reply& r) {
        auto it = forwarded_.find(r.id);
        if (it == forwarded_.end())
          return;
        auto f = it->second;
        forwarded_.erase(it);
        reply_error(f.requester, f.requester_actor, f.requester_id, r.error);
      },
      [this](const assign_ranks& a) {
        buddy_ = a.buddy;
        buddy_address_ = a.buddy_address;
        local_ranks_.clear();
        for (const auto& r : a.ranks)
          local_ranks_[r.local_index] = r.rank;
      },
      [this](const persist_request& p) { persist(p); },
      [this](connect_atom) { report_all(); },
      [this](const snapshot_committed& c) {
        // Pinned where the custody rule reads it: no slot and no replica window loses it now.
        const policy::custody_pin pin{c.epoch, c.step};
        if (const auto was = window_.pinned(); std::tie(pin.epoch, pin.step) <= std::tie(was.epoch, was.step))
          return;  // the pin only moves forward
        // The replicas of ranks no longer guarded here go (policy/snapshot_custody.hpp).
        const auto stale = window_.pin(pin);
        for (const auto& gone : stale)
          drop_replica(gone);
        if (!stale.empty())
          spdlog::info("{} replica(s) of ranks no longer guarded here dropped (all older than the committed step {}), "
                       "the first of rank {} step {}",
                       stale.size(), pin.step.value(), stale.front().rank.value(), stale.front().step.value());
        for (auto& slot : slots_)
          slot.pin(pin);
      },
      [this](const peer_event& e) {
        if (e.up)
          return;
        // The next request to that daemon connects again; those sent on the lost connection fail.
        std::erase_if(peers_, [&](const auto& p) { return p.second == e.peer; });
        for (auto it = forwarded_.begin(); it != forwarded_.end();) {
          if (it->second.holder == e.peer) {
            reply_error(it->second.requester, it->second.requester_actor, it->second.requester_id,
                        "the connection to the holder " + e.name + " ended: " + e.reason);
            it = forwarded_.erase(it);
          } else {
            ++it;
          }
        }
      },
      [this](const job_finished&) {},
      [this](const checkpoint_continuation& c) { c.fn(this); },
      [this](const link_probe_request& r) { probe_link(r); },
      [this](const envelope& from, const bulk_payload& p, const link_probe& h) {
        ctx_->bridge->send(from.peer, "checkpoint", from.actor, link_probe_ack{h.id, h.seq, p.bytes.size()});
      },
      [this](const envelope&, const link_probe_ack& a) { on_probe_ack(a); },
  };
}

void checkpoint_actor::report_all() {
  std::uint32_t copies = 0;
  for (const auto& slot : slots_)
    for (const auto& h : slot.halves())
      if (h) {
        ctx_->supervisor->send("checkpoint", snapshot_held{h->epoch, h->rank, h->step, ctx_->node, copy_kind::local_slot});
        ++copies;
      }
  for (const auto& r : window_.all()) {
    ctx_->supervisor->send("checkpoint", snapshot_held{r.epoch, r.rank, r.step, ctx_->node, copy_kind::buddy_replica});
    ++copies;
  }
  // After them on the same connection: the supervisor knows this node's copies are all in.
  ctx_->supervisor->send("checkpoint", holdings_reported{ctx_->node, copies});
}

void checkpoint_actor::with_peer(const std::string& address, std::function<void(expected<transport::peer_id>)> then) {
  if (auto it = peers_.find(address); it != peers_.end()) {
    then(it->second);
    return;
  }
  // One connection per address: callers while it is being made wait for it.
  auto to = parse_host_port(address);
  if (!to) {
    then(to.error());
    return;
  }
  auto& waiting = connecting_[address];
  waiting.push_back(std::move(then));
  if (waiting.size() > 1)
    return;
  caf::actor self = this;
  // The connection completes on the transport's thread; continue inside this actor.
  ctx_->bridge->connect(to->host, to->port, [self, address](expected<transport::peer_info> r) mutable {
    caf::anon_send(self, checkpoint_continuation{[address, r = std::move(r)](checkpoint_actor* a) {
                     auto callers = std::move(a->connecting_[address]);
                     a->connecting_.erase(address);
                     if (r)
                       a->peers_[address] = r->id;
                     for (auto& call : callers)
                       call(r ? expected<transport::peer_id>{r->id} : expected<transport::peer_id>{r.error()});
                   }});
  });
}

namespace {

// A probe (with its repeats) that takes longer has failed: the link is as good as down.
constexpr auto link_probe_deadline = std::chrono::seconds{20};
constexpr std::uint64_t max_link_probe_bytes = 256ull << 20;
constexpr std::uint32_t max_link_probe_repeats = 16;

}  // namespace

void checkpoint_actor::probe_link(const link_probe_request& r) {
  const auto refuse = [&](const std::string& why) {
    ctx_->supervisor->send("checkpoint", link_report{r.id, ctx_->node, r.peer, 0, why});
  };
  if (r.bytes == 0 || r.bytes > max_link_probe_bytes || r.repeats == 0 || r.repeats > max_link_probe_repeats)
    return refuse("a probe of " + std::to_string(r.bytes) + " bytes x " + std::to_string(r.repeats) +
                  " is out of range (1 byte to 256 MiB, 1 to 16 times)");
  if (link_runs_.contains(r.id))
    return refuse("probe " + std::to_string(r.id) + " is already running");
  caf::actor self = this;
  const auto id = r.id;
  delayed_send(self, link_probe_deadline, checkpoint_continuation{[id](checkpoint_actor* a) {
                 if (a->link_runs_.contains(id))
                   a->end_link_run(id, "no answer within " + std::to_string(link_probe_deadline.count()) + " s");
               }});
  link_runs_[id] = link_run{r, transport::peer_id{0}, transport::shared_bytes{std::vector<std::byte>(r.bytes)}, 0, {}, 0};
  with_peer(r.address, [this, id](expected<transport::peer_id> p) {
    auto it = link_runs_.find(id);
    if (it == link_runs_.end())
      return;
    if (!p)
      return end_link_run(id, "cannot reach " + it->second.request.address + ": " + p.error().message());
    it->second.peer = *p;
    send_probe(it->second);
  });
}

void checkpoint_actor::send_probe(link_run& run) {
  ++run.seq;
  run.sent = std::chrono::steady_clock::now();
  ctx_->bridge->send_bulk(run.peer, "checkpoint", "checkpoint", link_probe{run.request.id, run.seq}, run.payload);
}

void checkpoint_actor::on_probe_ack(const link_probe_ack& a) {
  auto it = link_runs_.find(a.id);
  if (it == link_runs_.end() || a.seq != it->second.seq)
    return;
  auto& run = it->second;
  if (a.bytes != run.request.bytes)
    return end_link_run(a.id, "the peer received " + std::to_string(a.bytes) + " bytes of " + std::to_string(run.request.bytes));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.sent).count();
  run.best_s = run.seq == 1 ? s : std::min(run.best_s, s);
  if (run.seq < run.request.repeats)
    return send_probe(run);
  end_link_run(a.id, {});
}

void checkpoint_actor::end_link_run(std::uint64_t id, std::string error) {
  auto it = link_runs_.find(id);
  if (it == link_runs_.end())
    return;
  const auto& run = it->second;
  const double mbps = error.empty() ? static_cast<double>(run.request.bytes) / std::max(run.best_s, 1e-9) / 1e6 : 0.0;
  if (!error.empty())
    spdlog::warn("link probe to node {} failed: {}", run.request.peer.value(), error);
  ctx_->supervisor->send("checkpoint", link_report{id, ctx_->node, run.request.peer, mbps, std::move(error)});
  link_runs_.erase(it);
}

void checkpoint_actor::persist(const persist_request& p) {
  const auto dir = config::checkpoint_dir_for(ctx_->spec, ctx_->data_dir);
  const auto fail = [&](rank_id rank, const std::string& why, bool superseded = false) {
    if (!superseded)
      spdlog::warn("shard of rank {} step {} not persisted: {}", rank.value(), p.step.value(), why);
    ctx_->supervisor->send("checkpoint", shard_persisted{p.epoch, p.step, rank, ctx_->node, false,
                                                             storage::shard_file_name(p.step, rank), 0, 0, 0, why,
                                                             superseded});
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!writer_) {
    persist_hooks_ = persist_hooks_from_env();
    caf::actor self = this;
    writer_ = std::make_unique<storage::shard_writer>(
        [self](storage::shard_done finished) {
          auto shared = std::make_shared<storage::shard_done>(std::move(finished));
          caf::anon_send(self, checkpoint_continuation{[shared](checkpoint_actor* a) {
                           auto& d = *shared;
                           // The buffer goes back for the next checkpoint (two per local rank kept).
                           if (a->spare_buffers_.size() < 2 * std::max<std::size_t>(a->slots_.size(), 1))
                             a->spare_buffers_.push_back(std::move(d.buffer));
                           // The epoch of the request that asked for this step.
                           const auto it = a->persist_epochs_.find(d.step);
                           const epoch_t epoch = it != a->persist_epochs_.end() ? it->second : epoch_t{0};
                           shard_persisted out{epoch, d.step, d.rank, a->ctx_->node, d.result.has_value(), d.file};
                           out.write_ns = static_cast<std::int64_t>(d.seconds * 1e9);
                           if (d.result) {
                             out.size = d.result->size;
                             out.checksum = d.result->checksum;
                           } else {
                             out.detail = d.result.error().message();
                             spdlog::warn("shard of rank {} step {} not persisted: {}", d.rank.value(), d.step.value(),
                                          out.detail);
                           }
                           a->ctx_->supervisor->send("checkpoint", out);
                         }});
        },
        persist_hooks_.get());
  }
  persist_epochs_[p.step] = p.epoch;
  while (persist_epochs_.size() > 8)
    persist_epochs_.erase(persist_epochs_.begin());
  for (const auto& [local, rank] : local_ranks_) {
    if (local >= slots_.size()) {
      fail(rank, "local rank " + std::to_string(local) + " has no slot on node " + ctx_->node_name());
      continue;
    }
    auto view = slots_[local].at_step(p.step, false);
    if (!view) {
      // Training ran past the next anchor before the request came: that one is persisted instead.
      const auto held_now = slots_[local].steps();
      const bool newer_anchor = std::any_of(held_now.begin(), held_now.end(), [&](step_t s) {
        return s > p.step && policy::is_anchor(s, ctx_->spec.checkpoint.snapshot_every);
      });
      fail(rank, view.error().message(), newer_anchor);
      continue;
    }
    if (view->rank != rank) {
      fail(rank, "slot " + std::to_string(local) + " holds another rank's state of step " + std::to_string(p.step.value()));
      continue;
    }
    // Copied by the writer's copy thread at once, while the slot still holds it (the half is
    // reused a few snapshots on, sooner than a disk takes to write it), into a buffer an earlier
    // checkpoint used: faulted in, not zeroed. Not on this thread: the copies of a node's ranks
    // take seconds on busy cores, and the snapshot reports behind them would wait as long.
    storage::shard_buffer buffer;
    if (!spare_buffers_.empty()) {
      buffer = std::move(spare_buffers_.back());
      spare_buffers_.pop_back();
    }
    const auto* slot = &slots_[local];  // slots_ outlives writer_ (declared before it)
    storage::shard_source source{view->data, [slot, v = *view] { return slot->still_valid(v); }, view->checksum,
                                 "the snapshot of step " + std::to_string(p.step.value()) + " in slot " +
                                     std::to_string(local)};
    storage::shard_job job{dir, p.step, rank, std::move(buffer), 0, 0, std::move(source)};
    writer_->submit(std::move(job));
  }
}

void checkpoint_actor::drop_replica(const policy::copy_tag& gone) {
  std::erase_if(replicas_, [&](const replica& x) { return x.tag == gone; });
  ctx_->supervisor->send("checkpoint", snapshot_dropped{gone.epoch, gone.rank, gone.step, ctx_->node, copy_kind::buddy_replica});
}

void checkpoint_actor::replicate(std::uint32_t local_index, const policy::copy_tag& c) {
  if (buddy_address_.empty() || buddy_ == ctx_->node)
    return;
  // Behind the writer: a newer snapshot of this slot is published and its own report follows, so
  // the copy goes to that one. A busy node then falls behind by at most one snapshot per anchor.
  // Anchors are always copied: restores after a node loss rely on them.
  if (auto newest = slots_[local_index].latest(false);
      newest && newest->step != c.step && !policy::is_anchor(c.step, ctx_->spec.checkpoint.snapshot_every)) {
    spdlog::debug("replication of {} skipped: step {} is published since", policy::to_string(c), newest->step.value());
    return;
  }
  auto view = slots_[local_index].at_step(c.step, false);
  if (!view || view->epoch != c.epoch || view->rank != c.rank) {
    // Overwritten before its turn came (a newer anchor replaced it): the newer one follows.
    spdlog::debug("replication of {} skipped: {}", policy::to_string(c),
                  view ? "the slot holds another copy of that step" : view.error().message());
    return;
  }
  std::vector<std::byte> copy(view->data.size());
  const auto sum = copy_and_checksum(copy, view->data);
  if (!slots_[local_index].still_valid(*view) || sum != view->checksum) {
    spdlog::warn("replication of {} skipped: the snapshot changed while it was copied", policy::to_string(c));
    return;
  }
  transport::shared_bytes payload{std::move(copy)};
  const replica_header header{c.epoch, c.rank, c.step, payload.size(), sum};
  with_peer(buddy_address_, [this, header, payload](expected<transport::peer_id> p) {
    if (!p) {
      spdlog::warn("replication of rank {} step {} to {} failed: {}", header.rank.value(), header.step.value(),
                   buddy_address_, p.error().message());
      return;
    }
    ctx_->bridge->send_bulk(*p, "checkpoint", "checkpoint", header, payload);
  });
}

void checkpoint_actor::reply_error(transport::peer_id to, const std::string& actor, std::uint64_t id, const std::string& why) {
  ctx_->bridge->send(to, "checkpoint", actor, state_reply{id, false, why, 0, 0});
}

void checkpoint_actor::serve(const envelope& from, const state_request& r) {
  const auto where = "node " + ctx_->node_name();
  std::optional<transport::shared_bytes> found;
  std::uint64_t checksum = 0;
  std::string error = "rank " + std::to_string(r.rank.value()) + " step " + std::to_string(r.step.value()) +
                      " is not held on " + where;
  const auto holds_rank = [&](const storage::snapshot_slot& slot, std::optional<step_t> step) {
    const auto halves = slot.halves();
    return std::any_of(halves.begin(), halves.end(),
                       [&](const auto& h) { return h && h->rank == r.rank && (!step || h->step == *step); });
  };
  if (r.kind == copy_kind::local_slot) {
    for (std::uint32_t local = 0; local < slots_.size() && !found; ++local) {
      if (!holds_rank(slots_[local], r.step))
        continue;
      auto view = slots_[local].at_step(r.step, true);
      if (!view) {
        error = view.error().message();
        continue;
      }
      if (view->rank != r.rank)
        continue;
      std::vector<std::byte> copy(view->data.begin(), view->data.end());
      if (!slots_[local].still_valid(*view)) {
        error = "the snapshot of step " + std::to_string(r.step.value()) + " was overwritten while it was read";
        continue;
      }
      checksum = view->checksum;
      found = transport::shared_bytes{std::move(copy)};
    }
  } else if (r.kind == copy_kind::buddy_replica) {
    for (const auto& rep : replicas_)
      if (rep.tag.rank == r.rank && rep.tag.step == r.step) {
        found = rep.bytes;
        checksum = rep.checksum;
      }
  } else {
    error = "checkpoints on disk are not held by " + where;
  }
  if (!found && r.kind == copy_kind::buddy_replica) {
    std::string steps;
    for (const auto& c : window_.of(r.rank))
      steps += (steps.empty() ? "" : ", ") + std::to_string(c.step.value()) + " (epoch " + std::to_string(c.epoch.value()) + ")";
    error += " (replicas of rank " + std::to_string(r.rank.value()) + " here: " + (steps.empty() ? "none" : steps) + ")";
  }
  if (!found && r.kind == copy_kind::local_slot && error.ends_with(" is not held on " + where)) {
    // Say what the rank's slot holds instead.
    for (std::uint32_t local = 0; local < slots_.size(); ++local) {
      if (!holds_rank(slots_[local], std::nullopt))
        continue;
      std::string steps;
      for (auto s : slots_[local].steps())
        steps += (steps.empty() ? "" : ", ") + std::to_string(s.value());
      error += " (slot " + std::to_string(local) + " holds step " + (steps.empty() ? "none" : steps) + ")";
    }
  }
  if (!found) {
    reply_error(from.peer, from.actor, r.id, error);
    return;
  }
  ctx_->bridge->send_bulk(from.peer, "checkpoint", from.actor, state_reply{r.id, true, "", found->size(), checksum}, *found);
}

void checkpoint_actor::forward(const envelope& from, const state_request& r) {
  const std::uint64_t id = next_id_++;
  forwarded_[id] = {from.peer, from.actor, r.id};
  state_request out = r;
  out.id = id;
  with_peer(r.holder_address, [this, out, id](expected<transport::peer_id> p) {
    if (!p) {
      auto it = forwarded_.find(id);
      if (it != forwarded_.end()) {
        reply_error(it->second.requester, it->second.requester_actor, it->second.requester_id,
                    "cannot reach the daemon at " + out.holder_address + ": " + p.error().message());
        forwarded_.erase(it);
      }
      return;
    }
    if (auto it = forwarded_.find(id); it != forwarded_.end())
      it->second.holder = *p;
    ctx_->bridge->send(*p, "checkpoint", "checkpoint", out);
  });
}

}  // namespace rekindle::actors
