#include "common/collective_position.hpp"

namespace rekindle {

std::string_view to_string(collective_kind k) noexcept {
  switch (k) {
    case collective_kind::none: return "none";
    case collective_kind::allreduce: return "allreduce";
    case collective_kind::reduce_scatter: return "reduce_scatter";
    case collective_kind::allgather: return "allgather";
    case collective_kind::broadcast: return "broadcast";
    case collective_kind::barrier: return "barrier";
    case collective_kind::send: return "send";
    case collective_kind::recv: return "recv";
  }
  return "unknown";
}

std::string_view to_string(collective_phase p) noexcept {
  switch (p) {
    case collective_phase::idle: return "idle";
    case collective_phase::inside: return "inside";
    case collective_phase::done: return "done";
    case collective_phase::failed: return "failed";
  }
  return "unknown";
}

}  // namespace rekindle
