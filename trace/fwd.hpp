#pragma once

// Forward declarations of trace/.
namespace rekindle::trace {
class cluster_shape;
enum class fault_kind : unsigned char;
struct fault_target;
struct fault_event;
struct trace_header;
struct fault_trace;
struct parse_result;
struct model;
struct sim_result;
}  // namespace rekindle::trace
