#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "actors/node_context.hpp"
#include "storage/etcd.hpp"
#include "storage/state_replica.hpp"

namespace rekindle::actors {

/// The daemon etcd names as the supervisor's leader: the value of the leader key, "NODE HOST:PORT".
struct named_leader {
  std::string node;
  std::string address;
};

/// The etcd key that names the leader of `spec`'s job: "/rekindle/<cluster>/<job>/leader".
[[nodiscard]] std::string leader_key(const config::spec& spec);
/// The key's value for a leader, and the leader a value names.
[[nodiscard]] std::string leader_value(const std::string& node, const std::string& address);
[[nodiscard]] named_leader parse_leader_value(std::string_view value);
/// Asks `spec`'s etcd which daemon leads now (nullopt: none does). Errors: etcd does not answer
/// within `timeout`, or answers with an error.
[[nodiscard]] expected<std::optional<named_leader>> ask_etcd_for_leader(const config::spec& spec,
                                                                        std::chrono::milliseconds timeout);

/// A standby's copy of the supervisor's state store: asks the leader's supervisor for the changes
/// it lacks (every 100 ms, at once while more wait) and applies them to a `storage::state_replica`
/// in <node_dir>/state. Sets `*complete` once it holds a whole copy (then it may take over).
///
/// Exposed to peers as "replica". Thread-safety: an actor.
class replica_actor : public caf::event_based_actor {
 public:
  replica_actor(caf::actor_config& cfg, node_context* ctx, std::unique_ptr<storage::state_replica> replica,
                std::atomic<bool>* complete);
  caf::behavior make_behavior() override;
  const char* name() const override { return "replica"; }
  void on_exit() override;

 private:
  void pull();

  node_context* ctx_;
  std::unique_ptr<storage::state_replica> replica_;
  std::atomic<bool>* complete_;
  std::uint64_t pull_id_ = 0;
  /// When the pull in flight was sent.
  std::optional<clock::time_point> asked_;
};

/// Who runs the supervisor when a standby is configured (docs/RELIABILITY.md). One per daemon, on
/// a thread of its own:
///
/// - every daemon reads the leader key in etcd every `lease / 6` (at most 500 ms) and tells its
///   agent when the leader changes (`leader_seen`; node_context::leader);
/// - the supervisor's node and the standby campaign for the key under a lease of `cluster.lease`
///   when nobody holds it: the supervisor's node at once, the standby only once its replica holds
///   a whole copy. The winner opens <node_dir>/state as the state store and spawns the supervisor
///   with the key's create revision as its term; the other keeps a replica of the leader's store;
/// - a leader renews its lease every lease / 3 and stops its supervisor when the lease was not
///   renewed for `lease` less one poll interval: before etcd can let another take over.
///
/// Thread-safety: constructed and destroyed by the daemon's main thread; `leading` from any thread.
class leadership {
 public:
  leadership(caf::actor_system& sys, node_context& ctx, caf::actor agent);
  ~leadership();
  leadership(const leadership&) = delete;
  leadership& operator=(const leadership&) = delete;

  /// Whether this daemon's supervisor runs now.
  [[nodiscard]] bool leading() const noexcept { return leading_.load(); }

 private:
  void run();
  void step();
  void publish(std::int64_t term, const std::string& node, const std::string& address);
  void campaign();
  void become_leader(std::int64_t term);
  void resign(const std::string& why);
  void follow();
  void stop_replica();

  caf::actor_system& sys_;
  node_context& ctx_;
  caf::actor agent_;
  storage::etcd_client etcd_;
  std::string key_;
  std::string value_;
  bool candidate_ = false;
  bool primary_ = false;
  std::chrono::nanoseconds poll_;

  std::atomic<bool> leading_{false};
  std::atomic<bool> replica_complete_{false};
  std::int64_t lease_ = 0;
  std::int64_t term_ = 0;
  std::chrono::steady_clock::time_point renewed_;
  std::chrono::steady_clock::time_point next_renew_;
  std::int64_t published_term_ = -1;
  std::string published_address_;
  std::chrono::steady_clock::time_point last_error_log_;
  caf::actor supervisor_;
  caf::actor replica_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rekindle::actors
