#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "config/spec.hpp"
#include "storage/snapshot_slot.hpp"
#include "training/training_task.hpp"
#include "transport/ring_communicator.hpp"

namespace rekindle::actors {

/// What a worker process knows when it starts.
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

/// One rank's training inside a worker process.
///
/// A worker started as a warm standby has loaded everything and connected to its agent; it
/// takes a local rank (its slot, its device) when the agent activates it, so replacing a failed
/// rank costs no process start.
///
/// The worker actor (CAF) takes control messages from the agent and answers heartbeats at once;
/// the training thread runs the rank's epochs:
///   1. On an assignment (epoch e, rank r, world w) it opens a ring communicator and registers
///      (rank_ready with its address).
///   2. On start_training of e it connects the ring, builds the training task, restores the
///      chosen step (from its own slot when it holds it, else through the node's checkpoint
///      actor), reports rank_restored and trains: after every step a progress report, every
///      `snapshot_every` steps an export straight into the half of its slot that the slot's
///      custody rule gives (the training stall) and a snapshot_taken to the checkpoint actor, or
///      a snapshot_skipped when the rule skips it.
///   3. abort_epoch of a newer epoch aborts the communicator from the actor's thread, so a
///      collective in flight returns at once; the process stays and waits for its next
///      assignment. A collective that fails on its own is reported (rank_trouble).
///   4. job_finished ends the process.
///   Fault drills (drill_request) change how the training thread steps: a hung rank stops before
///   its next step and waits until it is killed or its epoch ends; a slowed one sleeps after each
///   step for (factor - 1) times the step's own time; a stalled one (a partition across it) starts
///   no step until the stall ends.
///
/// Thread-safety: the actor and the training thread share only the command queue and the
/// current communicator, both under a mutex.
class worker_runtime {
 public:
  /// `slot` is the local rank's snapshot slot, or empty for a standby (opened on activation).
  worker_runtime(caf::actor_system& sys, worker_context ctx, std::optional<storage::snapshot_slot> slot);
  ~worker_runtime();

  /// Blocks until the job ends; returns the process exit status.
  int run();

 private:
  struct finish {
    std::string state;
  };
  using command = std::variant<worker_activate, worker_assignment, start_training, abort_epoch, finish>;

  friend class worker_actor;
  void push(command c);
  void abort_current(epoch_t newer);
  void train(const start_training& start);
  void prepare_standby_task();
  /// Imports the state `start` names. On failure `failed` is the copy that could not be read,
  /// when one could not (rather than the import itself failing).
  [[nodiscard]] status restore(const start_training& start, training::training_task& task, std::string& source,
                               std::optional<restore_source>& failed);
  [[nodiscard]] expected<transport::shared_bytes> fetch(const state_request& r, std::chrono::nanoseconds timeout);
  void deliver(std::uint64_t id, expected<transport::shared_bytes> bytes);
  [[nodiscard]] bool interrupted() const;
  template <class T>
  void to_agent(const T& msg);
  template <class T>
  void to_checkpoint(const T& msg);

  caf::actor_system& system_;
  worker_context ctx_;
  std::optional<storage::snapshot_slot> slot_;
  /// A standby's mappings of every local rank's slot, made ahead; the one it takes over becomes slot_.
  std::map<std::uint32_t, storage::snapshot_slot> standby_slots_;
  caf::actor actor_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<command> commands_;
  std::unique_ptr<transport::ring_communicator> comm_;
  /// What a standby's pre-built task is bound to until activation.
  std::unique_ptr<transport::communicator> standby_comm_;
  /// The training task; kept across epochs while the world stays (a standby's is rebound to the
  /// rank it takes over). Training thread only.
  std::unique_ptr<training::training_task> task_;
  /// The ring's UCX worker and spare mailbox, kept across epochs (and made while on standby).
  std::shared_ptr<transport::ring_resources> ring_;
  std::optional<worker_assignment> assignment_;
  std::map<std::uint64_t, std::promise<expected<transport::shared_bytes>>> pending_;
  std::uint64_t next_request_ = 1;
  int exit_status_ = 0;
  /// Fault drills (drill_request), set by the actor, read by the training thread before each step.
  std::atomic<bool> hang_{false};
  std::atomic<double> slow_factor_{1.0};
  /// A partition drill stalls the rank's collectives with ranks across the cut: until this
  /// steady-clock time (ns since its epoch) no step starts.
  std::atomic<std::int64_t> stall_until_ns_{0};
  /// The epoch the stall was ordered in: a new epoch (the world without the far side) trains at once.
  std::atomic<std::uint64_t> stall_epoch_{0};
};

}  // namespace rekindle::actors
