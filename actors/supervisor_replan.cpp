// The supervisor's re-plan: with job.plan and the planner's files it was made for, a node lost with
// no free node to take its ranks is re-planned by the planner, starting from the plan that ran,
// and the job goes on with the new plan's stages, placement and shares, restored from its
// snapshots (a rank's state is the same whatever the split). Meanwhile the planner's full search
// of the nodes left runs on a thread, and a plan it finds that is clearly faster replaces the
// re-plan's. Once the plan's nodes are all back, the job returns to job.plan the same way.

#include <spdlog/spdlog.h>

#include <cstdio>

#include "actors/supervisor_actor.hpp"
#include "config/planner_files.hpp"
#include "planner/cost.hpp"
#include "planner/replan.hpp"
#include "planner/search.hpp"

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
  if (!job.plan_ranks.empty())
    policy_.set_upward_replanner([this] { return replan_up(); });
}

expected<planner::plan> supervisor_actor::as_plan(const std::vector<rank_slot>& placement,
                                                  const std::vector<std::uint32_t>& stages,
                                                  std::vector<std::uint32_t> shares) const {
  const auto& spec = ctx_->spec;
  const auto p = stages.size() <= 1 ? 1u : static_cast<std::uint32_t>(stages.size());
  if (placement.empty() || placement.size() % p != 0)
    return status{errc::failed_precondition, "the world is not whole pipelines of " + std::to_string(p) + " stages"};
  planner::plan out;
  out.micro_batch_size = spec.job.micro_batch;
  out.micro_batches = spec.job.global_batch / spec.job.micro_batch;
  std::uint32_t first = 0;
  for (std::uint32_t s = 0; s < p; ++s) {
    const auto layers = p == 1 ? spec.model.layers : stages[s];
    out.stages.push_back({first, layers, 1});
    first += layers;
  }
  const auto replicas = placement.size() / p;
  if (shares.size() != replicas || std::find(shares.begin(), shares.end(), 0u) != shares.end())
    shares.assign(replicas, 0);  // every replica's count, or none (shared out again)
  for (std::size_t r = 0; r < replicas; ++r) {
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
    replica.micro_batches = shares[r];
    out.replicas.push_back(std::move(replica));
  }
  // Its prediction, for the notes' "was".
  if (auto predicted = planner::evaluate(*replan_problem_, out); predicted)
    out = std::move(*predicted);
  return out;
}

std::vector<std::uint32_t> supervisor_actor::running_shares(const std::vector<rank_slot>& placement) const {
  // shares_ is by rank, in rank order: each replica's is its first rank's.
  return shares_.size() == placement.size() ? replica_shares(shares_) : std::vector<std::uint32_t>{};
}

planner::replan_options supervisor_actor::replan_options() const {
  planner::replan_options o;
  o.budget = ctx_->spec.job.replan_budget;
  return o;
}

std::vector<planner::lost_device> supervisor_actor::nodes_down(std::optional<node_id> lost) const {
  std::vector<planner::lost_device> gone;
  for (std::size_t n = 0; n < planner_node_.size(); ++n) {
    const node_id id{static_cast<std::uint32_t>(n)};
    if (planner_node_[n] >= 0 && (id == lost || !policy_.node_up(id)))
      gone.push_back({static_cast<std::uint32_t>(planner_node_[n]), std::nullopt});
  }
  return gone;
}

expected<replanned> supervisor_actor::replan(const std::vector<rank_slot>& placement, node_id lost) {
  if (!replan_problem_)
    return status{errc::failed_precondition, "no planner files"};
  // The plan that ran: this placement in the split in force, with its shares.
  RK_ASSIGN_OR_RETURN(auto current, as_plan(placement, stages_, running_shares(placement)));
  // Every node down is lost to the planner, the one just lost among them.
  RK_ASSIGN_OR_RETURN(auto result, planner::replan(*replan_problem_, current, nodes_down(lost), replan_options()));
  const auto& best = result.plans.front();
  RK_ASSIGN_OR_RETURN(auto taken, runnable(best));
  taken.replanned.note += ": " + result.how;
  auto out = taken.replanned;
  take_plan(std::move(taken));
  spdlog::info("re-planned: {}", out.note);
  start_research(std::move(result.reduced), out.placement, best.step_time);
  return out;
}

std::optional<replanned> supervisor_actor::replan_up() {
  if (!replan_problem_)
    return std::nullopt;
  const auto& spec = ctx_->spec;
  std::vector<rank_slot> plan;
  for (const auto& r : spec.initial_placement())
    plan.push_back({r.rank, r.node, r.local_index});
  const auto fail = [&](const std::string& why) -> std::optional<replanned> {
    event("replan_up", "a node of the plan is back, but " + why + "; the world stays");
    return std::nullopt;
  };
  // From job.plan as written, without the nodes still down.
  auto planned = as_plan(plan, spec.job.stages, spec.job.plan_shares);
  if (!planned)
    return fail("job.plan is not the planner's: " + planned.error().message());
  auto result = planner::replan(*replan_problem_, *planned, nodes_down(), replan_options());
  if (!result)
    return fail("the planner found no plan over the nodes up: " + result.error().message());
  const auto& best = result->plans.front();
  auto taken = runnable(best);
  if (!taken)
    return fail(taken.error().message());
  // Against the world running, predicted the same way.
  const auto running = as_plan(policy_.placement(), stages_, running_shares(policy_.placement()));
  char figures[128];
  std::snprintf(figures, sizeof figures, "predicted step %.3f s against the running world's %.3f s", best.step_time,
                running ? running->step_time : 0.0);
  if (running && running->step_time > 0 && best.step_time > running->step_time * (1 - research_gain))
    return fail("the plan over the nodes up now, " + taken->replanned.note + ", is not " +
                std::to_string(static_cast<int>(research_gain * 100)) + "% faster: " + figures);
  taken->replanned.note += ", " + std::string{figures} + ": " + result->how;
  auto out = taken->replanned;
  take_plan(std::move(*taken));
  spdlog::info("re-planned up: {}", out.note);
  start_research(std::move(result->reduced), out.placement, best.step_time);
  return out;
}

expected<supervisor_actor::runnable_plan> supervisor_actor::runnable(const planner::plan& plan) const {
  const auto& spec = ctx_->spec;
  if (plan.micro_batch_size != spec.job.micro_batch || plan.recompute)
    return status{errc::failed_precondition, "the planner's plan " + plan.shape() + " changes the micro-batch size or "
                                             "recomputes, which the running job cannot"};
  runnable_plan out;
  for (const auto& s : plan.stages) {
    if (s.tensor != 1)
      return status{errc::failed_precondition, "the planner's plan " + plan.shape() + " is tensor parallel"};
    out.stages.push_back(s.layers);
  }
  out.replanned.world_multiple = plan.pipeline();
  for (const auto& replica : plan.replicas) {
    for (std::uint32_t s = 0; s < plan.pipeline(); ++s) {
      const auto& at = replica.stages[s];
      out.replanned.placement.push_back({rank_id{static_cast<std::uint32_t>(out.replanned.placement.size())},
                                         config_node_.at(at.node), at.devices.front()});
    }
    out.shares.push_back(replica.micro_batches);
  }
  std::string split;
  for (const auto blocks : out.stages)
    split += (split.empty() ? "" : ", ") + std::to_string(blocks);
  out.replanned.note = plan.shape() + ", stages [" + split + "]";
  return out;
}

void supervisor_actor::take_plan(runnable_plan p) {
  stages_ = std::move(p.stages);  // one entry, the whole model, for no pipeline: the ranks are told
  planned_shares_ = std::move(p.shares);
  planned_world_ = p.replanned.placement.size();
}

void supervisor_actor::start_research(planner::problem reduced, std::vector<rank_slot> placement, double step_time) {
  if (research_)
    research_->stop.request_stop();  // a re-plan of a re-plan: the older search is moot
  research next;
  next.placement = std::move(placement);
  next.step_time = step_time;
  next.result = std::async(std::launch::async, [problem = std::move(reduced), stop = next.stop.get_token()]() -> expected<planner::search_result> {
    planner::search_options options;
    options.stop = stop;
    options.budget = std::chrono::seconds{10};
    try {
      return planner::search(problem, options);
    } catch (const std::exception& e) {  // out of memory, above all: the daemon goes on
      return status{errc::resource_exhausted, std::string{"the search failed: "} + e.what()};
    }
  });
  research_ = std::move(next);
}

void supervisor_actor::poll_research() {
  using namespace std::chrono_literals;
  if (!research_ || research_->result.wait_for(0s) != std::future_status::ready)
    return;
  if (policy_.state() == job_state::rendezvous && policy_.placement() == research_->placement)
    return;  // the re-plan's epoch is still starting: its verdict waits for it
  auto ended = std::move(*research_);
  research_.reset();
  auto found = ended.result.get();
  if (!found) {
    event("replan_search", "the full re-search after the re-plan found no plan: " + found.error().message());
    return;
  }
  if (policy_.state() != job_state::running || policy_.placement() != ended.placement) {
    event("replan_search", "the full re-search ended after the world changed again or the job stopped training: its "
                           "plans are not used");
    return;
  }
  for (const auto& plan : found->plans) {
    auto taken = runnable(plan);
    if (!taken)
      continue;  // the next shape, if one runs here
    char figures[96];
    std::snprintf(figures, sizeof figures, "predicted step %.3f s against the re-plan's %.3f s", plan.step_time,
                  ended.step_time);
    if (plan.step_time > ended.step_time * (1 - research_gain)) {
      event("replan_search", "the full re-search found no plan " + std::to_string(static_cast<int>(research_gain * 100)) +
                                 "% faster than the re-plan's: its best, " + taken->replanned.note + ", " + figures);
      return;
    }
    const auto note = "the full re-search found a faster plan for the same nodes: " + taken->replanned.note + ", " +
                      figures + "; switching from " + std::to_string(ended.placement.size()) + " to " +
                      std::to_string(taken->replanned.placement.size()) + " ranks";
    auto replanned = taken->replanned;
    take_plan(std::move(*taken));
    spdlog::info("{}", note);
    execute(policy_.adopt_plan(replanned, note));
    return;
  }
  event("replan_search", "the full re-search found no plan the running job can take (tensor parallel, recomputed or "
                         "another micro-batch size)");
}

}  // namespace rekindle::actors
