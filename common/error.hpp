#pragma once

#include <cstdint>
#include <string_view>

namespace rekindle {

/// The project's error codes. Every fallible function reports one of these inside a `status`,
/// together with a message that names the place (file:line:column, field, byte offset, peer).
enum class errc : std::uint8_t {
  /// The caller passed a value the callee cannot accept.
  invalid_argument = 1,
  /// A configuration file is malformed or fails validation.
  invalid_config,
  /// Text could not be parsed (a shell command, a trace line, a duration).
  parse_error,
  /// A value lies outside its allowed range.
  out_of_range,
  /// The named thing (file, key, rank, node, checkpoint) does not exist.
  not_found,
  /// The thing to create exists already.
  already_exists,
  /// An operating-system or device I/O call failed; retrying may help.
  io_error,
  /// Stored or received bytes fail their checksum or structure check; the data is lost.
  data_loss,
  /// A deadline passed before the operation completed.
  timeout,
  /// The operation was aborted on purpose (communicator abort, shutdown).
  aborted,
  /// A peer process or node failed or closed its connection.
  peer_failed,
  /// A peer could not prove it holds the cluster token.
  unauthenticated,
  /// The caller's credentials do not allow the operation (read-only token).
  permission_denied,
  /// A message or request carries an epoch older than the current one.
  stale_epoch,
  /// The service is not reachable or not ready yet; retrying later may help.
  unavailable,
  /// Out of memory, disk space or another bounded resource.
  resource_exhausted,
  /// The operation is not valid in the current state.
  failed_precondition,
  /// The feature or backend is not available in this build or on this machine.
  unsupported,
  /// A CUDA runtime or cuBLAS call failed.
  cuda_error,
  /// An NCCL call failed.
  nccl_error,
  /// An invariant of the program itself was broken.
  internal,
};

/// Returns the short lower-case name of `code`, e.g. "invalid_config".
std::string_view to_string(errc code) noexcept;

}  // namespace rekindle
