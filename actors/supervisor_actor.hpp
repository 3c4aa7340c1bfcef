#pragma once

#include <caf/all.hpp>

#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "actors/job_status.hpp"
#include "actors/messages.hpp"
#include "actors/node_context.hpp"
#include "common/files.hpp"
#include "planner/plan.hpp"
#include "planner/problem.hpp"
#include "planner/replan.hpp"
#include "planner/search.hpp"
#include "policy/checkpoint_coordinator.hpp"
#include "policy/link_screen.hpp"
#include "policy/recovery_meter.hpp"
#include "policy/straggler_detector.hpp"
#include "policy/supervisor_policy.hpp"
#include "storage/state_store.hpp"

namespace rekindle::actors {

/// The supervisor: runs the job on the policy's decisions, keeps its state in the state store,
/// and answers operators.
///
/// It feeds the policy what it hears (agents connecting and beating, ranks registering,
/// failing, progressing, snapshots being held) and carries out the actions in order:
/// persist_epoch is a synced write before anything announces the epoch; abort goes to every
/// agent; spawns become one assign_ranks per node; start_training goes with every rank's address
/// and where its state comes from. Every transition is an event in the store. It measures each
/// recovery (detection, respawn and registration, rendezvous, restore, first step) and writes a
/// status file (<data_dir>/status.json) every tick and a report (<data_dir>/report.json) when the
/// job ends.
///
/// Exposed to peers as "supervisor". Thread-safety: an actor.
class supervisor_actor : public caf::event_based_actor {
 public:
  /// `term`: with a standby, the leader's term (etcd's create revision of the leader key).
  supervisor_actor(caf::actor_config& cfg, node_context* ctx, std::unique_ptr<storage::state_store> store,
                   std::int64_t term = 0);
  caf::behavior make_behavior() override;
  const char* name() const override { return "supervisor"; }
  void on_exit() override;

 private:
  struct rank_status {
    std::uint32_t node = 0;
    std::uint32_t local_index = 0;
    std::uint32_t pid = 0;
    std::uint64_t step = 0;
    double loss = 0;
    std::int64_t step_ns = 0;
    /// Forward and backward passes of the last step (a slowed rank's included), its thread's CPU
    /// time in them (0: a device computes), collectives, filling batches.
    std::int64_t compute_ns = 0;
    std::int64_t compute_cpu_ns = 0;
    std::int64_t communication_ns = 0;
    std::int64_t data_ns = 0;
    std::int64_t snapshot_ns = 0;
    std::uint64_t last_snapshot = 0;
    std::uint32_t restarts = 0;
    std::string state = "starting";
  };

  void execute(std::vector<policy::policy_action> actions);
  /// Stores the job record: its state and why, with the configuration's hash.
  void put_job(storage::job_state state, const std::string& reason);
  void event(const std::string& kind, const std::string& detail, std::optional<rank_id> rank = {},
             std::optional<node_id> node = {}, std::vector<std::pair<std::string, std::string>> fields = {});
  template <class T>
  void to_agent(node_id n, const T& msg) {
    if (auto it = agents_.find(n); it != agents_.end())
      ctx_->bridge->send(it->second, "supervisor", "agent", msg);
  }
  template <class T>
  void to_all_agents(const T& msg) {
    for (const auto& [n, peer] : agents_)
      ctx_->bridge->send(peer, "supervisor", "agent", msg);
  }
  /// Lists the recoveries earlier supervisors of this job finished (their "recovered" events).
  void restore_recoveries();
  void open_recovery(const std::string& cause, std::optional<rank_id> rank, std::optional<node_id> node,
                     std::int64_t injected_ns = 0);
  void write_status(bool final);
  [[nodiscard]] job_status make_status(bool full) const;
  [[nodiscard]] std::string status_json(bool full) const;

  // ---- operators' requests (supervisor_admin.cpp) ----
  /// A handler for every admin request type: refuses a read-only token what changes the job,
  /// answers the rest with on_admin, and replies to the sender.
  caf::message_handler admin_behavior();
  template <class... Requests>
  caf::message_handler admin_handlers(type_list<Requests...>);
  admin_reply on_admin(const admin_status& r);
  admin_reply on_admin(const admin_loss& r);
  admin_reply on_admin(const admin_events& r);
  admin_reply on_admin(const admin_kill& r);
  admin_reply on_admin(const admin_drill& r);
  admin_reply on_admin(const admin_fail_node& r);
  admin_reply on_admin(const admin_partition& r);
  admin_reply on_admin(const admin_pause& r);
  admin_reply on_admin(const admin_drain& r);
  admin_reply on_admin(const admin_scale& r);
  /// New shares now, through a new epoch (supervisor_shares.cpp).
  admin_reply on_admin(const admin_rebalance& r);
  admin_reply on_admin(const admin_checkpoint_now& r);
  admin_reply on_admin(const admin_stop& r);
  /// `check` is answered once the nodes asked have reported (on_node_check) or after 60 s, and
  /// the link check that follows has ended: a refusal now, or nullopt when the answer follows.
  std::optional<admin_reply> start_check(const envelope& from, const admin_check& r);
  /// Asks `nodes` for their checks (the drill on them when `slow_factor` > 1). With `asker`, the
  /// operator's `check` request answered at the end; without, a check of the supervisor's own
  /// (checks.every).
  void launch_check(std::vector<std::uint32_t> nodes, double slow_factor, const std::string& slow_only,
                    std::optional<std::pair<transport::peer_id, std::string>> asker, std::uint64_t request);
  /// A node's check: to the policy (quarantine), and to the pending check.
  void on_node_check(const node_check_report& r);
  /// The nodes' part of the pending check is in (or `timed_out`): its table, then the link check
  /// over the nodes that reported, then the answer.
  void finish_check(bool timed_out);
  /// Answers the pending check's asker with both tables (nothing for a check of the supervisor's own).
  void answer_check();

  // ---- the link check (supervisor_links.cpp) ----
  /// Starts a link check over `nodes` (policy/link_screen.hpp); false when there are fewer than two.
  bool start_link_check(std::vector<std::uint32_t> nodes);
  /// Sends the current round's probes.
  void send_link_round();
  void on_link_report(const link_report& r);
  /// The round is in (or `timed_out`): the next one, or the verdicts.
  void end_link_round(bool timed_out);
  /// Events, quarantines and releases for the verdicts; the table for the pending check.
  void finish_link_check();
  struct link_check_run {
    std::uint64_t id = 0;
    policy::link_screen screen;
    clock::time_point deadline;
  };
  std::optional<link_check_run> link_check_;
  /// Each link check turns the pairing by one (every link is probed once in n-1 checks).
  std::uint64_t link_rotation_ = 0;
  /// The latest link check's table and JSON, for the pending check's answer.
  std::string link_text_;
  std::string link_json_;
  std::optional<clock::time_point> next_periodic_check_;
  /// No straggler is scored from progress arriving before then: a node check's measurements take
  /// the cores the ranks run on (set while the nodes measure, and a few seconds after).
  std::optional<clock::time_point> unscored_until_;
  /// The latest check of each node (by node index), as reported.
  std::map<std::uint32_t, node_check_report> node_checks_;
  /// The operator's `check` waiting for its nodes' reports.
  struct pending_check {
    /// Who asked (an operator's `check`); none for a periodic check.
    std::optional<std::pair<transport::peer_id, std::string>> asker;
    std::uint64_t request = 0;
    std::uint64_t id = 0;
    std::set<std::uint32_t> waiting;
    std::vector<std::uint32_t> nodes;
    clock::time_point deadline;
    /// Once the nodes' part is in: its table and JSON, waiting for the link check.
    bool nodes_done = false;
    std::string text;
    std::string json;
  };
  std::optional<pending_check> pending_check_;
  std::uint64_t next_check_id_ = 0;
  /// The node of that name, or invalid_argument naming the ones that come close.
  [[nodiscard]] expected<node_id> node_named(const std::string& name) const;
  /// The slot of `rank`, or invalid_argument when it is not in the job's placement.
  [[nodiscard]] expected<policy::rank_slot> placed_rank(rank_id rank) const;
  /// failed_precondition unless the job is training.
  [[nodiscard]] status training_now() const;
  /// A request done (text for people, JSON for scripts), or refused with a code and the reason.
  static admin_reply answered(std::string text, std::string json_text = {});
  static admin_reply refused(errc code, std::string why);
  static admin_reply refused(const status& st) { return refused(st.code(), st.message()); }
  /// The loss curve in at most `points` buckets, and the steps where failures struck (`loss`).
  [[nodiscard]] std::string loss_json(std::size_t points) const;

  // ---- checkpoints on disk (supervisor_checkpoints.cpp) ----
  /// At start: pending manifests of an earlier run are dropped, and files no committed manifest
  /// names are removed; committed checkpoints become restore points.
  void load_checkpoints();
  /// After a copy of `step` was reported: persist it when it is due and every rank's slot holds it.
  void maybe_persist(step_t step);
  void on_shard_persisted(const shard_persisted& s);
  /// Does what the checkpoint coordinator asks: store records, ask the nodes, remove files, events.
  void carry_out(std::vector<policy::checkpoint_action> actions);
  /// Deletes committed checkpoints beyond checkpoint.keep, oldest first.
  void apply_retention();
  [[nodiscard]] std::filesystem::path checkpoint_dir() const;

  /// Keeps a step's loss and time (over what is there only when `overwrite`).
  void record_loss(const progress_report& p, bool overwrite);

  // ---- data-parallel shares (supervisor_shares.cpp) ----
  /// Folds a step's compute time into the speed of the rank's device slot.
  void measure_speed(const progress_report& p);
  /// Shares of a step's micro-batches for `placement`: "equal", "speeds" (the nodes' configured
  /// speeds) or "measured" (the slots' measured speeds; a slot not measured yet counts at the
  /// median measured speed times its node's configured speed). Errors: failed_precondition for
  /// "measured" before any rank of the placement reported a step.
  [[nodiscard]] expected<std::vector<std::uint32_t>> plan_shares(const std::vector<policy::rank_slot>& placement,
                                                                 const std::string& how) const;
  /// The shares the epoch starting on `placement` runs with: an operator's `rebalance` while the
  /// world keeps its size, else job.balance planned for this placement. An event when they change.
  std::vector<std::uint32_t> shares_for_epoch(const std::vector<policy::rank_slot>& placement);
  /// The equal split for a world of `world` ranks, per rank (with pipeline stages, per replica
  /// and the same on each of its stages).
  [[nodiscard]] std::vector<std::uint32_t> equal_shares(std::size_t world) const;
  /// Blocks of the pipeline stage `rank` runs; 1 without a pipeline.
  [[nodiscard]] double stage_blocks(rank_id rank) const;
  /// What the ranks are told: per rank, or with pipeline stages per replica (its first rank's).
  [[nodiscard]] std::vector<std::uint32_t> replica_shares(const std::vector<std::uint32_t>& per_rank) const;
  /// "5, 5, 4, 2" (and the step's compute time they predict, relative to the equal split).
  [[nodiscard]] std::string describe_shares(const std::vector<std::uint32_t>& shares, const std::vector<policy::rank_slot>& placement) const;

  /// The pipeline split in force: the blocks of each stage (empty: no pipeline). job.stages, until
  /// a re-plan after a node loss changes it.
  std::vector<std::uint32_t> stages_;
  [[nodiscard]] std::uint32_t pipeline_stages() const noexcept {
    return stages_.size() <= 1 ? 1 : static_cast<std::uint32_t>(stages_.size());
  }
  // ---- re-plans (supervisor_replan.cpp) ----
  /// With job.plan: hands the policy the return to the plan. With job.plan_cluster and
  /// job.plan_model too: reads them and hands the policy the re-plan.
  void load_replanner();
  /// The plan for `placement` without node `lost`: planner::replan from the plan that runs (this
  /// placement in the split in force, its shares), with every node down lost. On success the split
  /// and shares in force become the new plan's.
  expected<policy::replanned> replan(const std::vector<policy::rank_slot>& placement, node_id lost);
  /// The re-plan upwards: a node of job.plan is back while another is still down. planner::replan
  /// from job.plan (its placement, split and shares) with every node down lost; the plan it gives
  /// when predicted at least research_gain faster than the world running (whose split and shares
  /// become it, and whose full re-search starts), else nullopt with an event (replan_up) saying why.
  std::optional<policy::replanned> replan_up();
  /// `placement` in the split `stages` (one entry: no pipeline) with each replica's share
  /// (`shares`, by replica; empty or any 0: shared out again) as the planner's plan, with its
  /// prediction when the planner can evaluate it.
  [[nodiscard]] expected<planner::plan> as_plan(const std::vector<policy::rank_slot>& placement,
                                                const std::vector<std::uint32_t>& stages,
                                                std::vector<std::uint32_t> shares) const;
  /// Each replica's share of `placement` in force (empty when the shares are of another world).
  [[nodiscard]] std::vector<std::uint32_t> running_shares(const std::vector<policy::rank_slot>& placement) const;
  /// The re-plan's budget (job.replan_budget).
  [[nodiscard]] planner::replan_options replan_options() const;
  /// Every node of the planner's cluster that is down, as the planner's lost devices (and `lost`).
  [[nodiscard]] std::vector<planner::lost_device> nodes_down(std::optional<node_id> lost = std::nullopt) const;
  /// A planner's plan the running job can take (tensor degree 1, the job's micro-batch size, no
  /// recompute): its placement with the stages as multiple, the split and each replica's share.
  struct runnable_plan {
    policy::replanned replanned;
    std::vector<std::uint32_t> stages;
    std::vector<std::uint32_t> shares;
  };
  [[nodiscard]] expected<runnable_plan> runnable(const planner::plan& plan) const;
  /// The split and shares in force become `p`'s.
  void take_plan(runnable_plan p);
  /// The full re-search after a re-plan: planner::search of the cluster without the lost nodes,
  /// on a thread of its own; the tick takes its result (poll_research). A plan it finds that is
  /// predicted at least research_gain faster than the re-plan's replaces it, if the world is
  /// still the re-plan's.
  struct research {
    std::stop_source stop;
    std::future<expected<planner::search_result>> result;
    /// The re-plan's placement and predicted step time.
    std::vector<policy::rank_slot> placement;
    double step_time = 0;
  };
  std::optional<research> research_;
  static constexpr double research_gain = 0.05;
  void start_research(planner::problem reduced, std::vector<policy::rank_slot> placement, double step_time);
  void poll_research();
  /// The planner's problem of job.plan_cluster and job.plan_model; nothing without them.
  std::optional<planner::problem> replan_problem_;
  /// Each configured node's index in the planner's cluster (-1: not in it), and back.
  std::vector<int> planner_node_;
  std::vector<node_id> config_node_;

  /// A plan's micro-batches per replica (job.plan's, or a re-plan's), while the world has
  /// `planned_world_` ranks in the split they were planned for. Empty: none.
  std::vector<std::uint32_t> planned_shares_;
  std::size_t planned_world_ = 0;

  /// Micro-batches each rank runs in this epoch, by rank.
  std::vector<std::uint32_t> shares_;
  /// Chosen by an operator; kept until the world changes size.
  std::optional<std::vector<std::uint32_t>> operator_shares_;
  /// Measured compute speed of each device slot (node, local index): micro-batches per second,
  /// smoothed over its recent steps.
  std::map<std::pair<std::uint32_t, std::uint32_t>, double> slot_speed_;
  /// Scores each rank's compute per micro-batch against the others' (straggler events).
  policy::straggler_detector stragglers_;
  /// Feeds a report to stragglers_; after a batch, check_stragglers logs what changed.
  void score_straggler(const progress_report& p);
  void check_stragglers();
  /// What stragglers.action says to do about a rank newly flagged (`why`: the event's text).
  void act_on_straggler(rank_id rank, std::optional<node_id> node, const std::string& why,
                        const std::vector<std::pair<std::string, std::string>>& fields);

  node_context* ctx_;
  std::int64_t term_ = 0;
  std::unique_ptr<storage::state_store> store_;
  policy::supervisor_policy policy_;
  /// When checkpoints on disk are written and when they count.
  policy::checkpoint_coordinator checkpoints_;
  /// When the checkpoint being written began (the clock's ns); how long the newest committed one
  /// took; how many committed.
  std::int64_t persist_began_ns_ = 0;
  std::optional<double> persist_s_;
  std::uint64_t persists_committed_ = 0;
  std::map<node_id, transport::peer_id> agents_;
  std::vector<std::string> node_addresses_;
  /// Per node, from its last heartbeat: a warm standby worker waits there.
  std::map<std::uint32_t, bool> standby_ready_;
  /// Each node's buddy in the current epoch (the policy's last assign_buddies), for the status.
  std::vector<std::optional<node_id>> buddies_;
  std::map<rank_id, blob> addresses_;
  std::map<rank_id, rank_status> ranks_;
  /// Mean loss of every step since the job began (index = step - 1), as rank 0 reported it.
  std::vector<double> losses_;
  std::vector<double> step_seconds_;
  policy::recovery_meter recoveries_;
  /// Injected faults waiting for their failure report: rank or node → injection time.
  std::map<std::uint32_t, std::int64_t> injected_ranks_;
  /// When the last tick ran: a long gap means this process did not run, not that nodes were silent.
  std::optional<clock::time_point> last_tick_;
  /// status.json, written off this actor: a disk busy with a checkpoint must not stall the ticks.
  background_file_writer status_file_;
  /// Ranks the supervisor killed (hung, unresponsive) and why: the cause of their recovery.
  std::map<std::uint32_t, std::string> killed_as_;
  std::map<std::uint32_t, std::int64_t> injected_nodes_;
  std::int64_t started_ns_ = 0;
  std::uint64_t max_step_ = 0;
  bool finished_ = false;
  std::string final_state_;
};

}  // namespace rekindle::actors
