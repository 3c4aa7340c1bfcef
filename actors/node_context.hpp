#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

#include "actors/bridge.hpp"
#include "common/clock.hpp"
#include "common/ids.hpp"
#include "config/spec.hpp"

namespace rekindle::actors {

/// Prepares the actor system of a rekindle process: every message type registered, `threads`
/// scheduler threads that sleep on a condition variable when idle (CAF's work-sharing policy; the
/// default work stealing polls for tens of milliseconds after each message, cycles taken from
/// training), CAF's own console log off.
void configure_actor_system(caf::actor_system_config& cfg, std::size_t threads);

/// The messenger options every rekindle process of `spec` on `node` shares (a daemon adds where it
/// listens): the token, keep-alive and peer timeouts, the network devices, TLS, and a frame limit
/// that lets a snapshot of the largest slot through.
[[nodiscard]] transport::messenger_options messenger_options_for(const config::spec& spec, node_id node,
                                                                 std::string name);

/// How the agent reaches the supervisor: through the bridge, to the peer it connected to. The
/// checkpoint actor sends through it too.
///
/// Thread-safety: every method may be called from any thread.
class status_board;

class supervisor_link {
 public:
  explicit supervisor_link(bridge& b) : bridge_(b) {}

  void set(std::optional<transport::peer_id> peer) {
    std::lock_guard lock{mutex_};
    peer_ = peer;
  }
  [[nodiscard]] std::optional<transport::peer_id> peer() const {
    std::lock_guard lock{mutex_};
    return peer_;
  }
  /// Sends `msg` from local actor `from` to the supervisor; false (and nothing sent) when the
  /// supervisor is not connected.
  template <class T>
  bool send(const std::string& from, const T& msg) {
    auto p = peer();
    if (!p)
      return false;
    bridge_.send(*p, from, "supervisor", msg);
    return true;
  }

 private:
  bridge& bridge_;
  mutable std::mutex mutex_;
  std::optional<transport::peer_id> peer_;
};

/// Which daemon runs the supervisor, as etcd names it (with a standby; docs/RELIABILITY.md).
///
/// Thread-safety: every method may be called from any thread.
class leader_record {
 public:
  void set(std::int64_t term, std::string node, std::string address) {
    std::lock_guard lock{mutex_};
    term_ = term;
    node_ = std::move(node);
    address_ = std::move(address);
  }
  /// host:port of the leader's daemon; "" while none leads.
  [[nodiscard]] std::string address() const {
    std::lock_guard lock{mutex_};
    return address_;
  }
  [[nodiscard]] std::int64_t term() const {
    std::lock_guard lock{mutex_};
    return term_;
  }

 private:
  mutable std::mutex mutex_;
  std::int64_t term_ = 0;
  std::string node_;
  std::string address_;
};

/// What every actor of a node daemon shares. Owned by the daemon; outlives its actors.
struct node_context {
  config::spec spec;
  /// The configuration file, or empty for the embedded default.
  std::filesystem::path config_path;
  node_id node;
  /// The daemon's own folder: <data_dir>/<node name>.
  std::filesystem::path node_dir;
  /// The root shared by the nodes of a single-host cluster: <data_dir>.
  std::filesystem::path data_dir;
  /// host:port this daemon listens on.
  std::string address;
  /// Where rekindle-worker lives.
  std::filesystem::path worker_binary;
  /// host:port of the supervisor's daemon when given on the command line (else see
  /// supervisor_address()).
  std::string supervisor_override;
  /// The process's bridge: messages to and from other processes, fenced by epoch.
  actors::bridge* bridge = nullptr;
  supervisor_link* supervisor = nullptr;
  /// Where this daemon's supervisor publishes the job's status for the HTTP server (null: nowhere).
  status_board* board = nullptr;
  /// With a standby: the leader etcd names (the daemon's leadership thread keeps it current).
  leader_record leader;
  const clock* time = nullptr;

  [[nodiscard]] const std::string& node_name() const { return spec.nodes.at(node.value()).name; }
  /// The snapshot slot of local rank `local_index` on this node.
  [[nodiscard]] std::string slot_name(std::uint32_t local_index) const;
  /// With a standby: until when (steady clock, ns) this daemon's supervisor may act, set by the
  /// leadership thread at each renewal of its lease; 0 while it does not lead.
  std::atomic<std::int64_t> lead_until_ns{0};
  /// Whether this daemon's supervisor may act now: always without a standby; with one, while its
  /// lease is known to be held (docs/RELIABILITY.md).
  [[nodiscard]] bool may_lead() const {
    return !with_standby() ||
           std::chrono::steady_clock::now().time_since_epoch().count() < lead_until_ns.load();
  }
  /// Whether a standby supervisor is configured: the leader comes from etcd.
  [[nodiscard]] bool with_standby() const { return !spec.cluster.standby.empty(); }
  /// host:port of the supervisor's daemon: with a standby, the leader etcd names; else the command
  /// line's, the configured port of the supervisor node, or what that daemon wrote to
  /// <data_dir>/supervisor.addr; "" until known.
  [[nodiscard]] std::string supervisor_address() const;
  /// The most ranks this node may run (its configured ranks, or the widest node's for a spare).
  [[nodiscard]] std::uint32_t max_local_ranks() const;
};

/// Nanoseconds of `clock` since its epoch, for messages.
inline std::int64_t now_ns(const clock& c) { return c.now().time_since_epoch().count(); }

}  // namespace rekindle::actors
