// Bytes on the wire that no messenger would send: a raw UCX client feeds a messenger malformed
// frames, before and after a correct token handshake, and checks that each is dropped and counted
// under its reason, and that nothing reaches the application.

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>

#include "transport/auth.hpp"
#include "transport/frame.hpp"
#include "transport/messenger.hpp"
#include "transport/ucx.hpp"

namespace rekindle::transport {
namespace {

using namespace std::chrono_literals;

constexpr unsigned frame_am_id = 7;  // the messenger's active-message id
constexpr std::uint16_t type_hello = first_reserved_type, type_challenge = first_reserved_type + 1,
                        type_auth = first_reserved_type + 2, type_welcome = first_reserved_type + 3,
                        type_refused = first_reserved_type + 4;

// A UCX client that speaks the frame format by hand.
class raw_client {
 public:
  explicit raw_client(std::uint16_t port) {
    context_ = std::move(*ucx_context::create({.active_messages = true, .wakeup = false, .net_devices = "lo"}));
    worker_ = std::move(*ucx_worker::create(*context_, false));
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = frame_am_id;
    am.cb = &raw_client::on_am;
    am.arg = this;
    EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_->get(), &am), UCS_OK);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    params.sockaddr.addrlen = sizeof addr;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    EXPECT_EQ(ucp_ep_create(worker_->get(), &params, &ep_), UCS_OK);
  }
  ~raw_client() {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep_, &p);
    while (req != nullptr && !UCS_PTR_IS_ERR(req) && ucp_request_check_status(req) == UCS_INPROGRESS)
      ucp_worker_progress(worker_->get());
    if (req != nullptr && !UCS_PTR_IS_ERR(req))
      ucp_request_free(req);
  }

  void send_raw(std::span<const std::byte> header, std::span<const std::byte> payload) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
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

  // Steps 1, 3 and 5 of the token handshake (see make_proof).
  bool handshake(const std::string& token) {
    const nonce mine = random_nonce();
    frame_header hello;
    hello.type = type_hello;
    std::vector<std::byte> body(mine.begin(), mine.end());
    body.push_back(std::byte{3});
    for (char c : std::string{"raw"})
      body.push_back(static_cast<std::byte>(c));
    send_frame(hello, body);
    auto challenge = receive({type_challenge});
    if (!challenge || challenge->second.size() < 32)
      return false;
    nonce theirs;
    std::memcpy(theirs.data(), challenge->second.data(), 32);
    frame_header auth;
    auth.type = type_auth;
    const auto p = make_proof(token, "client", mine, theirs);
    send_frame(auth, p);
    auto answer = receive({type_welcome, type_refused});
    return answer && answer->first.type == type_welcome;
  }

 private:
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
  server() {
    messenger_options o;
    o.name = "server";
    o.listen_host = "127.0.0.1";
    o.token = token;
    o.net_devices = "lo";
    o.max_frame_size = 1 << 16;
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
};

std::vector<std::byte> valid_header(std::span<const std::byte> payload) {
  frame_header h;
  h.type = 5;
  h.dst_actor = "supervisor";
  return encode_header(h, payload);
}

TEST(wire, malformed_headers_from_an_unauthenticated_peer_are_dropped_by_reason) {
  server s;
  raw_client c{s.m->port()};
  const std::vector<std::byte> payload(10, std::byte{1});

  auto bad = valid_header(payload);
  bad[0] = std::byte{0};
  c.send_raw(bad, payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::bad_magic, 1));

  bad = valid_header(payload);
  bad[4] = std::byte{77};
  c.send_raw(bad, payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::bad_version, 1));

  bad = valid_header(payload);
  c.send_raw(std::span{bad}.first(12), payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::truncated, 1));

  // A well-formed frame, but its sender never authenticated.
  c.send_raw(valid_header(payload), payload);
  ASSERT_TRUE(s.wait_dropped(drop_reason::unauthenticated, 1));

  std::lock_guard lock{s.mutex};
  EXPECT_TRUE(s.delivered.empty());
}

TEST(wire, bad_payloads_from_an_authenticated_peer_are_dropped_then_good_frames_flow) {
  server s;
  raw_client c{s.m->port()};
  ASSERT_TRUE(c.handshake(token));

  std::vector<std::byte> payload(100, std::byte{7});
  auto header = valid_header(payload);
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
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    {
      std::lock_guard lock{s.mutex};
      if (!s.delivered.empty())
        break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the good frame never arrived";
  }
  std::lock_guard lock{s.mutex};
  ASSERT_EQ(s.delivered.size(), 1u);
  EXPECT_EQ(s.delivered[0].payload.size(), payload.size());
  EXPECT_GE(s.m->stats().dropped_total(), 203u);
}

TEST(wire, a_wrong_token_in_a_hand_made_handshake_is_refused) {
  server s;
  raw_client c{s.m->port()};
  EXPECT_FALSE(c.handshake("some-other-token-0123456789"));
  EXPECT_EQ(s.m->stats().peers_refused, 1u);
}

}  // namespace
}  // namespace rekindle::transport
