#include "planner/layout.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/check.hpp"
#include "planner/cost.hpp"

namespace rekindle::planner::detail {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

}  // namespace

// ---- layouts ----

void finish_layout(const cluster& c, layout& l) {
  const auto p = l.pipeline();
  const auto d = l.data();
  l.classes.clear();
  l.class_of.assign(d, 0);
  std::map<std::vector<double>, std::uint32_t> index;
  std::vector<double> key;
  l.used_devices = 0;
  for (auto t : l.tensor)
    l.used_devices += t * d;
  // A node's network interface is shared by its devices that the layout uses: at the end of a step
  // they all reduce their stage's gradients with other nodes at once.
  std::map<std::uint32_t, std::uint32_t> used_on;
  for (std::uint32_t r = 0; r < d; ++r)
    for (std::uint32_t s = 0; s < p; ++s)
      used_on[l.replicas[r][s].node] += l.tensor[s];
  const auto between = [&](std::uint32_t a, std::uint32_t b) {
    double bw = c.net.bandwidth(c.nodes, a, b);
    for (auto n : {a, b})
      if (c.nodes[n].nic_bandwidth > 0)
        bw = std::min(bw, c.nodes[n].nic_bandwidth / std::max<std::uint32_t>(used_on[n], 1));
    return bw;
  };
  for (std::uint32_t r = 0; r < d; ++r) {
    const auto& rep = l.replicas[r];
    RK_CHECK_EQ(rep.size(), p);
    replica_class cls;
    for (std::uint32_t s = 0; s < p; ++s)
      cls.types.push_back(c.nodes[rep[s].node].type);
    for (std::uint32_t s = 0; s + 1 < p; ++s) {
      const auto a = rep[s].node;
      const auto b = rep[s + 1].node;
      if (a == b) {
        const auto& t = c.types[c.nodes[a].type];
        cls.link_bandwidth.push_back(t.link_bandwidth);
        cls.link_latency.push_back(t.link_latency);
      } else {
        cls.link_bandwidth.push_back(between(a, b));
        cls.link_latency.push_back(c.net.latency());
      }
    }
    key.clear();
    for (auto t : cls.types)
      key.push_back(t);
    key.insert(key.end(), cls.link_bandwidth.begin(), cls.link_bandwidth.end());
    key.insert(key.end(), cls.link_latency.begin(), cls.link_latency.end());
    auto [it, inserted] = index.emplace(key, static_cast<std::uint32_t>(l.classes.size()));
    if (inserted)
      l.classes.push_back(std::move(cls));
    l.classes[it->second].count += 1;
    l.class_of[r] = it->second;
  }

  {
    std::vector<std::string> patterns;
    for (const auto& cls : l.classes) {
      std::string text;
      for (auto t : cls.types)
        text += std::to_string(t) + ",";
      for (std::uint32_t i = 0; i < cls.count; ++i)
        patterns.push_back(text);
    }
    std::sort(patterns.begin(), patterns.end());
    l.signature = "t";
    for (auto t : l.tensor)
      l.signature += std::to_string(t) + ",";
    l.signature += "|";
    for (std::size_t i = 0; i < patterns.size();) {
      std::size_t j = i;
      while (j < patterns.size() && patterns[j] == patterns[i])
        ++j;
      l.signature += std::to_string(j - i) + "x" + patterns[i] + ";";
      i = j;
    }
  }
  l.ring_bandwidth.assign(p, infinity);
  l.ring_latency.assign(p, 0);
  l.stage_types.assign(p, {});
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ring;  // (group, node)
  for (std::uint32_t s = 0; s < p; ++s) {
    ring.clear();
    for (std::uint32_t r = 0; r < d; ++r) {
      const auto n = l.replicas[r][s].node;
      ring.emplace_back(c.nodes[n].group, n);
      const auto t = c.nodes[n].type;
      auto& types = l.stage_types[s];
      if (std::find(types.begin(), types.end(), t) == types.end())
        types.push_back(t);
    }
    std::sort(ring.begin(), ring.end());
    double bw = infinity;
    bool crosses_nodes = false;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const auto a = ring[i].second;
      const auto b = ring[(i + 1) % ring.size()].second;
      if (ring.size() == 1)
        break;
      if (a == b) {
        bw = std::min(bw, c.types[c.nodes[a].type].link_bandwidth);
      } else {
        bw = std::min(bw, between(a, b));
        crosses_nodes = true;
      }
    }
    if (ring.size() > 1) {
      l.ring_bandwidth[s] = bw;
      l.ring_latency[s] = crosses_nodes ? c.net.latency() : c.types[c.nodes[ring[0].second].type].link_latency;
    }
  }
}

device_pool::device_pool(const cluster& c) : cluster_(&c), free_(c.nodes.size()), by_type_(c.types.size()) {
  for (std::uint32_t n = 0; n < c.nodes.size(); ++n) {
    auto ids = c.nodes[n].devices;
    std::sort(ids.rbegin(), ids.rend());  // descending: take from the back, lowest id first
    free_[n] = std::move(ids);
    by_type_[c.nodes[n].type].emplace(static_cast<std::uint32_t>(free_[n].size()), n);
  }
}

void device_pool::reindex(std::uint32_t n, std::size_t old_free) {
  auto& set = by_type_[cluster_->nodes[n].type];
  set.erase({static_cast<std::uint32_t>(old_free), n});
  set.emplace(static_cast<std::uint32_t>(free_[n].size()), n);
}

std::optional<placement> device_pool::take(std::uint32_t type, std::uint32_t count,
                                           std::optional<std::uint32_t> preferred) {
  std::optional<std::uint32_t> node;
  if (preferred && cluster_->nodes[*preferred].type == type && free_[*preferred].size() >= count) {
    node = *preferred;
  } else {
    const auto& set = by_type_[type];
    auto it = set.lower_bound({count, 0});
    if (it == set.end())
      return std::nullopt;
    node = it->second;
  }
  auto& ids = free_[*node];
  const auto old = ids.size();
  placement p;
  p.node = *node;
  for (std::uint32_t i = 0; i < count; ++i) {
    p.devices.push_back(ids.back());
    ids.pop_back();
  }
  reindex(*node, old);
  return p;
}

bool device_pool::claim(const placement& p) {
  auto& ids = free_[p.node];
  const auto old = ids.size();
  for (auto id : p.devices) {
    auto it = std::find(ids.begin(), ids.end(), id);
    if (it == ids.end())
      return false;
    ids.erase(it);
  }
  reindex(p.node, old);
  return true;
}

void device_pool::release(const placement& p) {
  auto& ids = free_[p.node];
  const auto old = ids.size();
  ids.insert(ids.end(), p.devices.begin(), p.devices.end());
  std::sort(ids.rbegin(), ids.rend());
  reindex(p.node, old);
}

std::optional<layout> place(const cluster& c, std::span<const std::uint32_t> tensor,
                            std::span<const std::vector<std::uint32_t>> unordered) {
  // The placement depends only on the multiset of patterns, not on the order they come in.
  std::vector<std::vector<std::uint32_t>> patterns(unordered.begin(), unordered.end());
  std::sort(patterns.begin(), patterns.end());
  const auto p = static_cast<std::uint32_t>(tensor.size());
  layout l;
  l.tensor.assign(tensor.begin(), tensor.end());
  l.replicas.assign(patterns.size(), std::vector<placement>(p));
  bool ok = true;
  {
    // First try: stage by stage, keeping a replica in the node of its previous stage.
    device_pool pool{c};
    for (std::size_t r = 0; r < patterns.size() && ok; ++r) {
      std::optional<std::uint32_t> previous;
      for (std::uint32_t s = 0; s < p; ++s) {
        auto got = pool.take(patterns[r][s], tensor[s], previous);
        if (!got) {
          ok = false;
          break;
        }
        previous = got->node;
        l.replicas[r][s] = std::move(*got);
      }
    }
  }
  if (!ok) {
    // Second try: the largest groups first (best-fit decreasing), which packs mixed tensor degrees.
    std::vector<std::pair<std::size_t, std::uint32_t>> groups;
    for (std::size_t r = 0; r < patterns.size(); ++r)
      for (std::uint32_t s = 0; s < p; ++s)
        groups.emplace_back(r, s);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](const auto& a, const auto& b) { return tensor[a.second] > tensor[b.second]; });
    device_pool pool{c};
    for (const auto& [r, s] : groups) {
      auto got = pool.take(patterns[r][s], tensor[s], std::nullopt);
      if (!got)
        return std::nullopt;
      l.replicas[r][s] = std::move(*got);
    }
  }
  finish_layout(c, l);
  return l;
}

// ---- balancing ----

bool balance(std::span<const double> fixed, std::span<const double> per, std::span<const std::uint32_t> count,
             std::uint32_t total, std::vector<class_share>& out) {
  const auto k = fixed.size();
  out.assign(k, {});
  std::uint64_t replicas = 0;
  double lo = 0;
  double hi = 0;
  for (std::size_t i = 0; i < k; ++i) {
    replicas += count[i];
    if (count[i] > 0) {
      lo = std::max(lo, fixed[i] + per[i]);
      hi = std::max(hi, fixed[i] + per[i] * total);
    }
  }
  if (replicas == 0 || total < replicas)
    return false;
  const auto counted = [&](double t) {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < k; ++i) {
      if (count[i] == 0)
        continue;
      const double m = std::floor((t - fixed[i]) / per[i] * (1 + 1e-12));
      n += static_cast<std::uint64_t>(std::max(1.0, m)) * count[i];
    }
    return n;
  };
  // The smallest finish time T with enough micro-batch slots: every replica of class i can run
  // floor((T - fixed)/per) micro-batches by T (at least one).
  if (counted(lo) < total) {
    for (int iter = 0; iter < 200 && hi - lo > 1e-13 * hi; ++iter) {
      const double mid = 0.5 * (lo + hi);
      (counted(mid) >= total ? hi : lo) = mid;
    }
  } else {
    hi = lo;
  }
  std::uint64_t assigned = 0;
  for (std::size_t i = 0; i < k; ++i) {
    if (count[i] == 0)
      continue;
    const double m = std::floor((hi - fixed[i]) / per[i] * (1 + 1e-12));
    out[i].count = static_cast<std::uint32_t>(std::max(1.0, m));
    out[i].high = count[i];
    assigned += std::uint64_t{out[i].count} * count[i];
  }
  // Take back the surplus from the replicas that finish last.
  for (; assigned > total; --assigned) {
    std::size_t best = k;
    double latest = -1;
    for (std::size_t i = 0; i < k; ++i) {
      if (count[i] == 0 || out[i].count < 2)
        continue;
      const double finish = fixed[i] + per[i] * out[i].count;
      if (finish > latest) {
        latest = finish;
        best = i;
      }
    }
    RK_CHECK(best < k, "a surplus micro-batch can always be taken back");
    auto& s = out[best];
    if (--s.high == 0) {
      s.count -= 1;
      s.high = count[best];
    }
  }
  return true;
}

// ---- cost model ----

namespace {

// Linear through (x0, y0) and (x1, y1), at x.
double lerp(double x0, double y0, double x1, double y1, double x) {
  return x1 == x0 ? y0 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

measured_time interpolate_points(std::span<const layer_measurement> points, std::uint32_t b, std::uint32_t t,
                                 const std::function<measured_time(std::uint32_t, std::uint32_t)>& analytic) {
  RK_CHECK(!points.empty(), "interpolate_points needs a point");
  const auto scaled = [&](measured_time at, std::uint32_t from_b, std::uint32_t from_t) {
    // The measured time at (from_b, from_t), carried to (b, t) by the estimate's ratio.
    const auto there = analytic(from_b, from_t);
    const auto here = analytic(b, t);
    return measured_time{at.forward * here.forward / there.forward, at.backward * here.backward / there.backward};
  };
  // The time at (b, degree) for a measured degree: linear in b between its measured sizes.
  const auto along_b = [&](std::uint32_t degree) {
    const layer_measurement* below = nullptr;
    const layer_measurement* above = nullptr;
    for (const auto& p : points) {
      if (p.tensor != degree)
        continue;
      if (p.micro_batch <= b && (below == nullptr || p.micro_batch > below->micro_batch))
        below = &p;
      if (p.micro_batch >= b && (above == nullptr || p.micro_batch < above->micro_batch))
        above = &p;
    }
    if (below != nullptr && above != nullptr)
      return measured_time{lerp(below->micro_batch, below->forward, above->micro_batch, above->forward, b),
                           lerp(below->micro_batch, below->backward, above->micro_batch, above->backward, b)};
    const auto* near = below != nullptr ? below : above;
    // Past the measured sizes: the nearest one, scaled by the estimate (at this degree).
    const auto there = analytic(near->micro_batch, degree);
    const auto here = analytic(b, degree);
    return measured_time{near->forward * here.forward / there.forward, near->backward * here.backward / there.backward};
  };
  std::uint32_t lo = 0, hi = 0;  // the measured degrees around t (0: none)
  for (const auto& p : points) {
    if (p.tensor <= t && p.tensor > lo)
      lo = p.tensor;
    if (p.tensor >= t && (hi == 0 || p.tensor < hi))
      hi = p.tensor;
  }
  if (lo != 0 && hi != 0) {
    const auto a = along_b(lo);
    if (lo == hi)
      return a;
    const auto c = along_b(hi);
    const double x = 1.0 / t;
    return measured_time{lerp(1.0 / lo, a.forward, 1.0 / hi, c.forward, x),
                         lerp(1.0 / lo, a.backward, 1.0 / hi, c.backward, x)};
  }
  const auto near = lo != 0 ? lo : hi;
  return scaled(along_b(near), b, near);
}

cost_model::cost_model(const problem& p) : problem_(&p), types_(p.hardware.types.size()) {
  const auto& m = p.workload;
  layer_params_ = layer_parameters(m);
  const double fwd_flops = layer_forward_flops(m, 1);
  const double sh = static_cast<double>(m.seq_len) * m.hidden;
  const double fixed = 10.0 * sh;
  const double scaled = layer_activation_bytes(m, 1, 1) - fixed;
  for (std::size_t t = 0; t < types_.size(); ++t) {
    auto& x = types_[t];
    const auto& dt = p.hardware.types[t];
    x.block_unit = fwd_flops / dt.rate();
    x.overhead = dt.layer_overhead;
    x.head_forward = head_forward_flops(m, 1) / dt.rate();
    if (t < m.measured_head.size())
      x.head_points = m.measured_head[t];
    x.forward.assign(m.layers + 1, 0);
    x.backward.assign(m.layers + 1, 0);
    x.act_fixed.assign(m.layers + 1, 0);
    x.act_scaled.assign(m.layers + 1, 0);
    const bool has_measured = t < m.measured.size() && !m.measured[t].empty();
    for (std::uint32_t i = 0; i < m.layers; ++i) {
      const std::vector<layer_measurement>* points = has_measured && !m.measured[t][i].empty() ? &m.measured[t][i] : nullptr;
      // Layers with the same points share a group; its prefix counts are filled below.
      if (points != nullptr) {
        auto g = std::find_if(x.groups.begin(), x.groups.end(), [&](const point_group& pg) {
          return pg.points.size() == points->size() &&
                 std::equal(pg.points.begin(), pg.points.end(), points->begin(), [](const auto& a, const auto& c) {
                   return a.micro_batch == c.micro_batch && a.tensor == c.tensor && a.forward == c.forward &&
                          a.backward == c.backward && a.activation == c.activation;
                 });
        });
        if (g == x.groups.end()) {
          x.groups.push_back({*points, std::vector<std::uint32_t>(m.layers + 1, 0)});
          g = std::prev(x.groups.end());
        }
        g->count[i + 1] = 1;  // made prefix sums below
      }
      const auto one = points != nullptr
                           ? interpolate_points(*points, 1, 1,
                                                [&](std::uint32_t bb, std::uint32_t tt) {
                                                  return analytic_block(static_cast<std::uint32_t>(t), bb, tt);
                                                })
                           : analytic_block(static_cast<std::uint32_t>(t), 1, 1);
      double af = fixed;
      double as = scaled;
      if (points != nullptr)
        for (const auto& pt : *points)
          if (pt.activation >= 0) {
            // Bytes of a micro-batch at its tensor degree, per sequence at degree 1.
            af = 0;
            as = pt.activation * pt.tensor / pt.micro_batch;
            break;
          }
      x.forward[i + 1] = x.forward[i] + one.forward;
      x.backward[i + 1] = x.backward[i] + one.backward;
      x.act_fixed[i + 1] = x.act_fixed[i] + af;
      x.act_scaled[i + 1] = x.act_scaled[i] + as;
      x.max_fixed = std::max(x.max_fixed, af);
      x.max_scaled = std::max(x.max_scaled, as);
    }
    for (auto& g : x.groups)
      for (std::uint32_t i = 0; i < m.layers; ++i)
        g.count[i + 1] += g.count[i];
  }
}

measured_time cost_model::analytic_block(std::uint32_t type, std::uint32_t b, std::uint32_t t) const {
  const auto& x = types_[type];
  const double f = x.block_unit * b / t + x.overhead;
  return {f, 2 * f};
}

double cost_model::block_compute(std::uint32_t type, std::uint32_t first, std::uint32_t count, std::uint32_t b,
                                 std::uint32_t t, bool recompute) const {
  const auto& x = types_[type];
  const auto sum = [&](const measured_time& one) { return one.forward + one.backward + (recompute ? one.forward : 0); };
  std::uint32_t measured = 0;
  double total = 0;
  for (const auto& g : x.groups) {
    const auto n = g.count[first + count] - g.count[first];
    if (n == 0)
      continue;
    measured += n;
    total += n * sum(interpolate_points(g.points, b, t, [&](std::uint32_t bb, std::uint32_t tt) {
      return analytic_block(type, bb, tt);
    }));
  }
  return total + (count - measured) * sum(analytic_block(type, b, t));
}

double cost_model::head_compute(std::uint32_t type, std::uint32_t b, std::uint32_t t) const {
  const auto& x = types_[type];
  const auto analytic = [&](std::uint32_t bb, std::uint32_t tt) {
    const double f = x.head_forward * bb / tt + x.overhead;
    return measured_time{f, 2 * f};
  };
  const auto one = x.head_points.empty() ? analytic(b, t) : interpolate_points(x.head_points, b, t, analytic);
  return one.forward + one.backward;
}

double cost_model::compute_per_sequence(std::uint32_t type, std::uint32_t first, std::uint32_t count,
                                        bool recompute) const {
  const auto& x = types_[type];
  const double f = x.forward[first + count] - x.forward[first];
  const double b = x.backward[first + count] - x.backward[first];
  return f + b + (recompute ? f : 0);
}

double cost_model::model_seconds_per_sequence(std::uint32_t type, bool recompute) const {
  return compute_per_sequence(type, 0, problem_->workload.layers, recompute) + head_compute(type, 1, 1);
}

double cost_model::stage_parameters(std::uint32_t s, std::uint32_t p, std::uint32_t count) const {
  const auto& m = problem_->workload;
  double params = count * layer_params_;
  if (s == 0)
    params += embedding_parameters(m);
  if (s + 1 == p) {
    params += 2.0 * m.hidden;
    if (!m.tied_embeddings || p > 1)
      params += static_cast<double>(m.vocab) * m.hidden;
  }
  return params;
}

memory_use cost_model::stage_memory(std::uint32_t type, std::uint32_t s, std::uint32_t p, std::uint32_t first,
                                    std::uint32_t count, std::uint32_t t, std::uint32_t b, bool recompute,
                                    std::uint32_t in_flight, std::uint32_t data) const {
  const auto& m = problem_->workload;
  const auto& x = types_[type];
  memory_use u;
  u.stage = s;
  u.type = type;
  const double params = stage_parameters(s, p, count) / t;
  u.weights = params * m.value_bytes;
  u.gradients = params * m.gradient_bytes;
  u.optimizer = params * optimizer_bytes_per_parameter / (m.zero ? data : 1);
  if (!recompute) {
    const double per_sequence = (x.act_fixed[first + count] - x.act_fixed[first]) +
                                (x.act_scaled[first + count] - x.act_scaled[first]) / t;
    u.activations = static_cast<double>(in_flight) * b * per_sequence;
  } else {
    const double input = static_cast<double>(m.seq_len) * m.hidden * m.value_bytes;
    u.activations = static_cast<double>(in_flight) * b * count * input + b * (x.max_fixed + x.max_scaled / t);
  }
  if (s + 1 == p)
    u.activations += 4.0 * b * m.seq_len * static_cast<double>(m.vocab) / t;  // fp32 logits of one micro-batch
  // 1F1B keeps, per neighbouring stage, a buffer for the activation and one for the gradient that
  // cross the boundary; a device holds its 1/t of each.
  const double message = static_cast<double>(b) * m.seq_len * m.hidden * m.value_bytes / t;
  u.buffers = 2.0 * message * ((s > 0 ? 1 : 0) + (s + 1 < p ? 1 : 0));
  u.margin = m.memory_margin * (u.weights + u.gradients + u.optimizer + u.activations + u.buffers);
  u.capacity = problem_->hardware.types[type].usable_memory();
  return u;
}

cost_model::stage_time cost_model::stage_cost(const layout& l, std::uint32_t k, std::uint32_t s, std::uint32_t first,
                                              std::uint32_t count, std::uint32_t b, bool recompute) const {
  const auto& m = problem_->workload;
  const auto& cls = l.classes[k];
  const auto p = l.pipeline();
  const auto type = cls.types[s];
  const auto t = l.tensor[s];
  const auto& dt = problem_->hardware.types[type];
  const double message = static_cast<double>(b) * m.seq_len * m.hidden * m.value_bytes;
  stage_time out;
  out.compute = block_compute(type, first, count, b, t, recompute);
  if (s + 1 == p)
    out.compute += head_compute(type, b, t);
  if (t > 1)
    out.tensor_parallel = count * (recompute ? 6.0 : 4.0) * ring_allreduce_time(message, t, dt.link_bandwidth, dt.link_latency);
  if (s + 1 < p)
    out.sends += cls.link_latency[s] + message / (std::min(t, l.tensor[s + 1]) * cls.link_bandwidth[s]);
  if (s > 0)
    out.sends += cls.link_latency[s - 1] + message / (std::min(l.tensor[s - 1], t) * cls.link_bandwidth[s - 1]);
  return out;
}

evaluation cost_model::evaluate(const layout& l, std::span<const std::uint32_t> split, std::uint32_t b,
                                bool recompute, std::span<const std::uint32_t> counts) const {
  evaluation e;
  const auto& m = problem_->workload;
  const auto& hw = problem_->hardware;
  const auto p = l.pipeline();
  const auto d = l.data();
  const std::uint32_t total = m.global_batch / b;
  if (total < d || d == 0)
    return e;
  e.valid = true;
  const auto k_count = l.classes.size();
  // Stage times per micro-batch, class by class.
  std::vector<std::uint32_t> first;
  first.assign(p, 0);
  for (std::uint32_t s = 1; s < p; ++s)
    first[s] = first[s - 1] + split[s - 1];
  const auto stage_terms = [&](const replica_class& cls, std::uint32_t s, double& compute, double& tp, double& p2p) {
    const auto k = static_cast<std::uint32_t>(&cls - l.classes.data());
    const auto st = stage_cost(l, k, s, first[s], split[s], b, recompute);
    compute = st.compute;
    tp = st.tensor_parallel;
    p2p = st.sends;
  };
  std::vector<double> fixed, per;
  std::vector<std::uint32_t> class_counts, bottleneck;
  fixed.assign(k_count, 0);
  per.assign(k_count, 0);
  class_counts.assign(k_count, 0);
  bottleneck.assign(k_count, 0);
  for (std::size_t k = 0; k < k_count; ++k) {
    const auto& cls = l.classes[k];
    class_counts[k] = cls.count;
    double sum = 0;
    double worst = -1;
    for (std::uint32_t s = 0; s < p; ++s) {
      double c = 0, tp = 0, p2p = 0;
      stage_terms(cls, s, c, tp, p2p);
      const double time = c + tp + p2p;
      sum += time;
      if (time > worst) {
        worst = time;
        bottleneck[k] = s;
      }
    }
    fixed[k] = sum - worst;
    per[k] = worst;
  }
  // Micro-batches per replica: the most any replica of a class runs.
  std::vector<std::uint32_t> most;
  most.assign(k_count, 0);
  if (counts.empty()) {
    balance(fixed, per, class_counts, total, e.shares);
    for (std::size_t k = 0; k < k_count; ++k)
      most[k] = e.shares[k].high > 0 ? e.shares[k].count : e.shares[k].count - 1;
  } else {
    std::uint64_t sum = 0;
    for (std::uint32_t r = 0; r < d; ++r) {
      if (counts[r] == 0) {
        e.valid = false;
        return e;
      }
      sum += counts[r];
      most[l.class_of[r]] = std::max(most[l.class_of[r]], counts[r]);
    }
    if (sum != total) {
      e.valid = false;
      return e;
    }
  }
  double pipe = -1;
  for (std::size_t k = 0; k < k_count; ++k) {
    const double finish = fixed[k] + per[k] * most[k];
    if (finish > pipe) {
      pipe = finish;
      e.critical_class = static_cast<std::uint32_t>(k);
    }
  }
  // Memory of every (class, stage).
  e.memory_ratio = 0;
  for (std::size_t k = 0; k < k_count; ++k) {
    const auto& cls = l.classes[k];
    for (std::uint32_t s = 0; s < p; ++s) {
      const auto in_flight = std::min(p - s, most[k]);
      const auto u = stage_memory(cls.types[s], s, p, first[s], split[s], l.tensor[s], b, recompute, in_flight, d);
      const double ratio = u.total() / u.capacity;
      if (ratio > e.memory_ratio) {
        e.memory_ratio = ratio;
        e.worst_stage = s;
        e.worst_type = cls.types[s];
      }
    }
  }
  e.fits = e.memory_ratio <= 1.0;
  // Data-parallel reduction and optimizer step.
  double dp = 0;
  double opt = 0;
  for (std::uint32_t s = 0; s < p; ++s) {
    const double params = stage_parameters(s, p, split[s]) / l.tensor[s];
    if (d > 1)
      // A reduce-scatter of the gradients and an all-gather of the updated 16-bit weights: the
      // volume of one all-reduce of their mean size.
      dp = std::max(dp, ring_allreduce_time(params * (m.gradient_bytes + m.value_bytes) / 2, d, l.ring_bandwidth[s],
                                            l.ring_latency[s]));
    const double updated = params / (m.zero ? d : 1);
    for (auto type : l.stage_types[s])
      opt = std::max(opt, updated * optimizer_traffic_per_parameter / hw.types[type].memory_bandwidth);
  }
  // The breakdown of the critical replica's bottleneck stage.
  const auto k = e.critical_class;
  double c = 0, tp = 0, p2p = 0;
  stage_terms(l.classes[k], bottleneck[k], c, tp, p2p);
  e.breakdown.compute = c * most[k];
  e.breakdown.tensor_parallel = tp * most[k];
  e.breakdown.pipeline_p2p = p2p * most[k];
  e.breakdown.bubble = fixed[k];
  e.breakdown.data_parallel = dp;
  e.breakdown.optimizer = opt;
  e.step_time = e.breakdown.total();
  return e;
}

plan cost_model::make_plan(const layout& l, std::span<const std::uint32_t> split, std::uint32_t b, bool recompute,
                           const evaluation& e, std::span<const std::uint32_t> counts) const {
  const auto& m = problem_->workload;
  plan out;
  const auto p = l.pipeline();
  std::uint32_t first = 0;
  for (std::uint32_t s = 0; s < p; ++s) {
    out.stages.push_back({first, split[s], l.tensor[s]});
    first += split[s];
  }
  out.micro_batch_size = b;
  out.micro_batches = m.global_batch / b;
  out.recompute = recompute;
  out.replicas.resize(l.data());
  std::vector<std::uint32_t> seen(l.classes.size(), 0);
  std::vector<std::uint32_t> most(l.classes.size(), 0);
  for (std::uint32_t r = 0; r < l.data(); ++r) {
    out.replicas[r].stages = l.replicas[r];
    const auto k = l.class_of[r];
    if (!counts.empty()) {
      out.replicas[r].micro_batches = counts[r];
    } else {
      const auto& share = e.shares[k];
      out.replicas[r].micro_batches = seen[k] < share.high ? share.count : share.count - 1;
      seen[k] += 1;
    }
    most[k] = std::max(most[k], out.replicas[r].micro_batches);
  }
  out.breakdown = e.breakdown;
  out.step_time = e.step_time;
  for (std::uint32_t r = 0; r < l.data(); ++r)
    if (l.class_of[r] == e.critical_class && out.replicas[r].micro_batches == most[e.critical_class]) {
      out.critical_replica = r;
      break;
    }
  for (std::size_t k = 0; k < l.classes.size(); ++k) {
    for (std::uint32_t s = 0; s < p; ++s) {
      const auto type = l.classes[k].types[s];
      const auto u = stage_memory(type, s, p, out.stages[s].first_layer, split[s], l.tensor[s], b, recompute,
                                  std::min(p - s, most[k]), l.data());
      auto it = std::find_if(out.memory.begin(), out.memory.end(),
                             [&](const memory_use& x) { return x.stage == s && x.type == type; });
      if (it == out.memory.end())
        out.memory.push_back(u);
      else if (u.total() > it->total())
        *it = u;
    }
  }
  std::sort(out.memory.begin(), out.memory.end(),
            [](const memory_use& a, const memory_use& b2) { return std::tie(a.stage, a.type) < std::tie(b2.stage, b2.type); });
  out.idle_devices = problem_->hardware.device_count() - l.used_devices;
  return out;
}

}  // namespace rekindle::planner::detail
