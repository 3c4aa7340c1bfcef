#pragma once

#include <deque>
#include <caf/all.hpp>

#include <chrono>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/node_context.hpp"
#include "common/text.hpp"

namespace rekindle::actors {

/// The agent of a node: connects to the supervisor, runs the node's worker processes, watches
/// them, and relays between them and the supervisor.
///
/// Workers are separate processes (`rekindle-worker`), started with the agent's port and their
/// local index, in their own process group, dying with the daemon (PR_SET_PDEATHSIG). While the
/// job runs the agent keeps one warm standby worker: a failed rank is replaced by activating it,
/// not by starting a process, and a new standby starts in the background. A worker
/// that exits is reported at once (the daemon's reaper thread sends child_exited); one that stops
/// sending heartbeats for `timeouts.node` is reported unresponsive. Live workers keep their
/// process across epochs: assign_ranks only tells them their new rank.
///
/// Exposed to peers as "agent". Thread-safety: an actor; its state is its own.
class agent_actor;

/// Waits up to `limit` for the threads agents run work on (a node check, a hung rank's stack) to
/// end: a daemon calls it before its actor system goes, which those threads send their results to.
/// False when some still run.
bool wait_for_agent_threads(std::chrono::milliseconds limit);

class agent_actor : public caf::event_based_actor {
 public:
  agent_actor(caf::actor_config& cfg, node_context* ctx, caf::actor checkpoint);
  caf::behavior make_behavior() override;
  const char* name() const override { return "agent"; }

 private:
  struct worker {
    std::uint32_t local_index = 0;
    std::int32_t pid = 0;
    std::optional<transport::peer_id> peer;
    /// The rank and epoch it runs, once assigned.
    std::optional<rank_id> rank;
    epoch_t epoch;
    std::uint32_t world = 0;
    clock::time_point last_heartbeat;
    bool reported_unresponsive = false;
    /// Where it was in its collectives at its latest heartbeat, in that heartbeat's epoch.
    std::optional<worker_heartbeat> position;
    /// Killed on purpose (no longer assigned, or the job ended): its exit is not a failure.
    bool retiring = false;
    /// The user's program (job.command) rather than a rekindle worker. Until it joins through the
    /// worker API it has no connection and no heartbeats, and every epoch starts it again.
    bool external = false;
    /// A program that joined through the worker API: it keeps its process across epochs.
    bool joined = false;
    /// It left the worker API (rk_finish): its connection closes, its exit status decides.
    bool leaving = false;
  };

  /// Where programs' process groups meet in the current epoch (MASTER_ADDR, MASTER_PORT).
  [[nodiscard]] host_port bootstrap() const;
  /// Tells the supervisor a program's rank is ready (a program has no data-plane address for it).
  void register_program(const worker& w);

  void connect_to_supervisor();
  void on_supervisor_up(transport::peer_id peer);
  void tick();
  void flush_progress();
  void forget_stale_progress();
  void apply(const assign_ranks& a);
  void spawn_worker(std::uint32_t local_index);
  /// Starts a worker process for `local_index`, or a standby without one; returns its pid or -1.
  std::int32_t fork_worker(std::optional<std::uint32_t> local_index);
  /// Starts the job's own program (job.command) as the rank assigned to `local_index`, with the
  /// torchrun environment, and registers it: it has no connection to say so itself.
  void spawn_program(std::uint32_t local_index);
  /// Every rank assigned to this node reported a step of the current epoch.
  [[nodiscard]] bool all_local_ranks_trained() const;
  /// Keeps one warm standby worker (or, once a program joined through the worker API, a standby
  /// of the program) while the job runs.
  void ensure_standby();
  /// Starts the job's program for `local_index` (its rank's torchrun environment), or as a standby
  /// without one; returns its pid, or -1 (a rank's failure to start is reported as its exit).
  std::int32_t start_program(std::optional<std::uint32_t> local_index);
  void assign_worker(worker& w);
  void stop_worker(worker& w, int signal, const std::string& why);
  /// The positions of the node's ranks in the current epoch, for the heartbeat.
  [[nodiscard]] std::vector<rank_position> positions() const;
  /// Takes the stack of a rank declared hung or unresponsive (off the actor's thread, bounded in
  /// time), then kills it, and sends the stack to the supervisor.
  void kill_hung(const worker& w, const kill_request& k);
  /// Measures the node (actors/node_check) off the actor's thread; the report comes back to this
  /// actor, which keeps it and sends it to the supervisor. `id` 0: the check at start.
  void start_node_check(std::uint64_t id, double slow_factor, const std::string& slow_only = {});
  /// node_hello to the supervisor, then what the node holds and the progress not yet reported.
  void say_hello();
  template <class T>
  void to_supervisor(const T& msg);
  template <class T>
  void to_worker(const worker& w, const T& msg);
  worker* by_peer(transport::peer_id peer);
  /// When tick() last ran: a long gap means this process did not run, not that workers were silent.
  std::optional<clock::time_point> last_tick_;
  worker* by_rank(rank_id rank);

  node_context* ctx_;
  caf::actor checkpoint_;
  bool connecting_ = false;
  /// The supervisor address the pending connection goes to, and the one the link is to.
  std::string connecting_to_;
  std::string connected_to_;
  /// The last supervisor address that could not be parsed (logged once).
  std::string bad_address_;
  std::uint64_t heartbeat_seq_ = 0;
  epoch_t epoch_;
  std::uint32_t world_ = 0;
  /// The host of rank 0 in the current epoch (from assign_ranks): MASTER_ADDR of a job.command.
  std::string rank0_host_;
  bool finished_ = false;
  /// The current assignment: local index → rank, for workers to pick up.
  std::map<std::uint32_t, rank_assignment> assignment_;
  std::map<std::uint32_t, worker> workers_;
  /// A started worker without a local rank, ready to replace a failed one.
  std::optional<worker> standby_;
  /// The supervisor asked for new processes in the latest epoch (the restart-all policy): no warm
  /// standby is kept or used, as a job launcher that restarts everything has none.
  bool new_processes_ = false;
  /// A program of this job joined through the worker API: the job is at level 1.
  bool api_seen_ = false;
  std::vector<progress_report> progress_;
  /// The newest steps this node's ranks trained, one report a step (the first to arrive), for a
  /// supervisor that connects later: a new leader, or one restarted, knows no losses.
  std::deque<progress_report> history_;
  /// start_training of the current epoch, for workers that say hello after it was sent.
  std::optional<start_training> started_;
  /// When the current epoch's start went to the workers: progress is relayed at once for a while
  /// after it (recoveries are measured to the first step), batched otherwise.
  /// The last epoch whose ranks reported a step (a standby is made only then), and which of
  /// this node's ranks did.
  epoch_t trained_epoch_{0};
  std::set<rank_id> trained_ranks_;
  /// The furthest step a rank of this node reported in the current epoch (sent in node_hello).
  std::uint64_t reached_step_ = 0;
  clock::time_point started_at_;
  /// The node's latest check (sent after every hello), once one has finished.
  std::optional<node_check_report> check_;
};

}  // namespace rekindle::actors
