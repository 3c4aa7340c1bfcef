#include "planner/cost.hpp"

#include <algorithm>
#include <set>

#include "common/text.hpp"
#include "planner/layout.hpp"

namespace rekindle::planner {

double layer_parameters(const model& m) noexcept {
  const double h = m.hidden;
  const double f = m.ffn_hidden;
  return 4 * h * h + 2 * h * f + 9 * h + f;
}

double embedding_parameters(const model& m) noexcept {
  return (static_cast<double>(m.vocab) + m.seq_len) * m.hidden;
}

double stage_parameters(const model& m, std::uint32_t layers, bool first, bool last) noexcept {
  double params = layers * layer_parameters(m);
  if (first)
    params += embedding_parameters(m);
  if (last) {
    params += 2.0 * m.hidden;
    if (!m.tied_embeddings || !first)
      params += static_cast<double>(m.vocab) * m.hidden;
  }
  return params;
}

double model_parameters(const model& m) noexcept { return stage_parameters(m, m.layers, true, true); }

double layer_forward_flops(const model& m, std::uint32_t b) noexcept {
  const double h = m.hidden;
  const double f = m.ffn_hidden;
  const double s = m.seq_len;
  return 2.0 * b * s * (4 * h * h + 2 * h * f) + 4.0 * b * s * s * h;
}

double head_forward_flops(const model& m, std::uint32_t b) noexcept {
  return 2.0 * b * m.seq_len * static_cast<double>(m.hidden) * m.vocab;
}

double layer_activation_bytes(const model& m, std::uint32_t b, std::uint32_t t) noexcept {
  const double s = m.seq_len;
  const double h = m.hidden;
  const double a = m.heads;
  return s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t));
}

double ring_allreduce_time(double bytes, std::uint32_t n, double bandwidth, double latency) noexcept {
  if (n <= 1)
    return 0;
  const double steps = 2.0 * (n - 1);
  return steps / n * bytes / bandwidth + steps * latency;
}

expected<plan> evaluate(const problem& p, plan shape) {
  RK_RETURN_IF_ERROR(validate(p));
  const auto& m = p.workload;
  const auto& hw = p.hardware;
  const auto bad = [](std::string what) { return status{errc::invalid_argument, std::move(what)}; };
  if (shape.stages.empty())
    return bad("a plan needs at least one stage");
  if (shape.replicas.empty())
    return bad("a plan needs at least one replica");
  if (shape.micro_batch_size == 0 || m.global_batch % shape.micro_batch_size != 0)
    return bad("micro-batch size " + std::to_string(shape.micro_batch_size) + " does not divide the global batch " +
               std::to_string(m.global_batch));
  detail::layout l;
  std::vector<std::uint32_t> split;
  std::uint32_t next = 0;
  for (std::size_t s = 0; s < shape.stages.size(); ++s) {
    const auto& st = shape.stages[s];
    if (st.first_layer != next || st.layers == 0)
      return bad("stage " + std::to_string(s) + " must start at layer " + std::to_string(next) +
                 " and hold at least one layer");
    if (st.tensor == 0 || m.heads % st.tensor != 0)
      return bad("stage " + std::to_string(s) + ": tensor degree " + std::to_string(st.tensor) +
                 " does not divide the " + std::to_string(m.heads) + " heads");
    next += st.layers;
    split.push_back(st.layers);
    l.tensor.push_back(st.tensor);
  }
  if (next != m.layers)
    return bad("the stages cover " + std::to_string(next) + " layers, the model has " + std::to_string(m.layers));
  std::set<std::pair<std::uint32_t, std::uint32_t>> used;
  std::vector<std::uint32_t> counts;
  bool any_count = false;
  for (std::size_t r = 0; r < shape.replicas.size(); ++r) {
    const auto& rep = shape.replicas[r];
    if (rep.stages.size() != shape.stages.size())
      return bad("replica " + std::to_string(r) + " has " + std::to_string(rep.stages.size()) + " placements for " +
                 std::to_string(shape.stages.size()) + " stages");
    for (std::size_t s = 0; s < rep.stages.size(); ++s) {
      const auto& pl = rep.stages[s];
      const auto where = "replica " + std::to_string(r) + " stage " + std::to_string(s);
      if (pl.node >= hw.nodes.size())
        return bad(where + ": node " + std::to_string(pl.node) + " does not exist");
      if (pl.devices.size() != shape.stages[s].tensor)
        return bad(where + ": " + std::to_string(pl.devices.size()) + " devices for tensor degree " +
                   std::to_string(shape.stages[s].tensor));
      const auto& node = hw.nodes[pl.node];
      for (auto id : pl.devices) {
        if (std::find(node.devices.begin(), node.devices.end(), id) == node.devices.end())
          return bad(where + ": device " + std::to_string(id) + " of node " + node.name + " does not exist or is lost");
        if (!used.emplace(pl.node, id).second)
          return bad(where + ": device " + std::to_string(id) + " of node " + node.name + " is used twice");
      }
    }
    l.replicas.push_back(rep.stages);
    counts.push_back(rep.micro_batches);
    any_count = any_count || rep.micro_batches > 0;
  }
  detail::finish_layout(hw, l);
  detail::cost_model cm{p};
  if (!any_count)
    counts.clear();
  const auto e = cm.evaluate(l, split, shape.micro_batch_size, shape.recompute, counts);
  const std::uint32_t total = m.global_batch / shape.micro_batch_size;
  if (!e.valid)
    return bad(any_count ? "every replica needs at least one micro-batch and they must add up to " +
                               std::to_string(total)
                         : std::to_string(l.data()) + " replicas need at least as many micro-batches, the plan has " +
                               std::to_string(total));
  auto out = cm.make_plan(l, split, shape.micro_batch_size, shape.recompute, e, counts);
  if (!e.fits) {
    const auto it = std::find_if(out.memory.begin(), out.memory.end(), [&](const memory_use& u) {
      return u.stage == e.worst_stage && u.type == e.worst_type;
    });
    const auto& u = *it;
    return status{errc::resource_exhausted,
                  "does not fit: a " + hw.types[u.type].name + " device of stage " + std::to_string(u.stage) +
                      " needs " + format_bytes(u.total()) + " (weights " + format_bytes(u.weights) + ", gradients " +
                      format_bytes(u.gradients) + ", optimizer " + format_bytes(u.optimizer) + ", activations " +
                      format_bytes(u.activations) + ") of " + format_bytes(u.capacity) + " usable"};
  }
  return out;
}

}  // namespace rekindle::planner
