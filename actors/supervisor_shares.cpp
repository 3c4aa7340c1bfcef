// The supervisor's data-parallel shares: how many of a step's micro-batches each rank runs, planned
// from the nodes' configured speeds or the ranks' measured compute speeds, and applied to the
// running job through a new epoch (the ranks take their shares only at an epoch's start, so every
// rank of a step agrees on them).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "actors/supervisor_actor.hpp"
#include "common/text.hpp"
#include "planner/micro_batches.hpp"
#include "training/training_task.hpp"

namespace rekindle::actors {

using namespace policy;

namespace {

std::uint32_t micro_batches_of(const config::spec& spec) { return spec.job.global_batch / spec.job.micro_batch; }

// The compute figure of a step that speeds and straggler scores use: the rank thread's CPU time
// where it computes on the host (time the machine gave other processes is not the rank's device
// being slow), else the wall time.
std::int64_t work_ns(const progress_report& p) { return p.compute_cpu_ns > 0 ? p.compute_cpu_ns : p.compute_ns; }

// Each replica's count given to every one of its `p` stages (consecutive ranks).
std::vector<std::uint32_t> to_every_stage(const std::vector<std::uint32_t>& per_replica, std::uint32_t p) {
  std::vector<std::uint32_t> out;
  for (const auto count : per_replica)
    out.insert(out.end(), p, count);
  return out;
}

// With pipeline stages (the split in force: job.stages, or a re-plan's) every stage of a replica
// runs the replica's micro-batches, and a replica runs at its slowest stage's rate: shares are
// planned per replica from the lowest rate of its ranks and given to each of them. Rates are per rank; p = 1 plans per rank.
expected<std::vector<std::uint32_t>> share_over_replicas(const std::vector<double>& rates, std::uint32_t p,
                                                         std::uint32_t total) {
  if (p <= 1)
    return planner::share_micro_batches(rates, total);
  std::vector<double> replicas;
  for (std::size_t r = 0; r + p <= rates.size(); r += p)
    replicas.push_back(*std::min_element(rates.begin() + static_cast<std::ptrdiff_t>(r),
                                         rates.begin() + static_cast<std::ptrdiff_t>(r + p)));
  RK_ASSIGN_OR_RETURN(auto shares, planner::share_micro_batches(replicas, total));
  return to_every_stage(shares, p);
}

}  // namespace

std::vector<std::uint32_t> supervisor_actor::equal_shares(std::size_t world) const {
  const auto p = pipeline_stages();
  auto out = to_every_stage(training::equal_split(micro_batches_of(ctx_->spec), static_cast<int>(world / p)), p);
  out.resize(world, 0);  // ranks short of a whole pipeline (none in a placement) run nothing
  return out;
}

double supervisor_actor::stage_blocks(rank_id rank) const {
  const auto p = pipeline_stages();
  if (p <= 1)
    return 1.0;
  return static_cast<double>(stages_[config::position_in_pipeline(rank.value(), p).stage]);
}

std::vector<std::uint32_t> supervisor_actor::replica_shares(const std::vector<std::uint32_t>& per_rank) const {
  const auto p = pipeline_stages();
  if (p <= 1)
    return per_rank;
  std::vector<std::uint32_t> out;
  for (std::size_t r = 0; r + p <= per_rank.size(); r += p)
    out.push_back(per_rank[r]);
  return out;
}

void supervisor_actor::measure_speed(const progress_report& p) {
  if (work_ns(p) <= 0 || p.rank.value() >= shares_.size())
    return;
  const auto it = ranks_.find(p.rank);
  const auto count = shares_[p.rank.value()];
  if (it == ranks_.end() || count == 0)
    return;
  const double speed = static_cast<double>(count) * 1e9 / static_cast<double>(work_ns(p));
  auto& v = slot_speed_[{it->second.node, it->second.local_index}];
  v = v > 0 ? 0.9 * v + 0.1 * speed : speed;
}

void supervisor_actor::score_straggler(const progress_report& p) {
  if (work_ns(p) <= 0 || p.rank.value() >= shares_.size() || shares_[p.rank.value()] == 0)
    return;
  if (unscored_until_ && ctx_->time->now() < *unscored_until_)
    return;
  // Per micro-batch, and per block of the rank's pipeline stage: stages of more blocks are not
  // stragglers for it (the embedding and the head are counted with no block of their own).
  const double per_block = static_cast<double>(work_ns(p)) / shares_[p.rank.value()] / stage_blocks(p.rank);
  stragglers_.add(p.rank, std::chrono::nanoseconds{static_cast<std::int64_t>(per_block)},
                  ctx_->time->now().time_since_epoch());
}

void supervisor_actor::check_stragglers() {
  for (const auto& f : stragglers_.evaluate(ctx_->time->now().time_since_epoch())) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", f.ratio);
    const auto it = ranks_.find(f.rank);
    const std::optional<node_id> node = it != ranks_.end() ? std::optional{node_id{it->second.node}} : std::nullopt;
    const bool cpu = it != ranks_.end() && it->second.compute_cpu_ns > 0;
    const auto figures = format_duration(f.rank_median) + " of " + (cpu ? "CPU time" : "compute") +
                         " a micro-batch against the fleet's median " + format_duration(f.fleet_median) +
                         ", medians over each rank's last steps";
    std::vector<std::pair<std::string, std::string>> fields{
        {"ratio", ratio},
        {"rank_ns", std::to_string(f.rank_median.count())},
        {"fleet_ns", std::to_string(f.fleet_median.count())},
        {"cause", "compute"},
        {"clock", cpu ? "cpu" : "wall"}};
    if (f.straggler) {
      const auto why = "rank " + std::to_string(f.rank.value()) + " computes " + ratio + "x as long as the others (" +
                       figures + ")";
      event("straggler", why + ": its compute, not its link", f.rank, node, fields);
      act_on_straggler(f.rank, node, why, fields);
    } else
      event("straggler_cleared", "rank " + std::to_string(f.rank.value()) + " computes at the others' pace again (" +
                                     figures + ")",
            f.rank, node, std::move(fields));
  }
}

void supervisor_actor::act_on_straggler(rank_id rank, std::optional<node_id> node, const std::string& why,
                                        const std::vector<std::pair<std::string, std::string>>& fields) {
  const auto& action = ctx_->spec.stragglers.action;
  if (action == "report" || !training_now().ok())
    return;
  const auto who = "rank " + std::to_string(rank.value());
  if (action == "rebalance") {
    auto planned = plan_shares(policy_.placement(), "measured");
    if (!planned || *planned == shares_) {
      event("straggler_kept", who + ": the measured shares stay as they are" +
                                  (planned ? "" : " (" + planned.error().message() + ")"),
            rank, node);
      return;
    }
    operator_shares_ = *planned;
    const auto text = describe_shares(*planned, policy_.placement());
    event("straggler_rebalanced", who + ": micro-batches per rank " + text, rank, node);
    execute(policy_.restart_epoch("straggler " + who + ": micro-batches per rank " + text));
    return;
  }
  // replace: its node leaves the job for a spare; without a free spare (or on the supervisor's own
  // node, which cannot leave) it stays, reported.
  if (!node || *node == ctx_->node || !policy_.spare_available()) {
    event("straggler_kept",
          who + " stays: " + (!node ? "its node is unknown"
                              : *node == ctx_->node ? "it runs on the supervisor's node, which cannot be replaced"
                                                    : "no free spare to replace its node"),
          rank, node);
    return;
  }
  execute(policy_.quarantine(*node, "straggler", why, fields));
}

expected<std::vector<std::uint32_t>> supervisor_actor::plan_shares(const std::vector<rank_slot>& placement,
                                                                   const std::string& how) const {
  const auto total = micro_batches_of(ctx_->spec);
  const auto p = pipeline_stages();
  if (how == "equal")
    return equal_shares(placement.size());
  // A rank's configured rate: its node's speed over its stage's blocks.
  const auto configured = [&](const rank_slot& s) {
    return (s.node.value() < ctx_->spec.nodes.size() ? ctx_->spec.nodes[s.node.value()].speed : 1.0) /
           stage_blocks(s.rank);
  };
  std::vector<double> speeds;
  speeds.reserve(placement.size());
  if (how == "speeds") {
    for (const auto& s : placement)
      speeds.push_back(configured(s));
    return share_over_replicas(speeds, p, total);
  }
  if (how != "measured")
    return status{errc::invalid_argument, "'" + how + "' is not a way to share micro-batches: use equal, speeds or measured"};
  std::vector<double> known;
  for (const auto& s : placement)
    if (auto it = slot_speed_.find({s.node.value(), s.local_index}); it != slot_speed_.end())
      known.push_back(it->second / configured(s));
  if (known.empty())
    return status{errc::failed_precondition, "no rank of the job has reported a step's compute time yet"};
  std::nth_element(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(known.size() / 2), known.end());
  const double median = known[known.size() / 2];
  for (const auto& s : placement) {
    const auto it = slot_speed_.find({s.node.value(), s.local_index});
    speeds.push_back(it != slot_speed_.end() ? it->second : median * configured(s));
  }
  return share_over_replicas(speeds, p, total);
}

std::string supervisor_actor::describe_shares(const std::vector<std::uint32_t>& shares,
                                              const std::vector<rank_slot>& placement) const {
  std::string out;
  for (std::size_t i = 0; i < shares.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shares[i]);
  // With every slot measured: the step's compute time these shares predict against equal shares.
  const auto equal = equal_shares(placement.size());
  double with = 0, without = 0;
  for (std::size_t i = 0; i < placement.size() && i < shares.size(); ++i) {
    const auto it = slot_speed_.find({placement[i].node.value(), placement[i].local_index});
    if (it == slot_speed_.end() || it->second <= 0)
      return out;
    with = std::max(with, shares[i] / it->second);
    without = std::max(without, equal[i] / it->second);
  }
  if (with > 0 && without > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " (a step's compute predicted at %.2fx the time of equal shares)", with / without);
    out += buf;
  }
  return out;
}

std::vector<std::uint32_t> supervisor_actor::shares_for_epoch(const std::vector<rank_slot>& placement) {
  if (operator_shares_ && operator_shares_->size() != placement.size())
    operator_shares_.reset();  // chosen for another world
  std::vector<std::uint32_t> next;
  // A plan's shares hold while the world is the plan's (ranks that moved to a spare keep their
  // numbers); a world that shrank is shared again by job.balance.
  const bool from_plan = !operator_shares_ && !planned_shares_.empty() && placement.size() == planned_world_ &&
                         planned_shares_.size() * pipeline_stages() == placement.size();
  if (operator_shares_) {
    next = *operator_shares_;
  } else if (from_plan) {
    next = to_every_stage(planned_shares_, pipeline_stages());
  } else if (auto planned = plan_shares(placement, ctx_->spec.job.balance); planned) {
    next = std::move(*planned);
  } else if (auto by_config = plan_shares(placement, "speeds"); by_config && ctx_->spec.job.balance == "measured") {
    next = std::move(*by_config);  // nothing measured yet: the configured speeds
  } else {
    next = equal_shares(placement.size());
  }
  if (next != shares_) {
    if (!shares_.empty() || next != equal_shares(placement.size()))
      event("shares", "micro-batches per rank: " + describe_shares(next, placement) +
                          (operator_shares_ ? " (rebalanced by an operator)"
                           : from_plan      ? " (the plan)"
                                            : " (job.balance = " + ctx_->spec.job.balance + ")"));
    shares_ = next;
  }
  return next;
}

admin_reply supervisor_actor::on_admin(const admin_rebalance& r) {
  if (auto st = training_now(); !st.ok())
    return refused(st);
  auto planned = plan_shares(policy_.placement(), r.how);
  if (!planned)
    return refused(planned.error());
  if (*planned == shares_)
    return answered("the shares stay " + describe_shares(*planned, policy_.placement()));
  operator_shares_ = *planned;
  const auto text = describe_shares(*planned, policy_.placement());
  execute(policy_.restart_epoch("rebalance (" + r.how + "): micro-batches per rank " + text));
  return answered("micro-batches per rank " + text + "; epoch " + std::to_string(policy_.epoch().value()));
}

}  // namespace rekindle::actors
