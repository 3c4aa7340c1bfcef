// The worker API's C ABI over the rank session (actors/rank_session.hpp).

#include "api/rekindle.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "actors/rank_session.hpp"
#include "common/logging.hpp"
#include "common/text.hpp"
#include "config/load.hpp"
#include "storage/named_buffers.hpp"
#include "storage/shard_file.hpp"

using namespace rekindle;
using clock_type = std::chrono::steady_clock;

struct rk_rank {
  real_clock time;
  std::unique_ptr<actors::rank_process> process;
  std::unique_ptr<actors::rank_session> session;
  std::uint32_t local_world = 1;
  actors::worker_assignment assignment;
  actors::start_training start;
  /// Commands taken out of the session by rk_poll, for rk_reconfigure.
  std::deque<actors::rank_session::command> pending;
  bool finished = false;
  /// This epoch's restore: begun, ended; its state while it is read.
  bool restore_begun = false;
  bool restore_ended = false;
  std::optional<actors::rank_session::state_read> read;
  std::vector<std::vector<storage::named_buffer>> parts;
  clock_type::time_point restore_started;
  /// rank_restored is sent once per epoch (at the restore's end, or the first step).
  bool announced = false;
  std::optional<clock_type::time_point> last_step;
  std::int64_t snapshot_ns = 0;
  /// The split of the next reported step (rk_step_times); unset: not measured.
  std::optional<std::int64_t> compute_ns, communication_ns, data_ns;
  std::string error;
  /// This epoch's MASTER_ADDR and MASTER_PORT.
  host_port bootstrap;
  /// The NUL-terminated copy of a buffer's name rk_restore_entry hands out.
  std::string name_copy;
};

namespace {

thread_local std::string last_error;

int code_of(const status& s) {
  switch (s.code()) {
    case errc::invalid_argument: return RK_ERR_INVALID;
    case errc::failed_precondition: return RK_ERR_ORDER;
    case errc::resource_exhausted: return RK_ERR_TOO_LARGE;
    case errc::timeout: return RK_ERR_TIMEOUT;
    case errc::data_loss: return RK_ERR_DATA_LOSS;
    default: return RK_ERR_INTERNAL;
  }
}

int fail(rk_rank* rk, int code, std::string message) {
  rk->error = std::move(message);
  return code;
}

int fail(rk_rank* rk, const status& s) { return fail(rk, code_of(s), s.message()); }

std::string env_or(const char* name, std::string fallback = {}) {
  const char* v = std::getenv(name);
  return v ? std::string{v} : fallback;
}

epoch_t epoch_of(const actors::rank_session::command& c) {
  if (auto* a = std::get_if<actors::worker_assignment>(&c))
    return a->epoch;
  if (auto* s = std::get_if<actors::start_training>(&c))
    return s->epoch;
  if (auto* a = std::get_if<actors::abort_epoch>(&c))
    return a->epoch;
  return epoch_t{~std::uint64_t{0}};
}

void take_assignment(rk_rank* rk, const actors::worker_assignment& a) {
  rk->assignment = a;
  rk->session->enter(a);
  auto meet = parse_host_port(a.bootstrap);
  rk->bootstrap = meet ? std::move(*meet) : host_port{};
}

/// Takes commands until the start of an epoch newer than `after` (its assignment, then its
/// start_training). RK_OK, RK_FINISHED or RK_ERR_TIMEOUT.
int wait_epoch(rk_rank* rk, epoch_t after, std::chrono::nanoseconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  std::optional<actors::worker_assignment> assigned;
  for (;;) {
    std::optional<actors::rank_session::command> c;
    if (!rk->pending.empty()) {
      c = std::move(rk->pending.front());
      rk->pending.pop_front();
    } else {
      const auto left = deadline - clock_type::now();
      if (left <= std::chrono::nanoseconds{0} || !(c = rk->session->next_for(left)))
        return fail(rk, RK_ERR_TIMEOUT,
                    "no new epoch began within " + std::to_string(timeout.count() / 1000000) + " ms");
    }
    if (auto* end = std::get_if<actors::session_end>(&*c)) {
      rk->finished = true;
      return fail(rk, RK_FINISHED, "the job ended: " + end->state);
    }
    if (auto* a = std::get_if<actors::worker_assignment>(&*c)) {
      if (a->epoch > after) {
        take_assignment(rk, *a);
        assigned = *a;
      }
      continue;
    }
    if (auto* s = std::get_if<actors::start_training>(&*c)) {
      if (assigned && s->epoch == assigned->epoch) {
        rk->start = *s;
        rk->restore_begun = rk->restore_ended = rk->announced = false;
        rk->read.reset();
        rk->parts.clear();
        rk->last_step.reset();
        return RK_OK;
      }
      continue;
    }
    // abort_epoch, activation: wait on.
  }
}

/// Buffer `index` of `buffers`: its name (a NUL-terminated copy in `name_copy`) and size.
status entry_of(const std::vector<storage::named_buffer>& buffers, std::size_t index, std::string& name_copy,
                const char** name, std::uint64_t* size) {
  if (index >= buffers.size())
    return status{errc::invalid_argument, "buffer " + std::to_string(index) + " is not there (" +
                                              std::to_string(buffers.size()) + " buffers)"};
  name_copy = std::string{buffers[index].name};
  if (name)
    *name = name_copy.c_str();
  if (size)
    *size = buffers[index].bytes.size();
  return {};
}

/// Copies buffer `name` of `buffers` into `dst` of exactly its size.
status copy_of(const std::vector<storage::named_buffer>& buffers, const char* name, void* dst, std::uint64_t size,
               const std::string& where) {
  if (name == nullptr || (dst == nullptr && size > 0))
    return status{errc::invalid_argument, "a null name or destination"};
  for (const auto& b : buffers)
    if (b.name == name) {
      if (b.bytes.size() != size)
        return status{errc::invalid_argument, "buffer '" + std::string{name} + "' holds " + std::to_string(b.bytes.size()) +
                                                  " bytes; the destination has " + std::to_string(size) +
                                                  " (was the state's shape changed?)"};
      std::memcpy(dst, b.bytes.data(), size);
      return {};
    }
  return status{errc::invalid_argument, "buffer '" + std::string{name} + "' is not in " + where};
}

/// A standby's wait until the agent activates it as a local rank (as long as it takes).
int wait_activation(rk_rank* rk) {
  for (;;) {
    auto c = rk->session->next();
    if (auto* end = std::get_if<actors::session_end>(&c)) {
      rk->finished = true;
      return fail(rk, RK_FINISHED, "the job ended: " + end->state);
    }
    if (auto* act = std::get_if<actors::worker_activate>(&c)) {
      if (auto st = rk->session->activate(act->local_index); !st.ok())
        return fail(rk, st);
      spdlog::info("standby activated as local rank {}", act->local_index);
      return RK_OK;
    }
  }
}

void announce(rk_rank* rk, const std::string& source, std::int64_t restore_ns) {
  if (rk->announced)
    return;
  rk->announced = true;
  rk->session->to_agent(actors::rank_restored{rk->assignment.epoch, rk->assignment.rank, rk->start.restore_step, source, 0,
                                              restore_ns});
}

template <class F>
int guarded(rk_rank* rk, F&& f) {
  if (rk == nullptr)
    return RK_ERR_INVALID;
  try {
    return f();
  } catch (const std::exception& e) {
    return fail(rk, RK_ERR_INTERNAL, std::string{"internal error: "} + e.what());
  }
}

int check_live(rk_rank* rk) {
  if (rk->finished)
    return fail(rk, RK_FINISHED, "the job ended");
  return RK_OK;
}

}  // namespace

extern "C" {

int rk_join(rk_rank** out) {
  last_error.clear();
  if (out == nullptr) {
    last_error = "rk_join: the handle's address is null";
    return RK_ERR_INVALID;
  }
  *out = nullptr;
  const auto agent = env_or("REKINDLE_AGENT");
  if (agent.empty()) {
    last_error =
        "this program was not started by rekindled (REKINDLE_AGENT is not set): run it as the job.command of a "
        "rekindle job (docs/WORKER_API.md)";
    return RK_ERR_NOT_UNDER_REKINDLE;
  }
  try {
    const auto config_path = env_or("REKINDLE_CONFIG");
    const auto node_name = env_or("REKINDLE_NODE");
    const auto data_dir = env_or("REKINDLE_DATA_DIR");
    // A warm standby learns its local rank when the agent activates it.
    const bool standby = env_or("REKINDLE_STANDBY") == "1";
    const auto local = standby ? std::string{"standby"} : env_or("LOCAL_RANK");
    if (config_path.empty() || node_name.empty() || data_dir.empty() || local.empty()) {
      last_error = "the environment lacks REKINDLE_CONFIG, REKINDLE_NODE, REKINDLE_DATA_DIR or LOCAL_RANK";
      return RK_ERR_NOT_UNDER_REKINDLE;
    }
    auto loaded = config::load_file(config_path);
    if (!loaded.ok()) {
      last_error = loaded.error_text();
      return RK_ERR_INVALID;
    }
    const auto& spec = *loaded.value;
    const auto node = spec.find_node(node_name);
    if (!node) {
      last_error = "node '" + node_name + "' is not in " + config_path;
      return RK_ERR_INVALID;
    }
    const std::optional<std::uint32_t> local_index =
        standby ? std::nullopt : std::optional{static_cast<std::uint32_t>(std::strtoul(local.c_str(), nullptr, 10))};
    set_log_node(node_name);
    init_logging("rank[" + node_name + "/" + local + "]", spec.daemon.log, spec.daemon.log_format);
    const auto node_dir = std::filesystem::path{data_dir} / node_name;
    std::optional<storage::snapshot_slot> slot;
    if (local_index) {
      auto opened = storage::snapshot_slot::open(storage::snapshot_slot::name_for(node_dir, spec.job.name, *local_index));
      if (!opened) {
        last_error = "cannot open this rank's snapshot slot: " + opened.error().message();
        return RK_ERR_INTERNAL;
      }
      opened->touch_pages();  // before training, not in the first snapshots' steps
      slot = std::move(*opened);
    }
    auto process = actors::rank_process::connect(spec, *node, "rank " + node_name + "/" + local, agent);
    if (!process) {
      last_error = process.error().message();
      return RK_ERR_INTERNAL;
    }
    auto rk = std::make_unique<rk_rank>();
    rk->local_world = static_cast<std::uint32_t>(std::max(1l, std::strtol(env_or("LOCAL_WORLD_SIZE", "1").c_str(), nullptr, 10)));
    actors::worker_context ctx{spec, *node, local_index, node_dir, (*process)->bridge(), (*process)->agent(), &rk->time};
    rk->process = std::move(*process);
    rk->session = std::make_unique<actors::rank_session>(rk->process->system(), std::move(ctx), std::move(slot));
    if (standby)
      rk->session->map_slots_ahead();
    rk->session->to_agent(actors::worker_hello{static_cast<std::uint32_t>(getpid()), local_index.value_or(~0u), standby});
    if (standby) {
      const int code = wait_activation(rk.get());
      if (code != RK_OK) {
        last_error = "waiting as a standby: " + rk->error;
        return code;
      }
    }
    const auto wait = std::max<std::chrono::nanoseconds>(spec.timeouts.rendezvous, std::chrono::seconds{60});
    const int code = wait_epoch(rk.get(), epoch_t{0}, wait);
    if (code != RK_OK) {
      last_error = "joining the job: " + rk->error;
      return code;
    }
    if (standby) {
      // The rank's output goes where a program started for it writes: <node>/rank-R.log.
      const auto log = node_dir / ("rank-" + std::to_string(rk->assignment.rank.value()) + ".log");
      std::fflush(stdout);
      std::fflush(stderr);
      if (const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644); fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
    }
    *out = rk.release();
    return RK_OK;
  } catch (const std::exception& e) {
    last_error = std::string{"internal error: "} + e.what();
    return RK_ERR_INTERNAL;
  }
}

const char* rk_last_error(void) { return last_error.c_str(); }

int rk_info_get(const rk_rank* crk, rk_info* out) {
  auto* rk = const_cast<rk_rank*>(crk);
  return guarded(rk, [&]() -> int {
    if (out == nullptr)
      return fail(rk, RK_ERR_INVALID, "rk_info_get: the output is null");
    const auto& spec = rk->session->spec();
    *out = rk_info{};
    out->rank = rk->assignment.rank.value();
    out->world_size = rk->assignment.world;
    out->local_rank = *rk->session->local_index();
    out->local_world_size = rk->local_world;
    out->epoch = rk->assignment.epoch.value();
    out->restore_step = rk->start.restore_step.value();
    out->restore_world = rk->start.restore_world;
    std::snprintf(out->master_addr, sizeof out->master_addr, "%s", rk->bootstrap.host.c_str());
    out->master_port = rk->bootstrap.port;
    out->snapshot_every = spec.checkpoint.snapshot_every;
    out->state_bytes = rk->session->slot() ? rk->session->slot()->capacity() : 0;
    const auto ms = [](std::chrono::nanoseconds d) {
      return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
    };
    out->collective_timeout_ms = ms(spec.timeouts.collective);
    out->rendezvous_timeout_ms = ms(spec.timeouts.rendezvous);
    return RK_OK;
  });
}

int rk_snapshot(rk_rank* rk, uint64_t step, const rk_buffer* buffers, size_t count) {
  return guarded(rk, [&]() -> int {
    if (int c = check_live(rk); c != RK_OK)
      return c;
    if (buffers == nullptr && count > 0)
      return fail(rk, RK_ERR_INVALID, "rk_snapshot: the buffers are null");
    if (rk->start.restore_step.value() > 0 && !rk->restore_ended)
      return fail(rk, RK_ERR_ORDER,
                  "snapshot of step " + std::to_string(step) + " before the restore: this epoch resumes from step " +
                      std::to_string(rk->start.restore_step.value()) + "; restore first");
    if (step <= rk->start.restore_step.value())
      return fail(rk, RK_ERR_INVALID,
                  "snapshot of step " + std::to_string(step) + ": steps after the restore step " +
                      std::to_string(rk->start.restore_step.value()) + " only");
    std::vector<storage::named_buffer> named;
    named.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (buffers[i].name == nullptr || (buffers[i].data == nullptr && buffers[i].size > 0))
        return fail(rk, RK_ERR_INVALID, "rk_snapshot: buffer " + std::to_string(i) + " has a null name or data");
      named.push_back({buffers[i].name, {static_cast<const std::byte*>(buffers[i].data), buffers[i].size}});
    }
    auto size = storage::named_buffers_size(named);
    if (!size)
      return fail(rk, size.error());
    auto* slot = rk->session->slot();
    if (*size > slot->capacity())
      return fail(rk, RK_ERR_TOO_LARGE,
                  "the snapshot of step " + std::to_string(step) + " takes " + std::to_string(*size) +
                      " bytes; this rank's slot holds " + std::to_string(slot->capacity()) +
                      " (job.state_bytes): raise job.state_bytes in the job's configuration");
    const auto t0 = clock_type::now();
    const auto& a = rk->assignment;
    const storage::snapshot_meta meta{{a.epoch, a.rank, step_t{step}}, a.world, rk->start.restore_step,
                                      rk->session->spec().checkpoint.snapshot_every};
    auto taken = rk->session->snapshot(meta, [&](std::span<std::byte> half) { return storage::write_named_buffers(half, named); });
    if (!taken)
      return fail(rk, taken.error());
    rk->snapshot_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count();
    return RK_OK;
  });
}

int rk_restore_begin(rk_rank* rk, uint64_t* step, uint32_t* parts) {
  return guarded(rk, [&]() -> int {
    if (int c = check_live(rk); c != RK_OK)
      return c;
    if (rk->start.restore_step.value() == 0)
      return fail(rk, RK_ERR_ORDER, "nothing to restore: epoch " + std::to_string(rk->assignment.epoch.value()) +
                                        " trains from the start (restore_step 0)");
    if (rk->restore_begun)
      return fail(rk, RK_ERR_ORDER, "restore was already called in epoch " + std::to_string(rk->assignment.epoch.value()) +
                                        ": once per epoch");
    rk->restore_begun = true;
    rk->restore_started = clock_type::now();
    std::optional<actors::restore_source> failed;
    const auto& a = rk->assignment;
    auto read = rk->session->read_state(rk->start, a.rank, a.world, failed);
    if (!read) {
      if (failed)
        rk->session->to_agent(actors::restore_failed{a.epoch, a.rank, rk->session->context().node, rk->start.restore_step,
                                                     failed->old_rank, failed->holder, failed->kind, read.error().message()});
      return fail(rk, read.error());
    }
    rk->parts.clear();
    for (std::size_t i = 0; i < read->buffers.size(); ++i) {
      auto named = storage::read_named_buffers(read->buffers[i]);
      if (!named)
        return fail(rk, named.error().with_context("the state of step " + std::to_string(rk->start.restore_step.value()) +
                                                   " (part " + std::to_string(i) + ")"));
      rk->parts.push_back(std::move(*named));
    }
    rk->read = std::move(*read);
    if (step)
      *step = rk->start.restore_step.value();
    if (parts)
      *parts = static_cast<std::uint32_t>(rk->parts.size());
    return RK_OK;
  });
}

int rk_restore_count(rk_rank* rk, uint32_t part, size_t* count) {
  return guarded(rk, [&]() -> int {
    if (!rk->read || part >= rk->parts.size() || count == nullptr)
      return fail(rk, rk->read ? RK_ERR_INVALID : RK_ERR_ORDER,
                  rk->read ? "part " + std::to_string(part) + " is not in this restore" : std::string{"no restore is open"});
    *count = rk->parts[part].size();
    return RK_OK;
  });
}

int rk_restore_entry(rk_rank* rk, uint32_t part, size_t index, const char** name, uint64_t* size) {
  return guarded(rk, [&]() -> int {
    if (!rk->read)
      return fail(rk, RK_ERR_ORDER, "no restore is open");
    if (part >= rk->parts.size())
      return fail(rk, RK_ERR_INVALID, "part " + std::to_string(part) + " is not in this restore");
    auto st = entry_of(rk->parts[part], index, rk->name_copy, name, size);
    return st.ok() ? RK_OK : fail(rk, st);
  });
}

int rk_restore_copy(rk_rank* rk, uint32_t part, const char* name, void* dst, uint64_t size) {
  return guarded(rk, [&]() -> int {
    if (!rk->read)
      return fail(rk, RK_ERR_ORDER, "no restore is open");
    if (part >= rk->parts.size())
      return fail(rk, RK_ERR_INVALID, "part " + std::to_string(part) + " is not in this restore");
    auto st = copy_of(rk->parts[part], name, dst, size, "the state of step " + std::to_string(rk->start.restore_step.value()));
    return st.ok() ? RK_OK : fail(rk, st);
  });
}

int rk_restore_end(rk_rank* rk) {
  return guarded(rk, [&]() -> int {
    if (!rk->read)
      return fail(rk, RK_ERR_ORDER, "no restore is open");
    auto st = rk->session->still_valid(*rk->read, rk->start.restore_step);
    const auto source = rk->read->source;
    rk->read.reset();
    rk->parts.clear();
    if (!st.ok())
      return fail(rk, RK_ERR_DATA_LOSS, st.message());
    rk->restore_ended = true;
    announce(rk, source,
             std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - rk->restore_started).count());
    return RK_OK;
  });
}

int rk_poll(rk_rank* rk) {
  return guarded(rk, [&]() -> int {
    if (rk->finished)
      return RK_FINISHED;
    while (auto c = rk->session->next_for(std::chrono::nanoseconds{0}))
      rk->pending.push_back(std::move(*c));
    for (const auto& c : rk->pending) {
      if (std::holds_alternative<actors::session_end>(c)) {
        rk->finished = true;
        return fail(rk, RK_FINISHED, "the job ended: " + std::get<actors::session_end>(c).state);
      }
    }
    for (const auto& c : rk->pending)
      if (epoch_of(c) > rk->assignment.epoch)
        return fail(rk, RK_RECONFIGURE, "epoch " + std::to_string(epoch_of(c).value()) + " begins");
    return RK_OK;
  });
}

int rk_step_done(rk_rank* rk, uint64_t step, double loss, uint64_t tokens) {
  return guarded(rk, [&]() -> int {
    if (int c = check_live(rk); c != RK_OK)
      return c;
    if (rk->start.restore_step.value() > 0 && !rk->restore_ended)
      return fail(rk, RK_ERR_ORDER, "step " + std::to_string(step) + " reported before the restore: this epoch resumes from step " +
                                        std::to_string(rk->start.restore_step.value()));
    announce(rk, "none", 0);
    const auto now = clock_type::now();
    const auto step_ns = rk->last_step ? std::chrono::duration_cast<std::chrono::nanoseconds>(now - *rk->last_step).count() : 0;
    rk->last_step = now;
    const auto& a = rk->assignment;
    const auto communication_ns = rk->communication_ns.value_or(0);
    const auto data_ns = rk->data_ns.value_or(0);
    const auto compute_ns = rk->compute_ns.value_or(std::max<std::int64_t>(step_ns - communication_ns - data_ns, 0));
    rk->session->report(actors::progress_report{a.epoch, a.rank, step_t{step}, loss, step_ns, compute_ns,
                                                  communication_ns, rk->snapshot_ns, tokens, data_ns, 0});
    rk->snapshot_ns = 0;
    rk->compute_ns.reset();
    rk->communication_ns.reset();
    rk->data_ns.reset();
    return rk_poll(rk);
  });
}

int rk_step_times(rk_rank* rk, uint64_t compute_ns, uint64_t communication_ns, uint64_t data_ns) {
  return guarded(rk, [&]() -> int {
    if (int c = check_live(rk); c != RK_OK)
      return c;
    constexpr std::uint64_t hour_ns = 3'600'000'000'000;
    const std::pair<const char*, std::uint64_t> parts[] = {
        {"compute_ns", compute_ns}, {"communication_ns", communication_ns}, {"data_ns", data_ns}};
    for (const auto& [what, ns] : parts)
      if (ns != RK_STEP_TIME_UNKNOWN && ns > hour_ns)
        return fail(rk, RK_ERR_INVALID, std::string{"rk_step_times: "} + what + " " + std::to_string(ns) +
                                            " is more than an hour of one step (the times are nanoseconds)");
    const auto known = [](std::uint64_t ns) {
      return ns == RK_STEP_TIME_UNKNOWN ? std::nullopt : std::optional{static_cast<std::int64_t>(ns)};
    };
    rk->compute_ns = known(compute_ns);
    rk->communication_ns = known(communication_ns);
    rk->data_ns = known(data_ns);
    return RK_OK;
  });
}

int rk_reconfigure(rk_rank* rk, uint64_t timeout_ms) {
  return guarded(rk, [&]() -> int {
    if (int c = check_live(rk); c != RK_OK)
      return c;
    return wait_epoch(rk, rk->assignment.epoch, std::chrono::milliseconds{timeout_ms});
  });
}

int rk_finish(rk_rank* rk) {
  if (rk == nullptr)
    return RK_ERR_INVALID;
  try {
    // The agent hears it before the connection closes: the program's exit status decides.
    if (!rk->finished)
      rk->session->to_agent(actors::rank_completed{rk->assignment.epoch, rk->assignment.rank, rk->session->context().node});
  } catch (...) {
  }
  delete rk;
  return RK_OK;
}

const char* rk_error(const rk_rank* rk) { return rk ? rk->error.c_str() : "no handle"; }

}  // extern "C"

struct rk_shard {
  std::vector<std::byte> payload;
  std::vector<storage::named_buffer> buffers;
  std::string where;
  std::string name_copy;
  std::string error;
};

extern "C" {

int rk_shard_open(const char* path, uint64_t step, uint32_t rank, rk_shard** out) {
  last_error.clear();
  if (path == nullptr || out == nullptr) {
    last_error = "rk_shard_open: a null path or handle address";
    return RK_ERR_INVALID;
  }
  *out = nullptr;
  try {
    auto shard = std::make_unique<rk_shard>();
    auto info = storage::read_shard(path, shard->payload, {.step = step_t{step}, .rank = rank_id{rank}});
    if (!info) {
      last_error = info.error().message();
      return code_of(info.error());
    }
    auto named = storage::read_named_buffers(shard->payload);
    if (!named) {
      last_error = std::string{path} + ": " + named.error().message() +
                   " (a checkpoint of the built-in model, not of a program on the worker API?)";
      return RK_ERR_DATA_LOSS;
    }
    shard->buffers = std::move(*named);
    shard->where = path;
    *out = shard.release();
    return RK_OK;
  } catch (const std::exception& e) {
    last_error = std::string{"internal error: "} + e.what();
    return RK_ERR_INTERNAL;
  }
}

int rk_shard_count(rk_shard* shard, size_t* count) {
  if (shard == nullptr || count == nullptr)
    return RK_ERR_INVALID;
  *count = shard->buffers.size();
  return RK_OK;
}

int rk_shard_entry(rk_shard* shard, size_t index, const char** name, uint64_t* size) {
  if (shard == nullptr)
    return RK_ERR_INVALID;
  auto st = entry_of(shard->buffers, index, shard->name_copy, name, size);
  shard->error = st.message();
  return st.ok() ? RK_OK : code_of(st);
}

int rk_shard_copy(rk_shard* shard, const char* name, void* dst, uint64_t size) {
  if (shard == nullptr)
    return RK_ERR_INVALID;
  auto st = copy_of(shard->buffers, name, dst, size, shard->where);
  shard->error = st.message();
  return st.ok() ? RK_OK : code_of(st);
}

const char* rk_shard_error(const rk_shard* shard) { return shard ? shard->error.c_str() : "no shard"; }

int rk_shard_close(rk_shard* shard) {
  delete shard;
  return RK_OK;
}

}  // extern "C"
