// libFuzzer target: plan files (`rekindle plan --evaluate`), read against a fixed cluster and model
// and, when they read, evaluated.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "planner/cost.hpp"
#include "planner/plan_file.hpp"

namespace {

rekindle::planner::problem make() {
  using namespace rekindle::planner;
  problem p;
  p.hardware.name = "fuzz";
  for (int t = 0; t < 2; ++t) {
    device_type d;
    d.name = t == 0 ? "a100" : "h100";
    d.flops = t == 0 ? 312e12 : 989e12;
    d.efficiency = 0.5;
    d.memory = 80e9;
    d.reserved_memory = 1e9;
    d.memory_bandwidth = 2e12;
    d.link_bandwidth = 300e9;
    d.link_latency = 5e-6;
    p.hardware.types.push_back(d);
  }
  p.hardware.net = network{25e9, 10e-6};
  for (std::uint32_t i = 0; i < 2; ++i) {
    node n;
    n.name = (i == 0 ? "a" : "h") + std::to_string(i);
    n.type = i;
    n.devices = {0, 1, 2, 3};
    p.hardware.nodes.push_back(n);
  }
  auto& m = p.workload;
  m.name = "m";
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 8;
  m.ffn_hidden = 4096;
  m.seq_len = 512;
  m.vocab = 32000;
  m.global_batch = 16;
  m.micro_batch_sizes = {1, 2, 4};
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto p = make();
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  auto plans = rekindle::planner::parse_plan_file(text, "plan.json", p);
  if (plans)
    for (const auto& pl : *plans)
      (void)rekindle::planner::evaluate(p, pl);
  return 0;
}
