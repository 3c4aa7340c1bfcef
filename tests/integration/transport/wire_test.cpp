// Bytes on the wire that no messenger would send: a raw UCX client feeds a messenger malformed
// frames, before and after a correct token handshake, and checks that each is dropped and counted
// under its reason, and that nothing reaches the application.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "transport/auth.hpp"
#include "transport/frame.hpp"
#include "transport/handshake.hpp"
#include "transport/messenger.hpp"
#include "transport/ucx.hpp"

namespace rekindle::transport {
namespace {

using namespace std::chrono_literals;

constexpr unsigned frame_am_id = 7;  // the messenger's active-message id

// Writes `bytes` to a blocking socket; false when the other side closed it.
bool write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

// A TCP connection to a messenger's port, opened by hand.
struct tcp_connection {
  int fd = -1;
  explicit tcp_connection(std::uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    timeval tv{.tv_sec = 20, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~tcp_connection() {
    if (fd >= 0)
      ::close(fd);
  }
  tcp_connection(const tcp_connection&) = delete;
  tcp_connection& operator=(const tcp_connection&) = delete;

  bool send(std::span<const std::byte> bytes) { return write_all(fd, bytes); }
  bool send_frame(frame_header h, std::span<const std::byte> payload) {
    const auto header = encode_header(h, payload);
    return send(header) && send(payload);
  }
  // Reads exactly n bytes; false at the end of the stream or after 20 s.
  bool read_exact(std::span<std::byte> out) {
    while (!out.empty()) {
      const auto n = ::recv(fd, out.data(), out.size(), 0);
      if (n <= 0)
        return false;
      out = out.subspan(static_cast<std::size_t>(n));
    }
    return true;
  }
  std::optional<std::pair<frame_header, std::vector<std::byte>>> receive_frame() {
    std::vector<std::byte> header(frame_fixed_size);
    if (!read_exact(header))
      return std::nullopt;
    header.resize(frame_fixed_size + static_cast<std::size_t>(header[40]) + static_cast<std::size_t>(header[41]));
    if (!read_exact(std::span{header}.subspan(frame_fixed_size)))
      return std::nullopt;
    frame_header h;
    if (decode_header(header, 1 << 20, h) != drop_reason::none)
      return std::nullopt;
    std::vector<std::byte> payload(h.payload_length);
    if (!read_exact(payload))
      return std::nullopt;
    return std::pair{h, std::move(payload)};
  }
  // True when the server closes the connection within 20 s (after any bytes it still sends).
  bool closed_by_server() {
    std::byte b[256];
    while (true) {
      const auto n = ::recv(fd, b, sizeof b, 0);
      if (n == 0)
        return true;
      if (n < 0)
        return errno == ECONNRESET;
    }
  }
};

std::uint64_t read_u64(std::span<const std::byte> b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<std::uint8_t>(b[static_cast<std::size_t>(i)]);
  return v;
}

// A client that speaks the handshake and the frame format by hand: the token handshake on a TCP
// connection, then a UCX listener of its own for the server's endpoint.
class raw_client {
 public:
  explicit raw_client(std::uint16_t port) : tcp_(port) {
    context_ = std::move(*ucx_context::create({.active_messages = true, .wakeup = false, .net_devices = "lo"}));
    worker_ = std::move(*ucx_worker::create(*context_, false));
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = frame_am_id;
    am.cb = &raw_client::on_am;
    am.arg = this;
    EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_->get(), &am), UCS_OK);
  }
  ~raw_client() {
    if (listener_ != nullptr)
      ucp_listener_destroy(listener_);
    if (ep_ == nullptr)
      return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep_, &p);
    while (req != nullptr && !UCS_PTR_IS_ERR(req) && ucp_request_check_status(req) == UCS_INPROGRESS)
      ucp_worker_progress(worker_->get());
    if (req != nullptr && !UCS_PTR_IS_ERR(req))
      ucp_request_free(req);
  }

  // With `reply` false the frame carries no sender endpoint, as from a stranger.
  void send_raw(std::span<const std::byte> header, std::span<const std::byte> payload, bool reply = true) {
    ASSERT_NE(ep_, nullptr);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = reply ? UCP_AM_SEND_FLAG_REPLY : 0;
    void* req = ucp_am_send_nbx(ep_, frame_am_id, header.data(), header.size(), payload.data(), payload.size(), &p);
    ASSERT_FALSE(UCS_PTR_IS_ERR(req));
    while (req != nullptr && ucp_request_check_status(req) == UCS_INPROGRESS)
      ucp_worker_progress(worker_->get());
    if (req != nullptr)
      ucp_request_free(req);
  }

  void send_frame(frame_header h, std::span<const std::byte> payload) {
    const auto header = encode_header(h, payload);
    send_raw(header, payload);
  }

  // Steps 1, 3 and 5 of the token handshake (see make_proof) on the TCP connection, then a UCX
  // listener whose port goes to the server, and the endpoint the server connects to it.
  bool handshake(const std::string& token) {
    const nonce mine = random_nonce();
    frame_header hello;
    hello.type = type_hello;
    std::vector<std::byte> body(mine.begin(), mine.end());
    body.push_back(std::byte{3});
    for (char c : std::string{"raw"})
      body.push_back(static_cast<std::byte>(c));
    if (!tcp_.send_frame(hello, body))
      return false;
    auto challenge = tcp_.receive_frame();
    if (!challenge || challenge->first.type != type_challenge || challenge->second.size() < 32)
      return false;
    nonce theirs;
    std::memcpy(theirs.data(), challenge->second.data(), 32);
    frame_header auth;
    auth.type = type_auth;
    const auto p = make_proof(token, "client", mine, theirs);
    if (!tcp_.send_frame(auth, p))
      return false;
    auto answer = tcp_.receive_frame();
    if (!answer || answer->first.type != type_welcome)
      return false;
    // role(1) proof(32) name(1+n) ticket(8)
    const auto& w = answer->second;
    ticket_ = read_u64(std::span{w}.subspan(34 + static_cast<std::size_t>(w.at(33)), 8));

    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    params.sockaddr.addrlen = sizeof addr;
    params.conn_handler.cb = &raw_client::on_conn;
    params.conn_handler.arg = this;
    EXPECT_EQ(ucp_listener_create(worker_->get(), &params, &listener_), UCS_OK);
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    EXPECT_EQ(ucp_listener_query(listener_, &attr), UCS_OK);
    const auto port = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
    frame_header ready;
    ready.type = type_ready;
    std::vector<std::byte> port_bytes;
    for (int i = 0; i < 4; ++i)
      port_bytes.push_back(static_cast<std::byte>(static_cast<std::uint32_t>(port) >> (8 * i)));
    if (!tcp_.send_frame(ready, port_bytes))
      return false;
    auto attached = receive({type_attached});
    return attached.has_value() && ep_ != nullptr;
  }

  // Waits for a frame of one of `types` from the server.
  std::optional<std::pair<frame_header, std::vector<std::byte>>> receive(std::initializer_list<std::uint16_t> types) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker_->get());
      for (auto it = inbox_.begin(); it != inbox_.end(); ++it)
        if (std::find(types.begin(), types.end(), it->first.type) != types.end()) {
          auto out = std::move(*it);
          inbox_.erase(it);
          return out;
        }
    }
    return std::nullopt;
  }

  [[nodiscard]] std::uint64_t ticket() const { return ticket_; }
  tcp_connection& tcp() { return tcp_; }

 private:
  static void on_conn(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<raw_client*>(arg);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    EXPECT_EQ(ucp_ep_create(self->worker_->get(), &params, &self->ep_), UCS_OK);
  }

  static ucs_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                            const ucp_am_recv_param_t*) {
    auto* self = static_cast<raw_client*>(arg);
    frame_header h;
    if (decode_header({static_cast<const std::byte*>(header), header_length}, 1 << 20, h) == drop_reason::none) {
      const auto* d = static_cast<const std::byte*>(data);
      self->inbox_.emplace_back(h, std::vector<std::byte>(d, d + length));
    }
    return UCS_OK;
  }

  tcp_connection tcp_;
  std::uint64_t ticket_ = 0;
  ucp_listener_h listener_ = nullptr;
  std::optional<ucx_context> context_;
  std::optional<ucx_worker> worker_;
  ucp_ep_h ep_ = nullptr;
  std::deque<std::pair<frame_header, std::vector<std::byte>>> inbox_;
};

const std::string token = "wire-test-token-0123456789";

struct server {
  std::mutex mutex;
  std::vector<frame> delivered;
  std::unique_ptr<messenger> m;
  explicit server(std::chrono::nanoseconds handshake_timeout = 5s) {
    messenger_options o;
    o.name = "server";
    o.listen_host = "127.0.0.1";
    o.token = token;
    o.net_devices = "lo";
    o.max_frame_size = 1 << 16;
    o.handshake_timeout = handshake_timeout;
    auto started = messenger::start(o, {.on_frame = [this](const peer_info&, frame&& f) {
                                          std::lock_guard lock{mutex};
                                          delivered.push_back(std::move(f));
                                        }});
    EXPECT_TRUE(started) << started.error();
    m = std::move(*started);
  }
  std::uint64_t dropped(drop_reason r) const { return m->stats().dropped_of(r); }
  bool wait_dropped(drop_reason r, std::uint64_t n) const {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (dropped(r) < n)
      if (std::chrono::steady_clock::now() > deadline)
        return false;
    return true;
  }
  std::size_t delivered_count() {
    std::lock_guard lock{mutex};
    return delivered.size();
  }
  bool wait_delivered(std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (delivered_count() < n) {
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
};

// A messenger that connects to `s` with the token; it sends one frame per call of send_one.
struct real_client {
  std::unique_ptr<messenger> m;
  std::optional<peer_info> peer;
  explicit real_client(server& s) {
    messenger_options o;
    o.name = "client";
    o.token = token;
    o.net_devices = "lo";
    auto started = messenger::start(o, {});
    EXPECT_TRUE(started) << started.error();
    m = std::move(*started);
    auto p = m->connect_blocking("127.0.0.1", s.m->port(), 20s);
    EXPECT_TRUE(p) << p.error();
    if (p)
      peer = *p;
  }
  void send_one() {
    frame f;
    f.header.type = 5;
    f.header.dst_actor = "supervisor";
    f.payload = shared_bytes{std::vector<std::byte>(16, std::byte{3})};
    m->send(peer->id, std::move(f));
  }
};

// A peer that connected before whatever a test does, and one that connects after it, both get
// their frames through.
void the_port_keeps_serving(server& s, real_client& before) {
  const auto n = s.delivered_count();
  before.send_one();
  ASSERT_TRUE(s.wait_delivered(n + 1)) << "a peer connected before lost its connection";
  real_client after{s};
  ASSERT_TRUE(after.peer) << "a new peer could not connect";
  after.send_one();
  ASSERT_TRUE(s.wait_delivered(n + 2)) << "a new peer's frame never arrived";
}

std::vector<std::byte> valid_header(std::span<const std::byte> payload) {
  frame_header h;
  h.type = 5;
  h.dst_actor = "supervisor";
  return encode_header(h, payload);
}

TEST(wire, frames_that_name_no_known_endpoint_are_dropped_whatever_they_hold) {
  server s;
  raw_client c{s.m->port()};
  ASSERT_TRUE(c.handshake(token));
  const std::vector<std::byte> payload(10, std::byte{1});
  auto bad = valid_header(payload);
  bad[0] = std::byte{0};
  c.send_raw(bad, payload, false);
  c.send_raw(std::span{bad}.first(12), payload, false);
  c.send_raw(valid_header(payload), payload, false);
  ASSERT_TRUE(s.wait_dropped(drop_reason::unauthenticated, 3));
  EXPECT_EQ(s.delivered_count(), 0u);
  // The same frame from the endpoint of the handshake is delivered.
  c.send_raw(valid_header(payload), payload);
  ASSERT_TRUE(s.wait_delivered(1));
}

TEST(wire, bad_frames_from_an_authenticated_peer_are_dropped_by_reason_then_good_frames_flow) {
  server s;
  raw_client c{s.m->port()};
  ASSERT_TRUE(c.handshake(token));

  std::vector<std::byte> payload(100, std::byte{7});
  auto header = valid_header(payload);

  auto bad = header;
  bad[0] = std::byte{0};
  c.send_raw(bad, payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::bad_magic, 1));

  bad = header;
  bad[4] = std::byte{77};
  c.send_raw(bad, payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::bad_version, 1));

  c.send_raw(std::span{header}.first(12), payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::truncated, 1));

  auto tampered = payload;
  tampered[50] = std::byte{8};
  c.send_raw(header, tampered);
  ASSERT_TRUE(s.wait_dropped(drop_reason::bad_checksum, 1));

  c.send_raw(header, std::span{payload}.first(60));
  ASSERT_TRUE(s.wait_dropped(drop_reason::bad_length, 1));

  std::vector<std::byte> huge(100000, std::byte{1});
  c.send_raw(valid_header(huge), huge);
  ASSERT_TRUE(s.wait_dropped(drop_reason::oversize, 1));

  // Random headers never crash the server.
  std::mt19937_64 rng{7};
  for (int i = 0; i < 200; ++i) {
    std::vector<std::byte> junk(rng() % 200);
    for (auto& b : junk)
      b = std::byte(rng());
    c.send_raw(junk, payload);
  }

  c.send_raw(header, payload);
  ASSERT_TRUE(s.wait_delivered(1)) << "the good frame never arrived";
  std::lock_guard lock{s.mutex};
  ASSERT_EQ(s.delivered.size(), 1u);
  EXPECT_EQ(s.delivered[0].payload.size(), payload.size());
  EXPECT_GE(s.m->stats().dropped_total(), 206u);
}

TEST(wire, a_wrong_token_in_a_hand_made_handshake_is_refused) {
  server s;
  raw_client c{s.m->port()};
  EXPECT_FALSE(c.handshake("some-other-token-0123456789"));
  EXPECT_EQ(s.m->stats().peers_refused, 1u);
  EXPECT_TRUE(c.tcp().closed_by_server());
}

// The length header of UCX's own connection manager set to 2^64-1: this packet once aborted a
// daemon inside UCX. The port now speaks only the handshake, and the frame it reads is bounded.
TEST(wire, the_packet_that_aborted_the_ucx_connection_manager_closes_one_connection) {
  server s;
  real_client before{s};
  tcp_connection t{s.m->port()};
  std::vector<std::byte> packet(8, std::byte{0xff});
  packet.push_back(std::byte{0});
  packet.resize(packet.size() + 256, std::byte{'x'});
  ASSERT_TRUE(t.send(packet));
  EXPECT_TRUE(t.closed_by_server());
  EXPECT_GE(s.dropped(drop_reason::bad_magic), 1u);
  the_port_keeps_serving(s, before);
}

TEST(wire, a_handshake_frame_announcing_a_huge_payload_is_refused_before_it_is_read) {
  server s;
  tcp_connection t{s.m->port()};
  frame_header h;
  h.type = type_hello;
  std::vector<std::byte> header = encode_header(h, {});
  const std::uint64_t claimed = 1ull << 40;
  for (int i = 0; i < 8; ++i)
    header[24 + static_cast<std::size_t>(i)] = static_cast<std::byte>(claimed >> (8 * i));
  ASSERT_TRUE(t.send(header));
  EXPECT_TRUE(t.closed_by_server());
  EXPECT_EQ(s.dropped(drop_reason::oversize), 1u);
}

TEST(wire, random_bytes_on_hundreds_of_connections_end_those_connections_only) {
  server s{1s};
  real_client before{s};
  std::mt19937_64 rng{11};
  for (int i = 0; i < 300; ++i) {
    tcp_connection t{s.m->port()};
    std::vector<std::byte> junk(rng() % 3000);
    for (auto& b : junk)
      b = std::byte(rng());
    // Every third starts like a frame, so the bytes get past the magic.
    if (i % 3 == 0 && junk.size() >= 8) {
      const std::vector<std::byte> magic{std::byte{'R'}, std::byte{'K'}, std::byte{'N'}, std::byte{'D'}, std::byte{1}};
      std::copy(magic.begin(), magic.end(), junk.begin());
    }
    (void)t.send(junk);
  }
  the_port_keeps_serving(s, before);
  EXPECT_EQ(s.delivered_count(), 2u);
}

TEST(wire, a_connection_that_sends_nothing_is_closed_after_the_handshake_timeout) {
  server s{500ms};
  tcp_connection t{s.m->port()};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(t.closed_by_server());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 400ms);
}

TEST(wire, hundreds_of_silent_connections_at_once_do_not_lock_out_a_real_peer) {
  server s;
  real_client before{s};
  std::vector<std::unique_ptr<tcp_connection>> silent;
  for (int i = 0; i < 400; ++i)
    silent.push_back(std::make_unique<tcp_connection>(s.m->port()));
  the_port_keeps_serving(s, before);
  EXPECT_GE(s.m->stats().peers_refused, 100u) << "more connections than the handshake limit were kept";
}

TEST(wire, bytes_on_the_tcp_connection_after_the_handshake_end_the_peer) {
  server s;
  raw_client c{s.m->port()};
  ASSERT_TRUE(c.handshake(token));
  const std::vector<std::byte> junk(32, std::byte{9});
  ASSERT_TRUE(c.tcp().send(junk));
  EXPECT_TRUE(c.tcp().closed_by_server());
}

}  // namespace
}  // namespace rekindle::transport
