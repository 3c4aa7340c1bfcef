#include "actors/metrics.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "transport/frame.hpp"
#include "web/exposition.hpp"

namespace rekindle::actors {

namespace {

constexpr std::array<std::string_view, 7> job_states{"waiting_for_nodes", "rendezvous", "running", "paused",
                                                     "completed",         "failed",     "stopped"};
constexpr std::array<std::string_view, 5> recovery_kinds{"rank_exit", "rank_hang", "node_lost",
                                                         "supervisor_restart", "other"};

void job_metrics(web::exposition& x, const job_status& j) {
  const web::labels job{{"training_job", j.job}};
  for (const auto s : job_states)
    x.gauge("rekindle_job_state", "1 for the job's current state, 0 for the others.", j.state == s ? 1 : 0,
            {{"training_job", j.job}, {"state", std::string{s}}});
  x.gauge("rekindle_job_epoch", "The job's epoch: bumped at every membership change.", static_cast<double>(j.epoch),
          job);
  x.gauge("rekindle_job_world_size", "Ranks in the current epoch.", j.world, job);
  x.gauge("rekindle_job_step", "The newest step any rank finished.", static_cast<double>(j.step), job);
  x.gauge("rekindle_job_target_steps", "Steps the job trains in all (0: the user's program decides).",
          static_cast<double>(j.total_steps), job);
  if (j.loss)
    x.gauge("rekindle_job_loss", "The loss of the newest step.", *j.loss, job);
  if (j.tokens_per_s)
    x.gauge("rekindle_job_tokens_per_second", "Tokens trained per second at the newest step.", *j.tokens_per_s, job);
  if (!j.ranks.empty()) {
    double slowest = 0;
    for (const auto& r : j.ranks)
      slowest = std::max(slowest, r.step_time_s);
    x.gauge("rekindle_job_step_seconds", "Wall time of the newest step: the slowest rank's.", slowest, job);
  }
  x.counter("rekindle_job_rank_restarts_total", "Rank processes restarted by the supervisor.", j.restarts, job);
  if (j.committed_step)
    x.gauge("rekindle_snapshot_committed_step",
            "The newest step every rank holds on enough nodes: where a failure restores to at worst.",
            static_cast<double>(*j.committed_step), job);

  // Ranks.
  std::map<std::string, int> by_state;
  for (const auto& r : j.ranks)
    ++by_state[r.state];
  for (const auto& [state, n] : by_state)
    x.gauge("rekindle_ranks", "Ranks of the placement by state.", n, {{"training_job", j.job}, {"state", state}});
  for (const auto& r : j.ranks) {
    const web::labels l{{"training_job", j.job}, {"rank", std::to_string(r.rank)}, {"node", r.node}};
    x.gauge("rekindle_rank_step", "The rank's newest finished step.", static_cast<double>(r.step), l);
    x.gauge("rekindle_rank_step_seconds", "Wall time of the rank's newest step.", r.step_time_s, l);
    x.gauge("rekindle_rank_compute_seconds", "Forward and backward passes of the rank's newest step.",
            r.compute_time_s, l);
    x.gauge("rekindle_rank_communication_seconds", "Collectives of the rank's newest step.", r.communication_time_s, l);
    x.gauge("rekindle_rank_data_seconds", "Filling the batches of the rank's newest step.", r.data_time_s, l);
    x.gauge("rekindle_rank_snapshot_stall_seconds", "Training stalled by the rank's newest snapshot.",
            r.snapshot_stall_s, l);
    x.counter("rekindle_rank_restarts_total", "Times the rank's process was restarted.", r.restarts, l);
    if (r.straggler_ratio)
      x.gauge("rekindle_rank_straggler_ratio", "The rank's compute per micro-batch over the fleet's median.",
              *r.straggler_ratio, l);
  }

  // Nodes.
  for (const auto& n : j.nodes) {
    const web::labels l{{"training_job", j.job}, {"node", n.name}};
    x.gauge("rekindle_node_up", "1 while the node's agent is connected.", n.up ? 1 : 0, l);
    x.gauge("rekindle_node_quarantined", "1 while the node's check keeps it out of the job.",
            n.check == "quarantined" ? 1 : 0, l);
    if (n.heartbeat_age_s)
      x.gauge("rekindle_node_heartbeat_age_seconds", "Seconds since the node's agent was last heard from.",
              *n.heartbeat_age_s, l);
  }

  // Checkpoints on disk.
  x.counter("rekindle_checkpoints_committed_total", "Checkpoints written and committed since the supervisor started.",
            static_cast<double>(j.checkpoint.committed), job);
  if (j.checkpoint.last_step)
    x.gauge("rekindle_checkpoint_committed_step", "The newest committed checkpoint on disk.",
            static_cast<double>(*j.checkpoint.last_step), job);
  if (j.checkpoint.persist_s)
    x.gauge("rekindle_checkpoint_persist_seconds", "How long the newest committed checkpoint took to write.",
            *j.checkpoint.persist_s, job);
  x.gauge("rekindle_checkpoint_failing", "1 when the last checkpoint failed.", j.checkpoint.error ? 1 : 0, job);

  // Recoveries, by kind, with their phases.
  std::map<std::string, std::vector<const recovery_status*>> kinds;
  for (const auto k : recovery_kinds)
    kinds[std::string{k}];
  bool recovering = false;
  for (const auto& r : j.recoveries) {
    kinds[recovery_kind(r)].push_back(&r);
    recovering = recovering || !r.done;
  }
  x.gauge("rekindle_recovery_in_progress", "1 while a recovery is under way.", recovering ? 1 : 0, job);
  for (const auto& [kind, list] : kinds) {
    const web::labels l{{"training_job", j.job}, {"kind", kind}};
    x.counter("rekindle_recoveries_total", "Recoveries begun, by kind.", static_cast<double>(list.size()), l);
    std::vector<double> detection, respawn, rendezvous, restore, first_step, total;
    double lost = 0;
    for (const auto* r : list) {
      if (r->injected_at_ns)  // known only when rekindle injected the fault itself
        detection.push_back(r->detect_s);
      if (!r->done)
        continue;
      respawn.push_back(r->respawn_s);
      rendezvous.push_back(r->rendezvous_s);
      restore.push_back(r->restore_s);
      first_step.push_back(r->first_step_s);
      total.push_back(r->total_s);
      lost += static_cast<double>(r->steps_lost);
    }
    const auto& b = recovery_buckets();
    x.histogram("rekindle_fault_detection_seconds",
                "From an injected fault to its detection (drills and replayed traces; unknown for others).", b,
                detection, l);
    x.histogram("rekindle_recovery_respawn_seconds", "Finished recoveries' respawn phase: detection to ranks ready.", b,
                respawn, l);
    x.histogram("rekindle_recovery_rendezvous_seconds", "Finished recoveries' rendezvous phase.", b, rendezvous, l);
    x.histogram("rekindle_recovery_restore_seconds", "Finished recoveries' restore phase.", b, restore, l);
    x.histogram("rekindle_recovery_first_step_seconds", "Finished recoveries' first step after the restore.", b,
                first_step, l);
    x.histogram("rekindle_recovery_duration_seconds", "Finished recoveries: detection to the first step after.", b,
                total, l);
    x.counter("rekindle_recovery_lost_steps_total", "Steps trained again after finished recoveries.", lost, l);
  }
}

}  // namespace

std::string recovery_kind(const recovery_status& r) {
  const auto& c = r.cause;
  if (c.starts_with("supervisor"))
    return "supervisor_restart";
  if (c.starts_with("node"))
    return "node_lost";
  if (c.starts_with("rank"))
    return c.find("hung") != std::string::npos || c.find("hang") != std::string::npos ? "rank_hang" : "rank_exit";
  return "other";
}

const std::vector<double>& recovery_buckets() {
  static const std::vector<double> b{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300};
  return b;
}

std::string render_metrics(const daemon_figures& d, const job_status* job) {
  web::exposition x;
  x.gauge("rekindle_daemon_info", "1, labelled with the daemon's node, role and version.", 1,
          {{"node", d.node}, {"role", d.role}, {"version", REKINDLE_VERSION}});
  x.gauge("rekindle_daemon_uptime_seconds", "Seconds since the daemon started.", d.uptime_s);
  x.gauge("rekindle_daemon_epoch", "The newest job epoch this daemon has seen.", static_cast<double>(d.epoch));
  const auto& t = d.transport;
  x.counter("rekindle_transport_frames_sent_total", "Control frames sent.", static_cast<double>(t.frames_sent));
  x.counter("rekindle_transport_frames_received_total", "Control frames received.",
            static_cast<double>(t.frames_received));
  x.counter("rekindle_transport_sent_bytes_total", "Bytes of control frames sent.", static_cast<double>(t.bytes_sent));
  x.counter("rekindle_transport_received_bytes_total", "Bytes of control frames received.",
            static_cast<double>(t.bytes_received));
  for (std::size_t i = 1; i < transport::drop_reason_count; ++i)
    x.counter("rekindle_transport_frames_dropped_total",
              "Received frames dropped, by reason (stale_epoch: fenced off by a newer epoch).",
              static_cast<double>(t.dropped[i]),
              {{"reason", std::string{transport::to_string(static_cast<transport::drop_reason>(i))}}});
  x.counter("rekindle_transport_peers_refused_total", "Peers refused in the token handshake.",
            static_cast<double>(t.peers_refused));
  x.counter("rekindle_transport_peers_lost_total", "Authenticated peers lost.", static_cast<double>(t.peers_lost));
  x.counter("rekindle_stale_epoch_messages_dropped_total", "Messages of an older epoch the fence dropped.",
            static_cast<double>(t.dropped_of(transport::drop_reason::stale_epoch)));
  x.counter("rekindle_stale_epoch_messages_delivered_total",
            "Messages delivered with a stamp older than one delivered before (the fence keeps this at 0).",
            static_cast<double>(d.stale_delivered));
  x.counter("rekindle_messages_not_from_leader_total", "Messages dropped for coming from a supervisor that is not the leader.",
            static_cast<double>(d.not_from_leader));
  x.counter("rekindle_messages_refused_total", "Messages refused for the sender's role (read-only token).",
            static_cast<double>(d.refused));
  x.counter("rekindle_messages_undeliverable_total", "Frames naming no actor, or that failed to decode.",
            static_cast<double>(d.undeliverable));
  if (job != nullptr)
    job_metrics(x, *job);
  return x.text();
}

}  // namespace rekindle::actors
