#pragma once

#include <chrono>
#include <string>

#include "policy/supervisor_policy.hpp"

namespace rekindle::testing {

/// A policy configuration for unit tests: `nodes` worker nodes n0, n1, ... of 2 ranks each (and a
/// spare s0), 100 steps, a snapshot every 5, timeouts of seconds (hang 5 s, node 1 s, rendezvous
/// 10 s) that a fake clock crosses on purpose.
inline policy::policy_config small_cluster(std::uint32_t nodes, bool with_spare) {
  using namespace std::chrono_literals;
  policy::policy_config c;
  for (std::uint32_t n = 0; n < nodes; ++n)
    c.nodes.push_back({"n" + std::to_string(n), 2, false});
  if (with_spare)
    c.nodes.push_back({"s0", 0, true});
  c.total_steps = 100;
  c.snapshot_every = 5;
  c.hang_timeout = 5s;
  c.node_timeout = 1s;
  c.rendezvous_timeout = 10s;
  return c;
}

}  // namespace rekindle::testing
