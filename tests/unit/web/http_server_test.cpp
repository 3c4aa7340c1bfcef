#include "web/http_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

namespace rekindle::web {
namespace {

std::unique_ptr<http_server> serve(access who = {}) {
  auto s = http_server::start({.host = "127.0.0.1", .port = 0, .who = std::move(who), .threads = 2},
                              {{"/hello", [] { return response{200, "text/plain", "hello\n"}; }},
                               {"/teapot", [] { return response{418, "text/plain", "short and stout\n"}; }}});
  EXPECT_TRUE(s) << s.error().message();
  return s ? std::move(*s) : nullptr;
}

// Sends `request` raw and returns the status line.
std::string raw(std::uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[512];
  const auto n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  const std::string got = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string{};
  return got.substr(0, got.find("\r\n"));
}

TEST(http_server, answers_its_routes_with_their_status_and_content_type) {
  auto s = serve();
  ASSERT_TRUE(s);
  ASSERT_GT(s->port(), 0);
  httplib::Client c{"127.0.0.1", s->port()};
  auto r = c.Get("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello\n");
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain");
  EXPECT_EQ(r->get_header_value("Cache-Control"), "no-store");
  r = c.Get("/teapot");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 418);
}

TEST(http_server, other_paths_are_404_and_other_methods_405) {
  auto s = serve();
  ASSERT_TRUE(s);
  httplib::Client c{"127.0.0.1", s->port()};
  auto r = c.Get("/nothing/here");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("no such page: /nothing/here"), std::string::npos);
  r = c.Post("/hello", "x", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET");
}

TEST(http_server, with_a_token_a_request_without_it_or_with_another_is_refused) {
  auto s = serve({.token = "reader-token"});
  ASSERT_TRUE(s);
  httplib::Client c{"127.0.0.1", s->port()};
  auto r = c.Get("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body.find("reader-token"), std::string::npos) << "an answer never shows the token";
  r = c.Get("/hello", {{"Authorization", "Bearer wrong-token!"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = c.Get("/hello", {{"Authorization", "Bearer reader-token"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/hello?token=reader-token");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/hello?token=reader-toke");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST(http_server, refuse_all_refuses_every_request_saying_why) {
  auto s = serve({.token = "", .refuse_all = "no read-only token is configured"});
  ASSERT_TRUE(s);
  httplib::Client c{"127.0.0.1", s->port()};
  auto r = c.Get("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("no read-only token is configured"), std::string::npos);
}

TEST(http_server, an_oversized_or_malformed_request_is_refused_and_the_server_keeps_serving) {
  auto s = serve();
  ASSERT_TRUE(s);
  EXPECT_EQ(raw(s->port(), "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n").substr(0, 12), "HTTP/1.1 414");
  EXPECT_EQ(raw(s->port(), "GARBAGE\r\n\r\n").substr(0, 12), "HTTP/1.1 400");
  EXPECT_EQ(raw(s->port(), "GET /hello HTTP/1.1\r\nX-Long: " + std::string(10000, 'v') + "\r\n\r\n").substr(0, 12),
            "HTTP/1.1 400");
  httplib::Client c{"127.0.0.1", s->port()};
  auto r = c.Get("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(http_server, a_taken_port_is_an_error_naming_the_address) {
  auto first = serve();
  ASSERT_TRUE(first);
  auto second = http_server::start({.host = "127.0.0.1", .port = first->port()}, {});
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message().find("127.0.0.1:" + std::to_string(first->port())), std::string::npos)
      << second.error().message();
}

TEST(http_server, stop_is_idempotent_and_ends_serving) {
  auto s = serve();
  ASSERT_TRUE(s);
  const auto port = s->port();
  s->stop();
  s->stop();
  httplib::Client c{"127.0.0.1", port};
  c.set_connection_timeout(2, 0);
  EXPECT_FALSE(c.Get("/hello"));
}

TEST(http_server, tokens_compare_equal_only_when_equal) {
  EXPECT_TRUE(same_token("abc", "abc"));
  EXPECT_FALSE(same_token("abd", "abc"));
  EXPECT_FALSE(same_token("ab", "abc"));
  EXPECT_FALSE(same_token("", ""));
}

}  // namespace
}  // namespace rekindle::web
