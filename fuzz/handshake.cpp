// libFuzzer target: the token handshake a daemon's port runs with whoever connects, fed as the byte
// stream a TCP connection delivers: the frame cutter, then the state machine of either end.
//
// The first byte picks the end and the point the stream starts at: a server that has just accepted
// the connection, a client that has sent hello, or a server that a genuine client already
// authenticated to (so what follows the proof is reached), or a client that waits for the server's
// endpoint to present its ticket. The stream is fed in chunks whose size the second byte picks.
// Without the token's proof a stranger's bytes must never authenticate.
//
// With REKINDLE_FUZZ_SEEDS=DIR set, it first writes the streams a peer holding another token sends
// at each of those points (so they get as far as the proof check), the seed corpus of
// fuzz/corpus/handshake.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <algorithm>
#include <span>
#include <vector>

#include "common/check.hpp"
#include "transport/handshake.hpp"

namespace {

using namespace rekindle::transport;

std::function<nonce()> counter_nonces(std::uint8_t seed) {
  return [n = std::uint8_t{seed}]() mutable {
    nonce out{};
    for (auto& b : out)
      b = std::byte{n++};
    return out;
  };
}

handshake make(handshake::side s, std::uint8_t seed) {
  return handshake{s, {"cluster-token", "readonly-token", "fuzz", counter_nonces(seed)}};
}

// Runs `client` against `server` until the client has the server's welcome.
void authenticate(handshake& client, handshake& server) {
  auto f = client.hello();
  bool to_server = true;
  for (int i = 0; i < 4; ++i) {
    frame_header h;
    h.type = f.type;
    auto& end = to_server ? server : client;
    auto step = end.on_frame(h, f.payload);
    RK_CHECK(step.what == handshake::step::action::send || step.what == handshake::step::action::listen,
             "a genuine exchange goes through");
    if (step.what == handshake::step::action::listen)
      return;
    f = std::move(step.reply);
    to_server = !to_server;
  }
  RK_CHECK(false, "a genuine exchange takes four frames");
}

// The bytes of `f` on the wire, as node `node` sends them.
void append_frame(std::vector<std::byte>& out, const handshake_frame& f, std::uint32_t node) {
  frame_header h;
  h.type = f.type;
  h.src_node = node;
  const auto header = encode_header(h, f.payload);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), f.payload.begin(), f.payload.end());
}

void write_seed(const std::string& dir, const std::string& name, std::uint8_t mode, std::uint8_t chunk,
                const std::vector<std::byte>& stream) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  const char head[2] = {static_cast<char>(mode), static_cast<char>(chunk)};
  out.write(head, 2);
  out.write(reinterpret_cast<const char*>(stream.data()), static_cast<std::streamsize>(stream.size()));
}

frame_header typed(std::uint16_t type) {
  frame_header h;
  h.type = type;
  return h;
}

void write_seeds(const std::string& dir) {
  const auto other = [](handshake::side s, std::uint8_t seed) {
    return handshake{s, {"another-token", "", "stranger", counter_nonces(seed)}};
  };
  {  // A server that accepted a connection: hello, then an auth with another token's proof.
    auto client = other(handshake::side::client, 100);
    auto server_view = other(handshake::side::server, 7);  // the fuzzed server's nonces
    std::vector<std::byte> stream;
    const auto hello = client.hello();
    append_frame(stream, hello, 3);
    const auto challenge = server_view.on_frame(typed(type_hello), hello.payload);
    const auto auth = client.on_frame(typed(type_challenge), challenge.reply.payload);
    append_frame(stream, auth.reply, 3);
    write_seed(dir, "server-hello-auth", 0, 63, stream);
    write_seed(dir, "server-hello-auth-bytewise", 0, 0, stream);
  }
  {  // A client that sent hello: a challenge, then a welcome with another token's proof.
    auto client_view = other(handshake::side::client, 7);  // the fuzzed client's nonces
    auto server = other(handshake::side::server, 100);
    std::vector<std::byte> stream;
    const auto hello = client_view.hello();
    const auto challenge = server.on_frame(typed(type_hello), hello.payload);
    append_frame(stream, challenge.reply, 0);
    const auto auth = client_view.on_frame(typed(type_challenge), challenge.reply.payload);
    const auto welcome = server.on_frame(typed(type_auth), auth.reply.payload);
    append_frame(stream, welcome.reply, 0);
    write_seed(dir, "client-challenge-welcome", 1, 63, stream);
    std::vector<std::byte> refused;
    const std::string reason = "\x05nope!";
    append_frame(refused, {type_refused, {reinterpret_cast<const std::byte*>(reason.data()),
                                          reinterpret_cast<const std::byte*>(reason.data()) + reason.size()}}, 0);
    write_seed(dir, "client-refused", 1, 63, refused);
  }
  {  // An authenticated server: the client's ready, port 12345.
    std::vector<std::byte> stream;
    append_frame(stream, {type_ready, {std::byte{0x39}, std::byte{0x30}, std::byte{0}, std::byte{0}}}, 3);
    write_seed(dir, "server-ready", 2, 63, stream);
  }
  {  // A client waiting for attached: the genuine ticket.
    auto client = make(handshake::side::client, 100);
    auto server = make(handshake::side::server, 7);
    authenticate(client, server);
    const auto ready = client.ready(1000);
    (void)server.on_frame(typed(ready.type), ready.payload);
    write_seed(dir, "client-attached", 3, 63, server.attached());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("REKINDLE_FUZZ_SEEDS"))
    write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2)
    return 0;
  const auto mode = data[0] % 4;
  const auto chunk = static_cast<std::size_t>(data[1] % 64) + 1;
  const std::span<const std::byte> stream{reinterpret_cast<const std::byte*>(data + 2), size - 2};

  if (mode == 3) {
    // A client waiting for the server's endpoint: only the server's attached is accepted.
    auto client = make(handshake::side::client, 100);
    auto server = make(handshake::side::server, 7);
    authenticate(client, server);
    const auto ready = client.ready(1000);
    frame_header h;
    h.type = ready.type;
    RK_CHECK(server.on_frame(h, ready.payload).what == handshake::step::action::connect, "ready connects");
    const auto attached = server.attached();
    frame_header a;
    a.type = type_attached;
    (void)encode_header(a, stream);
    const bool same = std::equal(stream.begin(), stream.end(), attached.begin(), attached.end());
    RK_CHECK(client.accepts_attached(a, stream) == same, "only the ticket is accepted");
    return 0;
  }
  auto end = make(mode == 1 ? handshake::side::client : handshake::side::server, 7);
  if (mode == 1)
    (void)end.hello();
  if (mode == 2) {
    auto client = make(handshake::side::client, 100);
    authenticate(client, end);
  }
  const bool authenticated_before = end.authenticated();

  std::vector<std::byte> in;
  bool over = false;
  for (std::size_t at = 0; at < stream.size() && !over; at += chunk) {
    const auto piece = stream.subspan(at, std::min(chunk, stream.size() - at));
    in.insert(in.end(), piece.begin(), piece.end());
    while (!over) {
      auto cut = next_handshake_frame(in);
      if (cut.what == handshake_cut::result::need_more)
        break;
      if (cut.what == handshake_cut::result::malformed) {
        RK_CHECK(!cut.why.empty(), "a malformed frame says why");
        RK_CHECK(cut.reason != drop_reason::none, "a malformed frame has a drop reason");
        over = true;
        break;
      }
      RK_CHECK_LE(cut.payload.size(), max_handshake_payload);
      const auto step = end.on_frame(cut.header, cut.payload);
      switch (step.what) {
        case handshake::step::action::fail:
        case handshake::step::action::refuse:
          RK_CHECK(!step.why.empty(), "a failed handshake says why");
          RK_CHECK(end.where() == handshake::phase::failed, "a failed handshake stays failed");
          over = true;
          break;
        case handshake::step::action::send:
          RK_CHECK_LE(step.reply.payload.size(), max_handshake_payload);
          break;
        case handshake::step::action::listen:
        case handshake::step::action::connect:
          break;
      }
      // Only the token's proof authenticates, and a stranger does not have it.
      RK_CHECK(authenticated_before || !end.authenticated(), "bytes without the proof authenticated a peer");
    }
  }
  return 0;
}
