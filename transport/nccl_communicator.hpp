#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/expected.hpp"
#include "transport/communicator.hpp"

namespace rekindle::transport {

/// True when this build has the NCCL backend (REKINDLE_WITH_CUDA).
bool nccl_built() noexcept;

/// The number of usable CUDA devices, or why there are none ("no CUDA device: ..."). Any error
/// of cudaGetDeviceCount counts as none: without a driver it returns error 35, not zero.
expected<int> cuda_device_count();

struct nccl_options {
  /// Deadline of every collective call, and of creation. Default: 10s.
  std::chrono::nanoseconds timeout = std::chrono::seconds{10};
};

/// The GPU communicator: NCCL, with buffers in the memory of the rank's device.
///
/// Bootstrapping:
///   1. One rank calls make_nccl_unique_id(); the bytes travel to every rank through whoever
///      does rendezvous (the supervisor, or a file in tests).
///   2. Every rank calls create() with the same id. Initialisation is non-blocking: create()
///      polls it against the deadline and aborts it when a rank never joins.
/// Each collective is enqueued on the communicator's stream and polled to completion against the
/// deadline and the abort flag; on either, the NCCL communicator is aborted (ncclCommAbort), every
/// later call fails at once, and recovery builds a new one. NCCL errors come back as
/// errc::nccl_error with NCCL's message; CUDA errors as errc::cuda_error, with file:line.
///
/// Thread-safety: as `communicator`. The calling thread's current device is set to the
/// communicator's device for the call.
class nccl_communicator final : public communicator {
 public:
  static expected<std::vector<std::byte>> make_unique_id();
  static expected<std::unique_ptr<nccl_communicator>> create(int rank, int size, std::span<const std::byte> unique_id,
                                                             int device, const nccl_options& options);
  ~nccl_communicator() override;

  [[nodiscard]] int rank() const noexcept override;
  [[nodiscard]] int size() const noexcept override;
  [[nodiscard]] bool device_memory() const noexcept override { return true; }
  status allreduce(void* data, std::size_t count, dtype type, reduce_op op) override;
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) override;
  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) override;
  status broadcast(void* data, std::size_t count, dtype type, int root) override;
  status barrier() override;
  void abort() noexcept override;
  [[nodiscard]] bool aborted() const noexcept override;

  class impl;

 private:
  explicit nccl_communicator(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace rekindle::transport
