#pragma once

// Every message the actors exchange, within a process or through the bridge. Each type is
// registered with CAF (register_message_types) and round-trip tested; a message type says what
// happened or what is asked.

#include <caf/all.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/collective_position.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "policy/snapshot_custody.hpp"

namespace rekindle::policy {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, copy_tag& x) {
  return f(caf::meta::type_name("copy_tag"), x.epoch, x.rank, x.step);
}
}  // namespace rekindle::policy

namespace rekindle::actors {

using blob = std::vector<std::uint8_t>;

// ---- agent ↔ supervisor ------------------------------------------------------------------------

/// An agent introduces its node to the supervisor (after every (re)connection).
struct node_hello {
  node_id node;
  std::string name;
  /// host:port of the node's daemon, where other daemons (buddies) connect.
  std::string address;
  std::uint32_t pid = 0;
  /// The furthest step its ranks reported in the epoch the agent knows: after a supervisor
  /// restart, how far the job got while nobody heard its progress.
  std::uint64_t reached_step = 0;
  /// The newest epoch the node has seen: a supervisor that took over from a replica a little
  /// behind starts its next epoch past every one announced before.
  epoch_t epoch;
};

/// Where a rank is in its collectives (common/collective_position.hpp), as the wire carries it.
struct rank_position {
  rank_id rank;
  epoch_t epoch;
  std::uint64_t seq = 0;
  collective_kind kind = collective_kind::none;
  collective_phase phase = collective_phase::idle;
  std::int64_t for_ns = 0;
  /// Its latest point-to-point call (collective_position::p2p).
  collective_kind p2p_kind = collective_kind::none;
  collective_phase p2p_phase = collective_phase::idle;
  std::int32_t p2p_peer = -1;
  std::int64_t p2p_for_ns = 0;

  [[nodiscard]] collective_position position() const {
    return {seq, kind, phase, std::chrono::nanoseconds{for_ns},
            {p2p_kind, p2p_phase, p2p_peer, std::chrono::nanoseconds{p2p_for_ns}}};
  }
};

/// An agent is alive.
struct node_heartbeat {
  node_id node;
  std::uint64_t sequence = 0;
  /// A warm standby worker waits on the node (a failed rank there restarts without a new process).
  bool standby_ready = false;
  /// The collective positions of the node's ranks, from their latest heartbeats.
  std::vector<rank_position> positions;
};

/// The supervisor asks an agent to check its node again (`rekindle check`); `id` comes back in the
/// report. `slow_factor` > 1 is a drill: each measurement does that many times its work.
struct node_check_request {
  std::uint64_t id = 0;
  double slow_factor = 1.0;
  /// The drill slows only "compute", "memory" or "disk"; empty: every measurement.
  std::string slow_only;
};

/// What a node's check measured (policy::node_figures), sent after the agent's hello (the check
/// it made when its daemon started) and in answer to a node_check_request (`id`; 0: unasked).
struct node_check_report {
  node_id node;
  std::uint64_t id = 0;
  double gemm_gflops = 0;
  double memory_gbps = 0;
  double disk_mbps = 0;
  double fsync_ms = 0;
  std::int32_t gpus = 0;
  std::int32_t gpus_expected = 0;
  std::string gpu_detail;
  std::string error;
  double gpu_gflops = 0;
  std::string gpu_faults;
};

/// The supervisor asks a node to probe its link to node `peer` (its daemon at `address`): the
/// node's checkpoint actor sends `bytes` to the peer's, `repeats` times one after the other, and
/// reports the fastest as a link_report. Part of the link check (policy/link_screen.hpp).
struct link_probe_request {
  std::uint64_t id = 0;
  node_id peer;
  std::string address;
  std::uint64_t bytes = 0;
  std::uint32_t repeats = 1;
};

/// One probe's header, its bytes travelling as the bulk payload (checkpoint actor to checkpoint actor).
struct link_probe {
  std::uint64_t id = 0;
  std::uint32_t seq = 0;
};

/// The peer received probe `seq` of `bytes`.
struct link_probe_ack {
  std::uint64_t id = 0;
  std::uint32_t seq = 0;
  std::uint64_t bytes = 0;
};

/// A link probe's figure: the fastest of its repeats in MB/s, or `error` (mbps 0).
struct link_report {
  std::uint64_t id = 0;
  node_id node;
  node_id peer;
  double mbps = 0;
  std::string error;
};

/// An agent took the stack of a rank the supervisor killed as hung or unresponsive, before the kill.
struct rank_stack {
  epoch_t epoch;
  rank_id rank;
  node_id node;
  /// The threads' stacks (eu-stack's output, at most 64 KiB), or empty with `error` saying why.
  std::string stack;
  std::string error;
};

/// One rank an agent must run in an epoch.
struct rank_assignment {
  rank_id rank;
  std::uint32_t local_index = 0;
  /// Start a new process only after this long (restart back-off).
  std::int64_t delay_ns = 0;
  /// Stop a live process of the previous epoch and start a new one (the restart-all policy),
  /// never a warm standby.
  bool new_process = false;
};

/// The supervisor tells a node which ranks it runs in `epoch`; every other worker process of the
/// node is stopped. Live workers keep their process and only join the new epoch.
struct assign_ranks {
  epoch_t epoch;
  std::uint32_t world = 0;
  std::vector<rank_assignment> ranks;
  /// The node whose daemon keeps replicas of this node's snapshots, and its address.
  node_id buddy;
  std::string buddy_address;
  /// The host of the node where rank 0 runs in this epoch (MASTER_ADDR of a job.command).
  std::string rank0_host;
};

/// Abort the collectives of every epoch older than `epoch`; keep the processes.
struct abort_epoch {
  epoch_t epoch;
};

/// A worker registered for an epoch with its data-plane address.
struct rank_ready {
  epoch_t epoch;
  rank_id rank;
  node_id node;
  std::uint32_t local_index = 0;
  std::uint32_t pid = 0;
  blob address;
};

/// Where one rank of the restored world's state is.
struct restore_source {
  rank_id old_rank;
  node_id holder;
  copy_kind kind = copy_kind::local_slot;
};

/// Every rank registered: train from `restore_step` (0: from scratch).
struct start_training {
  epoch_t epoch;
  std::uint32_t world = 0;
  /// Data-plane addresses by rank.
  std::vector<blob> addresses;
  step_t restore_step;
  std::uint32_t restore_world = 0;
  std::vector<restore_source> sources;
  /// host:port of every node's daemon, by node id ("" for nodes that never joined).
  std::vector<std::string> node_addresses;
  /// Micro-batches of a step each rank runs, by rank (empty: the equal split).
  std::vector<std::uint32_t> micro_batches;
  /// The pipeline split of this world: the blocks of each stage (empty: job.stages). A re-plan
  /// after a node loss changes it.
  std::vector<std::uint32_t> stages;
};

/// A worker process ended.
struct rank_exited {
  epoch_t epoch;
  rank_id rank;
  node_id node;
  std::int32_t exit_code = 0;
  std::int32_t signal = 0;
  /// "killed by signal 9 (SIGKILL)", "exited with status 3".
  std::string detail;
  /// Steady-clock time the agent reaped it (ns since the agent's boot).
  std::int64_t detected_ns = 0;
};

/// A rank's program (job.command, run without rekindle's API) exited with status 0: it finished.
struct rank_completed {
  epoch_t epoch;
  rank_id rank;
  node_id node;
};

/// A worker stopped answering (its heartbeats stopped) or a collective failed in it.
struct rank_trouble {
  epoch_t epoch;
  rank_id rank;
  node_id node;
  /// true: the process is unresponsive; false: a collective failed inside it.
  bool unresponsive = false;
  std::string detail;
};

/// Steps finished by one rank.
struct progress_report {
  epoch_t epoch;
  rank_id rank;
  step_t step;
  double loss = 0;
  /// From the end of the rank's previous step (its own start for the first of an epoch) to the
  /// end of this one: the loop's period, with the previous snapshot and report in it.
  std::int64_t step_ns = 0;
  /// Forward and backward passes (wall time; a slowed rank's drill included).
  std::int64_t compute_ns = 0;
  std::int64_t communication_ns = 0;
  /// Training stall of the snapshot taken after this step (0 when none).
  std::int64_t snapshot_ns = 0;
  std::uint64_t tokens = 0;
  /// Filling the step's batches (the data pipeline), outside compute_ns; 0 when not known.
  std::int64_t data_ns = 0;
  /// The CPU time of the thread in compute_ns when it computes on the host (the drill's extra
  /// included), the figure stragglers are scored on; 0 when a device computes or it is not known.
  std::int64_t compute_cpu_ns = 0;
};

/// An agent's batch of progress reports, all of `epoch`; or, with `replay`, the node's record of
/// the steps trained (one report a step, any epoch), sent to each supervisor it connects to so a
/// new leader learns the losses of the steps its predecessor heard of or nobody did.
struct progress_batch {
  epoch_t epoch;
  node_id node;
  std::vector<progress_report> reports;
  bool replay = false;
};

/// How step reports travel, one rule for a rank and its agent: they wait for the sender's next
/// heartbeat (a worker's every `timeouts_spec::keepalive()`, an agent's every `timeouts.heartbeat`)
/// and go with it as one batch, so that a step costs the control plane no wake-up of its own; they
/// go at once while the epoch's training is younger than `prompt_for` (a recovery's first steps are
/// seen without delay) and when `max_batch` wait.
struct progress_batching {
  static constexpr std::chrono::seconds prompt_for{2};
  static constexpr std::size_t max_batch = 64;
};

/// A rank connected its communicator, restored its state, and is about to train.
struct rank_restored {
  epoch_t epoch;
  rank_id rank;
  step_t step;
  /// "none", "local memory", "buddy memory on n0", "disk".
  std::string source;
  /// Connecting the communicator (the data plane's rendezvous).
  std::int64_t connect_ns = 0;
  /// Reading and importing the state.
  std::int64_t restore_ns = 0;
};

/// A node holds a copy of a rank's state at a step.
struct snapshot_held {
  epoch_t epoch;
  rank_id rank;
  step_t step;
  node_id holder;
  copy_kind kind = copy_kind::local_slot;
};

/// A node has reported every copy it holds (after each connection to the supervisor): a
/// restarted supervisor chooses a restore point only once the nodes it needs have said this.
struct holdings_reported {
  node_id node;
  std::uint32_t copies = 0;
};

/// A standby asks the supervisor for the changes of its state store from where the standby's
/// replica stands (storage::replica_position).
struct replica_pull {
  /// Echoed by the answer: an answer to an earlier pull is not applied.
  std::uint64_t id = 0;
  std::string source;
  std::uint64_t next = 0;
  bool copying = false;
  std::string copied;
};

/// The supervisor's answer: changes to apply in order (storage::replication_chunk).
struct replica_changes {
  std::uint64_t id = 0;
  bool reset = false;
  std::vector<std::string> batches;
  std::string source;
  std::uint64_t next = 0;
  bool copying = false;
  std::string copied;
};

/// Inside a daemon: etcd names this daemon as the supervisor's leader (term: the leader key's
/// create revision), or another one (`address`), or none (`term` 0).
struct leader_seen {
  std::int64_t term = 0;
  std::string node;
  std::string address;
};

/// A supervisor that just took the lead asks every process connected to its daemon to say hello
/// (again): an agent that connected before the supervisor was there said it to nobody. Only the
/// agents that follow this daemon (bridge::follow_leader) receive it.
struct introduce_yourself {
  /// The new leader's term.
  std::int64_t term = 0;
};

/// A node no longer holds a copy it reported (a slot half rewritten, a replica evicted).
struct snapshot_dropped {
  epoch_t epoch;
  rank_id rank;
  step_t step;
  node_id holder;
  copy_kind kind = copy_kind::local_slot;
};

/// Every rank of the current world holds `step` in enough places (its own slot and a buddy's
/// replica when the job spans nodes): status shows it, and the node's checkpoint actor pins it in
/// its slots and replicas until a newer step is committed (policy/snapshot_custody.hpp). The
/// supervisor → every agent → its checkpoint actor.
struct snapshot_committed {
  epoch_t epoch;
  step_t step;
};

/// A worker could not read a state its start_training named (gone, damaged, unreachable): the
/// supervisor forgets that copy and picks the restore point again.
struct restore_failed {
  epoch_t epoch;
  rank_id rank;
  node_id node;
  step_t step;
  /// The copy that failed.
  rank_id old_rank;
  node_id holder;
  copy_kind kind = copy_kind::local_slot;
  std::string detail;
};

/// Stop the worker of `rank` in `epoch` with a signal.
struct kill_request {
  epoch_t epoch;
  rank_id rank;
  std::int32_t signal = 9;
  /// Why, for the log: "hung", "operator", "leaving the node".
  std::string reason;
};

/// A fault drill on one rank's process, which stays alive.
enum class drill_kind : std::uint8_t {
  /// Training stops before its next step; its peers wait in their collectives, as behind a stuck
  /// kernel.
  hang,
  /// Each step's compute takes `factor` times as long (1 ends the drill).
  slow,
  /// No step starts for `factor` seconds (a partition across the rank's ring).
  stall,
};
inline constexpr std::uint8_t drill_kinds = 3;
/// "hang", "slow", "stall".
[[nodiscard]] std::string_view to_string(drill_kind k) noexcept;

struct drill_request {
  epoch_t epoch;
  rank_id rank;
  drill_kind kind = drill_kind::hang;
  double factor = 1.0;
};

/// Fault drill: the node's daemon drops its traffic with node `peer` for `duration_ns`, as if the
/// network between them were cut (the supervisor sends it to both ends); with `bytes_per_second`
/// > 0 the traffic is not dropped but leaves at that rate at most, as over a degraded link.
struct partition_request {
  node_id peer;
  std::int64_t duration_ns = 0;
  double bytes_per_second = 0;
};

/// Fault drill: the node's daemon dies at once (SIGKILL to itself), as a lost node does.
struct fail_node {
  std::string reason;
};

/// The job ended; workers stop, daemons stay or exit as configured.
struct job_finished {
  /// "completed", "failed", "stopped".
  std::string state;
  std::string reason;
};

// ---- worker ↔ agent -----------------------------------------------------------------------------

/// A new worker process introduces itself to its agent.
struct worker_hello {
  std::uint32_t pid = 0;
  std::uint32_t local_index = 0;
  /// A warm standby: started ahead of need, it takes a local index when activated.
  bool standby = false;
};

/// The agent puts a standby worker in the place of local rank `local_index`.
struct worker_activate {
  std::uint32_t local_index = 0;
};

/// A worker is alive (sent from its actor, not its training thread), and where its training
/// thread is in its collectives.
struct worker_heartbeat {
  std::uint32_t local_index = 0;
  epoch_t epoch;
  std::uint64_t seq = 0;
  collective_kind kind = collective_kind::none;
  collective_phase phase = collective_phase::idle;
  std::int64_t for_ns = 0;
  collective_kind p2p_kind = collective_kind::none;
  collective_phase p2p_phase = collective_phase::idle;
  std::int32_t p2p_peer = -1;
  std::int64_t p2p_for_ns = 0;
};

/// The agent tells a worker its rank in an epoch.
struct worker_assignment {
  epoch_t epoch;
  rank_id rank;
  std::uint32_t world = 0;
  /// host:port where a program's process group meets in this epoch (MASTER_ADDR:MASTER_PORT).
  std::string bootstrap;
};

/// A worker published a snapshot into its slot.
struct snapshot_taken {
  epoch_t epoch;
  rank_id rank;
  std::uint32_t local_index = 0;
  step_t step;
  std::uint64_t length = 0;
  std::uint64_t checksum = 0;
  /// The copy the snapshot overwrote in the slot, as the slot's custody rule chose it (none or one).
  std::vector<policy::copy_tag> dropped;
};

/// The slot's custody rule skipped a worker's snapshot: writing it would overwrite the protected
/// step `pinned` or the anchor `waiting` before that anchor is committed.
struct snapshot_skipped {
  epoch_t epoch;
  rank_id rank;
  std::uint32_t local_index = 0;
  step_t step;
  step_t pinned;
  step_t waiting;
};

// ---- checkpoint actors ---------------------------------------------------------------------------

/// Write the shards of `step` (an anchor every rank holds) to the checkpoint directory. The
/// supervisor → every agent → its checkpoint actor, which writes the local ranks' shards whose
/// slots hold that step.
struct persist_request {
  epoch_t epoch;
  step_t step;
};

/// A shard of a checkpoint is durable (ok), or could not be written (`detail` says why). The
/// checkpoint actor → the supervisor.
struct shard_persisted {
  epoch_t epoch;
  step_t step;
  rank_id rank;
  node_id node;
  bool ok = false;
  /// File name inside the checkpoint directory.
  std::string file;
  std::uint64_t size = 0;
  std::uint64_t checksum = 0;
  std::int64_t write_ns = 0;
  std::string detail;
  /// Not written because the slot already holds a newer anchor (training outran the request).
  bool superseded = false;
};

/// Replica of a rank's snapshot for a buddy (the bytes travel as the frame's bulk payload).
struct replica_header {
  epoch_t epoch;
  rank_id rank;
  step_t step;
  std::uint64_t length = 0;
  std::uint64_t checksum = 0;
};

/// A worker (or another daemon) asks for the state of `rank` at `step` held by `holder`.
struct state_request {
  std::uint64_t id = 0;
  rank_id rank;
  step_t step;
  copy_kind kind = copy_kind::local_slot;
  node_id holder;
  /// host:port of the holder's daemon.
  std::string holder_address;
};

/// The answer to state_request: `ok` false with `error` set, or the bytes as the bulk payload.
struct state_reply {
  std::uint64_t id = 0;
  bool ok = false;
  std::string error;
  std::uint64_t length = 0;
  std::uint64_t checksum = 0;
};

// ---- inspect functions ---------------------------------------------------------------------------

#define RK_INSPECT(type, ...)                                                 \
  template <class Inspector>                                                  \
  typename Inspector::result_type inspect(Inspector& f, type& x) {            \
    return f(caf::meta::type_name(#type), __VA_ARGS__);                      \
  }

RK_INSPECT(node_hello, x.node, x.name, x.address, x.pid, x.reached_step, x.epoch)
RK_INSPECT(replica_pull, x.id, x.source, x.next, x.copying, x.copied)
RK_INSPECT(replica_changes, x.id, x.reset, x.batches, x.source, x.next, x.copying, x.copied)
RK_INSPECT(leader_seen, x.term, x.node, x.address)
RK_INSPECT(introduce_yourself, x.term)
RK_INSPECT(rank_position, x.rank, x.epoch, x.seq, x.kind, x.phase, x.for_ns, x.p2p_kind, x.p2p_phase, x.p2p_peer,
           x.p2p_for_ns)
RK_INSPECT(node_heartbeat, x.node, x.sequence, x.standby_ready, x.positions)
RK_INSPECT(rank_stack, x.epoch, x.rank, x.node, x.stack, x.error)
RK_INSPECT(node_check_request, x.id, x.slow_factor, x.slow_only)
RK_INSPECT(link_probe_request, x.id, x.peer, x.address, x.bytes, x.repeats)
RK_INSPECT(link_probe, x.id, x.seq)
RK_INSPECT(link_probe_ack, x.id, x.seq, x.bytes)
RK_INSPECT(link_report, x.id, x.node, x.peer, x.mbps, x.error)
RK_INSPECT(node_check_report, x.node, x.id, x.gemm_gflops, x.memory_gbps, x.disk_mbps, x.fsync_ms, x.gpus, x.gpus_expected,
           x.gpu_detail, x.error, x.gpu_gflops, x.gpu_faults)
RK_INSPECT(rank_assignment, x.rank, x.local_index, x.delay_ns, x.new_process)
RK_INSPECT(assign_ranks, x.epoch, x.world, x.ranks, x.buddy, x.buddy_address, x.rank0_host)
RK_INSPECT(abort_epoch, x.epoch)
RK_INSPECT(rank_ready, x.epoch, x.rank, x.node, x.local_index, x.pid, x.address)
RK_INSPECT(restore_source, x.old_rank, x.holder, x.kind)
RK_INSPECT(start_training, x.epoch, x.world, x.addresses, x.restore_step, x.restore_world, x.sources, x.node_addresses,
           x.micro_batches, x.stages)
RK_INSPECT(rank_exited, x.epoch, x.rank, x.node, x.exit_code, x.signal, x.detail, x.detected_ns)
RK_INSPECT(rank_completed, x.epoch, x.rank, x.node)
RK_INSPECT(rank_trouble, x.epoch, x.rank, x.node, x.unresponsive, x.detail)
RK_INSPECT(progress_report, x.epoch, x.rank, x.step, x.loss, x.step_ns, x.compute_ns, x.communication_ns, x.snapshot_ns,
           x.tokens, x.data_ns, x.compute_cpu_ns)
RK_INSPECT(progress_batch, x.epoch, x.node, x.reports, x.replay)
RK_INSPECT(rank_restored, x.epoch, x.rank, x.step, x.source, x.connect_ns, x.restore_ns)
RK_INSPECT(snapshot_held, x.epoch, x.rank, x.step, x.holder, x.kind)
RK_INSPECT(holdings_reported, x.node, x.copies)
RK_INSPECT(snapshot_dropped, x.epoch, x.rank, x.step, x.holder, x.kind)
RK_INSPECT(snapshot_committed, x.epoch, x.step)
RK_INSPECT(restore_failed, x.epoch, x.rank, x.node, x.step, x.old_rank, x.holder, x.kind, x.detail)
RK_INSPECT(kill_request, x.epoch, x.rank, x.signal, x.reason)
RK_INSPECT(drill_request, x.epoch, x.rank, x.kind, x.factor)
RK_INSPECT(partition_request, x.peer, x.duration_ns, x.bytes_per_second)
RK_INSPECT(fail_node, x.reason)
RK_INSPECT(job_finished, x.state, x.reason)
RK_INSPECT(worker_hello, x.pid, x.local_index, x.standby)
RK_INSPECT(worker_activate, x.local_index)
RK_INSPECT(worker_heartbeat, x.local_index, x.epoch, x.seq, x.kind, x.phase, x.for_ns, x.p2p_kind, x.p2p_phase,
           x.p2p_peer, x.p2p_for_ns)
RK_INSPECT(worker_assignment, x.epoch, x.rank, x.world, x.bootstrap)
RK_INSPECT(snapshot_taken, x.epoch, x.rank, x.local_index, x.step, x.length, x.checksum, x.dropped)
RK_INSPECT(snapshot_skipped, x.epoch, x.rank, x.local_index, x.step, x.pinned, x.waiting)
RK_INSPECT(replica_header, x.epoch, x.rank, x.step, x.length, x.checksum)
RK_INSPECT(state_request, x.id, x.rank, x.step, x.kind, x.holder, x.holder_address)
RK_INSPECT(state_reply, x.id, x.ok, x.error, x.length, x.checksum)
RK_INSPECT(persist_request, x.epoch, x.step)
RK_INSPECT(shard_persisted, x.epoch, x.step, x.rank, x.node, x.ok, x.file, x.size, x.checksum, x.write_ns, x.detail, x.superseded)


// ---- admin shell ↔ supervisor -----------------------------------------------------------------------
//
// Each command is its own message type, parsed once where it is typed (the shell's CLI11, replay's
// trace) and checked again by the supervisor against the job (a rank that is placed, a node that is
// up, a value in range). `command` names it in refusals; `changes_job` says whether a read-only
// token may send it. Every request is answered by one admin_reply with the same id.

/// The job's status (job_status.hpp, as JSON); `full` adds every step's loss and time (report.json).
struct admin_status {
  static constexpr std::string_view command = "status";
  static constexpr bool changes_job = false;
  std::uint64_t id = 0;
  bool full = false;
};

/// The loss curve in at most `points` buckets (1..100000), with the steps where failures struck.
struct admin_loss {
  static constexpr std::string_view command = "loss";
  static constexpr bool changes_job = false;
  std::uint64_t id = 0;
  std::uint32_t points = 200;
};

/// At most 1000 events after sequence number `after`, oldest first.
struct admin_events {
  static constexpr std::string_view command = "events";
  static constexpr bool changes_job = false;
  std::uint64_t id = 0;
  std::uint64_t after = 0;
};

/// Fault drill: signal (1..64) a placed rank's process.
struct admin_kill {
  static constexpr std::string_view command = "kill";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  rank_id rank;
  std::int32_t signal = 9;
};

/// Fault drill: a placed rank hangs, or its compute is slowed by `factor` (1..100; 1 ends it).
/// Only hang and slow are operators' drills (stall is the agent's, for partitions).
struct admin_drill {
  static constexpr std::string_view command = "drill";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  rank_id rank;
  drill_kind kind = drill_kind::hang;
  double factor = 1.0;
};

/// Fault drill: the named node's daemon dies at once.
struct admin_fail_node {
  static constexpr std::string_view command = "fail node";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::string node;
};

/// Fault drill: traffic between two named nodes is dropped for `duration_ns` (100 ms..1 h).
struct admin_partition {
  static constexpr std::string_view command = "partition";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::string node1;
  std::string node2;
  std::int64_t duration_ns = 0;
  /// 0: the traffic is dropped; > 0: it is slowed to this many MB/s each way (`rekindle throttle`).
  double mbps = 0;
};

/// Pause training (the ranks wait, processes stay), or resume it in a new epoch.
struct admin_pause {
  static constexpr std::string_view command = "pause/resume";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  bool pause = true;
};

/// Move the named node's ranks to a spare (or shrink the world) and stop using it.
struct admin_drain {
  static constexpr std::string_view command = "drain";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::string node;
};

/// Resize the data-parallel world to `ranks` ranks.
struct admin_scale {
  static constexpr std::string_view command = "scale";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::uint32_t ranks = 0;
};

/// New micro-batch shares: "measured", "speeds" or "equal" (as job.balance), through a new epoch.
struct admin_rebalance {
  static constexpr std::string_view command = "rebalance";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::string how = "measured";
};

/// A checkpoint on disk at the next anchor, whatever checkpoint.persist_every says.
struct admin_checkpoint_now {
  static constexpr std::string_view command = "checkpoint now";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
};

/// Run the node check again on the named nodes (all when empty) and answer with every node's figures
/// and verdict, once they have all reported (or after 60 s). A node that fails is quarantined; a
/// quarantined one that passes is released. `slow_factor` > 1 is a drill on the named nodes: their
/// measurements do that much more work, as on slower hardware (1 to 100).
struct admin_check {
  static constexpr std::string_view command = "check";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::vector<std::string> nodes;
  double slow_factor = 1.0;
  /// The drill slows only "compute", "memory" or "disk"; empty: every measurement.
  std::string slow_only;
};

/// Stop the job; every rank ends, state is kept.
struct admin_stop {
  static constexpr std::string_view command = "stop";
  static constexpr bool changes_job = true;
  std::uint64_t id = 0;
  std::string reason;
};

/// The answer to any admin request: done (`ok`, with text for people and JSON for scripts), or
/// refused with `code` and the reason in `text`.
struct admin_reply {
  std::uint64_t id = 0;
  bool ok = true;
  errc code = errc::internal;
  std::string text;
  std::string json;
};

/// Every admin request type, in one list: registered with CAF and answered by the supervisor.
template <class... Ts>
struct type_list {};
using admin_requests = type_list<admin_status, admin_loss, admin_events, admin_kill, admin_drill, admin_fail_node,
                                 admin_partition, admin_pause, admin_drain, admin_scale, admin_rebalance,
                                 admin_checkpoint_now, admin_stop, admin_check>;

RK_INSPECT(admin_status, x.id, x.full)
RK_INSPECT(admin_loss, x.id, x.points)
RK_INSPECT(admin_events, x.id, x.after)
RK_INSPECT(admin_kill, x.id, x.rank, x.signal)
RK_INSPECT(admin_drill, x.id, x.rank, x.kind, x.factor)
RK_INSPECT(admin_fail_node, x.id, x.node)
RK_INSPECT(admin_partition, x.id, x.node1, x.node2, x.duration_ns, x.mbps)
RK_INSPECT(admin_pause, x.id, x.pause)
RK_INSPECT(admin_drain, x.id, x.node)
RK_INSPECT(admin_scale, x.id, x.ranks)
RK_INSPECT(admin_rebalance, x.id, x.how)
RK_INSPECT(admin_checkpoint_now, x.id)
RK_INSPECT(admin_stop, x.id, x.reason)
RK_INSPECT(admin_check, x.id, x.nodes, x.slow_factor, x.slow_only)
RK_INSPECT(admin_reply, x.id, x.ok, x.code, x.text, x.json)

// ---- within one process ---------------------------------------------------------------------------

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using connect_atom = caf::atom_constant<caf::atom("connect")>;
using spawn_atom = caf::atom_constant<caf::atom("spawn")>;
using unreachable_atom = caf::atom_constant<caf::atom("unreach")>;

/// The reaper thread saw a child process end (waitpid status).
struct child_exited {
  std::int32_t pid = 0;
  std::int32_t status = 0;
  std::int64_t at_ns = 0;
};
RK_INSPECT(child_exited, x.pid, x.status, x.at_ns)

// ---- fencing ----------------------------------------------------------------------------------

/// Whether messages of type T belong to an epoch. The bridge stamps a fenced message with its own
/// `epoch` field and drops one stamped older than the newest epoch the receiving process has seen:
/// a rank or an agent of an earlier epoch never acts or is heard in a later one. Every other message
/// is a fact or a request that holds across epochs (a process exited, a node is alive, a copy is
/// held or dropped, a shard was written, an abort, a drill on a node, a state for a restore) and
/// passes whatever epoch is current; it carries no stamp.
template <class T>
inline constexpr bool fenced = false;
template <> inline constexpr bool fenced<assign_ranks> = true;
template <> inline constexpr bool fenced<rank_ready> = true;
template <> inline constexpr bool fenced<start_training> = true;
template <> inline constexpr bool fenced<rank_trouble> = true;
template <> inline constexpr bool fenced<rank_completed> = true;
template <> inline constexpr bool fenced<progress_report> = true;
template <> inline constexpr bool fenced<progress_batch> = true;
template <> inline constexpr bool fenced<rank_restored> = true;
template <> inline constexpr bool fenced<snapshot_committed> = true;
template <> inline constexpr bool fenced<restore_failed> = true;
template <> inline constexpr bool fenced<kill_request> = true;
template <> inline constexpr bool fenced<drill_request> = true;
template <> inline constexpr bool fenced<worker_assignment> = true;
template <> inline constexpr bool fenced<persist_request> = true;

/// The stamp a message travels with: its epoch when fenced, else none (0).
template <class T>
[[nodiscard]] epoch_t stamp_of(const T& msg) noexcept {
  if constexpr (fenced<T>)
    return msg.epoch;
  else
    return epoch_t{0};
}

/// The epoch of a message received by the bridge when its first element is of a fenced type (read
/// from the message itself, not from the frame that carried it), else nullopt.
[[nodiscard]] std::optional<epoch_t> fenced_epoch(const caf::message& msg);

/// Whether every enum field of the message's first element holds one of its enum's values. CAF
/// loads an enum by casting whatever number the frame holds, so the bridge asks this of every
/// message it decodes and drops one that fails (a damaged frame, or a newer sender's kind).
[[nodiscard]] bool well_formed(const caf::message& msg);

/// Whether a peer that authenticated with the read-only token may send this message: an admin
/// request (the supervisor answers the ones that change the job with a refusal). Every other
/// message is the control plane of rekindle's own processes, which hold the cluster token.
[[nodiscard]] bool read_only_may_send(const caf::message& msg);

/// One default-made message of every type that crosses a bridge, for tests of every kind.
[[nodiscard]] std::vector<caf::message> one_message_of_every_type();

/// Registers every message type above with `cfg` (both ends of a bridge must).
void register_message_types(caf::actor_system_config& cfg);

/// The names of every registered message type, for tests.
std::vector<std::string> message_type_names();

#undef RK_INSPECT

}  // namespace rekindle::actors
