#include "actors/worker.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>

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

// Whether a rank that asks for `d` computes in host memory (the CPU backend).
bool computes_on_cpu(const kernels::device_request& d) {
  return d.type == kernels::device_request::kind::cpu ||
         (d.type == kernels::device_request::kind::auto_select && kernels::probe_cuda().device_count == 0);
}

}  // namespace

expected<std::span<float>> shared_gradient_memory(transport::ring_resources& ring, const config::spec& spec) {
  const std::size_t floats = training::gradient_floats(spec, transport::ring_communicator::max_size);
  RK_ASSIGN_OR_RETURN(auto bytes, ring.allocate_shared(floats * sizeof(float)));
  return std::span<float>{reinterpret_cast<float*>(bytes.data()), floats};
}

worker_runtime::worker_runtime(caf::actor_system& sys, worker_context ctx, std::optional<storage::snapshot_slot> slot)
    : session_(sys, std::move(ctx), std::move(slot)), ctx_(session_.context()) {
  session_.on_abort([this](epoch_t newer) {
    std::lock_guard lock{mutex_};
    if (comm_ && assignment_ && assignment_->epoch < newer)
      comm_->abort();
  });
}

worker_runtime::~worker_runtime() = default;

status worker_runtime::restore(const start_training& start, training::training_task& task, std::string& source,
                               std::optional<restore_source>& failed) {
  // The import checks the state's own checksums, this rank's own while it copies it in.
  auto read = session_.read_state(start, rank_id{static_cast<std::uint32_t>(task.rank())},
                                  static_cast<std::uint32_t>(task.world_size()), failed, true);
  if (!read)
    return read.error();
  source = read->source;
  auto st = task.import_state(read->buffers);
  if (!st.ok() && read->unverified)
    failed = read->unverified;  // its bytes failed as they were copied in: the next restore reads another copy
  if (st.ok())
    st = session_.still_valid(*read, start.restore_step);
  return st;
}

void worker_runtime::train(const start_training& start) {
  worker_assignment a;
  transport::ring_communicator* comm = nullptr;
  transport::communicator* tracked = nullptr;
  {
    std::lock_guard lock{mutex_};
    if (!assignment_ || assignment_->epoch != start.epoch || !comm_)
      return;
    a = *assignment_;
    comm = comm_.get();
    tracked = tracked_.get();
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
    if (!session_.interrupted())
      session_.to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, s.message()});
    return;
  }
  const auto connect_ns = ns_since(t0);
  spdlog::debug("ring connected in {} ms", connect_ns / 1000000);
  // The task of the last epoch carries over when rank and world stay (a survivor): its memory is
  // warm and only the communicator changes. Otherwise a new one, uninitialised when a state will
  // be imported into it anyway.
  const auto task_start = clock_type::now();
  // The split of this world (a re-plan changes it): a task of another split is built anew.
  const auto& stages = start.stages.empty() ? ctx_.spec.job.stages : start.stages;
  const auto same_split = [&](const training::training_task& t) {
    const auto have = t.stage_layers();
    return stages.size() <= 1 ? have.size() <= 1 : std::equal(have.begin(), have.end(), stages.begin(), stages.end());
  };
  if (task_ && (start.restore_step.value() == 0 || !same_split(*task_) || !task_->rebind(*tracked).ok()))
    task_.reset();  // back to step 0 means the seed's initialisation: a new task
  if (!task_) {
    training::task_options options;
    options.device = device_for(ctx_.spec, ctx_.node, *ctx_.local_index);
    options.initialize = start.restore_step.value() == 0;
    options.stage_layers = stages;
    options.gradient_memory = gradient_memory_;
    auto made = training::make_training_task(ctx_.spec, static_cast<int>(a.rank.value()), static_cast<int>(a.world),
                                             *tracked, options);
    if (!made) {
      spdlog::error("worker cannot build its training task: {}", made.error().message());
      session_.to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, made.error().message()});
      session_.end("no task", 5);
      return;
    }
    task_ = std::move(*made);
    spdlog::debug("training task ready in {} ms", ns_since(task_start) / 1000000);
  }
  training::training_task* task = task_.get();
  if (auto s = task->set_micro_batches(start.micro_batches); !s.ok()) {
    spdlog::error("worker cannot take its micro-batch share: {}", s.message());
    session_.to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, s.message()});
    return;
  }
  t0 = clock_type::now();
  std::string source = "none";
  if (start.restore_step.value() > 0) {
    std::optional<restore_source> failed;
    if (auto s = restore(start, *task, source, failed); !s.ok()) {
      spdlog::error("worker cannot restore: {}", s.message());
      if (failed)
        session_.to_agent(restore_failed{a.epoch, a.rank, ctx_.node, start.restore_step,
                                                           failed->old_rank, failed->holder, failed->kind, s.message()});
      else
        session_.to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, s.message()});
      return;
    }
  }
  spdlog::debug("restored step {} from {} in {} ms", start.restore_step.value(), source, ns_since(t0) / 1000000);
  session_.to_agent(rank_restored{a.epoch, a.rank, start.restore_step, source, connect_ns, ns_since(t0)});
  const auto every = ctx_.spec.checkpoint.snapshot_every;
  const auto tokens = static_cast<std::uint64_t>(ctx_.spec.job.global_batch) * ctx_.spec.model.seq_len;
  // A step's time runs from the end of the one before (or its own start, first in an epoch) to
  // its own end, both read at the same point of the loop: the loop's period, with the snapshot,
  // report and everything else the previous step did after it in it.
  std::optional<clock_type::time_point> previous_end;
  // An overlapped snapshot (checkpoint.overlap): begun after a step, written while the next one's
  // passes run, published after it. Leaving the loop any other way abandons it, once the export
  // has stopped writing into the slot (the slot hands that half out again).
  std::optional<rank_session::snapshot_begun> pending;
  struct abandon_pending {
    training::training_task& task;
    std::optional<rank_session::snapshot_begun>& pending;
    ~abandon_pending() {
      if (pending)
        (void)task.finish_export();
    }
  } abandon{*task, pending};
  const auto publish_pending = [&]() -> std::int64_t {
    if (!pending)
      return 0;
    const auto t = clock_type::now();
    auto done = task->finish_export();
    const auto step = pending->meta.tag.step.value();
    if (!done || !*done)
      spdlog::error("snapshot of step {} failed: {}", step, done ? done->error().message() : "no export was begun");
    else if (auto st = session_.finish_snapshot(*pending, task->state_size(), **done); !st)
      spdlog::error("snapshot of step {} not published: {}", step, st.error().message());
    pending.reset();
    return ns_since(t);
  };
  while (task->current_step().value() < task->total_steps()) {
    if (session_.interrupted())
      return;
    if (session_.hang) {
      // As behind a kernel that never returns: the process lives and heartbeats, its peers wait
      // in the next collective until the supervisor finds this rank and kills it.
      spdlog::warn("rank {} hangs before step {} (fault drill)", a.rank.value(), task->current_step().value() + 1);
      while (!session_.interrupted())
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
      return;
    }
    // A partition across this rank: its collectives cannot complete until it heals.
    while (a.epoch.value() == session_.stall_epoch && clock_type::now().time_since_epoch().count() < session_.stall_until_ns &&
           !session_.interrupted())
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    if (session_.interrupted())
      return;
    const auto step_start = previous_end.value_or(clock_type::now());
    // A slowed rank (fault drill) computes `factor` times longer, as on a slower device: each of
    // its passes (the task sleeps after it, so a pipeline's stages overlap as on such a device);
    // its collectives are not slowed, and fewer micro-batches make it faster.
    const double factor = session_.slow_factor;
    task->set_slowdown(factor);
    auto r = task->step();
    if (!r) {
      if (!session_.interrupted() && !comm->aborted())
        session_.to_agent(rank_trouble{a.epoch, a.rank, ctx_.node, false, r.error().message()});
      return;
    }
    // The slow drill's sleeps are in the compute's wall time; its CPU time counts them too, as
    // the slower device's work.
    const auto compute_ns = r->timings.compute.count();
    auto compute_cpu_ns = r->timings.compute_cpu.count();
    if (factor > 1.0 && compute_cpu_ns > 0)
      compute_cpu_ns += static_cast<std::int64_t>(static_cast<double>(compute_cpu_ns) * (factor - 1.0));
    const auto step_end = clock_type::now();
    const auto period_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(step_end - step_start).count();
    if (!previous_end)
      spdlog::debug("first step of epoch {} in {} ms", a.epoch.value(), period_ns / 1000000);
    progress_report p{a.epoch,
                      a.rank,
                      r->step,
                      r->loss,
                      period_ns,
                      compute_ns,
                      r->timings.communication.count(),
                      0,
                      tokens,
                      r->timings.data.count(),
                      compute_cpu_ns};
    // The snapshot of the step before, written while this one computed: its stall is the wait
    // before this step's optimizer, and the publish.
    if (pending)
      p.snapshot_ns = r->timings.snapshot_wait.count() + publish_pending();
    if (r->step.value() % every == 0) {
      // Into the half the slot's custody rule gives. The rule never gives the half of the
      // protected step (this epoch's restore step, or a newer one the node pinned once every rank
      // held it), and skips a snapshot that would overwrite it while the newest anchor waits for
      // its commit (policy/snapshot_custody.hpp). The checksum comes out of the export's own
      // pass: nothing reads the state again.
      const auto snap_start = clock_type::now();
      const storage::snapshot_meta meta{{a.epoch, a.rank, r->step}, a.world, start.restore_step, every};
      if (ctx_.spec.checkpoint.overlap) {
        auto begun = session_.begin_snapshot(meta);
        if (!begun)
          spdlog::error("snapshot of step {} failed: {}", r->step.value(), begun.error().message());
        else if (!begun->skipped()) {
          if (auto st = task->begin_export(begun->half); !st.ok())
            spdlog::error("snapshot of step {} failed: {}", r->step.value(), st.message());
          else
            pending = *begun;
          p.snapshot_ns += ns_since(snap_start);
        }
      } else {
        // The training stall: export straight into the half, publish.
        auto taken =
            session_.snapshot(meta, [&](std::span<std::byte> half) -> expected<std::pair<std::uint64_t, std::uint64_t>> {
              auto sum = task->export_state(half);
              if (!sum)
                return sum.error();
              return std::pair{static_cast<std::uint64_t>(task->state_size()), *sum};
            });
        if (!taken)
          spdlog::error("snapshot of step {} failed: {}", r->step.value(), taken.error().message());
        else if (!taken->skipped)
          p.snapshot_ns = ns_since(snap_start);
      }
    }
    session_.report(p);
    // The next epoch's mailbox, once this one trains: never on the recovery path.
    if (r->step.value() == start.restore_step.value() + 1)
      (void)ring_->prepare();
    previous_end = step_end;
  }
  (void)publish_pending();  // the last step's
  session_.flush_progress();
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
  options.gradient_memory = gradient_memory_;
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
  // Before the first communicator, which publishes the shared buffers that exist then.
  if (computes_on_cpu(device_for(ctx_.spec, ctx_.node, ctx_.local_index.value_or(0)))) {
    if (auto m = shared_gradient_memory(*ring_, ctx_.spec); m)
      gradient_memory_ = *m;
    else
      spdlog::warn("gradients in private memory (the ring carries them): {}", m.error().message());
  }
  if (!ctx_.local_index) {
    prepare_standby_task();
    session_.map_slots_ahead();
  }
  // A standby says hello once it is warm: the agent activates only a standby that is ready.
  session_.to_agent(worker_hello{static_cast<std::uint32_t>(getpid()), ctx_.local_index.value_or(~0u),
                                 !ctx_.local_index.has_value()});
  for (;;) {
    auto c = session_.next();
    if (auto* f = std::get_if<session_end>(&c)) {
      spdlog::info("worker ends: job {}", f->state);
      std::lock_guard lock{mutex_};
      tracked_.reset();
      comm_.reset();
      return session_.exit_status();
    }
    if (auto* act = std::get_if<worker_activate>(&c)) {
      const auto to = clock_type::now();
      if (auto st = session_.activate(act->local_index); !st.ok()) {
        spdlog::error("standby cannot become local rank {}: {}", act->local_index, st.message());
        return 3;
      }
      if (task_ && device_for(ctx_.spec, ctx_.node, act->local_index).type == kernels::device_request::kind::cuda)
        task_.reset();  // built for the CPU; this rank trains on a GPU
      spdlog::info("standby activated as local rank {} (slot opened in {} ms)", act->local_index, ns_since(to) / 1000000);
      continue;
    }
    if (auto* a = std::get_if<worker_assignment>(&c)) {
      if (!session_.slot()) {
        spdlog::error("an assignment reached a standby that was never activated");
        continue;
      }
      spdlog::debug("assignment epoch={} rank={} world={}", a->epoch.value(), a->rank.value(), a->world);
      {
        // The previous epoch's communicator goes first: its links wind down on the shared worker.
        std::lock_guard lock{mutex_};
        tracked_.reset();
        comm_.reset();
      }
      auto comm = transport::ring_communicator::create(ring_, static_cast<int>(a->rank.value()), static_cast<int>(a->world),
                                                       ring_options_of(ctx_.spec, a->epoch));
      if (!comm) {
        spdlog::error("worker cannot open its communicator: {}", comm.error().message());
        return 6;
      }
      blob address((*comm)->address().size());
      std::memcpy(address.data(), (*comm)->address().data(), address.size());
      {
        std::lock_guard lock{mutex_};
        comm_ = std::move(*comm);
        tracked_ = std::make_unique<transport::tracked_communicator>(*comm_, session_.collectives);
        assignment_ = *a;
      }
      session_.enter(*a);
      spdlog::debug("registered epoch={} rank={}", a->epoch.value(), a->rank.value());
      session_.to_agent(rank_ready{a->epoch, a->rank, ctx_.node, *ctx_.local_index,
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
