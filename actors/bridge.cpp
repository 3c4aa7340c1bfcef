#include "actors/bridge.hpp"

#include <unordered_set>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <spdlog/spdlog.h>

#include <cstring>

#include "common/logging.hpp"

namespace rekindle::actors {

namespace {

// CAF's binary deserializer with one more check: a sequence may not declare more elements than
// bytes remain (every element of every message type takes at least one byte).
class bounded_deserializer final : public caf::deserializer {
 public:
  bounded_deserializer(caf::actor_system& sys, std::span<const std::byte> bytes)
      : caf::deserializer(sys), inner_(sys, reinterpret_cast<const char*>(bytes.data()), bytes.size()) {}

  // Only rekindle's own message types: a name CAF knows besides (its config_value, actor handles)
  // would be decoded by CAF's code, which throws or needs a middleman on malformed bytes.
  caf::error begin_object(std::uint16_t& typenr, std::string& name) override {
    if (auto err = inner_.begin_object(typenr, name))
      return err;
    static const std::unordered_set<std::string> ours = [] {
      const auto names = message_type_names();
      return std::unordered_set<std::string>(names.begin(), names.end());
    }();
    // A message names its element types at once: "@<>+first+second".
    constexpr std::string_view prefix = "@<>+";
    if (typenr != 0 || !name.starts_with(prefix))
      return caf::make_error(caf::sec::unknown_type);
    for (std::size_t begin = prefix.size(); begin <= name.size();) {
      const auto end = std::min(name.find('+', begin), name.size());
      if (!ours.contains(name.substr(begin, end - begin)))
        return caf::make_error(caf::sec::unknown_type);
      begin = end + 1;
    }
    return caf::none;
  }
  caf::error end_object() override { return inner_.end_object(); }
  caf::error begin_sequence(std::size_t& size) override {
    if (auto err = inner_.begin_sequence(size))
      return err;
    if (size > inner_.remaining())
      return caf::make_error(caf::sec::end_of_stream);
    return caf::none;
  }
  caf::error end_sequence() override { return inner_.end_sequence(); }
  caf::error apply_raw(std::size_t num_bytes, void* data) override {
    if (num_bytes > inner_.remaining())
      return caf::make_error(caf::sec::end_of_stream);
    return inner_.apply_raw(num_bytes, data);
  }

 protected:
  caf::error apply_impl(std::int8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::uint8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::int16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::uint16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::int32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::uint32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::int64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::uint64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(float& x) override { return inner_.apply(x); }
  caf::error apply_impl(double& x) override { return inner_.apply(x); }
  caf::error apply_impl(long double& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_.apply(x); }

 private:
  caf::binary_deserializer inner_;
};

}  // namespace

caf::error decode_message(caf::actor_system& sys, std::span<const std::byte> bytes, caf::message& out) {
  bounded_deserializer source{sys, bytes};
  try {
    return source(out);
  } catch (const std::exception&) {
    // CAF's own decoders throw on some malformed input: the frame is refused, never the process.
    out = caf::message{};
    return caf::make_error(caf::sec::unknown_type);
  }
}

namespace {

constexpr std::uint16_t type_message = 1;  // payload: a serialised caf::message
constexpr std::uint16_t type_bulk = 2;     // payload: u32 header length, header message, bulk bytes

}  // namespace

void register_bridge_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<envelope>("envelope");
  cfg.add_message_type<peer_event>("peer_event");
}

bridge::bridge(caf::actor_system& sys) : system_(sys) {}

bridge::~bridge() { shutdown(); }

expected<std::unique_ptr<bridge>> bridge::start(caf::actor_system& sys, transport::messenger_options options) {
  std::unique_ptr<bridge> b{new bridge{sys}};
  auto* self = b.get();
  transport::messenger_handlers h;
  h.on_frame = [self](const transport::peer_info& from, transport::frame&& f) { self->on_frame(from, std::move(f)); };
  h.on_peer_up = [self](const transport::peer_info& p) { self->on_peer(p, true, ""); };
  h.on_peer_down = [self](const transport::peer_info& p, const status& why) { self->on_peer(p, false, why.message()); };
  RK_ASSIGN_OR_RETURN(b->messenger_, transport::messenger::start(std::move(options), std::move(h)));
  return b;
}

void bridge::shutdown() {
  if (messenger_)
    messenger_->shutdown();
}

void bridge::expose(const std::string& name, caf::actor a) {
  std::lock_guard lock{mutex_};
  exposed_[name] = std::move(a);
}

void bridge::watch_peers(caf::actor a) {
  std::lock_guard lock{mutex_};
  watchers_.push_back(std::move(a));
}

void bridge::set_epoch(epoch_t e) noexcept {
  std::uint64_t cur = epoch_.load();
  while (e.value() > cur && !epoch_.compare_exchange_weak(cur, e.value())) {
  }
  set_log_epoch(e.value());
}

std::uint16_t bridge::port() const noexcept { return messenger_->port(); }
transport::messenger_stats bridge::stats() const noexcept { return messenger_->stats(); }

std::string bridge::fence_summary() const {
  return "fence: " + std::to_string(stats().dropped_of(transport::drop_reason::stale_epoch)) + " stale dropped, " +
         std::to_string(stale_delivered()) + " stale delivered, " + std::to_string(not_from_leader()) +
         " not from the leader, " + std::to_string(refused()) + " refused";
}

void bridge::connect(const std::string& host, std::uint16_t port,
                     std::function<void(expected<transport::peer_info>)> done) {
  messenger_->connect(host, port, std::move(done));
}

expected<transport::peer_info> bridge::connect_blocking(const std::string& host, std::uint16_t port,
                                                        std::chrono::nanoseconds timeout) {
  return messenger_->connect_blocking(host, port, timeout);
}

void bridge::cut_off(node_id node, std::chrono::nanoseconds duration) {
  if (messenger_)
    messenger_->cut_off(node.value(), duration);
}

void bridge::throttle(node_id node, double bytes_per_second, std::chrono::nanoseconds duration) {
  if (messenger_ && bytes_per_second > 0)
    messenger_->throttle(node.value(), bytes_per_second, duration);
}

void bridge::close(transport::peer_id peer) { messenger_->close(peer); }

void bridge::send_message(transport::peer_id peer, const std::string& from, const std::string& to, epoch_t stamp,
                          const caf::message& msg) {
  std::vector<char> buf;
  caf::binary_serializer sink{system_, buf};
  if (auto err = sink(const_cast<caf::message&>(msg)); err || buf.empty()) {
    spdlog::error("bridge cannot serialise a message to {} ({}): {}", to, msg.content().stringify(), system_.render(err));
    return;
  }
  transport::frame f;
  f.header.type = type_message;
  f.header.epoch = stamp.value();
  f.header.src_actor = from;
  f.header.dst_actor = to;
  std::vector<std::byte> payload(buf.size());
  std::memcpy(payload.data(), buf.data(), buf.size());
  f.payload = transport::shared_bytes{std::move(payload)};
  messenger_->send(peer, std::move(f));
}

void bridge::send_bulk_message(transport::peer_id peer, const std::string& from, const std::string& to, epoch_t stamp,
                               const caf::message& header, const transport::shared_bytes& payload,
                               std::function<void(status)> done) {
  std::vector<char> buf;
  caf::binary_serializer sink{system_, buf};
  if (auto err = sink(const_cast<caf::message&>(header)); err || buf.empty()) {
    spdlog::error("bridge cannot serialise a bulk header to {}: {}", to, system_.render(err));
    if (done)
      done(status{errc::internal, "cannot serialise the bulk header"});
    return;
  }
  const auto header_len = static_cast<std::uint32_t>(buf.size());
  std::vector<std::byte> body(4 + buf.size() + payload.size());
  std::memcpy(body.data(), &header_len, 4);
  std::memcpy(body.data() + 4, buf.data(), buf.size());
  if (!payload.empty())
    std::memcpy(body.data() + 4 + buf.size(), payload.data(), payload.size());
  transport::frame f;
  f.header.type = type_bulk;
  f.header.epoch = stamp.value();
  f.header.src_actor = from;
  f.header.dst_actor = to;
  f.payload = transport::shared_bytes{std::move(body)};
  messenger_->send(peer, std::move(f), std::move(done));
}

void bridge::on_frame(const transport::peer_info& from, transport::frame&& f) {
  caf::actor target;
  {
    std::lock_guard lock{mutex_};
    if (auto it = exposed_.find(f.header.dst_actor); it != exposed_.end())
      target = it->second;
  }
  if (!target) {
    undeliverable_.fetch_add(1);
    spdlog::warn("frame for unknown actor '{}' from {} dropped", f.header.dst_actor, from.name);
    return;
  }
  envelope env{from.id, node_id{f.header.src_node}, f.header.src_actor, epoch_t{f.header.epoch},
               static_cast<std::uint8_t>(from.role)};
  auto bytes = f.payload.span();
  std::span<const std::byte> header_bytes = bytes;
  std::optional<transport::shared_bytes> bulk;
  if (f.header.type == type_bulk) {
    std::uint32_t n = 0;
    if (bytes.size() < 4 || (std::memcpy(&n, bytes.data(), 4), bytes.size() - 4 < n)) {
      undeliverable_.fetch_add(1);
      spdlog::warn("malformed bulk frame from {} dropped", from.name);
      return;
    }
    header_bytes = bytes.subspan(4, n);
    const auto rest = bytes.subspan(4 + n);
    bulk = transport::shared_bytes{std::make_shared<transport::shared_bytes>(f.payload), rest};
  } else if (f.header.type != type_message) {
    undeliverable_.fetch_add(1);
    spdlog::warn("frame of unknown type {} from {} dropped", f.header.type, from.name);
    return;
  }
  caf::message msg;
  if (auto err = decode_message(system_, header_bytes, msg); err || msg.empty()) {
    undeliverable_.fetch_add(1);
    spdlog::warn("undecodable message for '{}' from {} dropped: {}", f.header.dst_actor, from.name, system_.render(err));
    return;
  }
  if (!well_formed(msg)) {
    undeliverable_.fetch_add(1);
    spdlog::warn("message for '{}' from {} dropped: an enum field holds no value of its type", f.header.dst_actor,
                 from.name);
    return;
  }
  // Roles: a peer that connected here with the read-only token may ask, never command. Checked
  // here, for every actor of the process, not by each receiver.
  if (!from.outbound && from.role != transport::peer_role::admin && !read_only_may_send(msg)) {
    refused_.fetch_add(1);
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto last = last_refusal_log_ns_.load();
    if (now - last >= 1'000'000'000 && last_refusal_log_ns_.compare_exchange_strong(last, now))
      spdlog::warn("message for '{}' from {} (node {}) refused: its token is read-only and it may only send admin "
                   "requests; {} refused so far",
                   f.header.dst_actor, from.name, from.node, refused_.load());
    return;
  }
  // The leader's fence: with a standby, only the supervisor etcd names is obeyed.
  if (f.header.src_actor == "supervisor") {
    bool obey = true;
    {
      std::lock_guard lock{mutex_};
      obey = !leader_fenced_ || leader_ == from.id;
    }
    if (!obey) {
      not_from_leader_.fetch_add(1);
      spdlog::debug("{} from a supervisor that is not the leader ({}) dropped",
                    msg.content().stringify().substr(0, 40), from.name);
      return;
    }
  }
  // The fence: a message of an older epoch is never delivered. One that is delivered moves this
  // process's epoch forward at once, before its receiver acts on it: a message of the epoch
  // before, arriving behind it, cannot slip in while the receiver has not yet called set_epoch.
  if (const auto e = fenced_epoch(msg)) {
    if (e->value() < epoch_.load()) {
      messenger_->count_drop(transport::drop_reason::stale_epoch);
      spdlog::debug("stale {} dropped from={} epoch={} current={}", msg.content().stringify().substr(0, 40),
                    from.name, e->value(), epoch_.load());
      return;
    }
    set_epoch(*e);
    // The fence checked from the other side: stamps delivered never go backwards.
    std::uint64_t newest = newest_delivered_.load();
    if (e->value() < newest)
      stale_delivered_.fetch_add(1);
    while (e->value() > newest && !newest_delivered_.compare_exchange_weak(newest, e->value())) {
    }
  }
  auto full = caf::make_message(std::move(env));
  if (bulk)
    full = full + caf::make_message(bulk_payload{std::move(*bulk)});
  caf::anon_send(target, full + msg);
}

std::vector<transport::peer_id> bridge::peers() const {
  std::lock_guard lock{mutex_};
  return {peers_.begin(), peers_.end()};
}

void bridge::follow_leader(std::optional<transport::peer_id> leader) {
  std::lock_guard lock{mutex_};
  leader_fenced_ = true;
  leader_ = leader;
}

void bridge::on_peer(const transport::peer_info& p, bool up, const std::string& reason) {
  std::vector<caf::actor> watchers;
  {
    std::lock_guard lock{mutex_};
    watchers = watchers_;
    if (up)
      peers_.insert(p.id);
    else
      peers_.erase(p.id);
  }
  peer_event e{up, p.id, node_id{p.node}, p.name, static_cast<std::uint8_t>(p.role), p.outbound, reason};
  for (auto& w : watchers)
    caf::anon_send(w, e);
}

}  // namespace rekindle::actors
