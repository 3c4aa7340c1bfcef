#include "planner/finder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/text.hpp"
#include "planner/cost.hpp"

namespace rekindle::planner::detail {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<std::uint32_t> even_split(std::uint32_t layers, std::uint32_t p) {
  std::vector<std::uint32_t> out(p, layers / p);
  for (std::uint32_t i = 0; i < layers % p; ++i)
    out[i] += 1;
  return out;
}

std::string candidate::key() const {
  std::string k = "d" + std::to_string(where->data()) + "t";
  for (auto t : where->tensor)
    k += std::to_string(t) + ",";
  return k + "b" + std::to_string(micro_batch) + (recompute ? "r" : "");
}

double candidate::score() const noexcept {
  if (result.feasible())
    return result.step_time;
  return result.valid ? 1e30 * (1 + result.memory_ratio) : infinity;
}

finder::finder(const problem& p, std::uint32_t top, std::stop_token stop)
    : costs_(p), top_count_(std::max<std::uint32_t>(8, top)), wanted_(std::max<std::uint32_t>(1, top)),
      stop_(std::move(stop)) {
  const auto& m = p.workload;
  sizes_ = m.micro_batch_sizes;
  switch (m.recompute) {
    case config::recompute_policy::never: recompute_ = {false}; break;
    case config::recompute_policy::always: recompute_ = {true}; break;
    case config::recompute_policy::auto_select: recompute_ = {false, true}; break;
  }
  std::uint32_t widest = 0;
  for (const auto& n : p.hardware.nodes)
    widest = std::max(widest, static_cast<std::uint32_t>(n.devices.size()));
  for (std::uint32_t t = 1; t <= widest; t *= 2)
    if (m.heads % t == 0)
      tensor_.push_back(t);
}

bool finder::stopped() {
  if (stop_.stop_requested() || (deadline_ && std::chrono::steady_clock::now() >= *deadline_))
    stats_.stopped = true;
  return stats_.stopped;
}

evaluation finder::evaluate(const std::shared_ptr<const layout>& l, std::span<const std::uint32_t> split,
                            std::uint32_t b, bool recompute) {
  auto e = costs_.evaluate(*l, split, b, recompute);
  ++stats_.evaluations;
  if (!e.valid)
    return e;
  if (e.fits) {
    offer(candidate{l, {split.begin(), split.end()}, b, recompute, e});
  } else if (top_.empty() && (!closest_ || e.memory_ratio < closest_->result.memory_ratio)) {
    closest_ = candidate{l, {split.begin(), split.end()}, b, recompute, e};
  }
  return e;
}

void finder::offer(const candidate& c) {
  const auto key = c.key();
  auto same = std::find_if(top_.begin(), top_.end(), [&](const candidate& x) { return x.key() == key; });
  if (same != top_.end()) {
    if (c.result.step_time >= same->result.step_time)
      return;
    top_.erase(same);
  } else if (top_.size() >= top_count_ && c.result.step_time >= top_.back().result.step_time) {
    return;
  }
  auto at = std::upper_bound(top_.begin(), top_.end(), c.result.step_time,
                             [](double t, const candidate& x) { return t < x.result.step_time; });
  top_.insert(at, c);
  if (top_.size() > top_count_)
    top_.pop_back();
}

double finder::best_time() const noexcept { return top_.empty() ? infinity : top_.front().result.step_time; }

double finder::cutoff() const noexcept {
  return top_.size() < top_count_ ? infinity : top_.back().result.step_time;
}

double finder::lower_bound(const layout& l, bool recompute) const {
  // Each device of type τ does at most speed(τ) seconds of type-0 work per second, where speed(τ)
  // is its best ratio over the model's layers; the global batch needs B × (type-0 seconds).
  const auto& hw = target().hardware;
  const auto& m = target().workload;
  std::vector<double> speed(hw.types.size(), 0);
  for (std::uint32_t t = 0; t < hw.types.size(); ++t)
    for (std::uint32_t i = 0; i < m.layers; ++i)
      speed[t] = std::max(speed[t], costs_.compute_per_sequence(0, i, 1, recompute) /
                                        costs_.compute_per_sequence(t, i, 1, recompute));
  double capacity = 0;
  for (const auto& rep : l.replicas)
    for (std::size_t s = 0; s < rep.size(); ++s)
      capacity += l.tensor[s] * speed[hw.nodes[rep[s].node].type];
  return m.global_batch * costs_.compute_per_sequence(0, 0, m.layers, recompute) / capacity;
}

std::optional<std::vector<std::uint32_t>> finder::quick_split(const layout& l, std::uint32_t b, bool recompute) const {
  const auto& m = target().workload;
  const auto p = l.pipeline();
  const auto layers = m.layers;
  const auto d = l.data();
  const std::uint32_t total = m.global_batch / b;
  if (p > layers || total < d)
    return std::nullopt;
  const std::uint32_t per_replica = (total + d - 1) / d;
  const auto k_count = static_cast<std::uint32_t>(l.classes.size());
  // Weigh each class by its own speed so that a slow class's stages and a fast class's stages
  // count alike: weight = 1 / (time of one micro-batch through the class with an even split).
  std::vector<double> weight(k_count, 0);
  {
    const auto even = even_split(layers, p);
    for (std::uint32_t k = 0; k < k_count; ++k) {
      double sum = 0;
      std::uint32_t first = 0;
      for (std::uint32_t s = 0; s < p; ++s) {
        sum += costs_.stage_cost(l, k, s, first, even[s], b, recompute).total();
        first += even[s];
      }
      weight[k] = 1 / sum;
    }
  }
  const auto cost = [&](std::uint32_t s, std::uint32_t first, std::uint32_t count) {
    double worst = 0;
    for (std::uint32_t k = 0; k < k_count; ++k)
      worst = std::max(worst, weight[k] * costs_.stage_cost(l, k, s, first, count, b, recompute).total());
    return worst;
  };
  const auto fits = [&](std::uint32_t s, std::uint32_t first, std::uint32_t count) {
    for (auto type : l.stage_types[s]) {
      const auto u = costs_.stage_memory(type, s, p, first, count, l.tensor[s], b, recompute,
                                         std::min(p - s, per_replica), d);
      if (u.total() > u.capacity)
        return false;
    }
    return true;
  };
  std::vector<std::uint32_t> split(p, 0);
  const auto greedy = [&](double limit) {
    std::uint32_t pos = 0;
    for (std::uint32_t s = 0; s < p; ++s) {
      if (s + 1 == p) {
        const auto count = layers - pos;
        if (count < 1 || cost(s, pos, count) > limit || !fits(s, pos, count))
          return false;
        split[s] = count;
        return true;
      }
      const auto most = layers - pos - (p - 1 - s);
      std::uint32_t count = 0;
      for (std::uint32_t n = 1; n <= most; ++n) {
        if (cost(s, pos, n) > limit || !fits(s, pos, n))
          break;
        count = n;
      }
      if (count == 0)
        return false;
      split[s] = count;
      pos += count;
    }
    return false;
  };
  if (!greedy(infinity))
    return std::nullopt;
  double hi = 0;
  {
    std::uint32_t first = 0;
    for (std::uint32_t s = 0; s < p; ++s) {
      hi = std::max(hi, cost(s, first, split[s]));
      first += split[s];
    }
  }
  auto best = split;
  double lo = 0;
  for (int i = 0; i < 40 && hi - lo > 1e-9 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (greedy(mid)) {
      hi = mid;
      best = split;
    } else {
      lo = mid;
    }
  }
  return best;
}

std::vector<std::uint32_t> finder::memory_split(const layout& l, std::uint32_t b, bool recompute) const {
  const auto& m = target().workload;
  const auto p = l.pipeline();
  const auto d = l.data();
  const std::uint32_t per_replica = std::max<std::uint32_t>(1, (m.global_batch / b + d - 1) / d);
  const auto ratio = [&](std::uint32_t s, std::uint32_t first, std::uint32_t count) {
    double worst = 0;
    for (auto type : l.stage_types[s]) {
      const auto u = costs_.stage_memory(type, s, p, first, count, l.tensor[s], b, recompute,
                                         std::min(p - s, per_replica), d);
      worst = std::max(worst, u.total() / u.capacity);
    }
    return worst;
  };
  std::vector<std::uint32_t> split(p, 0);
  const auto greedy = [&](double limit) {
    std::uint32_t pos = 0;
    for (std::uint32_t s = 0; s + 1 < p; ++s) {
      const auto most = m.layers - pos - (p - 1 - s);
      std::uint32_t count = 1;
      while (count < most && ratio(s, pos, count + 1) <= limit)
        ++count;
      if (ratio(s, pos, count) > limit)
        return false;
      split[s] = count;
      pos += count;
    }
    split[p - 1] = m.layers - pos;
    return ratio(p - 1, pos, split[p - 1]) <= limit;
  };
  double lo = 0;
  double hi = 1;
  while (!greedy(hi) && hi < 1e12)
    hi *= 2;
  auto best = split;
  for (int i = 0; i < 40 && hi - lo > 1e-9 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (greedy(mid)) {
      hi = mid;
      best = split;
    } else {
      lo = mid;
    }
  }
  return best;
}

candidate finder::polish(candidate c) {
  if (!c.result.feasible())
    return c;
  const auto p = static_cast<std::uint32_t>(c.split.size());
  const auto limit = 4 * target().workload.layers + 8;
  // Moving one layer from stage i to stage j shifts the stages between by one layer and keeps
  // their sizes. Short pipelines try every pair, long ones pairs up to 3 stages apart.
  const std::uint32_t reach = p <= 8 ? p : 3;
  for (std::uint32_t round = 0; round < limit; ++round) {
    bool improved = false;
    for (std::uint32_t i = 0; i < p; ++i) {
      for (std::uint32_t j = 0; j < p; ++j) {
        if (i == j || (i > j ? i - j : j - i) > reach || c.split[i] < 2)
          continue;
        auto next = c.split;
        next[i] -= 1;
        next[j] += 1;
        auto e = evaluate(c.where, next, c.micro_batch, c.recompute);
        if (e.feasible() && e.step_time < c.result.step_time * (1 - 1e-12)) {
          c.split = std::move(next);
          c.result = std::move(e);
          improved = true;
        }
      }
    }
    if (!improved)
      break;
  }
  return c;
}

std::vector<plan> finder::plans() const {
  std::vector<plan> out;
  for (const auto& c : top_)
    if (out.size() < wanted_)
      out.push_back(costs_.make_plan(*c.where, c.split, c.micro_batch, c.recompute, c.result));
  return out;
}

std::string memory_shortfall(const problem& p) {
  const auto& hw = p.hardware;
  const auto& m = p.workload;
  const double params = model_parameters(m);
  const double state = params * (m.value_bytes + m.gradient_bytes + optimizer_bytes_per_parameter);
  double usable = 0;
  for (const auto& n : hw.nodes)
    usable += static_cast<double>(n.devices.size()) * hw.types[n.type].usable_memory();
  if (usable >= state)
    return {};
  char count[32];
  std::snprintf(count, sizeof count, "%.2f B", params / 1e9);
  return "the model's " + std::string{count} + " parameters need at least " + format_bytes(state) +
         " for weights, gradients and optimizer state, and the cluster's " + std::to_string(hw.device_count()) +
         " devices have " + format_bytes(usable) + " usable in all";
}

std::string finder::no_plan_reason() const {
  const auto& hw = target().hardware;
  const auto& m = target().workload;
  if (auto why = memory_shortfall(target()); !why.empty())
    return why;
  if (closest_) {
    const auto pl = costs_.make_plan(*closest_->where, closest_->split, closest_->micro_batch, closest_->recompute,
                                     closest_->result);
    const auto it = std::max_element(pl.memory.begin(), pl.memory.end(), [](const memory_use& a, const memory_use& b) {
      return a.total() / a.capacity < b.total() / b.capacity;
    });
    std::string layers;
    for (const auto& s : pl.stages)
      layers += (layers.empty() ? "" : ",") + std::to_string(s.layers);
    return "no plan fits in memory; the closest (" + pl.shape() + ", layers per stage " + layers + ") needs " +
           format_bytes(it->total()) + " on a " + hw.types[it->type].name + " device of stage " +
           std::to_string(it->stage) + " (weights " + format_bytes(it->weights) + ", gradients " +
           format_bytes(it->gradients) + ", optimizer " + format_bytes(it->optimizer) + ", activations " +
           format_bytes(it->activations) + ") where " + format_bytes(it->capacity) +
           " is usable; add devices or memory, allow recompute, or use smaller micro-batches";
  }
  return "no plan was possible: the global batch of " + std::to_string(m.global_batch) +
         " sequences gives too few micro-batches for any layout, or no tensor group fits in a node";
}

}  // namespace rekindle::planner::detail
