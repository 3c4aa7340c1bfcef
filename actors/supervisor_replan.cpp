// The supervisor's re-plan: with job.plan and the planner's files it was made for, a node lost with
// no free node to take its ranks is re-planned by the planner, starting from the plan that ran,
// and the job goes on with the new plan's stages, placement and shares, restored from its
// snapshots (a rank's state is the same whatever the split). Once the plan's nodes are all back,
// the job returns to job.plan the same way.

#include <spdlog/spdlog.h>

#include "actors/supervisor_actor.hpp"
#include "config/planner_files.hpp"
#include "planner/cost.hpp"
#include "planner/replan.hpp"

namespace rekindle::actors {

using namespace policy;

void supervisor_actor::load_replanner() {
  const auto& job = ctx_->spec.job;
  if (!job.plan_ranks.empty())
    // Back to job.plan once its nodes are: its split and shares again.
    policy_.set_plan_return([this] {
      stages_ = ctx_->spec.job.stages;
      planned_shares_ = ctx_->spec.job.plan_shares;
      planned_world_ = ctx_->spec.job.plan_ranks.size();
      spdlog::info("back to the plan of {}", ctx_->spec.job.plan.string());
    });
  if (job.plan_cluster.empty())
    return;
  // The loader checked both files; a file changed since is said, and the job shrinks instead.
  auto cluster = config::load_plan_cluster(job.plan_cluster);
  auto model = config::load_plan_model(job.plan_model);
  if (!cluster.ok() || !model.ok()) {
    event("replan_off", "the planner's files cannot be read, so a lost node shrinks the world instead: " +
                            (cluster.ok() ? model.error_text() : cluster.error_text()));
    return;
  }
  auto made = planner::make_problem(*cluster.value, *model.value);
  if (!made) {
    event("replan_off", "the planner's files make no problem, so a lost node shrinks the world instead: " +
                            made.error().message());
    return;
  }
  planner_node_.assign(ctx_->spec.nodes.size(), -1);
  config_node_.clear();
  for (std::uint32_t i = 0; i < made->hardware.nodes.size(); ++i) {
    const auto n = ctx_->spec.find_node(made->hardware.nodes[i].name);
    config_node_.push_back(n.value_or(node_id{0}));
    if (n)
      planner_node_[n->value()] = static_cast<int>(i);
  }
  replan_problem_ = std::move(*made);
  policy_.set_replanner([this](const std::vector<rank_slot>& placement, node_id lost) { return replan(placement, lost); });
}

expected<replanned> supervisor_actor::replan(const std::vector<rank_slot>& placement, node_id lost) {
  if (!replan_problem_)
    return status{errc::failed_precondition, "no planner files"};
  const auto& problem = *replan_problem_;
  const auto& spec = ctx_->spec;
  const auto p = pipeline_stages();
  if (placement.empty() || placement.size() % p != 0)
    return status{errc::failed_precondition, "the world is not whole pipelines of " + std::to_string(p) + " stages"};
  // The plan that ran: this placement in the split in force, with its shares.
  planner::plan current;
  current.micro_batch_size = spec.job.micro_batch;
  current.micro_batches = spec.job.global_batch / spec.job.micro_batch;
  std::uint32_t first = 0;
  for (std::uint32_t s = 0; s < p; ++s) {
    const auto layers = p == 1 ? spec.model.layers : stages_[s];
    current.stages.push_back({first, layers, 1});
    first += layers;
  }
  for (std::size_t r = 0; r < placement.size() / p; ++r) {
    planner::replica replica;
    for (std::uint32_t s = 0; s < p; ++s) {
      const auto& slot = placement[r * p + s];
      const int at = slot.node.value() < planner_node_.size() ? planner_node_[slot.node.value()] : -1;
      if (at < 0)
        return status{errc::failed_precondition,
                      "node " + spec.nodes.at(slot.node.value()).name + " runs a rank but is not in " +
                          spec.job.plan_cluster.string()};
      replica.stages.push_back({static_cast<std::uint32_t>(at), {slot.local_index}});
    }
    const auto first_rank = placement[r * p].rank.value();
    replica.micro_batches = first_rank < shares_.size() && shares_.size() == placement.size() ? shares_[first_rank] : 0;
    current.replicas.push_back(std::move(replica));
  }
  bool counted = true;
  for (const auto& r : current.replicas)
    counted = counted && r.micro_batches > 0;
  if (!counted)  // every replica's count, or none (shared out again)
    for (auto& r : current.replicas)
      r.micro_batches = 0;
  // Its prediction, for the note's "was".
  if (auto predicted = planner::evaluate(problem, current); predicted)
    current = std::move(*predicted);
  // Every node down is lost to the planner, the one just lost among them.
  std::vector<planner::lost_device> gone;
  for (std::size_t n = 0; n < planner_node_.size(); ++n)
    if (planner_node_[n] >= 0 && (node_id{static_cast<std::uint32_t>(n)} == lost || !policy_.node_up(node_id{static_cast<std::uint32_t>(n)})))
      gone.push_back({static_cast<std::uint32_t>(planner_node_[n]), std::nullopt});
  RK_ASSIGN_OR_RETURN(auto result, planner::replan(problem, current, gone));
  const auto& best = result.plans.front();
  if (best.micro_batch_size != spec.job.micro_batch || best.recompute)
    return status{errc::failed_precondition, "the planner's plan " + best.shape() + " changes the micro-batch size or "
                                             "recomputes, which the running job cannot"};
  std::vector<std::uint32_t> stages;
  for (const auto& s : best.stages) {
    if (s.tensor != 1)
      return status{errc::failed_precondition, "the planner's plan " + best.shape() + " is tensor parallel"};
    stages.push_back(s.layers);
  }
  replanned out;
  out.world_multiple = best.pipeline();
  std::vector<std::uint32_t> shares;
  for (std::size_t r = 0; r < best.replicas.size(); ++r) {
    for (std::uint32_t s = 0; s < best.pipeline(); ++s) {
      const auto& at = best.replicas[r].stages[s];
      out.placement.push_back({rank_id{static_cast<std::uint32_t>(out.placement.size())}, config_node_.at(at.node),
                               at.devices.front()});
    }
    shares.push_back(best.replicas[r].micro_batches);
  }
  std::string split;
  for (const auto blocks : stages)
    split += (split.empty() ? "" : ", ") + std::to_string(blocks);
  out.note = best.shape() + ", stages [" + split + "]: " + result.how;
  stages_ = std::move(stages);  // one entry, the whole model, for no pipeline: the ranks are told
  planned_shares_ = std::move(shares);
  planned_world_ = out.placement.size();
  spdlog::info("re-planned: {}", out.note);
  return out;
}

}  // namespace rekindle::actors
