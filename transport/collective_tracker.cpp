#include "transport/collective_tracker.hpp"

#include <algorithm>

namespace rekindle::transport {

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::uint64_t seq_mask = (std::uint64_t{1} << 48) - 1;

std::uint64_t pack(std::uint64_t seq, collective_kind k, collective_phase p) noexcept {
  return ((seq & seq_mask) << 16) | (static_cast<std::uint64_t>(k) << 8) | static_cast<std::uint64_t>(p);
}

std::int64_t now_ns() noexcept { return clock_type::now().time_since_epoch().count(); }

}  // namespace

void collective_tracker::reset() noexcept {
  since_ns_.store(now_ns());
  word_.store(0);
  p2p_since_ns_.store(0);
  p2p_word_.store(0);
}

void collective_tracker::enter_p2p(collective_kind k, int peer) noexcept {
  p2p_since_ns_.store(now_ns());
  p2p_word_.store((static_cast<std::uint64_t>(static_cast<std::uint32_t>(peer + 1)) << 16) |
                  (static_cast<std::uint64_t>(k) << 8) | static_cast<std::uint64_t>(collective_phase::inside));
}

void collective_tracker::leave_p2p(bool ok) noexcept {
  const auto w = p2p_word_.load();
  p2p_since_ns_.store(now_ns());
  p2p_word_.store((w & ~std::uint64_t{0xff}) |
                  static_cast<std::uint64_t>(ok ? collective_phase::done : collective_phase::failed));
}

void collective_tracker::enter(collective_kind k) noexcept {
  const auto seq = (word_.load() >> 16) + 1;
  since_ns_.store(now_ns());
  word_.store(pack(seq, k, collective_phase::inside));
}

void collective_tracker::leave(bool ok) noexcept {
  const auto w = word_.load();
  since_ns_.store(now_ns());
  word_.store(pack(w >> 16, static_cast<collective_kind>((w >> 8) & 0xff),
                   ok ? collective_phase::done : collective_phase::failed));
}

collective_position collective_tracker::now() const noexcept {
  const auto w = word_.load();
  collective_position p;
  p.seq = w >> 16;
  p.kind = static_cast<collective_kind>((w >> 8) & 0xff);
  p.phase = static_cast<collective_phase>(w & 0xff);
  const auto since = since_ns_.load();
  p.for_how_long = std::chrono::nanoseconds{since == 0 ? 0 : std::max<std::int64_t>(0, now_ns() - since)};
  if (const auto pw = p2p_word_.load(); pw != 0) {
    p.p2p.kind = static_cast<collective_kind>((pw >> 8) & 0xff);
    p.p2p.phase = static_cast<collective_phase>(pw & 0xff);
    p.p2p.peer = static_cast<std::int32_t>(static_cast<std::uint32_t>(pw >> 16)) - 1;
    const auto p2p_since = p2p_since_ns_.load();
    p.p2p.for_how_long = std::chrono::nanoseconds{p2p_since == 0 ? 0 : std::max<std::int64_t>(0, now_ns() - p2p_since)};
  }
  return p;
}

template <class Call>
status tracked_communicator::tracked(collective_kind k, Call&& call) {
  tracker_.enter(k);
  auto s = call();
  tracker_.leave(s.ok());
  return s;
}

status tracked_communicator::allreduce(void* data, std::size_t count, dtype type, reduce_op op) {
  return tracked(collective_kind::allreduce, [&] { return inner_.allreduce(data, count, type, op); });
}

status tracked_communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type,
                                            reduce_op op) {
  return tracked(collective_kind::reduce_scatter, [&] { return inner_.reduce_scatter(send, recv, recv_count, type, op); });
}

status tracked_communicator::allgather(const void* send, void* recv, std::size_t send_count, dtype type) {
  return tracked(collective_kind::allgather, [&] { return inner_.allgather(send, recv, send_count, type); });
}

status tracked_communicator::broadcast(void* data, std::size_t count, dtype type, int root) {
  return tracked(collective_kind::broadcast, [&] { return inner_.broadcast(data, count, type, root); });
}

status tracked_communicator::barrier() {
  return tracked(collective_kind::barrier, [&] { return inner_.barrier(); });
}

status tracked_communicator::send(const void* data, std::size_t bytes, int peer) {
  tracker_.enter_p2p(collective_kind::send, peer);
  auto s = inner_.send(data, bytes, peer);
  tracker_.leave_p2p(s.ok());
  return s;
}

status tracked_communicator::recv(void* data, std::size_t bytes, int peer) {
  tracker_.enter_p2p(collective_kind::recv, peer);
  auto s = inner_.recv(data, bytes, peer);
  tracker_.leave_p2p(s.ok());
  return s;
}

}  // namespace rekindle::transport
