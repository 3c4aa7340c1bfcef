#pragma once

#include <caf/all.hpp>

#include <memory>
#include <mutex>
#include <optional>

#include "actors/rank_session.hpp"
#include "training/training_task.hpp"
#include "transport/ring_communicator.hpp"

namespace rekindle::actors {

/// One rank of the built-in transformer inside a worker process: a client of the worker API's
/// core (rank_session), like a user's program on the C API.
///
/// A worker started as a warm standby has loaded everything and connected to its agent; it
/// takes a local rank (its slot, its device) when the agent activates it, so replacing a failed
/// rank costs no process start.
///
/// The rank's thread takes the session's commands in order:
///   1. On an assignment (epoch e, rank r, world w) it opens a ring communicator and registers
///      (rank_ready with its address).
///   2. On start_training of e it connects the ring, builds the training task, restores the
///      chosen step (rank_session::read_state: its own slot when it holds it, else through the
///      node's checkpoint actor), reports rank_restored and trains: after every step a progress
///      report, every `snapshot_every` steps an export straight into the half of its slot that
///      the slot's custody rule gives (the training stall), announced by the session.
///   3. abort_epoch of a newer epoch aborts the communicator from the session's actor, so a
///      collective in flight returns at once; the process stays and waits for its next
///      assignment. A collective that fails on its own is reported (rank_trouble).
///   4. session_end ends the process.
///   Fault drills change how the training thread steps: a hung rank stops before its next step
///   and waits until it is killed or its epoch ends; a slowed one sleeps after each step for
///   (factor - 1) times the step's own time; a stalled one (a partition across it) starts no step
///   until the stall ends.
///
/// Thread-safety: the session's actor and the training thread share only the current
/// communicator, under a mutex.
class worker_runtime {
 public:
  /// `slot` is the local rank's snapshot slot, or empty for a standby (opened on activation).
  worker_runtime(caf::actor_system& sys, worker_context ctx, std::optional<storage::snapshot_slot> slot);
  ~worker_runtime();

  /// Blocks until the job ends; returns the process exit status.
  int run();

 private:
  void train(const start_training& start);
  void prepare_standby_task();
  /// Imports the state `start` names. On failure `failed` is the copy that could not be read,
  /// when one could not (rather than the import itself failing).
  [[nodiscard]] status restore(const start_training& start, training::training_task& task, std::string& source,
                               std::optional<restore_source>& failed);

  rank_session session_;
  const worker_context& ctx_;

  std::mutex mutex_;
  std::unique_ptr<transport::ring_communicator> comm_;
  /// comm_ as the training task sees it: every call recorded in session_.collectives.
  std::unique_ptr<transport::tracked_communicator> tracked_;
  std::optional<worker_assignment> assignment_;
  /// What a standby's pre-built task is bound to until activation.
  std::unique_ptr<transport::communicator> standby_comm_;
  /// The training task; kept across epochs while the world stays (a standby's is rebound to the
  /// rank it takes over). Training thread only.
  std::unique_ptr<training::training_task> task_;
  /// The ring's UCX worker and spare mailbox, kept across epochs (and made while on standby).
  std::shared_ptr<transport::ring_resources> ring_;
  /// The task's gradients in the ring's shared buffers (a rank on the CPU), so that the ranks of
  /// one host reduce them reading each other's in place; empty otherwise.
  std::span<float> gradient_memory_;
};

/// The gradients of a rank of `spec` on the CPU (task_options::gradient_memory) in a shared buffer
/// of `ring`, sized for any world the ring allows: the ranks of one host then reduce them reading
/// each other's in place. Call before the ring's first communicator, once per process.
[[nodiscard]] expected<std::span<float>> shared_gradient_memory(transport::ring_resources& ring, const config::spec& spec);

}  // namespace rekindle::actors
