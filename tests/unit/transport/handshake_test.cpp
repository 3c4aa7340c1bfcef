// The handshake state machine without sockets: two ends exchange frames in memory.

#include <gtest/gtest.h>

#include <random>

#include "transport/handshake.hpp"

namespace rekindle::transport {
namespace {

// Nonces from a seeded generator, so a run is the same every time.
std::function<nonce()> seeded(std::uint64_t seed) {
  return [rng = std::make_shared<std::mt19937_64>(seed)] {
    nonce n{};
    for (auto& b : n)
      b = static_cast<std::byte>((*rng)());
    return n;
  };
}

handshake make(handshake::side s, std::string token, std::string readonly, std::string name, std::uint64_t seed) {
  return handshake{s, {std::move(token), std::move(readonly), std::move(name), seeded(seed)}};
}

frame_header header_of(std::uint16_t type, std::uint32_t node) {
  frame_header h;
  h.type = type;
  h.src_node = node;
  return h;
}

// A header as it arrives for `payload`: length and checksum filled in.
frame_header sealed(std::uint16_t type, std::span<const std::byte> payload) {
  auto h = header_of(type, 0);
  (void)encode_header(h, payload);
  return h;
}

// Sends `f` through next_handshake_frame as the bytes a socket would deliver, one byte at a time.
handshake_cut over_the_wire(const handshake_frame& f, std::uint32_t node) {
  auto h = header_of(f.type, node);
  const auto header = encode_header(h, f.payload);
  std::vector<std::byte> wire(header.begin(), header.end());
  wire.insert(wire.end(), f.payload.begin(), f.payload.end());
  std::vector<std::byte> in;
  for (auto b : wire) {
    in.push_back(b);
    auto cut = next_handshake_frame(in);
    if (cut.what != handshake_cut::result::need_more) {
      EXPECT_TRUE(in.empty());
      return cut;
    }
  }
  return {};
}

struct pair_of_ends {
  handshake client, server;
  handshake::step last;

  pair_of_ends(std::string client_token, std::string server_token, std::string readonly = "")
      : client(make(handshake::side::client, std::move(client_token), "", "worker-3", 1)),
        server(make(handshake::side::server, std::move(server_token), std::move(readonly), "node-0", 2)) {}

  // Runs the exchange until a step is not a plain send; returns that step.
  handshake::step run() {
    auto f = client.hello();
    bool to_server = true;
    while (true) {
      auto cut = over_the_wire(f, to_server ? 5 : 0);
      EXPECT_EQ(cut.what, handshake_cut::result::frame) << cut.why;
      auto& receiver = to_server ? server : client;
      last = receiver.on_frame(cut.header, cut.payload);
      if (last.what != handshake::step::action::send)
        return last;
      f = last.reply;
      to_server = !to_server;
    }
  }
};

TEST(handshake, matching_tokens_authenticate_both_ends_with_one_ticket) {
  pair_of_ends e{"s3cret", "s3cret"};
  auto step = e.run();
  ASSERT_EQ(step.what, handshake::step::action::listen) << step.why;
  EXPECT_EQ(e.client.where(), handshake::phase::awaiting_listener);
  EXPECT_EQ(e.server.where(), handshake::phase::awaiting_ready);
  EXPECT_TRUE(e.client.authenticated());
  EXPECT_TRUE(e.server.authenticated());
  EXPECT_FALSE(e.server.pending());
  EXPECT_EQ(e.client.role(), peer_role::admin);
  EXPECT_EQ(e.server.role(), peer_role::admin);
  EXPECT_EQ(e.client.peer_name(), "node-0");
  EXPECT_EQ(e.server.peer_name(), "worker-3");
  EXPECT_EQ(e.client.peer_node(), 0u);
  EXPECT_EQ(e.server.peer_node(), 5u);
  EXPECT_NE(e.client.ticket(), 0u);
  EXPECT_EQ(e.client.ticket(), e.server.ticket());

  auto ready = e.client.ready(40123);
  auto cut = over_the_wire(ready, 5);
  auto connect = e.server.on_frame(cut.header, cut.payload);
  ASSERT_EQ(connect.what, handshake::step::action::connect) << connect.why;
  EXPECT_EQ(connect.port, 40123);
  EXPECT_EQ(e.server.where(), handshake::phase::done);

  const auto attached = e.server.attached();
  EXPECT_TRUE(e.client.accepts_attached(sealed(type_attached, attached), attached));
  auto wrong = attached;
  wrong[0] ^= std::byte{1};
  EXPECT_FALSE(e.client.accepts_attached(sealed(type_attached, wrong), wrong));
  EXPECT_FALSE(e.client.accepts_attached(sealed(type_attached, attached), wrong)) << "a checksum that does not match";
  EXPECT_FALSE(e.client.accepts_attached(sealed(type_keepalive, attached), attached));
  auto longer = attached;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(e.client.accepts_attached(sealed(type_attached, longer), longer));
  // The server's end never accepts an attached.
  EXPECT_FALSE(e.server.accepts_attached(sealed(type_attached, attached), attached));
}

TEST(handshake, the_readonly_token_earns_the_readonly_role) {
  pair_of_ends e{"look", "admin", "look"};
  auto step = e.run();
  ASSERT_EQ(step.what, handshake::step::action::listen) << step.why;
  EXPECT_EQ(e.server.role(), peer_role::readonly);
  EXPECT_EQ(e.client.role(), peer_role::readonly);
}

TEST(handshake, a_wrong_token_is_refused_and_the_client_learns_why) {
  pair_of_ends e{"guess", "s3cret", "other"};
  auto step = e.run();
  ASSERT_EQ(step.what, handshake::step::action::refuse);
  EXPECT_EQ(step.why, "wrong cluster token");
  EXPECT_EQ(step.reply.type, type_refused);
  EXPECT_EQ(e.server.where(), handshake::phase::failed);
  EXPECT_FALSE(e.server.authenticated());
  auto cut = over_the_wire(step.reply, 0);
  auto at_client = e.client.on_frame(cut.header, cut.payload);
  EXPECT_EQ(at_client.what, handshake::step::action::fail);
  EXPECT_EQ(at_client.why, "refused: wrong cluster token");
  EXPECT_FALSE(e.client.authenticated());
}

TEST(handshake, a_server_without_the_token_cannot_fool_the_client) {
  // The server answers welcome with a proof made with another token: the client must refuse it.
  auto client = make(handshake::side::client, "s3cret", "", "w", 1);
  auto impostor_server = make(handshake::side::server, "s3cret", "", "impostor", 2);
  auto hello = client.hello();
  auto challenge = impostor_server.on_frame(header_of(hello.type, 1), hello.payload);
  auto auth = client.on_frame(header_of(challenge.reply.type, 0), challenge.reply.payload);
  auto welcome = impostor_server.on_frame(header_of(auth.reply.type, 1), auth.reply.payload);
  ASSERT_EQ(welcome.what, handshake::step::action::send);
  auto forged = welcome.reply.payload;
  forged[1] ^= std::byte{0x80};  // the first byte of the server's proof
  auto step = client.on_frame(header_of(type_welcome, 0), forged);
  EXPECT_EQ(step.what, handshake::step::action::fail);
  EXPECT_EQ(step.why, "the server could not prove it holds the cluster token");
  EXPECT_FALSE(client.authenticated());
}

TEST(handshake, frames_out_of_order_or_malformed_fail_and_say_which) {
  struct tried {
    handshake::side side;
    std::uint16_t type;
    std::vector<std::byte> payload;
    std::string why;
  };
  const std::vector<std::byte> nonce_bytes(32, std::byte{7});
  auto hello_with = [&](std::vector<std::byte> tail) {
    auto p = nonce_bytes;
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  const std::vector<tried> cases = {
      {handshake::side::server, type_auth, std::vector<std::byte>(32), "unexpected auth"},
      {handshake::side::server, type_ready, {}, "unexpected ready"},
      {handshake::side::server, type_welcome, {}, "unexpected welcome"},
      {handshake::side::server, type_hello, std::vector<std::byte>(31), "malformed hello"},
      {handshake::side::server, type_hello, hello_with({std::byte{5}, std::byte{'a'}}), "malformed hello"},
      {handshake::side::server, type_hello, hello_with({std::byte{0}, std::byte{0}}), "malformed hello"},
      {handshake::side::server, type_keepalive, {}, "frame type 61445 during the handshake"},
      {handshake::side::server, 42, {}, "frame type 42 during the handshake"},
      {handshake::side::server, type_refused, {}, "refused: no reason given"},
  };
  for (const auto& c : cases) {
    auto end = make(c.side, "t", "", "n", 3);
    auto step = end.on_frame(header_of(c.type, 1), c.payload);
    EXPECT_EQ(step.what, handshake::step::action::fail) << c.why;
    EXPECT_EQ(step.why, c.why);
    EXPECT_EQ(end.where(), handshake::phase::failed) << c.why;
    // Nothing is accepted after a failure, a correct hello included.
    auto again = end.on_frame(header_of(type_hello, 1), hello_with({std::byte{0}}));
    EXPECT_EQ(again.what, handshake::step::action::fail);
  }
  // Only frame types outside the handshake are counted as bad headers.
  auto end = make(handshake::side::server, "t", "", "n", 3);
  EXPECT_EQ(end.on_frame(header_of(42, 1), {}).drop, drop_reason::bad_header);
  auto end2 = make(handshake::side::server, "t", "", "n", 3);
  EXPECT_EQ(end2.on_frame(header_of(type_ready, 1), {}).drop, drop_reason::none);

  // The client: a challenge before hello, a short challenge, a ready port of 0 or above 65535.
  auto client = make(handshake::side::client, "t", "", "c", 4);
  EXPECT_EQ(client.on_frame(header_of(type_challenge, 0), nonce_bytes).why, "unexpected challenge");
  auto client2 = make(handshake::side::client, "t", "", "c", 4);
  (void)client2.hello();
  EXPECT_EQ(client2.on_frame(header_of(type_challenge, 0), std::vector<std::byte>(31)).why, "malformed challenge");
  for (std::uint32_t port : {0u, 65536u}) {
    pair_of_ends e{"t", "t"};
    ASSERT_EQ(e.run().what, handshake::step::action::listen);
    std::vector<std::byte> p(4);
    for (int i = 0; i < 4; ++i)
      p[static_cast<std::size_t>(i)] = static_cast<std::byte>(port >> (8 * i));
    EXPECT_EQ(e.server.on_frame(header_of(type_ready, 5), p).why, "malformed ready") << port;
  }
}

TEST(handshake, a_pending_server_is_one_that_has_not_seen_a_proof) {
  auto server = make(handshake::side::server, "t", "", "n", 3);
  EXPECT_TRUE(server.pending());
  std::vector<std::byte> hello(32, std::byte{1});
  hello.push_back(std::byte{0});
  ASSERT_EQ(server.on_frame(header_of(type_hello, 1), hello).what, handshake::step::action::send);
  EXPECT_TRUE(server.pending());
  EXPECT_EQ(server.where(), handshake::phase::awaiting_auth);
  EXPECT_FALSE(make(handshake::side::client, "t", "", "n", 3).pending());
}

TEST(handshake, the_frame_cutter_refuses_what_is_not_a_handshake_frame_and_keeps_the_bytes) {
  // Not the magic.
  std::vector<std::byte> junk(64, std::byte{'x'});
  auto cut = next_handshake_frame(junk);
  EXPECT_EQ(cut.what, handshake_cut::result::malformed);
  EXPECT_EQ(cut.reason, drop_reason::bad_magic);
  EXPECT_EQ(junk.size(), 64u);

  // A payload longer than a handshake's: refused from the header alone.
  frame_header h = header_of(type_hello, 1);
  std::vector<std::byte> big(max_handshake_payload + 1);
  auto header = encode_header(h, big);
  std::vector<std::byte> in(header.begin(), header.end());
  cut = next_handshake_frame(in);
  EXPECT_EQ(cut.what, handshake_cut::result::malformed);
  EXPECT_EQ(cut.reason, drop_reason::oversize);

  // A payload whose checksum does not match.
  const std::vector<std::byte> payload(40, std::byte{3});
  header = encode_header(h, payload);
  in.assign(header.begin(), header.end());
  in.insert(in.end(), payload.begin(), payload.end());
  in.back() ^= std::byte{1};
  cut = next_handshake_frame(in);
  EXPECT_EQ(cut.what, handshake_cut::result::malformed);
  EXPECT_EQ(cut.reason, drop_reason::bad_checksum) << cut.why;

  // Two frames in one read come out one after the other.
  in.assign(header.begin(), header.end());
  in.insert(in.end(), payload.begin(), payload.end());
  const auto one = in;
  in.insert(in.end(), one.begin(), one.end());
  for (int i = 0; i < 2; ++i) {
    cut = next_handshake_frame(in);
    ASSERT_EQ(cut.what, handshake_cut::result::frame) << cut.why;
    EXPECT_EQ(cut.payload, payload);
    EXPECT_EQ(cut.wire_size, one.size());
  }
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(next_handshake_frame(in).what, handshake_cut::result::need_more);
}

}  // namespace
}  // namespace rekindle::transport
