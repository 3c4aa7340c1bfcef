#include "transport/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <vector>

#include "common/check.hpp"

namespace rekindle::transport {

std::string_view to_string(peer_role r) noexcept {
  return r == peer_role::admin ? "admin" : "readonly";
}

nonce random_nonce() {
  nonce n;
  RK_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) == 1,
           "OpenSSL RAND_bytes failed");
  return n;
}

proof make_proof(std::string_view token, std::string_view label, const nonce& client, const nonce& server) {
  std::vector<unsigned char> msg;
  msg.reserve(label.size() + client.size() + server.size());
  msg.insert(msg.end(), label.begin(), label.end());
  for (auto b : client)
    msg.push_back(static_cast<unsigned char>(b));
  for (auto b : server)
    msg.push_back(static_cast<unsigned char>(b));
  proof out;
  unsigned int len = 0;
  static const unsigned char no_key = 0;
  const auto* key = token.empty() ? &no_key : reinterpret_cast<const unsigned char*>(token.data());
  RK_CHECK(HMAC(EVP_sha256(), key, static_cast<int>(token.size()), msg.data(), msg.size(),
                reinterpret_cast<unsigned char*>(out.data()), &len) != nullptr && len == out.size(),
           "OpenSSL HMAC-SHA256 failed");
  return out;
}

bool proofs_equal(const proof& a, const proof& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<peer_role> verify_client(const proof& client_proof, std::string_view admin_token,
                                       std::string_view readonly_token, const nonce& client, const nonce& server) {
  if (proofs_equal(client_proof, make_proof(admin_token, "client", client, server)))
    return peer_role::admin;
  if (!readonly_token.empty() && proofs_equal(client_proof, make_proof(readonly_token, "client", client, server)))
    return peer_role::readonly;
  return std::nullopt;
}

}  // namespace rekindle::transport
