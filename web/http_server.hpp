#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace rekindle::web {

/// What a route answers.
struct response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// A GET route: an exact path and what answers it (called on one of the server's threads).
struct route {
  std::string path;
  std::function<response()> answer;
};

/// Who may read. The token is never logged and never part of an answer.
struct access {
  /// Empty: anyone who reaches the port. Else a request must carry it, as
  /// `Authorization: Bearer <token>` or `?token=<token>` (for a page opened in a browser).
  std::string token;
  /// Non-empty: every request is refused (403) with this reason, e.g. authentication is on and no
  /// read-only token is configured.
  std::string refuse_all;
};

struct server_options {
  /// Address to bind, e.g. "0.0.0.0" or a node's address.
  std::string host = "127.0.0.1";
  /// 0: any free port (see port()).
  std::uint16_t port = 0;
  access who;
  /// Threads answering requests (a keep-alive connection holds one while open).
  std::size_t threads = 4;
};

/// A small read-only HTTP/1.1 server (cpp-httplib) on its own threads: GET on the routes given,
/// 404 on other paths, 405 on other methods; requests are bounded (URI and headers 8 KiB, no body,
/// 5 s to read one) so no client can hold it. Stops when destroyed.
class http_server {
 public:
  /// Binds and starts serving; an error names the address when it cannot bind.
  static expected<std::unique_ptr<http_server>> start(server_options options, std::vector<route> routes);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// The port it listens on.
  [[nodiscard]] std::uint16_t port() const noexcept;
  /// Stops serving and joins its threads. Idempotent.
  void stop();

  struct impl;

 private:
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Whether `given` equals `expected`, in time that does not depend on where they differ.
[[nodiscard]] bool same_token(const std::string& given, const std::string& expected) noexcept;

}  // namespace rekindle::web
