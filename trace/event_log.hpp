#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "trace/trace.hpp"

namespace rekindle::trace {

/// One entry of a job's event log, as `rekindle events --json` prints it.
struct logged_event {
  /// Calendar time in seconds since 1970.
  double unix_s = 0;
  /// "started", "fault_injected", "rank_exited", "node_lost", "rank_hung", ...
  std::string kind;
  std::optional<std::uint32_t> rank;
  std::optional<std::string> node;
  /// The event's fields ("fault", "signal", "exit_code", "factor", "link", "duration_s", ...).
  std::map<std::string, std::string> fields;
};

/// What happened to a job as a trace (docs/TRACES.md, "Exporting a job's event log"): every fault
/// an operator or a replay injected (fault_injected), and every failure that came by itself (a
/// rank that exited, a node lost, a rank found hung or unresponsive), each once: the exit or loss
/// an injected fault caused is not counted again. Times are seconds from the first `started`
/// event; a slow drill ended by a later one of factor 1 gets that duration. `header` is copied
/// (its duration set to the last event's time when unset). Errors: no `started` event.
expected<fault_trace> trace_from_event_log(const std::vector<logged_event>& events, trace_header header);

}  // namespace rekindle::trace
