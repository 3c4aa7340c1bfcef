#include "tests/support/thread_communicator.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "common/check.hpp"

namespace rekindle::testing {

namespace {

using transport::dtype;
using transport::reduce_op;

float bf16_to_float(std::uint16_t v) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16);
}

// Round to nearest even; NaN stays NaN.
std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f))
    return static_cast<std::uint16_t>((u >> 16) | 0x40);
  const std::uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float combine(float a, float b, reduce_op op) noexcept {
  return op == reduce_op::max ? std::max(a, b) : a + b;
}

// out[i] = the reduction over ranks (in rank order) of element `first + i` of every input.
void reduce_into(void* out, const std::vector<const void*>& inputs, std::size_t first, std::size_t count, dtype type,
                 reduce_op op) {
  const auto n = static_cast<float>(inputs.size());
  for (std::size_t i = 0; i < count; ++i) {
    if (type == dtype::f32) {
      float acc = static_cast<const float*>(inputs[0])[first + i];
      for (std::size_t r = 1; r < inputs.size(); ++r)
        acc = combine(acc, static_cast<const float*>(inputs[r])[first + i], op);
      if (op == reduce_op::average)
        acc /= n;
      static_cast<float*>(out)[i] = acc;
    } else {
      // bf16: reduced in float32, rounded to bf16 after every step.
      std::uint16_t acc = static_cast<const std::uint16_t*>(inputs[0])[first + i];
      for (std::size_t r = 1; r < inputs.size(); ++r)
        acc = float_to_bf16(combine(bf16_to_float(acc),
                                    bf16_to_float(static_cast<const std::uint16_t*>(inputs[r])[first + i]), op));
      if (op == reduce_op::average)
        acc = float_to_bf16(bf16_to_float(acc) / n);
      static_cast<std::uint16_t*>(out)[i] = acc;
    }
  }
}

}  // namespace

int thread_communicator::size() const noexcept {
  return group_->size();
}

status thread_communicator::allreduce(void* data, std::size_t count, dtype type, reduce_op op) {
  auto& g = *group_;
  g.slots_[static_cast<std::size_t>(rank_)] = {data, data};
  RK_RETURN_IF_ERROR(g.arrive(rank_));
  std::vector<const void*> inputs;
  for (const auto& s : g.slots_)
    inputs.push_back(s.send);
  std::vector<std::byte> result(count * transport::size_of(type));
  reduce_into(result.data(), inputs, 0, count, type, op);
  // Everyone has read every input before anyone overwrites its own.
  RK_RETURN_IF_ERROR(g.arrive(rank_));
  if (!result.empty())
    std::memcpy(data, result.data(), result.size());
  return {};
}

status thread_communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type,
                                           reduce_op op) {
  auto& g = *group_;
  g.slots_[static_cast<std::size_t>(rank_)] = {send, recv};
  RK_RETURN_IF_ERROR(g.arrive(rank_));
  std::vector<const void*> inputs;
  for (const auto& s : g.slots_)
    inputs.push_back(s.send);
  reduce_into(recv, inputs, static_cast<std::size_t>(rank_) * recv_count, recv_count, type, op);
  return g.arrive(rank_);
}

status thread_communicator::allgather(const void* send, void* recv, std::size_t send_count, dtype type) {
  auto& g = *group_;
  g.slots_[static_cast<std::size_t>(rank_)] = {send, recv};
  RK_RETURN_IF_ERROR(g.arrive(rank_));
  const std::size_t bytes = send_count * transport::size_of(type);
  for (int r = 0; r < g.size(); ++r) {
    auto* dst = static_cast<std::byte*>(recv) + static_cast<std::size_t>(r) * bytes;
    const void* src = g.slots_[static_cast<std::size_t>(r)].send;
    if (dst != src && bytes > 0)
      std::memmove(dst, src, bytes);
  }
  return g.arrive(rank_);
}

status thread_communicator::broadcast(void* data, std::size_t count, dtype type, int root) {
  auto& g = *group_;
  if (root < 0 || root >= g.size())
    return status{errc::invalid_argument, "broadcast root " + std::to_string(root) + " outside the group"};
  g.slots_[static_cast<std::size_t>(rank_)] = {data, data};
  RK_RETURN_IF_ERROR(g.arrive(rank_));
  if (rank_ != root && count > 0)
    std::memcpy(data, g.slots_[static_cast<std::size_t>(root)].send, count * transport::size_of(type));
  return g.arrive(rank_);
}

status thread_communicator::barrier() {
  return group_->arrive(rank_);
}

status thread_communicator::send(const void* data, std::size_t bytes, int peer) {
  return group_->post(rank_, peer, data, bytes);
}

status thread_communicator::recv(void* data, std::size_t bytes, int peer) {
  return group_->take(peer, rank_, data, bytes);
}

void thread_communicator::abort() noexcept {
  group_->abort(rank_);
}

bool thread_communicator::aborted() const noexcept {
  std::lock_guard lk(group_->mu_);
  return group_->aborted_[static_cast<std::size_t>(rank_)];
}

thread_group::thread_group(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), slots_(static_cast<std::size_t>(size)), aborted_(static_cast<std::size_t>(size)) {
  for (int r = 0; r < size; ++r)
    ranks_.push_back(std::make_unique<thread_communicator>(*this, r));
}

void thread_group::run(const std::function<void(int, transport::communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size_; ++r)
    threads.emplace_back([&fn, this, r] { fn(r, rank(r)); });
  for (auto& t : threads)
    t.join();
}

status thread_group::failure_for(int rank) const {
  if (aborted_[static_cast<std::size_t>(rank)])
    return status{errc::aborted, "rank " + std::to_string(rank) + " aborted the communicator"};
  if (cause_ == errc::aborted)
    return status{errc::peer_failed, reason_};
  return status{cause_, reason_};
}

status thread_group::arrive(int rank) {
  std::unique_lock lk(mu_);
  if (broken_)
    return failure_for(rank);
  const std::uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return {};
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (generation_ == gen && !broken_) {
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && generation_ == gen && !broken_) {
      broken_ = true;
      cause_ = errc::timeout;
      culprit_ = rank;
      reason_ = "rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) + " ms for " +
                std::to_string(size_ - arrived_) + " peer(s)";
      cv_.notify_all();
    }
  }
  if (generation_ != gen)
    return {};
  return failure_for(rank);
}

status thread_group::post(int from, int to, const void* data, std::size_t bytes) {
  if (to < 0 || to >= size_ || to == from)
    return status{errc::invalid_argument, "send to rank " + std::to_string(to) + " from rank " + std::to_string(from) +
                                              " of " + std::to_string(size_)};
  std::lock_guard lk(mu_);
  if (broken_)
    return failure_for(from);
  const auto* p = static_cast<const std::byte*>(data);
  mail_[{from, to}].emplace_back(p, p + bytes);
  cv_.notify_all();
  return {};
}

status thread_group::take(int from, int to, void* data, std::size_t bytes) {
  if (from < 0 || from >= size_ || to == from)
    return status{errc::invalid_argument, "recv from rank " + std::to_string(from) + " on rank " + std::to_string(to) +
                                              " of " + std::to_string(size_)};
  std::unique_lock lk(mu_);
  auto& box = mail_[{from, to}];
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (box.empty() && !broken_) {
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && box.empty() && !broken_) {
      broken_ = true;
      cause_ = errc::timeout;
      culprit_ = to;
      reason_ = "rank " + std::to_string(to) + " waited " + std::to_string(timeout_.count()) +
                " ms for a message from rank " + std::to_string(from);
      cv_.notify_all();
    }
  }
  if (broken_)
    return failure_for(to);
  if (box.front().size() != bytes) {
    broken_ = true;
    cause_ = errc::invalid_argument;
    culprit_ = to;
    reason_ = "rank " + std::to_string(to) + " expected " + std::to_string(bytes) + " bytes from rank " +
              std::to_string(from) + ", the message holds " + std::to_string(box.front().size());
    cv_.notify_all();
    return failure_for(to);
  }
  if (bytes > 0)
    std::memcpy(data, box.front().data(), bytes);
  box.pop_front();
  return {};
}

void thread_group::abort(int rank) noexcept {
  std::lock_guard lk(mu_);
  aborted_[static_cast<std::size_t>(rank)] = true;
  if (!broken_) {
    broken_ = true;
    cause_ = errc::aborted;
    culprit_ = rank;
    reason_ = "rank " + std::to_string(rank) + " aborted the communicator";
  }
  cv_.notify_all();
}

}  // namespace rekindle::testing
