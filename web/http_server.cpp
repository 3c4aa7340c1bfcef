#include "web/http_server.hpp"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "common/process.hpp"

namespace rekindle::web {

struct http_server::impl {
  httplib::Server server;
  std::thread thread;
  std::uint16_t port = 0;
};

bool same_token(const std::string& given, const std::string& expected) noexcept {
  if (given.size() != expected.size() || expected.empty())
    return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

namespace {

// The token a request carries, from its Authorization header or its query.
std::string token_of(const httplib::Request& req) {
  const auto auth = req.get_header_value("Authorization");
  constexpr std::string_view bearer = "Bearer ";
  if (auth.size() > bearer.size() && auth.compare(0, bearer.size(), bearer) == 0)
    return auth.substr(bearer.size());
  if (req.has_param("token"))
    return req.get_param_value("token");
  return {};
}

void refuse(httplib::Response& res, int status, const std::string& why) {
  res.status = status;
  res.set_content(why + "\n", "text/plain; charset=utf-8");
}

}  // namespace

expected<std::unique_ptr<http_server>> http_server::start(server_options o, std::vector<route> routes) {
  auto p = std::make_unique<impl>();
  auto& s = p->server;
  const std::size_t threads = std::max<std::size_t>(1, o.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_timeout(2);
  s.set_keep_alive_max_count(100);
  s.set_payload_max_length(1024);  // GET only: a body is never used, a large one refused (413)
  // SO_REUSEADDR only: the library's default adds SO_REUSEPORT, which would let a second daemon
  // bind the same port and take half its requests.
  s.set_socket_options([](int sock) {
    int yes = 1;
    (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  auto who = std::make_shared<access>(std::move(o.who));
  for (auto& r : routes) {
    s.Get(r.path, [who, answer = std::move(r.answer)](const httplib::Request& req, httplib::Response& res) {
      if (!who->refuse_all.empty())
        return refuse(res, 403, who->refuse_all);
      if (!who->token.empty() && !same_token(token_of(req), who->token)) {
        res.set_header("WWW-Authenticate", "Bearer");
        return refuse(res, 401,
                      "a read-only token is required: send 'Authorization: Bearer <token>' or add ?token=<token>");
      }
      auto a = answer();
      res.status = a.status;
      res.set_header("Cache-Control", "no-store");
      res.set_content(std::move(a.body), a.content_type);
    });
  }
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Allow", "GET");
    refuse(res, 405, "only GET is served here");
  };
  s.Post(".*", not_allowed);
  s.Put(".*", not_allowed);
  s.Delete(".*", not_allowed);
  s.Patch(".*", not_allowed);
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      res.set_content("no such page: " + req.path.substr(0, 200) + "\n", "text/plain; charset=utf-8");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    refuse(res, 500, "internal error");
  });

  if (o.port == 0) {
    const int port = s.bind_to_any_port(o.host);
    if (port <= 0)
      return status{errc::unavailable, "cannot bind an HTTP server to " + o.host + " (any port)"};
    p->port = static_cast<std::uint16_t>(port);
  } else {
    if (!s.bind_to_port(o.host, o.port))
      return status{errc::unavailable, "cannot bind an HTTP server to " + o.host + ":" + std::to_string(o.port) +
                                           " (in use, or not an address of this host)"};
    p->port = o.port;
  }
  p->thread = std::thread([srv = &p->server] {
    name_this_thread("rk-http");
    srv->listen_after_bind();
  });
  // stop() only ends a server that runs: wait until it does.
  for (int i = 0; i < 500 && !s.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  return std::unique_ptr<http_server>{new http_server(std::move(p))};
}

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

http_server::~http_server() { stop(); }

std::uint16_t http_server::port() const noexcept { return impl_->port; }

void http_server::stop() {
  if (!impl_->thread.joinable())
    return;
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace rekindle::web
