#include "planner/replan.hpp"

#include <algorithm>
#include <cstdio>
#include <new>
#include <set>

#include "planner/cost.hpp"
#include "planner/finder.hpp"

namespace rekindle::planner {

namespace {

using detail::candidate;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

std::string list(const std::vector<std::uint32_t>& xs) {
  std::string out;
  for (auto x : xs)
    out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

bool alive(const cluster& c, const placement& pl) {
  const auto& ids = c.nodes[pl.node].devices;
  return std::all_of(pl.devices.begin(), pl.devices.end(),
                     [&](std::uint32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); });
}

}  // namespace

expected<problem> without(const problem& p, std::span<const lost_device> lost) {
  problem out = p;
  for (const auto& l : lost) {
    if (l.node >= p.hardware.nodes.size())
      return status{errc::invalid_argument, "node " + std::to_string(l.node) + " does not exist (the cluster has " +
                                                std::to_string(p.hardware.nodes.size()) + ")"};
    auto& ids = out.hardware.nodes[l.node].devices;
    if (!l.device) {
      ids.clear();
      continue;
    }
    const auto& original = p.hardware.nodes[l.node].devices;
    if (std::find(original.begin(), original.end(), *l.device) == original.end())
      return status{errc::invalid_argument, "device " + std::to_string(*l.device) + " of node " +
                                                p.hardware.nodes[l.node].name + " does not exist"};
    ids.erase(std::remove(ids.begin(), ids.end(), *l.device), ids.end());
  }
  return out;
}

namespace {

expected<replan_result> replan_impl(const problem& p, const plan& current, std::span<const lost_device> lost,
                                    const replan_options& options) {
  const auto start = std::chrono::steady_clock::now();
  RK_RETURN_IF_ERROR(validate(p));
  if (auto check = evaluate(p, current); !check.has_value() && check.error().code() == errc::invalid_argument)
    return check.error().with_context("the current plan does not match the problem");
  RK_ASSIGN_OR_RETURN(auto reduced, without(p, lost));
  const auto& hw = reduced.hardware;
  if (auto why = detail::memory_shortfall(reduced); !why.empty())
    return status{errc::resource_exhausted,
                  "no plan fits the remaining " + std::to_string(hw.device_count()) + " devices: " + why};
  replan_result result;
  detail::finder f{reduced, options.top, {}};
  f.set_deadline(start + options.budget);

  // 1. Keep the intact replicas; move the broken stages of the others to idle devices.
  const auto p_stages = current.pipeline();
  std::vector<bool> broken(current.data(), false);
  for (std::uint32_t r = 0; r < current.data(); ++r)
    for (const auto& pl : current.replicas[r].stages)
      broken[r] = broken[r] || !alive(hw, pl);
  detail::device_pool pool{hw};
  std::vector<std::vector<placement>> kept;
  for (std::uint32_t r = 0; r < current.data(); ++r)
    if (!broken[r]) {
      for (const auto& pl : current.replicas[r].stages)
        (void)pool.claim(pl);
      kept.push_back(current.replicas[r].stages);
    }
  std::vector<std::uint32_t> moved;
  std::vector<std::uint32_t> dropped;
  for (std::uint32_t r = 0; r < current.data(); ++r) {
    if (!broken[r])
      continue;
    auto stages = current.replicas[r].stages;
    std::vector<placement> claimed;
    for (const auto& pl : stages)
      if (alive(hw, pl) && pool.claim(pl))
        claimed.push_back(pl);
    bool ok = true;
    for (std::uint32_t s = 0; s < p_stages && ok; ++s) {
      if (alive(hw, stages[s]))
        continue;
      const auto type = p.hardware.nodes[stages[s].node].type;
      std::optional<std::uint32_t> near;
      if (s > 0 && alive(hw, stages[s - 1]))
        near = stages[s - 1].node;
      else if (s + 1 < p_stages && alive(hw, stages[s + 1]))
        near = stages[s + 1].node;
      auto got = pool.take(type, current.stages[s].tensor, near);
      ok = got.has_value();
      if (ok) {
        stages[s] = *got;
        claimed.push_back(*got);
      }
    }
    if (!ok) {
      for (const auto& pl : claimed)
        pool.release(pl);
      dropped.push_back(r);
      continue;
    }
    moved.push_back(r);
    kept.push_back(std::move(stages));
  }
  std::vector<std::string> how;
  if (!moved.empty())
    how.push_back("replica" + std::string{moved.size() > 1 ? "s " : " "} + list(moved) +
                  " moved the stages they lost to idle devices of the same type");
  if (!dropped.empty())
    how.push_back("replica" + std::string{dropped.size() > 1 ? "s " : " "} + list(dropped) +
                  " dropped (no idle devices of their type left)");

  // 2. Evaluate the repaired layout with the old stages; re-share micro-batches; polish.
  detail::explored_layouts explored;
  std::optional<candidate> warm;
  if (!kept.empty()) {
    detail::layout l;
    for (const auto& s : current.stages)
      l.tensor.push_back(s.tensor);
    l.replicas = std::move(kept);
    detail::finish_layout(hw, l);
    auto shared = std::make_shared<const detail::layout>(std::move(l));
    std::vector<std::uint32_t> split;
    for (const auto& s : current.stages)
      split.push_back(s.layers);
    auto e = f.evaluate(shared, split, current.micro_batch_size, current.recompute);
    candidate c{shared, split, current.micro_batch_size, current.recompute, std::move(e)};
    if (!c.result.feasible()) {
      // Fewer replicas hold bigger optimizer shards: another split may still fit.
      if (auto s = f.quick_split(*shared, current.micro_batch_size, current.recompute)) {
        auto e2 = f.evaluate(shared, *s, current.micro_batch_size, current.recompute);
        c = candidate{shared, std::move(*s), current.micro_batch_size, current.recompute, std::move(e2)};
      }
    }
    if (c.result.feasible()) {
      warm = f.polish(std::move(c));
      how.push_back(std::to_string(shared->data()) + (shared->data() == 1 ? " replica keeps" : " replicas keep") +
                    " the old stages; predicted step " +
                    seconds_text(warm->result.step_time) + " (was " + seconds_text(current.step_time) + ")");
    } else if (c.result.valid) {
      how.push_back("the repaired plan does not fit in memory (" + std::to_string(shared->data()) +
                    (shared->data() == 1 ? " replica holds" : " replicas hold") + " larger optimizer shards)");
    } else {
      how.push_back("the repaired plan has more replicas than micro-batches");
    }
  } else {
    how.push_back("no replica could be kept");
  }

  // 3. Look around the repaired layout while the budget lasts.
  if (warm && !f.stopped())
    detail::improve_layout(f, *warm, explored);
  // 4. Nothing fits: search the remaining devices until a plan is found or none can exist.
  if (f.ranking().empty()) {
    f.clear_deadline();
    detail::run_fast(f);
    if (!f.ranking().empty())
      how.push_back("a new search over the remaining devices found one");
  }
  if (f.ranking().empty())
    return status{errc::resource_exhausted,
                  "no plan fits the remaining " + std::to_string(hw.device_count()) + " devices: " + f.no_plan_reason()};
  if (warm && f.ranking().front().result.step_time < warm->result.step_time * (1 - 1e-9))
    how.push_back("a nearby layout is faster: " + seconds_text(f.ranking().front().result.step_time));
  result.plans = f.plans();
  result.stats = f.stats();
  result.stats.mode = search_mode::fast;
  result.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& h : how)
    result.how += (result.how.empty() ? "" : "; ") + h;
  result.reduced = std::move(reduced);
  return result;
}

}  // namespace

expected<replan_result> replan(const problem& p, const plan& current, std::span<const lost_device> lost,
                               const replan_options& options) {
  try {
    return replan_impl(p, current, lost, options);
  } catch (const std::bad_alloc&) {
    return status{errc::resource_exhausted, "the re-plan ran out of memory on a cluster of " +
                                                std::to_string(p.hardware.device_count()) + " devices"};
  }
}

}  // namespace rekindle::planner
