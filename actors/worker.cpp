#include "actors/worker.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>

#include "storage/shard_file.hpp"
#include "common/checksum.hpp"
#include "training/state.hpp"
#include "training/training_task.hpp"

namespace rekindle::actors {

namespace {

using clock_type = std::chrono::steady_clock;

std::int64_t ns_since(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t).count();
}

kernels::device_request device_for(const config::spec& spec, node_id node, std::uint32_t local_index) {
  const auto& n = spec.nodes.at(node.value());
  config::device_spec d = n.devices.empty() || local_index >= n.devices.size() ? config::device_spec{} : n.devices[local_index];
  kernels::device_request r;
  switch (d.type) {
    case config::device_spec::kind::auto_select:
      r.type = kernels::device_request::kind::auto_select;
      r.index = static_cast<int>(local_index);
      break;
    case config::device_spec::kind::cpu:
      r.type = kernels::device_request::kind::cpu;
      break;
    case config::device_spec::kind::cuda:
      r.type = kernels::device_request::kind::cuda;
      r.index = d.index >= 0 ? d.index : static_cast<int>(local_index);
      break;
  }
  return r;
}

}  // namespace

/// The worker's actor: control messages in, heartbeats out.
class worker_actor : public caf::event_based_actor {
 public:
  worker_actor(caf::actor_config& cfg, worker_runtime* rt) : caf::event_based_actor(cfg), rt_(rt) {}
  const char* name() const override { return "worker"; }

  caf::behavior make_behavior() override {
    rt_->ctx_.bridge->expose("worker", this);
    rt_->ctx_.bridge->watch_peers(this);
    send(this, tick_atom::value);
    return {
        [this](tick_atom) {
          rt_->to_agent(worker_heartbeat{rt_->ctx_.local_index.value_or(~0u)});
          delayed_send(this, rt_->ctx_.spec.timeouts.heartbeat, tick_atom::value);
        },
        [this](const envelope&, const worker_activate& a) { rt_->push(a); },
        [this](const envelope&, const worker_assignment& a) { rt_->push(a); },
        [this](const envelope&, const start_training& s) { rt_->push(s); },
        [this](const envelope&, const abort_epoch& a) {
          rt_->abort_current(a.epoch);
          rt_->push(a);
        },
        [this](const envelope&, const drill_request& d) {
          spdlog::warn("fault drill on this rank: {} (factor {})", to_string(d.kind), d.factor);
          if (d.kind == drill_kind::hang)
            rt_->hang_ = true;
          else if (d.kind == drill_kind::slow)
            rt_->slow_factor_ = d.factor;
          else if (d.kind == drill_kind::stall) {
            {
              std::lock_guard lock{rt_->mutex_};
              rt_->stall_epoch_ = rt_->assignment_ ? rt_->assignment_->epoch.value() : 0;
            }
            rt_->stall_until_ns_ = (clock_type::now() + std::chrono::nanoseconds{static_cast<std::int64_t>(d.factor * 1e9)})
                                       .time_since_epoch()
                                       .count();
          }
        },
        [this](const envelope&, const job_finished& j) {
          rt_->abort_current(epoch_t{~std::uint64_t{0}});
          rt_->push(worker_runtime::finish{j.state});
        },
        [this](const envelope&, const bulk_payload& p, const state_reply& r) {
          if (r.ok && p.bytes.size() == r.length && snapshot_checksum(p.bytes.span()) == r.checksum)
            rt_->deliver(r.id, p.bytes);
          else
            rt_->deliver(r.id, status{errc::data_loss, "state " + std::to_string(r.id) + " arrived damaged (" +
                                                           std::to_string(p.bytes.size()) + " bytes)"});
        },
        [this](const envelope&, const state_reply& r) {
          rt_->deliver(r.id, status{errc::not_found, r.error});
        },
        [this](const peer_event& e) {
          if (!e.up && e.peer == rt_->ctx_.agent) {
            // The node daemon is gone: this process has no one to report to.
            spdlog::error("worker lost its agent ({}); exiting", e.reason);
            rt_->abort_current(epoch_t{~std::uint64_t{0}});
            rt_->exit_status_ = 4;
            rt_->push(worker_runtime::finish{"agent lost"});
          }
        },
    };
  }

 private:
  worker_runtime* rt_;
};

worker_runtime::worker_runtime(caf::actor_system& sys, worker_context ctx, std::optional<storage::snapshot_slot> slot)
    : system_(sys), ctx_(std::move(ctx)), slot_(std::move(slot)) {
  actor_ = system_.spawn<worker_actor>(this);
}

worker_runtime::~worker_runtime() {
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

template <class T>
void worker_runtime::to_agent(const T& msg) {
  ctx_.bridge->send(ctx_.agent, "worker", "agent", msg);
}

template <class T>
void worker_runtime::to_checkpoint(const T& msg) {
  ctx_.bridge->send(ctx_.agent, "worker", "checkpoint", msg);
}

void worker_runtime::push(command c) {
  {
    std::lock_guard lock{mutex_};
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void worker_runtime::abort_current(epoch_t newer) {
  std::lock_guard lock{mutex_};
  if (comm_ && assignment_ && assignment_->epoch < newer)
    comm_->abort();
}

bool worker_runtime::interrupted() const {
  auto* self = const_cast<worker_runtime*>(this);
  std::lock_guard lock{self->mutex_};
  return !commands_.empty();
}

void worker_runtime::deliver(std::uint64_t id, expected<transport::shared_bytes> bytes) {
  std::lock_guard lock{mutex_};
  if (auto it = pending_.find(id); it != pending_.end()) {
    it->second.set_value(std::move(bytes));
    pending_.erase(it);
  }
}

expected<transport::shared_bytes> worker_runtime::fetch(const state_request& r, std::chrono::nanoseconds timeout) {
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

status worker_runtime::restore(const start_training& start, training::training_task& task, std::string& source,
                               std::optional<restore_source>& failed) {
  const auto rank = static_cast<std::uint32_t>(task.rank());
  const bool same_world = start.restore_world == static_cast<std::uint32_t>(task.world_size());
  std::vector<transport::shared_bytes> held;
  std::vector<std::span<const std::byte>> buffers;
  source = std::string{to_string(copy_kind::local_slot)};
  for (const auto& s : start.sources) {
    if (same_world && s.old_rank.value() != rank)
      continue;  // this rank restores its own state only
    // Its own slot first: a survivor, or a rank restarted in place.
    if (s.kind == copy_kind::local_slot && s.holder == ctx_.node) {
      auto view = slot_->at_step(start.restore_step, true);
      if (view && view->rank == s.old_rank && view->world == start.restore_world) {
        if (same_world) {
          // Straight from the slot: nothing writes it while this rank restores, and a write that
          // raced the import anyway is caught after it.
          auto st = task.import_state(std::vector<std::span<const std::byte>>{view->data});
          if (st.ok() && !slot_->still_valid(*view))
            st = status{errc::unavailable, "the snapshot of step " + std::to_string(start.restore_step.value()) +
                                               " was overwritten while it was read"};
          return st;
        }
        held.push_back(transport::shared_bytes::copy_of(view->data));
        if (!slot_->still_valid(*view))
          return status{errc::unavailable, "the snapshot of step " + std::to_string(start.restore_step.value()) +
                                               " was overwritten while it was read"};
        buffers.push_back(held.back().span());
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
                                         std::to_string(start.restore_step.value()) + " from disk");
      }
      source = std::string{to_string(copy_kind::disk)};
      held.push_back(transport::shared_bytes{std::move(payload)});
      buffers.push_back(held.back().span());
      continue;
    }
    const auto holder_address =
        s.holder.value() < start.node_addresses.size() ? start.node_addresses[s.holder.value()] : std::string{};
    auto bytes = fetch(state_request{0, s.old_rank, start.restore_step, s.kind, s.holder, holder_address},
                       ctx_.spec.timeouts.rendezvous);
    if (!bytes) {
      failed = s;
      return bytes.error().with_context("restoring rank " + std::to_string(s.old_rank.value()) + " of step " +
                                        std::to_string(start.restore_step.value()));
    }
    // Another node's memory or disk: "buddy memory on n1", "memory on n1".
    source = std::string{s.kind == copy_kind::local_slot ? "memory" : to_string(s.kind)} + " on " +
             ctx_.spec.nodes.at(s.holder.value()).name;
    held.push_back(std::move(*bytes));
    buffers.push_back(held.back().span());
  }
  if (buffers.empty())
    return status{errc::not_found, "no source holds the state of rank " + std::to_string(rank) + " at step " +
                                       std::to_string(start.restore_step.value())};
  return task.import_state(buffers);
}

void worker_runtime::train(const start_training& start) {
  worker_assignment a;
  transport::ring_communicator* comm = nullptr;
  {
    std::lock_guard lock{mutex_};
    if (!assignment_ || assignment_->epoch != start.epoch || !comm_)
      return;
    a = *assignment_;
    comm = comm_.get();
  }
  // The data plane's rendezvous.
  std::vector<std::vector<std::byte>> addresses;
  for (const auto& addr : start.addresses) {
    std::vector<std::byte> v(addr.size());
    std::memcpy(v.data(), addr.data(), addr.size());
    addresses.push_back(std::move(v));
  }
  auto t0 = clock_type::now();
  if (auto s = comm->connect(addresses); !s.ok()) {
    if (!interrupted())
      to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, s.message()});
    return;
  }
  const auto connect_ns = ns_since(t0);
  spdlog::debug("ring connected in {} ms", connect_ns / 1000000);
  // The task of the last epoch carries over when rank and world stay (a survivor): its memory is
  // warm and only the communicator changes. Otherwise a new one, uninitialised when a state will
  // be imported into it anyway.
  const auto task_start = clock_type::now();
  if (task_ && (start.restore_step.value() == 0 || !task_->rebind(*comm).ok()))
    task_.reset();  // back to step 0 means the seed's initialisation: a new task
  if (!task_) {
    training::task_options options;
    options.device = device_for(ctx_.spec, ctx_.node, *ctx_.local_index);
    options.initialize = start.restore_step.value() == 0;
    auto made = training::make_training_task(ctx_.spec, static_cast<int>(a.rank.value()), static_cast<int>(a.world),
                                             *comm, options);
    if (!made) {
      spdlog::error("worker cannot build its training task: {}", made.error().message());
      to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, made.error().message()});
      exit_status_ = 5;
      push(finish{"no task"});
      return;
    }
    task_ = std::move(*made);
    spdlog::debug("training task ready in {} ms", ns_since(task_start) / 1000000);
  }
  training::training_task* task = task_.get();
  if (auto s = task->set_micro_batches(start.micro_batches); !s.ok()) {
    spdlog::error("worker cannot take its micro-batch share: {}", s.message());
    to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, s.message()});
    return;
  }
  t0 = clock_type::now();
  std::string source = "none";
  if (start.restore_step.value() > 0) {
    std::optional<restore_source> failed;
    if (auto s = restore(start, *task, source, failed); !s.ok()) {
      spdlog::error("worker cannot restore: {}", s.message());
      if (failed)
        to_agent(restore_failed{a.epoch, a.rank, ctx_.node, start.restore_step,
                                                           failed->old_rank, failed->holder, failed->kind, s.message()});
      else
        to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, s.message()});
      return;
    }
  }
  spdlog::debug("restored step {} from {} in {} ms", start.restore_step.value(), source, ns_since(t0) / 1000000);
  to_agent(rank_restored{a.epoch, a.rank, start.restore_step, source, connect_ns, ns_since(t0)});
  const auto every = ctx_.spec.checkpoint.snapshot_every;
  const auto tokens = static_cast<std::uint64_t>(ctx_.spec.job.global_batch) * ctx_.spec.model.seq_len;
  // A step's time runs from the end of the one before (or its own start, first in an epoch): the
  // period of the loop, with the snapshot and report of the previous step in it.
  std::optional<clock_type::time_point> previous_end;
  while (task->current_step().value() < task->total_steps()) {
    if (interrupted())
      return;
    if (hang_) {
      // As behind a kernel that never returns: the process lives and heartbeats, its peers wait
      // in the next collective until the supervisor finds this rank and kills it.
      spdlog::warn("rank {} hangs before step {} (fault drill)", a.rank.value(), task->current_step().value() + 1);
      while (!interrupted())
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
      return;
    }
    // A partition across this rank: its collectives cannot complete until it heals.
    while (a.epoch.value() == stall_epoch_ && clock_type::now().time_since_epoch().count() < stall_until_ns_ &&
           !interrupted())
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    if (interrupted())
      return;
    const auto step_start = previous_end.value_or(clock_type::now());
    auto r = task->step();
    if (!r) {
      if (!interrupted() && !comm->aborted())
        to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, r.error().message()});
      return;
    }
    // A slowed rank (fault drill) computes `factor` times longer, as on a slower device: its
    // collectives are not slowed, and fewer micro-batches make it faster.
    auto compute_ns = r->timings.compute.count();
    if (const double factor = slow_factor_; factor > 1.0) {
      const auto extra = static_cast<std::int64_t>(static_cast<double>(compute_ns) * (factor - 1.0));
      std::this_thread::sleep_for(std::chrono::nanoseconds{extra});
      compute_ns += extra;
    }
    if (!previous_end)
      spdlog::debug("first step of epoch {} in {} ms", a.epoch.value(), ns_since(step_start) / 1000000);
    progress_report p{a.epoch,
                      a.rank,
                      r->step,
                      r->loss,
                      ns_since(step_start),
                      compute_ns,
                      r->timings.communication.count(),
                      0,
                      tokens};
    if (r->step.value() % every == 0) {
      // The training stall: export straight into the half the slot's custody rule gives, publish.
      // The rule never gives the half of the protected step (this epoch's restore step, or a newer
      // one the node pinned once every rank held it), and skips a snapshot that would overwrite
      // it while the newest anchor waits for its commit (policy/snapshot_custody.hpp).
      const auto snap_start = clock_type::now();
      const storage::snapshot_meta meta{{a.epoch, a.rank, r->step}, a.world, start.restore_step, every};
      auto t = slot_->begin_write(meta);
      if (!t) {
        spdlog::error("snapshot of step {} failed: {}", r->step.value(), t.error().message());
      } else if (t->skipped()) {
        to_checkpoint(snapshot_skipped{a.epoch, a.rank, *ctx_.local_index, r->step,
                                                                  t->plan.pinned, t->plan.waiting});
      } else {
        // The checksum comes out of the export's own pass: nothing reads the state again.
        auto sum = task->export_state(t->half);
        auto st = sum ? slot_->publish(task->state_size(), *sum) : sum.error();
        if (!st.ok()) {
          spdlog::error("snapshot of step {} failed: {}", r->step.value(), st.message());
        } else {
          p.snapshot_ns = ns_since(snap_start);
          std::vector<policy::copy_tag> dropped;
          if (t->plan.overwrites)
            dropped.push_back(*t->plan.overwrites);
          to_checkpoint(snapshot_taken{a.epoch, a.rank, *ctx_.local_index, r->step,
                                                                  task->state_size(), *sum, std::move(dropped)});
        }
      }
    }
    to_agent(p);
    // The next epoch's mailbox, once this one trains: never on the recovery path.
    if (r->step.value() == start.restore_step.value() + 1)
      (void)ring_->prepare();
    previous_end = clock_type::now();
  }
  spdlog::info("rank {} finished all {} steps", a.rank.value(), task->total_steps());
}

namespace {
transport::ring_options ring_options_of(const config::spec& spec, epoch_t epoch) {
  transport::ring_options ro;
  ro.timeout = spec.timeouts.collective;
  ro.chunk_size = spec.transport.chunk_size;
  ro.net_devices = spec.transport.net_devices;
  ro.tls = spec.transport.tls;
  ro.generation = static_cast<std::uint32_t>(epoch.value());
  return ro;
}
}  // namespace

void worker_runtime::prepare_standby_task() {
  // The task a standby is likely to need, built while nothing fails: rank 0 of the configured
  // world, memory allocated and touched, parameters not initialised (a state is imported on
  // activation). Only on the CPU: a GPU standby does not know its device yet.
  const auto t0 = clock_type::now();
  const int world = static_cast<int>(ctx_.spec.world_size());
  standby_comm_ = std::make_unique<transport::unconnected_communicator>(0, world);
  training::task_options options;
  options.device = device_for(ctx_.spec, ctx_.node, 0);
  options.initialize = false;
  if (options.device.type == kernels::device_request::kind::cuda)
    return;
  auto made = training::make_training_task(ctx_.spec, 0, world, *standby_comm_, options);
  if (!made) {
    spdlog::debug("standby builds its task on activation: {}", made.error().message());
    return;
  }
  if ((*made)->device() != kernels::device_kind::cpu)
    return;
  task_ = std::move(*made);
  spdlog::debug("standby task ready in {} ms (rank 0 of {})", ns_since(t0) / 1000000, world);
}

int worker_runtime::run() {
  if (auto r = transport::ring_resources::create(ring_options_of(ctx_.spec, epoch_t{0})); r) {
    ring_ = std::move(*r);
  } else {
    spdlog::error("worker cannot set up its data plane: {}", r.error().message());
    return 6;
  }
  if (!ctx_.local_index) {
    prepare_standby_task();
    // Map every local rank's slot now: opening one faults in both halves (hundreds of MB for a
    // large state), work that must not wait for a failure.
    for (std::uint32_t i = 0; i < ctx_.spec.ranks_on(ctx_.node); ++i)
      if (auto s = storage::snapshot_slot::open(storage::snapshot_slot::name_for(ctx_.node_dir, ctx_.spec.job.name, i)))
        standby_slots_.emplace(i, std::move(*s));
  }
  // A standby says hello once it is warm: the agent activates only a standby that is ready.
  to_agent(worker_hello{static_cast<std::uint32_t>(getpid()), ctx_.local_index.value_or(~0u),
                                                      !ctx_.local_index.has_value()});
  for (;;) {
    command c;
    {
      std::unique_lock lock{mutex_};
      cv_.wait(lock, [&] { return !commands_.empty(); });
      c = std::move(commands_.front());
      commands_.pop_front();
    }
    if (auto* f = std::get_if<finish>(&c)) {
      spdlog::info("worker ends: job {}", f->state);
      std::lock_guard lock{mutex_};
      comm_.reset();
      return exit_status_;
    }
    if (auto* act = std::get_if<worker_activate>(&c)) {
      const auto to = clock_type::now();
      expected<storage::snapshot_slot> slot = status{errc::not_found, "not mapped ahead"};
      if (auto it = standby_slots_.find(act->local_index); it != standby_slots_.end())
        slot = std::move(it->second);
      else
        slot = storage::snapshot_slot::open(
            storage::snapshot_slot::name_for(ctx_.node_dir, ctx_.spec.job.name, act->local_index));
      standby_slots_.clear();
      if (!slot) {
        spdlog::error("standby cannot open the slot of local rank {}: {}", act->local_index, slot.error().message());
        exit_status_ = 3;
        return exit_status_;
      }
      slot_ = std::move(*slot);
      ctx_.local_index = act->local_index;
      if (task_ && device_for(ctx_.spec, ctx_.node, act->local_index).type == kernels::device_request::kind::cuda)
        task_.reset();  // built for the CPU; this rank trains on a GPU
      spdlog::info("standby activated as local rank {} (slot opened in {} ms)", act->local_index, ns_since(to) / 1000000);
      continue;
    }
    if (auto* a = std::get_if<worker_assignment>(&c)) {
      if (!slot_) {
        spdlog::error("an assignment reached a standby that was never activated");
        continue;
      }
      spdlog::debug("assignment epoch={} rank={} world={}", a->epoch.value(), a->rank.value(), a->world);
      {
        // The previous epoch's communicator goes first: its links wind down on the shared worker.
        std::lock_guard lock{mutex_};
        comm_.reset();
      }
      auto comm = transport::ring_communicator::create(ring_, static_cast<int>(a->rank.value()), static_cast<int>(a->world),
                                                       ring_options_of(ctx_.spec, a->epoch));
      if (!comm) {
        spdlog::error("worker cannot open its communicator: {}", comm.error().message());
        exit_status_ = 6;
        return exit_status_;
      }
      blob address((*comm)->address().size());
      std::memcpy(address.data(), (*comm)->address().data(), address.size());
      {
        std::lock_guard lock{mutex_};
        comm_ = std::move(*comm);
        assignment_ = *a;
      }
      ctx_.bridge->set_epoch(a->epoch);
      spdlog::debug("registered epoch={} rank={}", a->epoch.value(), a->rank.value());
      to_agent(rank_ready{a->epoch, a->rank, ctx_.node, *ctx_.local_index,
                                                      static_cast<std::uint32_t>(getpid()), std::move(address)});
      continue;
    }
    if (auto* s = std::get_if<start_training>(&c)) {
      train(*s);
      continue;
    }
    // abort_epoch: the communicator is already aborted; wait for the next assignment.
  }
}

}  // namespace rekindle::actors
