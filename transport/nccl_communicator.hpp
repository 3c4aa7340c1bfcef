#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/expected.hpp"
#include "transport/communicator.hpp"

namespace rekindle::transport {

/// The number of usable CUDA devices, or why there are none ("no CUDA device: ..."): the driver
/// is asked first, so a machine without one pays nothing.
expected<int> cuda_device_count();

struct nccl_options {
  /// Deadline of every collective call, and of creation. Default: 10s.
  std::chrono::nanoseconds timeout = std::chrono::seconds{10};
};

/// The GPU communicator: NCCL, with buffers in the memory of the rank's device. It lives in the
/// GPU plugin (common/gpu_plugin.hpp); these functions load it on first use and fail with
/// errc::unsupported where there is no GPU or no plugin.
///
/// Bootstrapping:
///   1. One rank calls make_nccl_unique_id(); the bytes travel to every rank through whoever does
///      rendezvous (the supervisor, or a file in tests).
///   2. Every rank calls make_nccl_communicator() with the same id. Initialisation is
///      non-blocking: it is polled against the deadline and aborted when a rank never joins.
/// Each collective is enqueued on the communicator's stream and polled to completion against the
/// deadline and the abort flag; on either, the NCCL communicator is aborted (ncclCommAbort), every
/// later call fails at once, and recovery builds a new one. NCCL errors come back as
/// errc::nccl_error with NCCL's message; CUDA errors as errc::cuda_error, with file:line. NCCL
/// runs one rank per GPU. The calling thread's current device is set for each call.
expected<std::vector<std::byte>> make_nccl_unique_id();
expected<std::unique_ptr<communicator>> make_nccl_communicator(int rank, int size, std::span<const std::byte> unique_id,
                                                               int device, const nccl_options& options);

}  // namespace rekindle::transport
