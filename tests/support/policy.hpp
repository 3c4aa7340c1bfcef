#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

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

/// One copy change for the ranks of every node, as the simulator reports it (a set every node
/// takes): the copy in the rank's own slot, or a replica on `replica_holder_of_node[its node]` (a
/// node id past the nodes: none). Owns what its copy_changes view names.
class change_on_every_node {
 public:
  change_on_every_node(policy::copy_change c, std::size_t nodes, std::span<const node_id> replica_holder_of_node = {})
      : sets_{{c}}, set_of_node_(nodes, 0), holders_(replica_holder_of_node.begin(), replica_holder_of_node.end()) {}
  operator policy::copy_changes() const noexcept { return {sets_, set_of_node_, holders_}; }

 private:
  std::vector<std::vector<policy::copy_change>> sets_;
  std::vector<std::uint32_t> set_of_node_;
  std::vector<node_id> holders_;
};

/// supervisor_policy::on_copies_changed_all with one change (`held`, or dropped) of step `s`
/// written in epoch `e` on every node of the placement. True when it commits a newer step.
inline bool copy_on_every_node(policy::supervisor_policy& p, bool held, epoch_t e, step_t s, copy_kind where,
                               std::span<const node_id> replica_holder_of_node = {}) {
  std::size_t nodes = 0;
  for (const auto& slot : p.placement())
    nodes = std::max<std::size_t>(nodes, slot.node.value() + 1);
  return p.on_copies_changed_all(change_on_every_node{{e, s, where, held}, nodes, replica_holder_of_node});
}

}  // namespace rekindle::testing
