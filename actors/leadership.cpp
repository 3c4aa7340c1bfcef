#include "actors/leadership.hpp"

#include <spdlog/spdlog.h>


#include "actors/messages.hpp"
#include "actors/supervisor_actor.hpp"
#include "common/files.hpp"
#include "common/process.hpp"
#include "common/text.hpp"
#include "storage/state_replica.hpp"
#include "storage/state_store.hpp"

namespace rekindle::actors {

namespace {

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

constexpr std::size_t max_pulls_in_a_row = 1000;
constexpr std::chrono::milliseconds pull_interval{100};
constexpr std::chrono::seconds pull_timeout{3};

storage::etcd_client client_for(const config::spec& spec) {
  auto hp = parse_host_port(spec.cluster.etcd);  // validated with the configuration
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(spec.cluster.lease / 3);
  return hp ? storage::etcd_client{hp->host, hp->port, timeout} : storage::etcd_client{"127.0.0.1", 2379, timeout};
}

}  // namespace

std::string leader_key(const config::spec& spec) {
  return "/rekindle/" + spec.cluster.name + "/" + spec.job.name + "/leader";
}

std::string leader_value(const std::string& node, const std::string& address) { return node + " " + address; }

named_leader parse_leader_value(std::string_view value) {
  const auto space = value.find(' ');
  if (space == std::string_view::npos)
    return {std::string{value}, ""};
  return {std::string{value.substr(0, space)}, std::string{value.substr(space + 1)}};
}

expected<std::optional<named_leader>> ask_etcd_for_leader(const config::spec& spec, std::chrono::milliseconds timeout) {
  auto hp = parse_host_port(spec.cluster.etcd);
  if (!hp)
    return status{errc::invalid_argument, "cluster.etcd: " + hp.error().message()};
  storage::etcd_client etcd{hp->host, hp->port, timeout};
  RK_ASSIGN_OR_RETURN(auto got, etcd.get(leader_key(spec)));
  if (!got)
    return std::optional<named_leader>{};
  return std::optional<named_leader>{parse_leader_value(got->value)};
}

// ---- replica_actor ----

replica_actor::replica_actor(caf::actor_config& cfg, node_context* ctx, std::unique_ptr<storage::state_replica> replica,
                             std::atomic<bool>* complete)
    : caf::event_based_actor(cfg), ctx_(ctx), replica_(std::move(replica)), complete_(complete) {
  complete_->store(replica_->position().complete());
}

void replica_actor::on_exit() {
  if (replica_)
    (void)replica_->close();
  replica_.reset();
}

void replica_actor::pull() {
  const auto& at = replica_->position();
  if (ctx_->supervisor->send("replica", replica_pull{++pull_id_, at.source, at.next, at.copying, at.copied}))
    asked_ = ctx_->time->now();
  else
    asked_.reset();
}

caf::behavior replica_actor::make_behavior() {
  ctx_->bridge->expose("replica", this);
  send(this, tick_atom::value);
  return {
      [this](tick_atom) {
        // Ask again when nothing is in flight, or the answer is long overdue (the leader changed).
        if (!asked_ || ctx_->time->now() - *asked_ > pull_timeout)
          pull();
        delayed_send(this, pull_interval, tick_atom::value);
      },
      [this](const envelope&, const replica_changes& c) {
        if (c.id != pull_id_ || !replica_)
          return;  // the answer to an earlier pull
        asked_.reset();
        storage::replication_chunk chunk;
        chunk.reset = c.reset;
        chunk.batches = c.batches;
        chunk.next = {c.source, c.next, c.copying, c.copied};
        if (auto st = replica_->apply(chunk); !st.ok()) {
          spdlog::error("the supervisor's replica could not apply the leader's changes: {}", st.message());
          return;
        }
        const bool was_complete = complete_->exchange(replica_->position().complete());
        if (!was_complete && replica_->position().complete())
          spdlog::info("the supervisor's replica holds a whole copy of the leader's state");
        // More waiting: ask at once (bounded by the pull ids), else at the next tick.
        if ((!c.batches.empty() || c.copying) && pull_id_ % max_pulls_in_a_row != 0)
          pull();
      },
  };
}

// ---- leadership ----

leadership::leadership(caf::actor_system& sys, node_context& ctx, caf::actor agent)
    : sys_(sys),
      ctx_(ctx),
      agent_(std::move(agent)),
      etcd_(client_for(ctx.spec)),
      key_(leader_key(ctx.spec)),
      value_(leader_value(ctx.node_name(), ctx.address)),
      candidate_(ctx.node == ctx.spec.supervisor_node() || ctx.node_name() == ctx.spec.cluster.standby),
      primary_(ctx.node == ctx.spec.supervisor_node()),
      poll_(std::min<std::chrono::nanoseconds>(ctx.spec.cluster.lease / 6, std::chrono::milliseconds{500})) {
  thread_ = std::thread([this] { run(); });
}

leadership::~leadership() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (supervisor_) {
    // Ended with the daemon: the lease goes at once, so a standby need not wait it out.
    caf::scoped_actor self{sys_};
    self->send_exit(supervisor_, caf::exit_reason::user_shutdown);
    self->wait_for(supervisor_);
    supervisor_ = nullptr;
    (void)etcd_.revoke(lease_);
  }
  stop_replica();
}

void leadership::run() {
  name_this_thread("rk-leadership");
  std::unique_lock lock{mutex_};
  while (!stopping_) {
    lock.unlock();
    step();
    lock.lock();
    wake_.wait_for(lock, poll_, [this] { return stopping_; });
  }
}

void leadership::publish(std::int64_t term, const std::string& node, const std::string& address) {
  if (term == published_term_ && address == published_address_)
    return;
  published_term_ = term;
  published_address_ = address;
  ctx_.leader.set(term, node, address);
  if (term == 0)
    spdlog::warn("no daemon leads the supervisor now (etcd {})", etcd_.address());
  else
    spdlog::info("the supervisor's leader is {} at {} (term {})", node, address, term);
  caf::anon_send(agent_, leader_seen{term, node, address});
}

void leadership::step() {
  const auto now = steady::now();
  auto got = etcd_.get(key_);
  if (!got) {
    if (now - last_error_log_ > std::chrono::seconds{5}) {
      last_error_log_ = now;
      spdlog::warn("etcd: {}", got.error().message());
    }
  } else if (*got) {
    const auto& v = **got;
    auto named = parse_leader_value(v.value);
    publish(v.create_revision, std::move(named.node), std::move(named.address));
  } else {
    publish(0, "", "");
  }
  if (!candidate_)
    return;
  if (leading_) {
    if (got && *got && (**got).create_revision != term_) {
      resign("etcd names another leader (term " + std::to_string((**got).create_revision) + ")");
      return;
    }
    if (got && !*got) {
      resign("its key is gone from etcd (the lease expired)");
      return;
    }
    if (now >= next_renew_) {
      next_renew_ = now + ctx_.spec.cluster.lease / 3;
      auto left = etcd_.keep_alive(lease_);
      if (left) {
        renewed_ = now;
        ctx_.lead_until_ns = (renewed_ + ctx_.spec.cluster.lease - poll_).time_since_epoch().count();
      }
      else if (left.error().code() == errc::not_found) {
        resign("its lease expired");
        return;
      }
    }
    // Stop acting before etcd can give the key to another: the lease runs from a renewal's
    // request, which etcd received after `renewed_`.
    if (steady::now() - renewed_ > ctx_.spec.cluster.lease - poll_)
      resign("its lease was not renewed for " + format_duration(steady::now() - renewed_));
    return;
  }
  if (got && !*got && (primary_ || replica_complete_.load()))
    campaign();
  else if (got && *got && published_address_ != ctx_.address)
    follow();
}

void leadership::campaign() {
  const auto started = steady::now();
  if (lease_ == 0) {
    auto id = etcd_.grant(std::chrono::duration_cast<std::chrono::seconds>(ctx_.spec.cluster.lease));
    if (!id) {
      spdlog::warn("etcd: no lease for the supervisor: {}", id.error().message());
      return;
    }
    lease_ = *id;
  }
  auto r = etcd_.create(key_, value_, lease_);
  if (!r) {
    spdlog::warn("etcd: the campaign for the supervisor failed: {}", r.error().message());
    return;
  }
  if (!r->created) {
    if (r->current.lease != lease_) {
      // Another daemon won; this lease is not needed.
      (void)etcd_.revoke(lease_);
      lease_ = 0;
    }
    return;
  }
  renewed_ = started;
  next_renew_ = started + ctx_.spec.cluster.lease / 3;
  become_leader(r->current.create_revision);
}

void leadership::become_leader(std::int64_t term) {
  stop_replica();
  auto store = storage::state_store::open(ctx_.node_dir / "state", {.clk = ctx_.time});
  if (!store) {
    spdlog::error("this daemon won the supervisor's lease but cannot open its state store: {}", store.error().message());
    (void)etcd_.revoke(lease_);
    lease_ = 0;
    return;
  }
  term_ = term;
  ctx_.lead_until_ns = (renewed_ + ctx_.spec.cluster.lease - poll_).time_since_epoch().count();
  spdlog::info("this daemon leads the supervisor now (term {})", term);
  supervisor_ = sys_.spawn<supervisor_actor>(&ctx_, std::move(*store), term);
  leading_ = true;
  (void)write_file_atomically(ctx_.data_dir / "supervisor.addr", ctx_.address + "\n");
  publish(term, ctx_.node_name(), ctx_.address);
}

void leadership::resign(const std::string& why) {
  ctx_.lead_until_ns = 0;
  spdlog::error("this daemon stops leading the supervisor (term {}): {}", term_, why);
  if (supervisor_) {
    caf::scoped_actor self{sys_};
    self->send_exit(supervisor_, caf::exit_reason::kill);
    self->wait_for(supervisor_);
    supervisor_ = nullptr;
  }
  leading_ = false;
  (void)etcd_.revoke(lease_);
  lease_ = 0;
  term_ = 0;
}

void leadership::follow() {
  if (replica_)
    return;
  auto replica = storage::state_replica::open(ctx_.node_dir / "state");
  if (!replica) {
    spdlog::error("the supervisor's replica cannot be opened: {}", replica.error().message());
    return;
  }
  replica_ = sys_.spawn<replica_actor>(&ctx_, std::move(*replica), &replica_complete_);
}

void leadership::stop_replica() {
  if (!replica_)
    return;
  caf::scoped_actor self{sys_};
  self->send_exit(replica_, caf::exit_reason::user_shutdown);
  self->wait_for(replica_);
  replica_ = nullptr;
}

}  // namespace rekindle::actors
