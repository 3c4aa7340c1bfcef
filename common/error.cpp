#include "common/error.hpp"

namespace rekindle {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument: return "invalid_argument";
    case errc::invalid_config: return "invalid_config";
    case errc::parse_error: return "parse_error";
    case errc::out_of_range: return "out_of_range";
    case errc::not_found: return "not_found";
    case errc::already_exists: return "already_exists";
    case errc::io_error: return "io_error";
    case errc::data_loss: return "data_loss";
    case errc::timeout: return "timeout";
    case errc::aborted: return "aborted";
    case errc::peer_failed: return "peer_failed";
    case errc::unauthenticated: return "unauthenticated";
    case errc::permission_denied: return "permission_denied";
    case errc::stale_epoch: return "stale_epoch";
    case errc::unavailable: return "unavailable";
    case errc::resource_exhausted: return "resource_exhausted";
    case errc::failed_precondition: return "failed_precondition";
    case errc::unsupported: return "unsupported";
    case errc::cuda_error: return "cuda_error";
    case errc::nccl_error: return "nccl_error";
    case errc::internal: return "internal";
  }
  return "unknown_error";
}

}  // namespace rekindle
