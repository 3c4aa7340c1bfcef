#pragma once

// Where a rank is in its sequence of collectives: written by the rank (transport/collective_tracker),
// carried in heartbeats, read by the supervisor's hang verdict (policy/hang_verdict).

#include <chrono>
#include <cstdint>
#include <string_view>

namespace rekindle {

/// The collectives, and the point-to-point calls of pipeline stages (send, recv), which are not
/// numbered: each rank makes its own.
enum class collective_kind : std::uint8_t { none, allreduce, reduce_scatter, allgather, broadcast, barrier, send, recv };
inline constexpr std::uint8_t collective_kinds = 8;
std::string_view to_string(collective_kind k) noexcept;

/// What a rank's latest collective is doing.
enum class collective_phase : std::uint8_t {
  /// No collective yet in this epoch.
  idle,
  /// Inside collective `seq`.
  inside,
  /// Collective `seq` returned; the rank computes towards the next.
  done,
  /// Collective `seq` returned an error (a timeout, a lost peer, an abort).
  failed,
};
inline constexpr std::uint8_t collective_phases = 4;
std::string_view to_string(collective_phase p) noexcept;

/// What a rank's latest point-to-point call (a pipeline stage's send or recv) is doing.
struct p2p_position {
  /// send, recv, or none before the first this epoch.
  collective_kind kind = collective_kind::none;
  collective_phase phase = collective_phase::idle;
  /// The other rank of the call; -1 with none.
  std::int32_t peer = -1;
  std::chrono::nanoseconds for_how_long{0};

  bool operator==(const p2p_position&) const = default;
};

struct collective_position {
  /// The number of the latest collective this epoch, from 1 (0 with phase idle). Every rank calls
  /// collectives in the same order, so equal numbers are the same call on every rank.
  std::uint64_t seq = 0;
  collective_kind kind = collective_kind::none;
  collective_phase phase = collective_phase::idle;
  /// How long the rank has been in this phase.
  std::chrono::nanoseconds for_how_long{0};
  /// Its latest point-to-point call, apart from the numbered collectives.
  p2p_position p2p;

  bool operator==(const collective_position&) const = default;
};

}  // namespace rekindle
