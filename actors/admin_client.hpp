#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "common/expected.hpp"
#include "config/spec.hpp"

namespace rekindle::actors {

/// Where and how an admin client reaches the supervisor.
struct admin_target {
  /// host:port of the supervisor's daemon; empty: with a standby, the daemon etcd names as the
  /// leader; else (or when etcd does not answer) the configuration's supervisor node port, or what
  /// its daemon wrote to <data_dir>/supervisor.addr.
  std::string address;
  /// The token to present; empty: the configuration's token (or none).
  std::string token;
  /// Overrides daemon.data_dir when looking for supervisor.addr.
  std::filesystem::path data_dir;
};

/// A connection from an operator's tool to the supervisor: commands out, replies back.
///
/// Thread-safety: one thread at a time.
class admin_client {
 public:
  /// Connects and authenticates. Errors: unavailable (no supervisor address known, or nothing
  /// answers there), unauthenticated (the token is refused).
  static expected<std::unique_ptr<admin_client>> connect(const config::spec& spec, const admin_target& target,
                                                         std::chrono::nanoseconds timeout);
  ~admin_client();

  /// Sends a request (one of admin_requests) and waits for its reply. Errors: the supervisor's
  /// refusal (its code and reason), timeout when no reply came.
  template <class Request>
  expected<admin_reply> call(Request request, std::chrono::nanoseconds timeout) {
    request.id = next_id_++;
    bridge_->send(supervisor_, "shell", "supervisor", request);
    return await(request.id, Request::command, timeout);
  }
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  /// The role the supervisor granted: 1 admin, 2 read-only.
  [[nodiscard]] std::uint8_t role() const noexcept { return role_; }

 private:
  admin_client() = default;
  expected<admin_reply> await(std::uint64_t id, std::string_view command, std::chrono::nanoseconds timeout);
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<bridge> bridge_;
  std::unique_ptr<caf::scoped_actor> self_;
  transport::peer_id supervisor_;
  std::string address_;
  std::uint8_t role_ = 1;
  std::uint64_t next_id_ = 1;
};

/// The supervisor's address for `spec`: with a standby, the leader etcd names; else (or when etcd
/// does not answer within the lease) its configured port, else <data_dir>/supervisor.addr.
std::string find_supervisor(const config::spec& spec, const std::filesystem::path& data_dir);

}  // namespace rekindle::actors
