#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.hpp"

/// An absent value is JSON null, and null reads back as absent.
template <class T>
struct nlohmann::adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& v) {
    if (v)
      j = *v;
    else
      j = nullptr;
  }
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null())
      v.reset();
    else
      v = j.get<T>();
  }
};

namespace rekindle::actors {

/// The job as the supervisor reports it (`rekindle status --json`, <data_dir>/status.json and
/// report.json): written by the supervisor and read by the shell, the demo and the benchmarks
/// through this one definition. Fields not known yet are null.

struct checkpoint_status {
  std::string directory;
  std::uint64_t persist_every = 0;
  /// The newest committed checkpoint on disk.
  std::optional<std::uint64_t> last_step;
  /// One being written.
  std::optional<std::uint64_t> writing_step;
  /// Why the last one failed.
  std::optional<std::string> error;
  /// How long writing the newest committed one took, from its start to its commit.
  std::optional<double> persist_s;
  /// Checkpoints committed by this supervisor since it started.
  std::uint64_t committed = 0;
};

struct node_status {
  std::string name;
  bool up = false;
  /// A warm standby worker waits there.
  bool standby_ready = false;
  /// Its latest pre-flight check: "passed", "quarantined", or "" before its first.
  std::string check;
  /// The check's figures, or what failed with the figures.
  std::string check_detail;
  /// Seconds since its agent was last heard from (null while it is down).
  std::optional<double> heartbeat_age_s;
  /// Its failure domain (nodes.domain; "" for none), and the node that keeps its snapshot
  /// replicas this epoch ("" for none).
  std::string domain;
  std::string buddy;
};

struct rank_status_view {
  std::uint32_t rank = 0;
  std::string node;
  std::uint32_t pid = 0;
  std::string state;
  std::uint64_t step = 0;
  double step_time_s = 0;
  /// Of the last step: forward and backward passes; the rank thread's CPU time in them (null
  /// when a device computes); collectives; filling the batches.
  double compute_time_s = 0;
  std::optional<double> compute_cpu_time_s;
  double communication_time_s = 0;
  double data_time_s = 0;
  /// Its straggler score: its median compute per micro-batch over the fleet's (null before its
  /// window is full; docs/RUNTIME.md, "Stragglers").
  std::optional<double> straggler_ratio;
  /// Its share of a step's micro-batches (with pipeline stages, its replica's).
  std::optional<std::uint32_t> micro_batches;
  /// Its pipeline stage and replica (job.stages; null without a pipeline).
  std::optional<std::uint32_t> stage;
  std::optional<std::uint32_t> replica;
  /// Measured micro-batches per second of compute on its device slot (null before its first step).
  std::optional<double> speed;
  double snapshot_stall_s = 0;
  std::uint64_t last_snapshot = 0;
  std::uint32_t restarts = 0;
};

struct recovery_status {
  std::uint64_t epoch = 0;
  std::string cause;
  std::uint64_t failed_at_step = 0;
  std::uint64_t restored_step = 0;
  std::uint64_t steps_lost = 0;
  std::string source;
  bool done = false;
  double detect_s = 0;
  double respawn_s = 0;
  double rendezvous_s = 0;
  double restore_s = 0;
  /// The slowest rank's first step after the restore.
  double first_step_s = 0;
  /// What the phases leave of the total (messages between them); the phases and this add up to it.
  double between_s = 0;
  double total_s = 0;
  /// Monotonic clock (CLOCK_MONOTONIC) readings, for tools on the same host.
  std::int64_t detected_at_ns = 0;
  std::int64_t first_step_at_ns = 0;
  std::optional<std::int64_t> injected_at_ns;
  std::optional<std::uint32_t> rank;
  std::optional<std::string> node;
};

struct job_status {
  std::string job;
  /// "waiting_for_nodes", "rendezvous", "running", "paused", "completed", "failed", "stopped".
  std::string state;
  std::string reason;
  std::uint64_t epoch = 0;
  std::uint32_t world = 0;
  std::uint64_t step = 0;
  std::uint64_t total_steps = 0;
  /// The user's program every rank runs (job.command, its words joined by spaces), when the job
  /// runs one instead of the built-in model: it reports no steps.
  std::optional<std::string> command;
  std::uint32_t restarts = 0;
  std::optional<double> loss;
  std::optional<double> tokens_per_s;
  /// The newest step every rank holds on enough nodes: where a failure now restores to at worst.
  std::optional<std::uint64_t> committed_step;
  checkpoint_status checkpoint;
  std::vector<node_status> nodes;
  std::string balance;
  std::vector<std::uint32_t> micro_batches;
  std::vector<rank_status_view> ranks;
  std::vector<recovery_status> recoveries;
  /// Only in the full report: every step's loss and time (index = step - 1).
  std::vector<double> losses;
  std::vector<double> step_seconds;

  /// Whether the job has ended (completed, failed or stopped).
  [[nodiscard]] bool ended() const { return state == "completed" || state == "failed" || state == "stopped"; }
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(checkpoint_status, directory, persist_every, last_step, writing_step,
                                                error, persist_s, committed)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(node_status, name, up, standby_ready, check, check_detail,
                                                heartbeat_age_s, domain, buddy)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(rank_status_view, rank, node, pid, state, step, step_time_s,
                                                compute_time_s, compute_cpu_time_s, communication_time_s,
                                                data_time_s, straggler_ratio, micro_batches, stage, replica, speed, snapshot_stall_s,
                                                last_snapshot, restarts)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(recovery_status, epoch, cause, failed_at_step, restored_step,
                                                steps_lost, source, done, detect_s, respawn_s, rendezvous_s,
                                                restore_s, first_step_s, between_s, total_s, detected_at_ns, first_step_at_ns, injected_at_ns,
                                                rank, node)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(job_status, job, state, reason, epoch, world, step, total_steps,
                                                command, restarts, loss, tokens_per_s, committed_step, checkpoint, nodes,
                                                balance, micro_batches, ranks, recoveries, losses, step_seconds)

/// Reads a status; errors (parse_error) say what in it is not a status.
[[nodiscard]] inline expected<job_status> parse_job_status(const std::string& text) {
  try {
    return nlohmann::json::parse(text).get<job_status>();
  } catch (const nlohmann::json::exception& e) {
    return status{errc::parse_error, std::string{"not a job status: "} + e.what()};
  }
}

}  // namespace rekindle::actors
