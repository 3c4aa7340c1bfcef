#pragma once

// The token handshake a connection runs before anything else is delivered, as a state machine
// without I/O: bytes and frames in, frames to send and decisions out. The messenger owns the
// socket, the UCX endpoints and the timers; this is the part that reads what a peer sent.
//
// On the TCP connection, client → server unless marked:
//   hello{client nonce, name}        client opens
//   challenge{server nonce}          server → client
//   auth{client proof}               the proof of its token (transport/auth.hpp)
//   welcome{role, server proof, name, ticket}   server → client, when the proof matched a token
//   refused{reason}                  server → client, when it did not; the server closes
//   ready{port}                      the port of the client's one-shot UCX listener
// then on UCX, server → client: attached{ticket}, on the endpoint the server connected to that
// listener; the first endpoint presenting the ticket is the peer's.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/auth.hpp"
#include "transport/frame.hpp"

namespace rekindle::transport {

/// Frame types of the transport itself, from first_reserved_type up. The handshake travels on the
/// TCP connection; attached and keep-alives as UCX active messages.
enum transport_frame_type : std::uint16_t {
  type_hello = first_reserved_type,
  type_challenge,
  type_auth,
  type_welcome,
  type_refused,
  type_keepalive,
  type_ready,
  type_attached,
};

/// A handshake frame's payload is small: the largest, welcome, carries a name of at most 255 bytes.
inline constexpr std::uint64_t max_handshake_payload = 64 * 1024;

/// One frame to send on the TCP connection.
struct handshake_frame {
  std::uint16_t type = 0;
  std::vector<std::byte> payload;
};

/// What next_handshake_frame found in the bytes received so far.
struct handshake_cut {
  enum class result {
    /// No whole frame yet: wait for more bytes.
    need_more,
    /// `header` and `payload` hold the first frame; its bytes are gone from the buffer.
    frame,
    /// The bytes are not a handshake frame: `reason` and `why` say how.
    malformed,
  };
  result what = result::need_more;
  frame_header header;
  std::vector<std::byte> payload;
  /// Bytes the frame took on the wire.
  std::size_t wire_size = 0;
  drop_reason reason = drop_reason::none;
  std::string why;
};

/// Cuts the first whole handshake frame from `in` (the bytes a TCP connection delivered, in order),
/// checking its magic, header, length (at most max_handshake_payload) and checksum as soon as the
/// bytes for each are there. A malformed frame leaves `in` as it was.
handshake_cut next_handshake_frame(std::vector<std::byte>& in);

/// Both ends of one connection's handshake. A client starts with hello(); a server waits for one.
class handshake {
 public:
  enum class side : std::uint8_t { client, server };
  enum class phase : std::uint8_t {
    /// Client: hello() not called yet.
    start,
    /// Server: a connection accepted.
    awaiting_hello,
    /// Client: hello sent.
    awaiting_challenge,
    /// Server: challenge sent.
    awaiting_auth,
    /// Client: auth sent.
    awaiting_welcome,
    /// Client: the server proved its token; it opens a listener, then calls ready().
    awaiting_listener,
    /// Server: welcome sent.
    awaiting_ready,
    /// Client: ready sent; waits for the server's endpoint to present the ticket.
    awaiting_attached,
    /// Server: the client gave its port; the peer is authenticated.
    done,
    /// A frame broke the handshake; nothing more is accepted.
    failed,
  };

  struct settings {
    /// The cluster token and the read-only token ("" when authentication is off).
    std::string token;
    std::string readonly_token;
    /// The name this end gives itself (at most 255 bytes go on the wire).
    std::string name;
    /// Where nonces and tickets come from: random_nonce unless a test fixes them.
    std::function<nonce()> nonces;
  };

  /// What the owner does after a frame.
  struct step {
    enum class action {
      /// Send `reply`; the handshake goes on.
      send,
      /// Send `reply` (a refused frame), then close: the client's proof matched no token.
      refuse,
      /// Close the connection: `why` says what was wrong.
      fail,
      /// Client: the server proved its token. Open a one-shot listener, then call ready(port).
      listen,
      /// Server: connect a UCX endpoint to `port` at the client's address and send it attached().
      connect,
    };
    action what = action::fail;
    handshake_frame reply;
    std::string why;
    /// fail: a drop to count under this reason (a frame type the handshake does not know).
    drop_reason drop = drop_reason::none;
    std::uint16_t port = 0;
  };

  handshake(side s, settings set);

  /// Client: the first frame. Only once, in phase start.
  handshake_frame hello();
  /// The next frame from the peer, as next_handshake_frame cut it.
  step on_frame(const frame_header& h, std::span<const std::byte> payload);
  /// Client: the ready frame, once its listener has `port`. Only in phase awaiting_listener.
  handshake_frame ready(std::uint16_t port);
  /// Server: the attached frame the UCX endpoint carries. Only in phase done.
  [[nodiscard]] std::vector<std::byte> attached() const;
  /// Client: whether an attached payload presents this handshake's ticket.
  [[nodiscard]] bool accepts_attached(const frame_header& h, std::span<const std::byte> payload) const;

  [[nodiscard]] side which() const noexcept { return side_; }
  [[nodiscard]] phase where() const noexcept { return phase_; }
  /// True once the peer has proved it holds a token (server: after auth; client: after welcome).
  [[nodiscard]] bool authenticated() const noexcept;
  /// Server: true while the peer has not proved a token, the connections a flood fills.
  [[nodiscard]] bool pending() const noexcept;
  /// What the peer said of itself; role is meaningful once authenticated().
  [[nodiscard]] const std::string& peer_name() const noexcept { return peer_name_; }
  [[nodiscard]] std::uint32_t peer_node() const noexcept { return peer_node_; }
  [[nodiscard]] peer_role role() const noexcept { return role_; }
  [[nodiscard]] std::uint64_t ticket() const noexcept { return ticket_; }

 private:
  step fail(std::string why);
  step send(std::uint16_t type, std::vector<std::byte> payload);
  nonce next_nonce();

  side side_;
  settings settings_;
  phase phase_;
  nonce client_nonce_{};
  nonce server_nonce_{};
  std::string peer_name_;
  std::uint32_t peer_node_ = 0;
  peer_role role_ = peer_role::readonly;
  std::uint64_t ticket_ = 0;
};

std::string_view to_string(handshake::phase p) noexcept;

}  // namespace rekindle::transport
