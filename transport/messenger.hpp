#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/expected.hpp"
#include "common/ids.hpp"
#include "transport/auth.hpp"
#include "transport/frame.hpp"

namespace rekindle::transport {

/// A connection to another process, unique within one messenger for its lifetime.
using peer_id = strong_id<struct peer_id_tag, std::uint64_t>;

/// What a messenger knows about an authenticated peer.
struct peer_info {
  peer_id id;
  peer_role role = peer_role::admin;
  /// The node the peer announced in its handshake.
  std::uint32_t node = 0;
  /// The name the peer announced, e.g. "rekindled n1".
  std::string name;
  /// True when this side connected to the peer.
  bool outbound = false;
};

/// Counters of one messenger. A snapshot; the messenger keeps counting.
struct messenger_stats {
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  /// Received frames dropped, by reason (indexed by drop_reason).
  std::array<std::uint64_t, drop_reason_count> dropped{};
  /// Peers refused in the handshake (wrong token).
  std::uint64_t peers_refused = 0;
  /// Authenticated peers lost (endpoint error, keep-alive timeout, closed by the other side).
  std::uint64_t peers_lost = 0;

  [[nodiscard]] std::uint64_t dropped_total() const noexcept;
  [[nodiscard]] std::uint64_t dropped_of(drop_reason r) const noexcept { return dropped[static_cast<std::size_t>(r)]; }
};

struct messenger_options {
  /// Announced to peers in the handshake, e.g. "rekindled n0".
  std::string name = "rekindle";
  /// Stamped as the source node of every frame this messenger sends.
  std::uint32_t node = 0;
  /// Address to listen on; empty for a messenger that only connects out. Default: "".
  std::string listen_host;
  /// Port to listen on; 0 takes any free port (see port()). Default: 0.
  std::uint16_t listen_port = 0;
  /// The cluster token: presented when connecting, and accepted from peers with role admin.
  /// Empty means authentication is off (peers must then also use an empty token).
  std::string token;
  /// Accepted from peers with role readonly. Default: "" (none).
  std::string readonly_token;
  /// Larger payloads are refused on send and dropped on receipt. Default: 16MiB.
  std::uint64_t max_frame_size = 16ull << 20;
  /// A keep-alive goes to a peer that has not been sent anything for this long. Default: 100ms.
  std::chrono::nanoseconds keepalive = std::chrono::milliseconds{100};
  /// A peer that has sent nothing for this long is lost. Default: 1s.
  std::chrono::nanoseconds peer_timeout = std::chrono::seconds{1};
  /// A connection that has not authenticated within this long is closed. Default: 5s.
  std::chrono::nanoseconds handshake_timeout = std::chrono::seconds{5};
  /// After activity, the loop polls this long before it blocks in the kernel. Default: 200us.
  std::chrono::nanoseconds spin = std::chrono::microseconds{200};
  /// UCX_NET_DEVICES and UCX_TLS; empty keeps UCX's choice.
  std::string net_devices;
  std::string tls;
};

/// Callbacks of a messenger. All run on its loop thread, never inside a caller's call, and may
/// call any messenger method.
struct messenger_handlers {
  /// A peer completed the token handshake (either direction).
  std::function<void(const peer_info&)> on_peer_up;
  /// An authenticated peer is gone: endpoint error, keep-alive timeout, or close().
  std::function<void(const peer_info&, const status& why)> on_peer_down;
  /// A frame from an authenticated peer, after every check passed.
  std::function<void(const peer_info&, frame&&)> on_frame;
};

/// Framed, authenticated messages between processes over UCX active messages: the control plane.
///
/// One messenger per process owns a UCP context and worker, an optional listener and one endpoint
/// per peer, and runs a loop thread that drives them: it polls while there is traffic and blocks
/// in the kernel when idle. Peers connect with a sockaddr endpoint in peer-failure mode, run the
/// token handshake (see make_proof), then exchange frames. Every received frame is checked
/// (see decode_header, check_payload); a bad one is dropped and counted, never delivered. A lost
/// peer surfaces as on_peer_down within `peer_timeout`, or at once on an endpoint error. A loop
/// that itself did not run for more than half of `peer_timeout` (a paused process or machine)
/// gives every peer a new timeout instead of dropping them all.
///
/// Thread-safety: every public method may be called from any thread, including from handlers.
/// Handlers run on the loop thread one at a time.
class messenger {
 public:
  static expected<std::unique_ptr<messenger>> start(messenger_options options, messenger_handlers handlers);
  ~messenger();
  messenger(const messenger&) = delete;
  messenger& operator=(const messenger&) = delete;

  /// The port the listener got, 0 without a listener.
  [[nodiscard]] std::uint16_t port() const noexcept;

  /// Connects to the messenger listening on host:port; `done` gets the authenticated peer or why
  /// not (errc::peer_failed when nothing listens, errc::unauthenticated when refused).
  void connect(const std::string& host, std::uint16_t port, std::function<void(expected<peer_info>)> done);
  /// connect() and wait. REQUIRES: not called on the loop thread.
  expected<peer_info> connect_blocking(const std::string& host, std::uint16_t port,
                                       std::chrono::nanoseconds timeout);

  /// Queues `f` to `to`; the source node is filled in. `done` (optional) learns when the payload
  /// may be reused, or why the frame was not sent. Payloads of 64 KiB and more travel zero-copy.
  void send(peer_id to, frame f, std::function<void(status)> done = {});

  /// Closes the connection; on_peer_down follows for an authenticated peer.
  void close(peer_id peer);

  /// Runs `task` on the loop thread.
  void post(std::function<void()> task);

  /// A partition (fault drill): for `duration`, frames to and from processes of `node` are
  /// dropped, keep-alives included, so the connections to them time out as over a cut network
  /// and new ones cannot authenticate; then traffic flows again.
  void cut_off(std::uint32_t node, std::chrono::nanoseconds duration);

  /// A slow link (fault drill): for `duration`, frames to processes of `node` leave at no more
  /// than `bytes_per_second` (header included), in order, the rest waiting their turn; then they
  /// flow at full speed again. Set at both ends, it slows the link both ways.
  void throttle(std::uint32_t node, double bytes_per_second, std::chrono::nanoseconds duration);

  /// Counts a frame dropped by a layer above (e.g. drop_reason::stale_epoch).
  void count_drop(drop_reason r) noexcept;

  [[nodiscard]] messenger_stats stats() const noexcept;
  [[nodiscard]] bool on_loop_thread() const noexcept;

  /// Closes every connection and stops the loop. Idempotent; the destructor calls it.
  /// REQUIRES: not called on the loop thread.
  void shutdown();

  class impl;

 private:
  explicit messenger(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace rekindle::transport
