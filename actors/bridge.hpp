#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "actors/messages.hpp"
#include "common/ids.hpp"
#include "transport/messenger.hpp"

namespace rekindle::actors {

/// Who sent a message that came through the bridge; the first element of every such message.
struct envelope {
  transport::peer_id peer;
  /// The node the sending process announced.
  node_id node;
  /// The sending actor's name, for replies.
  std::string actor;
  /// The epoch the frame was stamped with: a fenced message's own epoch (0 for other messages).
  epoch_t epoch;
  /// 1: admin, 2: readonly (transport::peer_role).
  std::uint8_t role = 1;
};

/// A peer process connected (`up`) or went away.
struct peer_event {
  bool up = false;
  transport::peer_id peer;
  node_id node;
  std::string name;
  std::uint8_t role = 1;
  bool outbound = false;
  std::string reason;
};

/// The bulk payload of a message sent with send_bulk (delivered after the envelope).
struct bulk_payload {
  transport::shared_bytes bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, envelope& x) {
  return f(caf::meta::type_name("envelope"), x.peer, x.node, x.actor, x.epoch, x.role);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_event& x) {
  return f(caf::meta::type_name("peer_event"), x.up, x.peer, x.node, x.name, x.role, x.outbound, x.reason);
}

/// Registers envelope and peer_event with `cfg`.
void register_bridge_types(caf::actor_system_config& cfg);

/// Decodes a message from a peer's frame with CAF's binary format, refusing (with CAF's error) a
/// sequence that declares more elements than bytes remain, before anything is allocated for it:
/// CAF 0.17 sizes a byte vector from the declared length, so a 20-byte frame could ask for 4 GiB.
/// Every message the bridge delivers goes through this.
[[nodiscard]] caf::error decode_message(caf::actor_system& sys, std::span<const std::byte> bytes, caf::message& out);

/// Carries CAF messages between processes over the messenger: the only place where actors meet
/// the transport.
///
/// A message to (peer, actor name) is serialised with CAF's binary serializer into a frame whose
/// header names both actors and carries the message's stamp: its epoch when its type is fenced
/// (`fenced<T>`, messages.hpp), none otherwise. The receiving bridge checks the frame (the
/// messenger already checked its integrity and the sender's token), deserialises it, drops a
/// fenced message stamped older than the newest epoch this process has seen (`set_epoch`, or the
/// stamp of a fenced message it delivered; counted as stale), refuses anything but an admin request from a peer that connected with the read-only
/// token (read_only_may_send; counted as refused), and delivers `envelope` + the message to the local actor exposed under that name.
/// This is the one fence: actors do not check epochs again. Bulk payloads (snapshots) travel next
/// to a small header message, never through CAF serialisation.
///
/// Thread-safety: every method may be called from any thread, including actors.
class bridge {
 public:
  static expected<std::unique_ptr<bridge>> start(caf::actor_system& sys, transport::messenger_options options);
  ~bridge();
  bridge(const bridge&) = delete;
  bridge& operator=(const bridge&) = delete;

  /// Makes `a` reachable from peers as `name`.
  void expose(const std::string& name, caf::actor a);
  /// `a` receives a peer_event for every peer that comes up or goes down.
  void watch_peers(caf::actor a);

  /// Sends `msg` from local actor `from` to actor `to` in process `peer`, stamped as its type says.
  template <class T>
  void send(transport::peer_id peer, const std::string& from, const std::string& to, const T& msg) {
    send_message(peer, from, to, stamp_of(msg), caf::make_message(msg));
  }
  /// Sends a message made elsewhere (its stamp read from its first element, as the receiver will).
  void send_made(transport::peer_id peer, const std::string& from, const std::string& to, const caf::message& msg) {
    send_message(peer, from, to, fenced_epoch(msg).value_or(epoch_t{0}), msg);
  }
  /// As send, with `payload` delivered as bulk_payload after the envelope; `done` (optional)
  /// learns when the payload has left.
  template <class T>
  void send_bulk(transport::peer_id peer, const std::string& from, const std::string& to, const T& header,
                 const transport::shared_bytes& payload, std::function<void(status)> done = {}) {
    send_bulk_message(peer, from, to, stamp_of(header), caf::make_message(header), payload, std::move(done));
  }

  /// Connects to the daemon at host:port; the peer comes up in watchers as well.
  void connect(const std::string& host, std::uint16_t port, std::function<void(expected<transport::peer_info>)> done);
  expected<transport::peer_info> connect_blocking(const std::string& host, std::uint16_t port,
                                                  std::chrono::nanoseconds timeout);
  void close(transport::peer_id peer);
  /// Partition drill: traffic with the processes of `node` is dropped for `duration`.
  void cut_off(node_id node, std::chrono::nanoseconds duration);
  /// Slow link drill: traffic to the processes of `node` leaves at `bytes_per_second` at most.
  void throttle(node_id node, double bytes_per_second, std::chrono::nanoseconds duration);

  /// Fenced messages stamped with an older epoch are dropped from now on. Only ever moves forward.
  void set_epoch(epoch_t e) noexcept;
  [[nodiscard]] epoch_t epoch() const noexcept { return epoch_t{epoch_.load()}; }

  [[nodiscard]] std::uint16_t port() const noexcept;
  [[nodiscard]] transport::messenger_stats stats() const noexcept;
  /// Frames that named an actor nobody exposed, or failed to deserialise.
  [[nodiscard]] std::uint64_t undeliverable() const noexcept { return undeliverable_.load(); }
  /// Messages refused for the sender's role (read-only peers may only send admin requests).
  [[nodiscard]] std::uint64_t refused() const noexcept { return refused_.load(); }

  /// With a standby supervisor (docs/RELIABILITY.md): from now on, messages from a process's
  /// "supervisor" actor are delivered only when they come from `leader`, the daemon etcd names
  /// (none: from nobody); the rest are dropped and counted. An old leader cut off by a partition
  /// commands nobody who has heard of the new one.
  void follow_leader(std::optional<transport::peer_id> leader);
  /// The peers connected now.
  [[nodiscard]] std::vector<transport::peer_id> peers() const;
  /// Messages dropped because their supervisor is not the leader this process follows.
  [[nodiscard]] std::uint64_t not_from_leader() const noexcept { return not_from_leader_.load(); }
  /// Fenced messages delivered with a stamp older than one delivered before them: the fence keeps
  /// this at 0 (the chaos campaign checks it).
  [[nodiscard]] std::uint64_t stale_delivered() const noexcept { return stale_delivered_.load(); }
  /// "fence: N stale dropped, N stale delivered, N not from the leader, N refused", which a daemon
  /// logs when it ends.
  [[nodiscard]] std::string fence_summary() const;

  /// Stops the transport; later sends are dropped.
  void shutdown();

 private:
  explicit bridge(caf::actor_system& sys);
  void send_message(transport::peer_id peer, const std::string& from, const std::string& to, epoch_t stamp,
                    const caf::message& msg);
  void send_bulk_message(transport::peer_id peer, const std::string& from, const std::string& to, epoch_t stamp,
                         const caf::message& header, const transport::shared_bytes& payload,
                         std::function<void(status)> done);
  void on_frame(const transport::peer_info& from, transport::frame&& f);
  void on_peer(const transport::peer_info& p, bool up, const std::string& reason);

  caf::actor_system& system_;
  std::unique_ptr<transport::messenger> messenger_;
  mutable std::mutex mutex_;
  std::map<std::string, caf::actor> exposed_;
  std::vector<caf::actor> watchers_;
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::uint64_t> undeliverable_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::uint64_t> not_from_leader_{0};
  std::atomic<std::uint64_t> newest_delivered_{0};
  std::atomic<std::uint64_t> stale_delivered_{0};
  /// Set by follow_leader (under mutex_): whether supervisors are checked, and the one followed.
  bool leader_fenced_ = false;
  std::optional<transport::peer_id> leader_;
  /// Peers up now (under mutex_), from the transport's peer events.
  std::set<transport::peer_id> peers_;
  std::atomic<std::int64_t> last_refusal_log_ns_{0};
};

}  // namespace rekindle::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rekindle::actors::bulk_payload)
