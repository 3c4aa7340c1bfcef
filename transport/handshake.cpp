#include "transport/handshake.hpp"

#include <cstring>
#include <utility>

#include "common/check.hpp"

namespace rekindle::transport {

namespace {

// Little-endian writers and readers of handshake payloads.
class payload_writer {
 public:
  void bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void u8(std::uint8_t v) { out_.push_back(std::byte{v}); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
      u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i)
      u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  // A length byte, then at most 255 bytes of `s`.
  void string(std::string_view s) {
    const auto n = static_cast<std::uint8_t>(std::min<std::size_t>(s.size(), 255));
    u8(n);
    bytes(std::as_bytes(std::span{s.data(), n}));
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class payload_reader {
 public:
  explicit payload_reader(std::span<const std::byte> in) : in_(in) {}
  bool bytes(std::span<std::byte> out) {
    if (in_.size() < out.size())
      return false;
    std::memcpy(out.data(), in_.data(), out.size());
    in_ = in_.subspan(out.size());
    return true;
  }
  bool u8(std::uint8_t& v) {
    std::byte b{};
    if (!bytes(std::span{&b, 1}))
      return false;
    v = static_cast<std::uint8_t>(b);
    return true;
  }
  bool u32(std::uint32_t& v) { return little_endian(v); }
  bool u64(std::uint64_t& v) { return little_endian(v); }
  bool string(std::string& s) {
    std::uint8_t n = 0;
    if (!u8(n) || in_.size() < n)
      return false;
    s.assign(reinterpret_cast<const char*>(in_.data()), n);
    in_ = in_.subspan(n);
    return true;
  }
  [[nodiscard]] bool empty() const noexcept { return in_.empty(); }

 private:
  template <typename T>
  bool little_endian(T& v) {
    v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      std::uint8_t b = 0;
      if (!u8(b))
        return false;
      v |= static_cast<T>(b) << (8 * i);
    }
    return true;
  }

  std::span<const std::byte> in_;
};

handshake_cut malformed(drop_reason r, std::string why) {
  handshake_cut c;
  c.what = handshake_cut::result::malformed;
  c.reason = r;
  c.why = std::move(why);
  return c;
}

}  // namespace

handshake_cut next_handshake_frame(std::vector<std::byte>& in) {
  if (in.size() < sizeof frame_magic)
    return {};
  std::uint32_t magic = 0;
  for (std::size_t i = 0; i < sizeof magic; ++i)
    magic |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  if (magic != frame_magic)
    return malformed(drop_reason::bad_magic, "not a rekindle frame");
  if (in.size() < frame_fixed_size)
    return {};
  const auto src_len = static_cast<std::size_t>(in[40]);
  const auto dst_len = static_cast<std::size_t>(in[41]);
  if (src_len > max_actor_name || dst_len > max_actor_name)
    return malformed(drop_reason::bad_header, "actor name too long");
  const auto header_size = frame_fixed_size + src_len + dst_len;
  if (in.size() < header_size)
    return {};
  handshake_cut c;
  std::string detail;
  if (const auto r = decode_header({in.data(), header_size}, max_handshake_payload, c.header, &detail);
      r != drop_reason::none)
    return malformed(r, std::string{to_string(r)} + (detail.empty() ? "" : " (" + detail + ")"));
  if (in.size() - header_size < c.header.payload_length)
    return {};
  const std::span<const std::byte> payload{in.data() + header_size, static_cast<std::size_t>(c.header.payload_length)};
  if (const auto r = check_payload(c.header, payload); r != drop_reason::none)
    return malformed(r, std::string{to_string(r)});
  c.what = handshake_cut::result::frame;
  c.payload.assign(payload.begin(), payload.end());
  c.wire_size = header_size + payload.size();
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(c.wire_size));
  return c;
}

handshake::handshake(side s, settings set)
    : side_(s), settings_(std::move(set)), phase_(s == side::client ? phase::start : phase::awaiting_hello) {
  if (!settings_.nonces)
    settings_.nonces = random_nonce;
}

nonce handshake::next_nonce() { return settings_.nonces(); }

handshake::step handshake::fail(std::string why) {
  phase_ = phase::failed;
  step s;
  s.what = step::action::fail;
  s.why = std::move(why);
  return s;
}

handshake::step handshake::send(std::uint16_t type, std::vector<std::byte> payload) {
  step s;
  s.what = step::action::send;
  s.reply = {type, std::move(payload)};
  return s;
}

handshake_frame handshake::hello() {
  RK_CHECK(side_ == side::client && phase_ == phase::start, "hello opens a client's handshake, once");
  client_nonce_ = next_nonce();
  phase_ = phase::awaiting_challenge;
  payload_writer w;
  w.bytes(client_nonce_);
  w.string(settings_.name);
  return {type_hello, w.take()};
}

handshake::step handshake::on_frame(const frame_header& h, std::span<const std::byte> payload) {
  if (phase_ == phase::failed)
    return fail("a frame after the handshake failed");
  payload_reader r{payload};
  switch (h.type) {
    case type_hello: {
      if (phase_ != phase::awaiting_hello)
        return fail("unexpected hello");
      if (!r.bytes(client_nonce_) || !r.string(peer_name_) || !r.empty())
        return fail("malformed hello");
      peer_node_ = h.src_node;
      server_nonce_ = next_nonce();
      phase_ = phase::awaiting_auth;
      payload_writer w;
      w.bytes(server_nonce_);
      return send(type_challenge, w.take());
    }
    case type_challenge: {
      if (phase_ != phase::awaiting_challenge)
        return fail("unexpected challenge");
      if (!r.bytes(server_nonce_) || !r.empty())
        return fail("malformed challenge");
      phase_ = phase::awaiting_welcome;
      payload_writer w;
      w.bytes(make_proof(settings_.token, "client", client_nonce_, server_nonce_));
      return send(type_auth, w.take());
    }
    case type_auth: {
      if (phase_ != phase::awaiting_auth)
        return fail("unexpected auth");
      proof client_proof{};
      if (!r.bytes(client_proof) || !r.empty())
        return fail("malformed auth");
      const auto role = verify_client(client_proof, settings_.token, settings_.readonly_token, client_nonce_,
                                      server_nonce_);
      if (!role) {
        phase_ = phase::failed;
        payload_writer w;
        w.string("wrong cluster token");
        step s;
        s.what = step::action::refuse;
        s.reply = {type_refused, w.take()};
        s.why = "wrong cluster token";
        return s;
      }
      role_ = *role;
      for (auto b : next_nonce())
        ticket_ = (ticket_ << 8) | static_cast<std::uint8_t>(b);
      payload_writer w;
      w.u8(static_cast<std::uint8_t>(role_));
      const auto& key = role_ == peer_role::admin ? settings_.token : settings_.readonly_token;
      w.bytes(make_proof(key, "server", client_nonce_, server_nonce_));
      w.string(settings_.name);
      w.u64(ticket_);
      phase_ = phase::awaiting_ready;
      return send(type_welcome, w.take());
    }
    case type_welcome: {
      if (phase_ != phase::awaiting_welcome)
        return fail("unexpected welcome");
      std::uint8_t role = 0;
      proof server_proof{};
      std::string name;
      std::uint64_t ticket = 0;
      if (!r.u8(role) || !r.bytes(server_proof) || !r.string(name) || !r.u64(ticket) || !r.empty() ||
          (role != static_cast<std::uint8_t>(peer_role::admin) && role != static_cast<std::uint8_t>(peer_role::readonly)))
        return fail("malformed welcome");
      if (!proofs_equal(server_proof, make_proof(settings_.token, "server", client_nonce_, server_nonce_)))
        return fail("the server could not prove it holds the cluster token");
      role_ = static_cast<peer_role>(role);
      peer_name_ = std::move(name);
      peer_node_ = h.src_node;
      ticket_ = ticket;
      phase_ = phase::awaiting_listener;
      step s;
      s.what = step::action::listen;
      return s;
    }
    case type_ready: {
      if (phase_ != phase::awaiting_ready)
        return fail("unexpected ready");
      std::uint32_t port = 0;
      if (!r.u32(port) || !r.empty() || port == 0 || port > 65535)
        return fail("malformed ready");
      phase_ = phase::done;
      step s;
      s.what = step::action::connect;
      s.port = static_cast<std::uint16_t>(port);
      return s;
    }
    case type_refused: {
      std::string reason;
      (void)r.string(reason);
      return fail("refused: " + (reason.empty() ? std::string{"no reason given"} : reason));
    }
    default: {
      auto s = fail("frame type " + std::to_string(h.type) + " during the handshake");
      s.drop = drop_reason::bad_header;
      return s;
    }
  }
}

handshake_frame handshake::ready(std::uint16_t port) {
  RK_CHECK(side_ == side::client && phase_ == phase::awaiting_listener, "ready follows a welcome, once");
  phase_ = phase::awaiting_attached;
  payload_writer w;
  w.u32(port);
  return {type_ready, w.take()};
}

std::vector<std::byte> handshake::attached() const {
  RK_CHECK(side_ == side::server && phase_ == phase::done, "attached follows a ready");
  payload_writer w;
  w.u64(ticket_);
  return w.take();
}

bool handshake::accepts_attached(const frame_header& h, std::span<const std::byte> payload) const {
  if (side_ != side::client || phase_ != phase::awaiting_attached || h.type != type_attached ||
      check_payload(h, payload) != drop_reason::none)
    return false;
  payload_reader r{payload};
  std::uint64_t ticket = 0;
  return r.u64(ticket) && r.empty() && ticket == ticket_;
}

bool handshake::authenticated() const noexcept {
  switch (phase_) {
    case phase::awaiting_ready:
    case phase::done:
    case phase::awaiting_listener:
    case phase::awaiting_attached:
      return true;
    default:
      return false;
  }
}

bool handshake::pending() const noexcept {
  return side_ == side::server && (phase_ == phase::awaiting_hello || phase_ == phase::awaiting_auth);
}

std::string_view to_string(handshake::phase p) noexcept {
  switch (p) {
    case handshake::phase::start: return "start";
    case handshake::phase::awaiting_hello: return "awaiting hello";
    case handshake::phase::awaiting_challenge: return "awaiting challenge";
    case handshake::phase::awaiting_auth: return "awaiting auth";
    case handshake::phase::awaiting_welcome: return "awaiting welcome";
    case handshake::phase::awaiting_listener: return "awaiting listener";
    case handshake::phase::awaiting_ready: return "awaiting ready";
    case handshake::phase::awaiting_attached: return "awaiting attached";
    case handshake::phase::done: return "done";
    case handshake::phase::failed: return "failed";
  }
  return "unknown";
}

}  // namespace rekindle::transport
