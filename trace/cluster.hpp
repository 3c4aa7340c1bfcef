#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/expected.hpp"
#include "config/fwd.hpp"

namespace rekindle::trace {

/// The nodes of a cluster as traces and the simulator see them: names, ranks, spares.
///
/// Built from a configuration file (`config::spec`) or from the compact form `N` nodes of `K`
/// ranks (nodes "n0".."n<N-1>", spares "spare0".."spare<S-1>"), so a 16,384-accelerator cluster
/// needs no 2,048-table file. Thread-safety: a value; const methods may be called concurrently.
class cluster_shape {
 public:
  struct node {
    std::string name;
    /// Ranks it runs in the initial placement; for a spare, the ranks it can take over.
    std::uint32_t ranks = 0;
    bool spare = false;
    /// Its failure domain (rack, switch, power feed); "" is a domain of its own.
    std::string domain;
  };

  cluster_shape() = default;
  /// The nodes of a validated configuration, in its order.
  static cluster_shape from_spec(const config::spec& s);
  /// `nodes` nodes of `ranks_per_node` ranks each, then `spares` spare nodes of the same width;
  /// with `rack_size` > 0, nodes n0..n<rack_size-1> are in failure domain "rack0", the next
  /// `rack_size` in "rack1", and so on (spares too, continuing the count).
  static expected<cluster_shape> compact(std::uint32_t nodes, std::uint32_t ranks_per_node, std::uint32_t spares = 0,
                                         std::uint32_t rack_size = 0);

  /// Appends a node. REQUIRES: no node has that name yet.
  void add_node(node n);
  /// Appends `count` spare nodes as wide as the widest node, named "spare<i>" after the last one
  /// (in the racks of the compact form, continuing its count, when it has them).
  void add_spares(std::uint32_t count);
  /// Failure domains: how many distinct ones the nodes name, and the nodes per rack of the
  /// compact form (0 when it has none).
  [[nodiscard]] std::uint32_t domains() const;
  [[nodiscard]] std::uint32_t rack_size() const noexcept { return rack_size_; }

  [[nodiscard]] const std::vector<node>& nodes() const noexcept { return nodes_; }
  /// Index of the node named `name`.
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view name) const;
  /// Ranks of the initial world: those of every node that is not a spare.
  [[nodiscard]] std::uint32_t world() const noexcept;
  [[nodiscard]] std::uint32_t spares() const noexcept;
  /// Ranks of the widest node (1 when there are none).
  [[nodiscard]] std::uint32_t widest() const noexcept;
  /// Every node name, for "did you mean".
  [[nodiscard]] std::vector<std::string> names() const;
  /// "2,048 nodes × 8 ranks (16,384 ranks, 2 spares)" and the like.
  [[nodiscard]] std::string describe() const;

 private:
  std::vector<node> nodes_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
  std::uint32_t rack_size_ = 0;
};

/// Reads the cluster of a rekindle configuration file; the error lists every problem in it
/// with file:line:column (errc::invalid_config).
expected<cluster_shape> load_cluster(const std::filesystem::path& path);

/// 16384 -> "16,384".
std::string with_commas(std::uint64_t n);

}  // namespace rekindle::trace
