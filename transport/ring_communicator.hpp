#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "transport/communicator.hpp"

namespace rekindle::transport {

struct ring_options {
  /// Deadline of every collective call, and of connect(). Default: 10s.
  std::chrono::nanoseconds timeout = std::chrono::seconds{10};
  /// Bytes per pipelined chunk. Default: 512KiB, as transport.chunk_size.
  std::size_t chunk_size = std::size_t{512} << 10;
  /// UCX_NET_DEVICES and UCX_TLS; empty keeps UCX's choice.
  std::string net_devices;
  std::string tls;
  /// Distinguishes this communicator's messages from earlier ones' on the same resources (the
  /// epoch, say). Default: 0.
  std::uint32_t generation = 0;
};

/// The long-lived part of a rank's ring: the UCX context and worker, and a spare mailbox ready
/// for the next communicator. A worker process keeps one across epochs, so building the
/// communicator of a new epoch costs no UCX setup.
///
/// Thread-safety: used by one thread at a time, like the communicators built on it.
class ring_resources {
 public:
  static expected<std::shared_ptr<ring_resources>> create(const ring_options& options);
  ~ring_resources();
  /// Allocates a spare mailbox when there is none; call when idle (after connect()).
  status prepare();

  /// Host memory of `bytes` bytes that the other ranks of this host map (at most
  /// `max_shared_buffers` per resources; they live as long as the resources). A collective whose
  /// buffers lie in such memory on every rank, on a ring whose ranks are all on one host, reads
  /// the peers' buffers in place instead of passing chunks around the ring: about half the
  /// memory traffic, with the same result to the bit. Communicators created after the call see
  /// the buffer; an earlier one treats it as private memory. An allreduce writes its result into
  /// the other ranks' buffers too: after such a call failed on this rank (a deadline, an abort),
  /// a peer still in it may write into this rank's buffer until its own call fails, which it
  /// does before it can join a new communicator.
  expected<std::span<std::byte>> allocate_shared(std::size_t bytes);
  static constexpr std::size_t max_shared_buffers = 8;

  class impl;
  /// For the communicators built on these resources.
  [[nodiscard]] impl& internals() noexcept { return *impl_; }

 private:
  explicit ring_resources(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The CPU communicator: a pipelined, chunked ring over UCX tag messages, in host memory.
///
/// Each rank sends only to its right neighbour and receives only from its left one. allreduce is
/// a reduce-scatter followed by an allgather around the ring, each split into chunks so that a
/// chunk is forwarded as soon as it is reduced; the reduction order of every element depends only
/// on the world size, so reruns are bitwise identical. A neighbour on the same host takes chunks
/// through a mailbox it maps; neighbours on other hosts exchange UCX tag messages. Every endpoint
/// is in peer-failure mode, and every call is bounded by `timeout`.
///
/// Bootstrapping:
///   1. create() opens a UCX worker; address() is what this rank publishes at rendezvous.
///   2. connect() takes every rank's address, opens the endpoint to the right neighbour and runs a
///      barrier, so a rank that is missing or dead is found before training starts.
///
/// Thread-safety: as `communicator`: one calling thread; abort() from any thread.
class ring_communicator final : public communicator {
 public:
  /// Largest world a ring supports (tags carry the step number).
  static constexpr int max_size = 2048;

  /// A communicator with resources of its own.
  static expected<std::unique_ptr<ring_communicator>> create(int rank, int size, const ring_options& options);
  /// A communicator on shared `resources` (their UCX worker and spare mailbox).
  static expected<std::unique_ptr<ring_communicator>> create(std::shared_ptr<ring_resources> resources, int rank, int size,
                                                             const ring_options& options);
  ~ring_communicator() override;

  /// This rank's rendezvous address: host identity and UCX worker address.
  [[nodiscard]] const std::vector<std::byte>& address() const noexcept;
  /// Step 2 of bootstrapping. `addresses[r]` is rank r's address().
  status connect(const std::vector<std::vector<std::byte>>& addresses);

  [[nodiscard]] int rank() const noexcept override;
  [[nodiscard]] int size() const noexcept override;
  status allreduce(void* data, std::size_t count, dtype type, reduce_op op) override;
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) override;
  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) override;
  status broadcast(void* data, std::size_t count, dtype type, int root) override;
  status barrier() override;
  /// Point to point reaches any rank: UCX tag messages, over shared memory or the network as UCX
  /// chooses (not the ring's links). A send copies its bytes and returns at once.
  [[nodiscard]] bool point_to_point() const noexcept override { return true; }
  status send(const void* data, std::size_t bytes, int peer) override;
  status recv(void* data, std::size_t bytes, int peer) override;
  void abort() noexcept override;
  [[nodiscard]] bool aborted() const noexcept override;

  /// True when the right neighbour is on this host (shared-memory path).
  [[nodiscard]] bool neighbour_is_local() const noexcept;
  /// True when every rank is on this host and maps every other's shared buffers
  /// (ring_resources::allocate_shared): collectives on such buffers read them in place.
  [[nodiscard]] bool reads_shared_buffers() const noexcept;

  class impl;

 private:
  explicit ring_communicator(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace rekindle::transport
