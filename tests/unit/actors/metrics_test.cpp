#include "actors/metrics.hpp"

#include <gtest/gtest.h>

#include "tests/support/process.hpp"

namespace rekindle::actors {
namespace {

job_status sample_job() {
  job_status j;
  j.job = "demo";
  j.state = "running";
  j.epoch = 3;
  j.world = 2;
  j.step = 2;
  j.total_steps = 100;
  j.loss = 4.5;
  j.tokens_per_s = 1000;
  j.restarts = 1;
  j.committed_step = 1;
  j.checkpoint.last_step = 1;
  j.checkpoint.persist_s = 0.75;
  j.checkpoint.committed = 1;
  j.nodes = {{"n0", true, false, "passed", "", 0.2}, {"n1", false, false, "quarantined", "slow", std::nullopt}};
  rank_status_view r0;
  r0.rank = 0;
  r0.node = "n0";
  r0.state = "training";
  r0.step = 2;
  r0.restarts = 1;
  r0.step_time_s = 0.25;
  rank_status_view r1 = r0;
  r1.rank = 1;
  r1.restarts = 0;
  r1.step_time_s = 0.2;
  j.ranks = {r0, r1};
  recovery_status done;
  done.epoch = 2;
  done.cause = "rank 0 exited with signal 9";
  done.done = true;
  done.respawn_s = 0.3;
  done.rendezvous_s = 0.1;
  done.restore_s = 0.05;
  done.total_s = 0.6;
  done.steps_lost = 2;
  done.injected_at_ns = 1;
  done.detect_s = 0.02;
  recovery_status open;
  open.epoch = 3;
  open.cause = "node n1 lost: no heartbeat for 5s";
  j.recoveries = {done, open};
  return j;
}

TEST(metrics, recoveries_have_a_kind_of_few_values) {
  recovery_status r;
  r.cause = "rank 3 exited with signal 9";
  EXPECT_EQ(recovery_kind(r), "rank_exit");
  r.cause = "rank 3 hung (in allreduce 12): the supervisor killed it";
  EXPECT_EQ(recovery_kind(r), "rank_hang");
  r.cause = "node n1 lost";
  EXPECT_EQ(recovery_kind(r), "node_lost");
  r.cause = "supervisor restarted";
  EXPECT_EQ(recovery_kind(r), "supervisor_restart");
  r.cause = "something new";
  EXPECT_EQ(recovery_kind(r), "other");
}

TEST(metrics, the_job_ranks_nodes_checkpoints_and_recoveries_with_their_phases_are_exposed) {
  daemon_figures d;
  d.node = "n0";
  d.role = "supervisor";
  d.epoch = 3;
  d.transport.dropped[static_cast<std::size_t>(transport::drop_reason::stale_epoch)] = 4;
  const auto job = sample_job();
  const auto text = render_metrics(d, &job);
  for (const char* want : {
           "rekindle_daemon_info{node=\"n0\",role=\"supervisor\",version=\"",
           "rekindle_stale_epoch_messages_dropped_total 4\n",
           "rekindle_transport_frames_dropped_total{reason=\"stale_epoch\"} 4\n",
           "rekindle_job_state{training_job=\"demo\",state=\"running\"} 1\n",
           "rekindle_job_state{training_job=\"demo\",state=\"failed\"} 0\n",
           "rekindle_job_epoch{training_job=\"demo\"} 3\n",
           "rekindle_job_loss{training_job=\"demo\"} 4.5\n",
           "rekindle_job_step_seconds{training_job=\"demo\"} 0.25\n",
           "rekindle_ranks{training_job=\"demo\",state=\"training\"} 2\n",
           "rekindle_rank_restarts_total{training_job=\"demo\",rank=\"0\",node=\"n0\"} 1\n",
           "rekindle_node_up{training_job=\"demo\",node=\"n1\"} 0\n",
           "rekindle_node_quarantined{training_job=\"demo\",node=\"n1\"} 1\n",
           "rekindle_node_heartbeat_age_seconds{training_job=\"demo\",node=\"n0\"} 0.2\n",
           "rekindle_checkpoint_persist_seconds{training_job=\"demo\"} 0.75\n",
           "rekindle_snapshot_committed_step{training_job=\"demo\"} 1\n",
           "rekindle_recovery_in_progress{training_job=\"demo\"} 1\n",
           "rekindle_recoveries_total{training_job=\"demo\",kind=\"rank_exit\"} 1\n",
           "rekindle_recoveries_total{training_job=\"demo\",kind=\"node_lost\"} 1\n",
           "rekindle_recoveries_total{training_job=\"demo\",kind=\"rank_hang\"} 0\n",
           "rekindle_recovery_respawn_seconds_bucket{training_job=\"demo\",kind=\"rank_exit\",le=\"0.25\"} 0\n",
           "rekindle_recovery_respawn_seconds_bucket{training_job=\"demo\",kind=\"rank_exit\",le=\"0.5\"} 1\n",
           "rekindle_recovery_duration_seconds_count{training_job=\"demo\",kind=\"rank_exit\"} 1\n",
           "rekindle_recovery_duration_seconds_count{training_job=\"demo\",kind=\"node_lost\"} 0\n",
           "rekindle_fault_detection_seconds_count{training_job=\"demo\",kind=\"rank_exit\"} 1\n",
           "rekindle_recovery_lost_steps_total{training_job=\"demo\",kind=\"rank_exit\"} 2\n",
       })
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  // A node's heartbeat age is unknown while it is down: no sample rather than a made-up one.
  EXPECT_EQ(text.find("rekindle_node_heartbeat_age_seconds{training_job=\"demo\",node=\"n1\"}"), std::string::npos);
}

TEST(metrics, a_daemon_without_the_job_exposes_only_itself) {
  daemon_figures d;
  d.node = "n1";
  const auto text = render_metrics(d, nullptr);
  EXPECT_NE(text.find("rekindle_daemon_info{node=\"n1\",role=\"node\""), std::string::npos);
  EXPECT_EQ(text.find("rekindle_job_"), std::string::npos);
}

TEST(metrics, the_exposition_passes_promtool) {
  if (auto why = testing::missing_tool("promtool", "prometheus")) GTEST_SKIP() << *why;
  daemon_figures d;
  d.node = "n0";
  const auto job = sample_job();
  auto r = testing::run_process({"promtool", "check", "metrics"}, std::chrono::seconds{60}, render_metrics(d, &job));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace rekindle::actors
