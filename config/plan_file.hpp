#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"

/// Plan files: what `rekindle plan --json` prints, or one plan written by hand (docs/PLANNER.md,
/// "Scoring a plan of your own"). Read here once, with node names resolved against the nodes the
/// caller knows: the planner scores them (`rekindle plan --evaluate`), a job runs one (`job.plan`).

namespace rekindle::config {

/// Limits of a plan file: what no cluster the planner accepts can need.
inline constexpr std::size_t max_plan_file_plans = 100;
inline constexpr std::size_t max_plan_file_depth = 16;

/// A node a plan may place stages on, with its device identifiers.
struct plan_file_node {
  std::string name;
  std::vector<std::uint32_t> devices;
};

/// What a plan file may hold: the model's layers, the global batch, and the nodes.
struct plan_bounds {
  std::uint32_t layers = 0;
  std::uint32_t global_batch = 0;
  std::vector<plan_file_node> nodes;
};

/// One plan as its file gives it, layers and devices filled in.
struct plan_in_file {
  struct stage {
    std::uint32_t first_layer = 0;
    std::uint32_t layers = 0;
    std::uint32_t tensor = 1;
  };
  struct placement {
    /// Index into plan_bounds::nodes.
    std::uint32_t node = 0;
    /// `tensor` distinct device identifiers of that node.
    std::vector<std::uint32_t> devices;
  };
  struct replica {
    std::vector<placement> stages;
    /// 0: not given.
    std::uint32_t micro_batches = 0;
  };
  std::vector<stage> stages;
  std::vector<replica> replicas;
  std::uint32_t micro_batch_size = 1;
  bool recompute = false;
  /// Where the plan is in its file, for errors found later: "plans[1]", or "" for a lone plan.
  std::string field;
};

/// Reads the plans of `text` (from `source`, named in errors). The text is either a document with a
/// "plans" array (every plan in it is read), or one plan object. A plan object has:
///   "stages":   [{"layers": N, "tensor": T, "first_layer": F}, ...]   first_layer optional
///   "replicas": [{"stages": [{"node": "a0", "devices": [0, 1]}, ...], "micro_batches": M}, ...]
///               devices optional (the node's lowest devices no earlier stage took), micro_batches
///               optional (0 or absent in every replica: shared out for the fastest step)
///   "micro_batch_size": B (default 1), "recompute": false (default)
/// Keys the planner writes about its prediction ("step_time", "breakdown", "memory", ...) are
/// accepted and ignored. Any other key is an error, and so is a device two stages share.
///
/// Errors (invalid_argument) name the source and the field ("plan.json: plans[0].replicas[2].
/// stages[1].node: unknown node 'h9' (did you mean 'h0'?)").
[[nodiscard]] expected<std::vector<plan_in_file>> read_plan_file(std::string_view text, const std::string& source,
                                                                 const plan_bounds& bounds);

/// The error of a plan read from `source` at `field` (a plan's `field` joined with a key inside it):
/// "source: field: message", as read_plan_file words its own.
[[nodiscard]] status plan_file_error(const std::string& source, const std::string& field, const std::string& message);

/// `plan` (a plan_in_file::field) and `key` joined into a field: "plans[0].stages", or "stages".
[[nodiscard]] std::string plan_field(const std::string& plan, std::string_view key);

}  // namespace rekindle::config
