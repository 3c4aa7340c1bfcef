#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace rekindle::transport {

/// Element types the collectives reduce.
enum class dtype : std::uint8_t {
  f32,   ///< IEEE float32
  bf16,  ///< bfloat16 stored as uint16; reduced in float32 and rounded to nearest even per step
};

/// Bytes per element of `t`.
constexpr std::size_t size_of(dtype t) noexcept { return t == dtype::f32 ? 4 : 2; }
constexpr std::string_view to_string(dtype t) noexcept { return t == dtype::f32 ? "f32" : "bf16"; }

enum class reduce_op : std::uint8_t {
  sum,
  average,  ///< the sum scaled by 1/size once, after the reduction
  max,
};
constexpr std::string_view to_string(reduce_op op) noexcept {
  return op == reduce_op::sum ? "sum" : op == reduce_op::average ? "average" : "max";
}

/// Collective operations among the ranks of one epoch.
///
/// Buffers live where the implementation computes: host memory for the UCX ring, device memory
/// for NCCL. Every call has a deadline (the communicator's `timeout`); when a peer dies, stops, or
/// `abort()` is called, every call returns an error (`errc::timeout`, `errc::peer_failed` or
/// `errc::aborted`) instead of hanging. After any error the communicator is broken: every later
/// call fails at once, and recovery builds a new communicator for the next epoch.
///
/// Reductions use a fixed order that depends only on the world size, so a rerun with the same
/// inputs is bitwise identical.
///
/// Thread-safety: collective calls are made from one thread at a time, in the same order on every
/// rank. `abort()`, `aborted()`, `rank()` and `size()` may be called from any thread.
class communicator {
 public:
  virtual ~communicator() = default;

  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual int size() const noexcept = 0;
  /// True when buffers must be in the memory of the rank's GPU (NCCL), false for host memory.
  [[nodiscard]] virtual bool device_memory() const noexcept { return false; }

  /// Reduces `count` elements of `data` over all ranks, in place.
  virtual status allreduce(void* data, std::size_t count, dtype type, reduce_op op) = 0;

  /// Reduces `send` (size() * `recv_count` elements) over all ranks; rank r receives the reduced
  /// elements [r * recv_count, (r + 1) * recv_count) in `recv`. `send` and `recv` must not overlap.
  virtual status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type,
                                reduce_op op) = 0;

  /// Gathers `send_count` elements from every rank into `recv` (size() * send_count elements,
  /// rank r's at offset r * send_count). `send` may alias rank()'s block of `recv`.
  virtual status allgather(const void* send, void* recv, std::size_t send_count, dtype type) = 0;

  /// Copies `count` elements of `data` on rank `root` to `data` on every rank.
  virtual status broadcast(void* data, std::size_t count, dtype type, int root) = 0;

  /// Returns when every rank has entered the barrier.
  virtual status barrier() = 0;

  /// Whether send and recv work here (a pipeline's stages exchange activations with them).
  [[nodiscard]] virtual bool point_to_point() const noexcept { return false; }
  /// Point to point: sends `bytes` bytes at `data` to rank `peer`, which receives them with a recv
  /// of the same size. Messages from one rank to another arrive in the order they were sent. A
  /// send may return before the peer receives (it is buffered), so two ranks can send to each other
  /// and then receive; `data` may be reused when send returns. Sends and receives are not
  /// collectives: they may sit between collectives on the ranks concerned only, as long as every
  /// collective call is made in the same order on every rank. Errors: as the collectives; invalid_argument
  /// for a peer outside the world or this rank itself; unsupported where point_to_point() is false.
  virtual status send(const void* data, std::size_t bytes, int peer) {
    (void)data, (void)bytes, (void)peer;
    return no_point_to_point();
  }
  /// Receives the next message from rank `peer` into `data`. Errors: as send, and
  /// invalid_argument when the message's size is not `bytes` (the communicator is then broken).
  virtual status recv(void* data, std::size_t bytes, int peer) {
    (void)data, (void)bytes, (void)peer;
    return no_point_to_point();
  }

  /// Makes every pending and later call on this rank return errc::aborted promptly. Idempotent.
  virtual void abort() noexcept = 0;
  [[nodiscard]] virtual bool aborted() const noexcept = 0;

 protected:
  static status no_point_to_point() {
    return status{errc::unsupported, "this communicator has no point-to-point sends (a pipeline needs them)"};
  }
};

/// A place holder with a rank and a size that reaches no one: every collective fails with
/// errc::failed_precondition. For what is built before its real communicator exists (a warm
/// standby's training task, rebound on activation).
class unconnected_communicator final : public communicator {
 public:
  unconnected_communicator(int rank, int size) noexcept : rank_(rank), size_(size) {}
  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return size_; }
  status allreduce(void*, std::size_t, dtype, reduce_op) override { return refuse(); }
  status reduce_scatter(const void*, void*, std::size_t, dtype, reduce_op) override { return refuse(); }
  status allgather(const void*, void*, std::size_t, dtype) override { return refuse(); }
  status broadcast(void*, std::size_t, dtype, int) override { return refuse(); }
  status barrier() override { return refuse(); }
  void abort() noexcept override { aborted_ = true; }
  [[nodiscard]] bool aborted() const noexcept override { return aborted_; }

 private:
  static status refuse() { return status{errc::failed_precondition, "the communicator is not connected to any rank"}; }
  int rank_;
  int size_;
  std::atomic<bool> aborted_{false};
};

/// The communicator of a world of one rank: every collective is the identity (a copy where the
/// result goes to another buffer). For what trains one rank alone: benchmarks, profiling.
class solo_communicator final : public communicator {
 public:
  [[nodiscard]] int rank() const noexcept override { return 0; }
  [[nodiscard]] int size() const noexcept override { return 1; }
  status allreduce(void*, std::size_t, dtype, reduce_op) override { return check(); }
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op) override {
    return copy(send, recv, recv_count, type);
  }
  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) override {
    return copy(send, recv, send_count, type);
  }
  status broadcast(void*, std::size_t, dtype, int root) override {
    return root == 0 ? check() : status{errc::invalid_argument, "broadcast root " + std::to_string(root) + " in a world of 1"};
  }
  status barrier() override { return check(); }
  void abort() noexcept override { aborted_ = true; }
  [[nodiscard]] bool aborted() const noexcept override { return aborted_; }

 private:
  [[nodiscard]] status check() const {
    return aborted_ ? status{errc::aborted, "the communicator was aborted"} : status{};
  }
  status copy(const void* from, void* to, std::size_t count, dtype type) {
    if (auto s = check(); !s.ok())
      return s;
    if (from != to && count > 0)
      std::memmove(to, from, count * size_of(type));
    return {};
  }
  std::atomic<bool> aborted_{false};
};

}  // namespace rekindle::transport
