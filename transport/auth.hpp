#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace rekindle::transport {

/// What an authenticated peer may do.
enum class peer_role : std::uint8_t {
  /// Holds the cluster token: daemons, workers, an operator's shell.
  admin = 1,
  /// Holds the read-only token: may look, not change.
  readonly = 2,
};
std::string_view to_string(peer_role r) noexcept;

using nonce = std::array<std::byte, 32>;
using proof = std::array<std::byte, 32>;

/// 32 bytes from OpenSSL's RAND_bytes.
nonce random_nonce();

/// HMAC-SHA256 keyed with `token` over `label`, the client's nonce and the server's nonce.
///
/// The token handshake, as both ends run it:
///   1. The client connects and sends hello{client nonce}.
///   2. The server answers challenge{server nonce}.
///   3. The client sends auth{proof(its token, "client", nonces)}.
///   4. The server checks the proof against its admin token, then its read-only token. On a match
///      it answers welcome{role, proof(matched token, "server", nonces)}, which shows the server
///      holds the same token; otherwise it answers refused{reason} and closes the endpoint.
///   5. The client checks the server's proof; a mismatch closes the endpoint.
/// Nothing but handshake frames is delivered from a peer before step 4 (server) or 5 (client)
/// completes. An empty token is a valid key: with authentication off both ends use "".
proof make_proof(std::string_view token, std::string_view label, const nonce& client, const nonce& server);

/// Constant-time comparison.
bool proofs_equal(const proof& a, const proof& b) noexcept;

/// Step 4 on the server: the role `client_proof` earns, if any.
std::optional<peer_role> verify_client(const proof& client_proof, std::string_view admin_token,
                                       std::string_view readonly_token, const nonce& client, const nonce& server);

}  // namespace rekindle::transport
