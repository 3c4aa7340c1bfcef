#pragma once

// Where a rank is in its sequence of collectives, readable from any thread while the training
// thread is blocked inside one: the supervisor's hang verdict is built from every rank's position.

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/collective_position.hpp"
#include "transport/communicator.hpp"

namespace rekindle::transport {

/// The position of one rank, written by its training thread, read by any other.
class collective_tracker {
 public:
  /// A new epoch's numbering: back to idle.
  void reset() noexcept;
  void enter(collective_kind k) noexcept;
  void leave(bool ok) noexcept;
  /// A point-to-point call with `peer` (kind send or recv): not numbered, kept apart.
  void enter_p2p(collective_kind k, int peer) noexcept;
  void leave_p2p(bool ok) noexcept;
  [[nodiscard]] collective_position now() const noexcept;

 private:
  // seq (48 bits) | kind (8) | phase (8), one word so a reader never sees a torn position.
  std::atomic<std::uint64_t> word_{0};
  std::atomic<std::int64_t> since_ns_{0};
  // peer + 1 (32 bits) | kind (8) | phase (8), likewise.
  std::atomic<std::uint64_t> p2p_word_{0};
  std::atomic<std::int64_t> p2p_since_ns_{0};
};

/// A communicator that records each call in a tracker before handing it to `inner`.
class tracked_communicator final : public communicator {
 public:
  tracked_communicator(communicator& inner, collective_tracker& tracker) noexcept : inner_(inner), tracker_(tracker) {}

  [[nodiscard]] int rank() const noexcept override { return inner_.rank(); }
  [[nodiscard]] int size() const noexcept override { return inner_.size(); }
  [[nodiscard]] bool device_memory() const noexcept override { return inner_.device_memory(); }
  status allreduce(void* data, std::size_t count, dtype type, reduce_op op) override;
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) override;
  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) override;
  status broadcast(void* data, std::size_t count, dtype type, int root) override;
  status barrier() override;
  /// Point-to-point calls are tracked apart from the collectives, which alone are numbered alike
  /// on every rank.
  [[nodiscard]] bool point_to_point() const noexcept override { return inner_.point_to_point(); }
  status send(const void* data, std::size_t bytes, int peer) override;
  status recv(void* data, std::size_t bytes, int peer) override;
  void abort() noexcept override { inner_.abort(); }
  [[nodiscard]] bool aborted() const noexcept override { return inner_.aborted(); }

 private:
  template <class Call>
  status tracked(collective_kind k, Call&& call);

  communicator& inner_;
  collective_tracker& tracker_;
};

}  // namespace rekindle::transport
