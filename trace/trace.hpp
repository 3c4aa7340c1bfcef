#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "config/load.hpp"
#include "trace/fwd.hpp"

namespace rekindle::trace {

/// The trace format version this build reads and writes.
inline constexpr int format_version = 1;
/// The longest a trace covers, in seconds (about 31 years): every time in it is checked against
/// this, so no arithmetic on times can overflow and no replay can run forever.
inline constexpr double max_trace_seconds = 1e9;
/// How deeply a line's JSON (its x- extensions) may nest.
inline constexpr std::size_t max_json_depth = 64;

/// What goes wrong. docs/TRACES.md says what each does to a job and which targets and arguments
/// it takes.
enum class fault_kind : unsigned char {
  /// A rank's process (or every process of a node) ends by a signal. Args: signal (default 9).
  kill,
  /// A rank's process exits on its own with an error. Args: exit_code (default 1).
  crash,
  /// A rank stops making progress without exiting. Args: duration (default: until killed).
  hang,
  /// A rank or a node computes `factor` times slower. Args: factor, duration.
  slow,
  /// A node stops: its processes and its memory are gone. Args: repair (default: never back).
  node_down,
  /// A node, or the link between two nodes, is cut off the network. Args: duration.
  partition,
  /// A node's disk is full: checkpoints it should write fail. Args: duration.
  disk_full,
  /// The newest persisted checkpoint of a rank or node fails its checksum when read.
  corrupt_checkpoint,
  /// A collective call fails on a rank with no failed peer to blame (a NIC or switch error).
  collective_error,
};

/// The name used in traces, e.g. "node_down".
std::string_view to_string(fault_kind k) noexcept;
/// The kind named `name`, if any.
std::optional<fault_kind> fault_kind_from(std::string_view name) noexcept;
/// Every kind's name, in declaration order.
std::span<const std::string_view> fault_kind_names() noexcept;

/// What a fault hits: a rank, a node, or the link between two nodes.
struct fault_target {
  enum class type : unsigned char { rank, node, link };
  type kind = type::rank;
  /// For `rank`: the rank in the world at the time of the fault.
  std::uint32_t rank = 0;
  /// For `node`: its name; for `link`: one end.
  std::string node;
  /// For `link`: the other end.
  std::string peer;

  static fault_target of_rank(std::uint32_t r) { return {type::rank, r, {}, {}}; }
  static fault_target of_node(std::string n) { return {type::node, 0, std::move(n), {}}; }
  static fault_target of_link(std::string a, std::string b) { return {type::link, 0, std::move(a), std::move(b)}; }
  /// "rank 3", "node n7", "link n1-n2".
  [[nodiscard]] std::string to_string() const;
  bool operator==(const fault_target&) const = default;
};

/// One line of a trace after the header.
struct fault_event {
  /// When, in seconds from the start of the trace. Exactly one of `at` and `at_step` is set.
  std::optional<double> at;
  /// When, as the first time the job completes this training step.
  std::optional<std::uint64_t> at_step;
  fault_kind kind = fault_kind::kill;
  fault_target target;
  /// kill: the signal. Default: 9.
  int signal = 9;
  /// crash: the exit code. Default: 1.
  int exit_code = 1;
  /// slow: the step-time multiplier (> 1). Default: 1 (only for kinds other than slow).
  double factor = 1.0;
  /// hang, slow, partition, disk_full: seconds it lasts. Default: until the end of the trace.
  std::optional<double> duration;
  /// node_down: seconds until the node is back. Default: it stays down.
  std::optional<double> repair;
  /// Fields whose key starts with "x-" (extensions), as compact JSON text, in file order.
  std::vector<std::pair<std::string, std::string>> extensions;
  /// The line it was read from; 0 when made in memory. Not part of equality.
  std::uint32_t line = 0;

  /// The value of extension `key` as JSON text, if present.
  [[nodiscard]] const std::string* extension(std::string_view key) const;
  bool operator==(const fault_event& o) const;
};

/// The first line of a trace.
struct trace_header {
  /// Where the events came from, e.g. "infinitehbd fault_trace.json". Default: "".
  std::string source;
  /// Free text. Default: "".
  std::string description;
  /// Nodes and ranks of the cluster the events were written for (informational).
  std::optional<std::uint32_t> nodes;
  std::optional<std::uint32_t> world;
  /// Seconds the trace covers; the simulator runs this long. Default: unset.
  std::optional<double> duration;
  /// Seconds of trace per second of the original record, for converted traces (informational).
  std::optional<double> time_scale;
  /// Extension fields ("x-..."), as compact JSON text, in file order.
  std::vector<std::pair<std::string, std::string>> extensions;

  bool operator==(const trace_header&) const = default;
};

/// A whole trace: header and events in time order.
struct fault_trace {
  trace_header header;
  std::vector<fault_event> events;

  bool operator==(const fault_trace&) const = default;
};

/// One problem in a trace: file, line, column (of a JSON syntax error), field and message.
using diagnostic = config::diagnostic;

/// The outcome of reading a trace: the trace when there are no errors.
struct parse_result {
  std::optional<fault_trace> value;
  std::vector<diagnostic> errors;

  [[nodiscard]] bool ok() const noexcept { return value.has_value(); }
  /// All errors, one per line.
  [[nodiscard]] std::string error_text() const;
};

/// Reads a trace (JSON Lines, docs/TRACES.md) and checks every line before returning anything:
/// syntax, the header, kinds, fields and their types, targets and time order; with `cluster`, also
/// that every rank and node exists in it. `source_name` names the text in diagnostics. Collects
/// every error rather than stopping at the first.
parse_result parse(std::string_view text, std::string source_name, const cluster_shape* cluster = nullptr);
/// parse() of the file at `path`; an unreadable file is one error.
parse_result load_file(const std::filesystem::path& path, const cluster_shape* cluster = nullptr);

/// The targets of `t` that `cluster` lacks (ranks beyond its world, unknown node names), named by
/// line (or event index when the event was made in memory).
std::vector<diagnostic> check_targets(const fault_trace& t, const cluster_shape& cluster, const std::string& source_name);

/// The trace as JSON Lines: the header, then one event per line; parse() reads it back equal.
std::string to_jsonl(const fault_trace& t);
/// Writes to_jsonl(t) to `path` (a temporary file renamed into place, so a failure leaves no
/// half-written trace).
[[nodiscard]] status write_file(const fault_trace& t, const std::filesystem::path& path);

}  // namespace rekindle::trace
