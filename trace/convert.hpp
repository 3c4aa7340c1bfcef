#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/expected.hpp"
#include "trace/trace.hpp"

namespace rekindle::trace {

// ---- InfiniteHBD -------------------------------------------------------------------------------

/// How one InfiniteHBD fault class becomes an event (docs/TRACES.md, "InfiniteHBD").
struct infinitehbd_mapping {
  /// node_down, partition (of the node), disk_full or crash (of the node's first rank).
  fault_kind kind;
  /// The category recorded as `x-category`: "gpu", "network", "software", ...
  std::string_view category;
  /// False when the class is not in the table and its level's default was used.
  bool known = true;
};

/// The mapping of a Level/Class pair; the level decides for a class the table lacks. Returns
/// nullopt for a level that is not one of the record's three.
std::optional<infinitehbd_mapping> map_infinitehbd(std::string_view level, std::string_view cls);
/// The record's levels, for messages.
std::span<const std::string_view> infinitehbd_levels() noexcept;

struct infinitehbd_options {
  /// Seconds of trace per second of the record: 1 replays in real time, 54/349 compresses the
  /// record's 349 days into 54. Default: 1.
  double time_scale = 1.0;
};

/// The outcome of a conversion: the trace when the input had no errors, and what was done.
struct convert_result {
  std::optional<fault_trace> value;
  std::vector<diagnostic> errors;
  /// Distinct servers in the record, and faults (start/end pairs) read.
  std::uint32_t servers = 0;
  std::uint32_t faults = 0;
  /// Faults whose class was not in the table (mapped by their level's default).
  std::uint32_t by_level_default = 0;
  /// Faults still open at the end of the record (node_down with no repair).
  std::uint32_t open_at_end = 0;

  [[nodiscard]] bool ok() const noexcept { return value.has_value(); }
  [[nodiscard]] std::string error_text() const;
};

/// Converts the InfiniteHBD fault record (a JSON array of fault_start / fault_end entries with
/// node_id, event_time in days and fault_type {Level, Class, Desc}) onto `cluster`: the S servers,
/// numbered in the sorted order of their ids, go to the W worker nodes in order, spread out when
/// W >= S (server i -> worker floor(i·W/S)) and folded otherwise (i -> i mod W); every start/end
/// pair becomes one event per the mapping table. Checks every entry first; errors name the line
/// of the entry and its field.
convert_result convert_infinitehbd(std::string_view json_text, std::string source_name, const cluster_shape& cluster,
                                   const infinitehbd_options& options);
/// convert_infinitehbd of the file at `path`.
convert_result convert_infinitehbd_file(const std::filesystem::path& path, const cluster_shape& cluster,
                                        const infinitehbd_options& options);

// ---- synthetic traces --------------------------------------------------------------------------

/// A category of generated faults and the event it becomes.
struct generator_category {
  std::string_view name;
  fault_kind kind;
  std::string_view what;
};
/// Every category the generator knows.
std::span<const generator_category> generator_categories() noexcept;

/// The default mix: "gpu=0.4,hbm=0.1,host=0.15,network=0.1,software=0.15,hang=0.05,collective=0.05".
inline constexpr std::string_view default_mix = "gpu=0.4,hbm=0.1,host=0.15,network=0.1,software=0.15,hang=0.05,collective=0.05";

/// Parses "gpu=0.5,software=0.2,..." into (category, weight) pairs; weights need not sum to 1.
/// Errors name the item and suggest the closest category.
expected<std::vector<std::pair<std::string, double>>> parse_mix(std::string_view text);

struct generate_options {
  /// Faults per accelerator (rank) per day. REQUIRES: > 0.
  double rate = 0;
  /// Days the trace covers. REQUIRES: > 0.
  double days = 0;
  /// Category weights (parse_mix).
  std::vector<std::pair<std::string, double>> mix;
  std::uint64_t seed = 1;
  /// Mean repair time of a node_down, seconds (exponentially distributed). Default: 1 day.
  double repair_mean = 86400;
  /// Mean length of a partition, slow-down or full disk, seconds (exponential). Default: 30 min.
  double outage_mean = 1800;
  /// Failures of a whole failure domain (a rack's switch or power feed) per domain per day: each
  /// takes every node of one domain down at once (category "domain", the domain in "x-domain"),
  /// repaired together after a draw of `repair_mean`. REQUIRES: >= 0; a cluster with domains when
  /// > 0. Default: 0.
  double domain_rate = 0;
};

/// A synthetic trace: faults arrive as a Poisson process of rate `rate` × accelerators per day
/// (the world's and the spares'); each picks a category by weight and a target uniformly among
/// the nodes (spares fail too) or the initial world's ranks; whole-domain failures arrive as a
/// second process (`domain_rate`). The same options and cluster give the same trace, byte for byte, on every
/// platform (a 64-bit Mersenne Twister and own distributions).
expected<fault_trace> generate(const cluster_shape& cluster, const generate_options& options);

}  // namespace rekindle::trace
