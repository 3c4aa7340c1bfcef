#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/communicator.hpp"

namespace rekindle::testing {

class thread_group;

/// One rank of a `thread_group`: a `transport::communicator` whose peers are threads of the same
/// process. For unit tests only.
///
/// Reductions add the ranks' values in rank order 0, 1, …, n−1 on every rank, so results are
/// bitwise reproducible and identical on all ranks. Every call waits at most the group's timeout
/// for its peers (then errc::timeout). `abort()` on any rank fails every pending and later call of
/// the group: errc::aborted on that rank, errc::peer_failed on the others. After any error the
/// group is broken, as the interface requires.
///
/// Thread-safety: as `transport::communicator` — one thread per rank makes the collective calls;
/// abort() from anywhere.
class thread_communicator final : public transport::communicator {
 public:
  thread_communicator(thread_group& group, int rank) noexcept : group_(&group), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override;
  status allreduce(void* data, std::size_t count, transport::dtype type, transport::reduce_op op) override;
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, transport::dtype type,
                        transport::reduce_op op) override;
  status allgather(const void* send, void* recv, std::size_t send_count, transport::dtype type) override;
  status broadcast(void* data, std::size_t count, transport::dtype type, int root) override;
  status barrier() override;
  bool point_to_point() const noexcept override { return true; }
  status send(const void* data, std::size_t bytes, int peer) override;
  status recv(void* data, std::size_t bytes, int peer) override;
  void abort() noexcept override;
  bool aborted() const noexcept override;

 private:
  thread_group* group_;
  int rank_;
};

/// `size` ranks in one process, each a `thread_communicator`.
///
/// Thread-safety: the communicators are used as described above; `run` starts and joins threads.
class thread_group {
 public:
  /// REQUIRES: size >= 1. `timeout` bounds every wait of every collective. Default: 10 s.
  explicit thread_group(int size, std::chrono::milliseconds timeout = std::chrono::seconds{10});
  thread_group(const thread_group&) = delete;
  thread_group& operator=(const thread_group&) = delete;

  [[nodiscard]] int size() const noexcept { return size_; }
  /// The communicator of rank `r`.
  [[nodiscard]] thread_communicator& rank(int r) noexcept { return *ranks_[static_cast<std::size_t>(r)]; }

  /// Runs fn(rank, communicator) on one thread per rank and waits for all of them.
  void run(const std::function<void(int, transport::communicator&)>& fn);

 private:
  friend class thread_communicator;

  // What one rank brings to the current collective.
  struct slot {
    const void* send = nullptr;
    void* recv = nullptr;
  };

  // Waits until every rank has arrived (one barrier phase). Fails on timeout, abort or a broken group.
  status arrive(int rank);
  status failure_for(int rank) const;  // REQUIRES: mu_ held and broken_
  status post(int from, int to, const void* data, std::size_t bytes);
  status take(int from, int to, void* data, std::size_t bytes);
  void abort(int rank) noexcept;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<thread_communicator>> ranks_;
  std::vector<slot> slots_;
  // Point-to-point messages not yet received, by (sender, receiver); guarded by mu_.
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> mail_;
  // Ranks that called abort(); guarded by mu_.
  std::vector<bool> aborted_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
  errc cause_ = errc::aborted;
  int culprit_ = -1;
  std::string reason_;
};

}  // namespace rekindle::testing
