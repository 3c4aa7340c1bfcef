#include "planner/plan_file.hpp"

#include "config/plan_file.hpp"

namespace rekindle::planner {

expected<std::vector<plan>> parse_plan_file(std::string_view text, const std::string& source, const problem& p) {
  config::plan_bounds bounds;
  bounds.layers = p.workload.layers;
  bounds.global_batch = p.workload.global_batch;
  bounds.nodes.reserve(p.hardware.nodes.size());
  for (const auto& n : p.hardware.nodes)
    bounds.nodes.push_back({n.name, n.devices});
  RK_ASSIGN_OR_RETURN(auto read, config::read_plan_file(text, source, bounds));
  std::vector<plan> plans;
  plans.reserve(read.size());
  for (const auto& in : read) {
    plan pl;
    pl.micro_batch_size = in.micro_batch_size;
    pl.recompute = in.recompute;
    for (const auto& s : in.stages)
      pl.stages.push_back({s.first_layer, s.layers, s.tensor});
    for (const auto& r : in.replicas) {
      replica out;
      out.micro_batches = r.micro_batches;
      for (const auto& s : r.stages)
        out.stages.push_back({s.node, s.devices});
      pl.replicas.push_back(std::move(out));
    }
    plans.push_back(std::move(pl));
  }
  return plans;
}

}  // namespace rekindle::planner
