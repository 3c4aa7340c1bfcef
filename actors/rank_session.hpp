#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "common/clock.hpp"
#include "config/spec.hpp"
#include "storage/snapshot_slot.hpp"
#include "transport/collective_tracker.hpp"

namespace rekindle::actors {

/// What a rank process knows when it starts.
struct worker_context {
  config::spec spec;
  node_id node;
  /// Its local rank index; unset for a standby until it is activated.
  std::optional<std::uint32_t> local_index;
  /// The node daemon's folder (its snapshot slots are named after it).
  std::filesystem::path node_dir;
  actors::bridge* bridge = nullptr;
  /// The agent's connection.
  transport::peer_id agent;
  const clock* time = nullptr;
};

/// A rank process's transport: its actor system and a connection to its node's agent. The
/// built-in worker and a program on the worker API (api/rekindle.h) both start this way.
class rank_process {
 public:
  /// Starts the transport as `label` ("worker n0/1") and connects to the agent at `agent`
  /// (host:port), waiting up to 30 s. Errors: invalid_argument (a bad address), unavailable.
  static expected<std::unique_ptr<rank_process>> connect(const config::spec& spec, node_id node, const std::string& label,
                                                         const std::string& agent);
  ~rank_process();
  rank_process(const rank_process&) = delete;
  rank_process& operator=(const rank_process&) = delete;

  [[nodiscard]] caf::actor_system& system() noexcept { return *system_; }
  [[nodiscard]] actors::bridge* bridge() noexcept { return bridge_.get(); }
  [[nodiscard]] transport::peer_id agent() const noexcept { return agent_; }

 private:
  rank_process() = default;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<actors::bridge> bridge_;
  transport::peer_id agent_{};
};

/// The end of a rank's session: the job ended, or its agent is gone.
struct session_end {
  std::string state;
};

/// The rank's side of the worker API: everything a rank does with rekindle except its training.
/// The built-in worker (worker.hpp) and the C API (api/rekindle.h) are its two users.
///
/// An actor (CAF, named "worker" on the bridge) takes the agent's control messages and answers
/// heartbeats at once; the rank's own thread takes them in order from `next` as commands:
///   worker_activate (a standby takes a local rank), worker_assignment (rank, world and epoch),
///   start_training (the restore step and where its state is), abort_epoch (a newer epoch
///   began), session_end.
/// An abort also reaches the `on_abort` hook from the actor's thread at once, so that a
/// collective in flight can be aborted while the rank's thread is inside it.
///
/// Snapshots go into the local rank's slot by the slot's custody rule (`snapshot`), then are
/// announced to the node's checkpoint actor, which replicates and persists them; `read_state`
/// finds a step's state wherever the supervisor says it is (this slot, another node's memory or
/// disk, or a checkpoint shard).
///
/// Thread-safety: `on_abort` is set before the first command; every other method is for the
/// rank's thread, except `interrupted` and the drill flags (any thread).
class rank_session {
 public:
  using command = std::variant<worker_activate, worker_assignment, start_training, abort_epoch, session_end>;

  /// `slot` is the local rank's snapshot slot, or empty for a standby (`activate` opens it).
  rank_session(caf::actor_system& sys, worker_context ctx, std::optional<storage::snapshot_slot> slot);
  ~rank_session();
  rank_session(const rank_session&) = delete;
  rank_session& operator=(const rank_session&) = delete;

  /// The hook an abort calls from the actor's thread with the newer epoch (the job's end: the
  /// largest epoch).
  void on_abort(std::function<void(epoch_t)> hook);

  /// Blocks until a command arrives.
  [[nodiscard]] command next();
  /// As next, for at most `timeout`.
  [[nodiscard]] std::optional<command> next_for(std::chrono::nanoseconds timeout);
  /// True while a command waits: the rank's current work is out of date.
  [[nodiscard]] bool interrupted() const;
  /// Ends the session from the rank's side: `next` returns session_end after what waits.
  void end(std::string why, int exit_status);
  /// The process's exit status as the session saw it end (0 unless its agent was lost).
  [[nodiscard]] int exit_status() const noexcept { return exit_status_; }

  [[nodiscard]] const worker_context& context() const noexcept { return ctx_; }
  [[nodiscard]] const config::spec& spec() const noexcept { return ctx_.spec; }
  [[nodiscard]] std::optional<std::uint32_t> local_index() const noexcept { return ctx_.local_index; }
  [[nodiscard]] storage::snapshot_slot* slot() noexcept { return slot_ ? &*slot_ : nullptr; }

  /// A standby's preparation: maps every local rank's slot ahead (faulting in both halves).
  void map_slots_ahead();
  /// A standby becomes local rank `index`: takes (or opens) its slot.
  [[nodiscard]] status activate(std::uint32_t index);

  /// Sends a message to the agent (rank_ready, rank_trouble, …), after the step reports that wait
  /// (the agent hears of a rank's steps before what it did after them); or to the node's
  /// checkpoint actor.
  template <class T>
  void to_agent(const T& msg) {
    std::lock_guard lock{progress_mutex_};
    send_progress();
    ctx_.bridge->send(ctx_.agent, "worker", "agent", msg);
  }
  template <class T>
  void to_checkpoint(const T& msg) {
    ctx_.bridge->send(ctx_.agent, "worker", "checkpoint", msg);
  }
  /// Reports a finished step to the agent, batched by `progress_batching`: it goes with the next
  /// heartbeat, or at once while the epoch's training is young or a batch is full.
  void report(const progress_report& p);
  /// Sends the step reports that wait now (a rank's last step: nothing follows it).
  void flush_progress();

  /// Takes an assignment: fenced messages of older epochs are dropped from now on.
  void enter(const worker_assignment& a);

  /// What `snapshot` did.
  struct snapshot_outcome {
    /// The custody rule skipped it (nothing written).
    bool skipped = false;
    std::uint64_t length = 0;
    std::uint64_t checksum = 0;
  };
  /// Writes a snapshot of `meta` into the slot: `fill` writes the state into the half it is
  /// given and returns its length and checksum (one pass: it copies and hashes). Then publishes
  /// it and tells the checkpoint actor (snapshot_taken, or snapshot_skipped when the custody rule
  /// skips it). Errors: failed_precondition (no slot), what `fill` or the slot report.
  using snapshot_fill = std::function<expected<std::pair<std::uint64_t, std::uint64_t>>(std::span<std::byte> half)>;
  [[nodiscard]] expected<snapshot_outcome> snapshot(const storage::snapshot_meta& meta, const snapshot_fill& fill);

  /// The same in two calls, for a state written in the background between them (an overlapped
  /// snapshot): begin_snapshot asks the slot for the half (the custody rule may skip it: then it
  /// tells the checkpoint actor at once and the half is empty), finish_snapshot publishes the
  /// state written into it. A begun snapshot that is never finished is abandoned: the slot hands
  /// the half out again. One at a time.
  struct snapshot_begun {
    storage::snapshot_meta meta;
    std::span<std::byte> half;
    std::optional<policy::copy_tag> overwrites;
    [[nodiscard]] bool skipped() const noexcept { return half.empty(); }
  };
  [[nodiscard]] expected<snapshot_begun> begin_snapshot(const storage::snapshot_meta& meta);
  [[nodiscard]] expected<snapshot_outcome> finish_snapshot(const snapshot_begun& begun, std::uint64_t length,
                                                          std::uint64_t checksum);

  /// The state of one restore, by old rank.
  struct state_read {
    /// One buffer per old rank it holds: the caller's own only when the world stays.
    std::vector<std::span<const std::byte>> buffers;
    /// "local memory", "buddy memory on n1", "disk".
    std::string source;
    /// Read straight from this rank's own slot: valid while `still_valid` says so.
    std::optional<storage::snapshot_view> view;
    std::vector<transport::shared_bytes> held;
    /// The copy the reader was left to verify (verified_by_reader): when its bytes fail, report
    /// this one as the copy that could not be read, so that the next restore uses another.
    std::optional<restore_source> unverified;
  };
  /// Finds the state `start` names for `rank` of `world` (its own when the world stays, every
  /// old rank's when it changes). On an error, `failed` names the copy that could not be read,
  /// when one could not. A copy in this node's slot is checked against its checksum first, unless
  /// it is this rank's own of the same world and `verified_by_reader` (the reader checks the
  /// state's own checksums as it copies it in: the built-in worker's import, one pass instead of
  /// two; `unverified` names it). Errors: not_found, data_loss, timeout, unavailable.
  [[nodiscard]] expected<state_read> read_state(const start_training& start, rank_id rank, std::uint32_t world,
                                                std::optional<restore_source>& failed, bool verified_by_reader = false);
  /// True while the bytes of `read` are still the state it found (check after using them).
  [[nodiscard]] status still_valid(const state_read& read, step_t step) const;

  /// Where the rank's training thread is in this epoch's collectives (enter resets it); the actor
  /// sends it with every heartbeat.
  transport::collective_tracker collectives;

  /// Fault drills (drill_request), set by the actor, read by the rank's thread before each step.
  std::atomic<bool> hang{false};
  std::atomic<double> slow_factor{1.0};
  /// A partition drill: no step starts until this steady-clock time (ns since its epoch) in the
  /// epoch `stall_epoch` (a new epoch, the world without the far side, trains at once).
  std::atomic<std::int64_t> stall_until_ns{0};
  std::atomic<std::uint64_t> stall_epoch{0};

 private:
  friend class session_actor;
  void push(command c);
  void abort(epoch_t newer);
  [[nodiscard]] expected<transport::shared_bytes> fetch(const state_request& r, std::chrono::nanoseconds timeout);
  void deliver(std::uint64_t id, expected<transport::shared_bytes> bytes);

  worker_context ctx_;
  std::optional<storage::snapshot_slot> slot_;
  /// A standby's mappings of every local rank's slot, made ahead; the one it takes over becomes slot_.
  std::map<std::uint32_t, storage::snapshot_slot> standby_slots_;
  caf::actor actor_;
  /// Set once the actor is exposed on the bridge (the constructor waits for it).
  std::promise<void> exposed_;
  /// The local rank the heartbeats name, for the actor's thread; `no_rank` for a standby not yet
  /// activated, which sends none (its agent has nothing to detect: the transport's keep-alives
  /// keep its connection).
  static constexpr std::uint32_t no_rank = ~0u;
  std::atomic<std::uint32_t> heartbeat_index_{no_rank};

  // Step reports waiting for the next heartbeat, all of one epoch; the mutex is held across their
  // send, so that what one thread sends after them cannot overtake them.
  void send_progress();
  std::mutex progress_mutex_;
  std::vector<progress_report> progress_;
  /// The epoch of the newest report, and when its first report was made.
  std::optional<std::pair<epoch_t, clock::time_point>> progress_epoch_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<command> commands_;
  std::function<void(epoch_t)> abort_hook_;
  std::uint64_t assigned_epoch_ = 0;
  std::map<std::uint64_t, std::promise<expected<transport::shared_bytes>>> pending_;
  std::uint64_t next_request_ = 1;
  std::atomic<int> exit_status_{0};
};

}  // namespace rekindle::actors
