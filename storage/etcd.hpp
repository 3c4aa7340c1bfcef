#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/expected.hpp"

namespace rekindle::storage {

/// One key of etcd as a range read returns it.
struct etcd_value {
  std::string value;
  /// The store revision that created the key: a new one each time the key is made again, larger
  /// than any before it. The supervisor's term (docs/RELIABILITY.md).
  std::int64_t create_revision = 0;
  /// The lease the key lives with (0: none).
  std::int64_t lease = 0;
};

/// What a `create` found: it made the key, or the key was there.
struct etcd_create_result {
  bool created = false;
  /// The key as it stands after the call: the new one, or the holder's.
  etcd_value current;
};

/// A client of etcd's v3 API through its JSON gateway (HTTP/1.1 on the client port), for the one
/// thing rekindle keeps there: which daemon runs the supervisor, under a lease. Every call opens
/// one connection, bounded by `timeout`; a response is at most 1 MiB. Errors: unavailable (no
/// connection, or etcd answered with an HTTP error), timeout, parse_error (an answer that is not
/// etcd's JSON), not_found (a lease that expired).
///
/// Thread-safety: a value; calls on one object may run on several threads at once.
class etcd_client {
 public:
  etcd_client(std::string host, std::uint16_t port, std::chrono::milliseconds timeout);

  /// A new lease of `ttl` seconds; its id.
  [[nodiscard]] expected<std::int64_t> grant(std::chrono::seconds ttl);
  /// Renews `lease`; the seconds it has left. not_found when it expired (its keys are gone).
  [[nodiscard]] expected<std::chrono::seconds> keep_alive(std::int64_t lease);
  /// Ends `lease` now: its keys go at once.
  [[nodiscard]] status revoke(std::int64_t lease);
  /// Creates `key` with `value` attached to `lease` unless it exists, in one transaction.
  [[nodiscard]] expected<etcd_create_result> create(const std::string& key, const std::string& value,
                                                    std::int64_t lease);
  /// The key, or nullopt when it does not exist.
  [[nodiscard]] expected<std::optional<etcd_value>> get(const std::string& key);

  /// "host:port".
  [[nodiscard]] std::string address() const;

 private:
  /// POSTs `body` to `path` and returns the response body of a 200.
  [[nodiscard]] expected<std::string> post(const std::string& path, const std::string& body);

  std::string host_;
  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
};

}  // namespace rekindle::storage
