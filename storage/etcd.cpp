#include "storage/etcd.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>

#include "common/text.hpp"

namespace rekindle::storage {

namespace {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

constexpr std::size_t max_response = 1 << 20;

constexpr char base64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(std::string_view in) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += base64_chars[(acc >> bits) & 63];
    }
  }
  if (bits > 0)
    out += base64_chars[(acc << (6 - bits)) & 63];
  while (out.size() % 4 != 0)
    out += '=';
  return out;
}

expected<std::string> unbase64(std::string_view in) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=')
      break;
    const char* p = std::strchr(base64_chars, c);
    if (c == '\0' || p == nullptr)
      return status{errc::parse_error, "etcd: a value is not base64"};
    acc = (acc << 6) | static_cast<std::uint32_t>(p - base64_chars);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// etcd's gateway writes 64-bit numbers as strings.
std::int64_t number_of(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field))
    return 0;
  const auto& v = j.at(field);
  if (v.is_number_integer())
    return v.get<std::int64_t>();
  if (v.is_string()) {
    auto n = parse_whole_number(v.get<std::string>(), 0, INT64_MAX);
    if (n)
      return static_cast<std::int64_t>(*n);
  }
  return 0;
}

expected<etcd_value> value_of(const json& kv) {
  etcd_value out;
  if (!kv.is_object())
    return status{errc::parse_error, "etcd: a key-value is not an object"};
  RK_ASSIGN_OR_RETURN(out.value, unbase64(kv.value("value", std::string{})));
  out.create_revision = number_of(kv, "create_revision");
  out.lease = number_of(kv, "lease");
  return out;
}

// Waits until `fd` is ready for `events` or the deadline passes.
status wait_for(int fd, short events, steady::time_point deadline, const std::string& where) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0)
      return status{errc::timeout, where + ": no answer in time"};
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0)
      return {};
    if (n < 0 && errno != EINTR)
      return status{errc::io_error, where + ": poll: " + std::strerror(errno)};
  }
}

// The body of a chunked HTTP response.
expected<std::string> unchunk(std::string_view in, const std::string& where) {
  std::string out;
  for (int chunks = 0; chunks < 100000; ++chunks) {
    const auto eol = in.find("\r\n");
    if (eol == std::string_view::npos)
      return status{errc::parse_error, where + ": a chunked answer ends early"};
    std::size_t size = 0;
    for (char c : in.substr(0, eol)) {
      if (c == ';')
        break;
      const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                    : (c >= 'a' && c <= 'f')                     ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F')                     ? c - 'A' + 10
                                                                 : -1;
      if (d < 0 || size > max_response)
        return status{errc::parse_error, where + ": a bad chunk size"};
      size = size * 16 + static_cast<std::size_t>(d);
    }
    in.remove_prefix(eol + 2);
    if (size == 0)
      return out;
    if (in.size() < size + 2)
      return status{errc::parse_error, where + ": a chunk ends early"};
    out.append(in.substr(0, size));
    in.remove_prefix(size + 2);
  }
  return status{errc::parse_error, where + ": too many chunks"};
}

}  // namespace

etcd_client::etcd_client(std::string host, std::uint16_t port, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

std::string etcd_client::address() const { return host_ + ":" + std::to_string(port_); }

expected<std::string> etcd_client::post(const std::string& path, const std::string& body) {
  const std::string where = "etcd at " + address() + path;
  const auto deadline = steady::now() + timeout_;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found); rc != 0)
    return status{errc::unavailable, where + ": " + gai_strerror(rc)};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addrs{found, ::freeaddrinfo};
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return status{errc::io_error, where + ": socket: " + std::strerror(errno)};
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    if (errno != EINPROGRESS)
      return status{errc::unavailable, where + ": connect: " + std::strerror(errno)};
    RK_RETURN_IF_ERROR(wait_for(fd, POLLOUT, deadline, where));
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0)
      return status{errc::unavailable, where + ": connect: " + std::strerror(err)};
  }
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + address() +
                              "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t sent = 0; sent < request.size();) {
    RK_RETURN_IF_ERROR(wait_for(fd, POLLOUT, deadline, where));
    const auto n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return status{errc::unavailable, where + ": send: " + std::strerror(errno)};
    if (n > 0)
      sent += static_cast<std::size_t>(n);
  }
  std::string response;
  char buf[16384];
  for (;;) {
    RK_RETURN_IF_ERROR(wait_for(fd, POLLIN, deadline, where));
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      return status{errc::unavailable, where + ": recv: " + std::strerror(errno)};
    }
    response.append(buf, static_cast<std::size_t>(n));
    if (response.size() > max_response)
      return status{errc::resource_exhausted, where + ": the answer is over 1 MiB"};
  }
  const auto head_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || response.size() < 12)
    return status{errc::parse_error, where + ": not an HTTP answer"};
  const auto code = response.substr(9, 3);
  std::string head = response.substr(0, head_end);
  std::string payload = response.substr(head_end + 4);
  for (auto& c : head)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    RK_ASSIGN_OR_RETURN(payload, unchunk(payload, where));
  }
  if (code != "200")
    return status{errc::unavailable, where + ": HTTP " + code + ": " + payload.substr(0, 200)};
  return payload;
}

expected<std::int64_t> etcd_client::grant(std::chrono::seconds ttl) {
  RK_ASSIGN_OR_RETURN(auto text, post("/v3/lease/grant", json{{"TTL", ttl.count()}}.dump()));
  const auto j = json::parse(text, nullptr, false);
  const auto id = number_of(j, "ID");
  if (id == 0)
    return status{errc::parse_error, "etcd at " + address() + ": a lease grant without an ID: " + text.substr(0, 200)};
  return id;
}

expected<std::chrono::seconds> etcd_client::keep_alive(std::int64_t lease) {
  RK_ASSIGN_OR_RETURN(auto text, post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("result"))
    return status{errc::parse_error, "etcd at " + address() + ": a keep-alive answer without a result: " + text.substr(0, 200)};
  const auto ttl = number_of(j.at("result"), "TTL");
  if (ttl <= 0)
    return status{errc::not_found, "etcd at " + address() + ": lease " + std::to_string(lease) + " expired"};
  return std::chrono::seconds{ttl};
}

status etcd_client::revoke(std::int64_t lease) {
  return post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()).to_status();
}

expected<etcd_create_result> etcd_client::create(const std::string& key, const std::string& value, std::int64_t lease) {
  const auto k = base64(key);
  json txn = {
      {"compare", json::array({{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}})},
      {"success", json::array({{{"request_put", {{"key", k}, {"value", base64(value)}, {"lease", std::to_string(lease)}}}}})},
      {"failure", json::array({{{"request_range", {{"key", k}}}}})}};
  RK_ASSIGN_OR_RETURN(auto text, post("/v3/kv/txn", txn.dump()));
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("header"))
    return status{errc::parse_error, "etcd at " + address() + ": a transaction answer without a header: " + text.substr(0, 200)};
  etcd_create_result out;
  out.created = j.value("succeeded", false);
  if (out.created) {
    // The key was made at the transaction's revision.
    out.current.value = value;
    out.current.lease = lease;
    out.current.create_revision = number_of(j.at("header"), "revision");
    return out;
  }
  const auto& responses = j.value("responses", json::array());
  if (responses.is_array() && !responses.empty() && responses[0].contains("response_range")) {
    const auto& kvs = responses[0]["response_range"].value("kvs", json::array());
    if (kvs.is_array() && !kvs.empty()) {
      RK_ASSIGN_OR_RETURN(out.current, value_of(kvs[0]));
      return out;
    }
  }
  // The key went between the compare and the read: nobody holds it now.
  return out;
}

expected<std::optional<etcd_value>> etcd_client::get(const std::string& key) {
  RK_ASSIGN_OR_RETURN(auto text, post("/v3/kv/range", json{{"key", base64(key)}}.dump()));
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("header"))
    return status{errc::parse_error, "etcd at " + address() + ": a range answer without a header: " + text.substr(0, 200)};
  const auto& kvs = j.value("kvs", json::array());
  if (!kvs.is_array() || kvs.empty())
    return std::optional<etcd_value>{};
  RK_ASSIGN_OR_RETURN(auto v, value_of(kvs[0]));
  return std::optional<etcd_value>{std::move(v)};
}

}  // namespace rekindle::storage
