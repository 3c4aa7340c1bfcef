#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "transport/messenger.hpp"

namespace rekindle::transport {
namespace {

using namespace std::chrono_literals;

// Collects what a messenger's handlers see.
struct recorder {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<frame> frames;
  std::vector<peer_info> up;
  std::vector<std::pair<peer_info, status>> down;

  messenger_handlers handlers() {
    return {
        .on_peer_up = [this](const peer_info& p) { add([&] { up.push_back(p); }); },
        .on_peer_down = [this](const peer_info& p, const status& s) { add([&] { down.emplace_back(p, s); }); },
        .on_frame = [this](const peer_info&, frame&& f) { add([&] { frames.push_back(std::move(f)); }); },
    };
  }
  template <class F>
  void add(F f) {
    std::lock_guard lock{mutex};
    f();
    cv.notify_all();
  }
  template <class Pred>
  bool wait(Pred pred, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock{mutex};
    return cv.wait_for(lock, timeout, pred);
  }
};

messenger_options server_options(std::string token = "cluster-token-0123456789") {
  messenger_options o;
  o.name = "server";
  o.node = 1;
  o.listen_host = "127.0.0.1";
  o.token = std::move(token);
  o.net_devices = "lo";
  return o;
}

messenger_options client_options(std::string token = "cluster-token-0123456789") {
  messenger_options o;
  o.name = "client";
  o.node = 2;
  o.token = std::move(token);
  o.net_devices = "lo";
  return o;
}

frame make_frame(std::uint16_t type, std::vector<std::byte> payload) {
  frame f;
  f.header.type = type;
  f.header.epoch = 3;
  f.header.dst_actor = "supervisor";
  f.payload = shared_bytes{std::move(payload)};
  return f;
}

TEST(messenger, handshake_then_frames_both_ways) {
  recorder srv, cli;
  auto server = messenger::start(server_options(), srv.handlers());
  ASSERT_TRUE(server) << server.error();
  ASSERT_NE((*server)->port(), 0);
  auto client = messenger::start(client_options(), cli.handlers());
  ASSERT_TRUE(client) << client.error();

  auto peer = (*client)->connect_blocking("127.0.0.1", (*server)->port(), 20s);
  ASSERT_TRUE(peer) << peer.error();
  EXPECT_EQ(peer->name, "server");
  EXPECT_EQ(peer->node, 1u);
  EXPECT_EQ(peer->role, peer_role::admin);
  ASSERT_TRUE(srv.wait([&] { return srv.up.size() == 1; }));
  EXPECT_EQ(srv.up[0].name, "client");
  EXPECT_EQ(srv.up[0].node, 2u);

  const std::string text = "rank 2 exited";
  (*client)->send(peer->id, make_frame(5, std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                                                  reinterpret_cast<const std::byte*>(text.data()) + text.size())));
  ASSERT_TRUE(srv.wait([&] { return srv.frames.size() == 1; }));
  EXPECT_EQ(srv.frames[0].header.type, 5);
  EXPECT_EQ(srv.frames[0].header.epoch, 3u);
  EXPECT_EQ(srv.frames[0].header.src_node, 2u);
  EXPECT_EQ(srv.frames[0].header.dst_actor, "supervisor");
  EXPECT_EQ(srv.frames[0].payload.as_string(), text);

  // Reply over the accepted connection.
  (*server)->send(srv.up[0].id, make_frame(6, {}));
  ASSERT_TRUE(cli.wait([&] { return cli.frames.size() == 1; }));
  EXPECT_EQ(cli.frames[0].header.type, 6);
  EXPECT_EQ((*server)->stats().dropped_total(), 0u);
}

TEST(messenger, large_payloads_arrive_intact) {
  recorder srv, cli;
  auto server = messenger::start(server_options(), srv.handlers());
  ASSERT_TRUE(server) << server.error();
  auto client = messenger::start(client_options(), cli.handlers());
  ASSERT_TRUE(client) << client.error();
  auto peer = (*client)->connect_blocking("127.0.0.1", (*server)->port(), 20s);
  ASSERT_TRUE(peer) << peer.error();

  for (std::size_t size : {std::size_t{1}, std::size_t{60} << 10, std::size_t{64} << 10, std::size_t{3} << 20}) {
    std::vector<std::byte> payload(size);
    for (std::size_t i = 0; i < size; ++i)
      payload[i] = std::byte(static_cast<unsigned char>(i * 131 + size));
    std::promise<status> sent;
    (*client)->send(peer->id, make_frame(9, payload), [&](status s) { sent.set_value(s); });
    EXPECT_TRUE(sent.get_future().get().ok());
    ASSERT_TRUE(srv.wait([&] { return !srv.frames.empty(); })) << size;
    std::lock_guard lock{srv.mutex};
    ASSERT_EQ(srv.frames.back().payload.size(), size);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), srv.frames.back().payload.span().begin())) << size;
    srv.frames.clear();
  }
}

TEST(messenger, oversize_frame_is_refused_on_send) {
  recorder srv, cli;
  auto opts = client_options();
  opts.max_frame_size = 4096;
  auto server = messenger::start(server_options(), srv.handlers());
  ASSERT_TRUE(server);
  auto client = messenger::start(opts, cli.handlers());
  ASSERT_TRUE(client);
  auto peer = (*client)->connect_blocking("127.0.0.1", (*server)->port(), 20s);
  ASSERT_TRUE(peer) << peer.error();
  std::promise<status> sent;
  (*client)->send(peer->id, make_frame(9, std::vector<std::byte>(5000)), [&](status s) { sent.set_value(s); });
  auto st = sent.get_future().get();
  EXPECT_EQ(st.code(), errc::out_of_range);
  EXPECT_NE(st.message().find("exceeds transport.max_frame_size (4096)"), std::string::npos);
}

TEST(messenger, oversize_frame_is_dropped_and_counted_on_receipt) {
  recorder srv, cli;
  auto opts = server_options();
  opts.max_frame_size = 4096;
  auto server = messenger::start(opts, srv.handlers());
  ASSERT_TRUE(server);
  auto client = messenger::start(client_options(), cli.handlers());
  ASSERT_TRUE(client);
  auto peer = (*client)->connect_blocking("127.0.0.1", (*server)->port(), 20s);
  ASSERT_TRUE(peer) << peer.error();
  (*client)->send(peer->id, make_frame(9, std::vector<std::byte>(100000)));
  (*client)->send(peer->id, make_frame(10, std::vector<std::byte>(10)));
  ASSERT_TRUE(srv.wait([&] { return !srv.frames.empty(); }));
  EXPECT_EQ(srv.frames[0].header.type, 10) << "the oversize frame was delivered";
  EXPECT_EQ((*server)->stats().dropped_of(drop_reason::oversize), 1u);
}

TEST(messenger, wrong_token_is_refused_and_nothing_is_delivered) {
  recorder srv, cli;
  auto server = messenger::start(server_options(), srv.handlers());
  ASSERT_TRUE(server);
  auto client = messenger::start(client_options("not-the-cluster-token-at-all"), cli.handlers());
  ASSERT_TRUE(client);
  auto peer = (*client)->connect_blocking("127.0.0.1", (*server)->port(), 20s);
  ASSERT_FALSE(peer);
  EXPECT_EQ(peer.error().code(), errc::unauthenticated);
  EXPECT_NE(peer.error().message().find("wrong cluster token"), std::string::npos) << peer.error();
  EXPECT_EQ((*server)->stats().peers_refused, 1u);
  EXPECT_TRUE(srv.up.empty());
  EXPECT_TRUE(srv.frames.empty());
}

TEST(messenger, readonly_token_gets_readonly_role) {
  recorder srv, cli;
  auto opts = server_options();
  opts.readonly_token = "read-only-token-0123456789";
  auto server = messenger::start(opts, srv.handlers());
  ASSERT_TRUE(server);
  auto client = messenger::start(client_options("read-only-token-0123456789"), cli.handlers());
  ASSERT_TRUE(client);
  auto peer = (*client)->connect_blocking("127.0.0.1", (*server)->port(), 20s);
  ASSERT_TRUE(peer) << peer.error();
  EXPECT_EQ(peer->role, peer_role::readonly);
  ASSERT_TRUE(srv.wait([&] { return srv.up.size() == 1; }));
  EXPECT_EQ(srv.up[0].role, peer_role::readonly);
}

TEST(messenger, nobody_listening_fails_promptly) {
  recorder cli;
  auto client = messenger::start(client_options(), cli.handlers());
  ASSERT_TRUE(client);
  // Find a port nothing listens on: start and stop a server.
  std::uint16_t port = 0;
  {
    recorder srv;
    auto server = messenger::start(server_options(), srv.handlers());
    ASSERT_TRUE(server);
    port = (*server)->port();
  }
  auto peer = (*client)->connect_blocking("127.0.0.1", port, 20s);
  ASSERT_FALSE(peer);
  EXPECT_NE(peer.error().code(), errc::timeout) << peer.error();
}

// A server and a client messenger, connected and authenticated both ways.
struct connected_pair {
  recorder srv, cli;
  std::unique_ptr<messenger> server, client;
  peer_info peer;  // the server, as the client sees it
};

void connect_pair(connected_pair& p, messenger_options so = server_options(), messenger_options co = client_options()) {
  auto server = messenger::start(std::move(so), p.srv.handlers());
  ASSERT_TRUE(server) << server.error();
  p.server = std::move(*server);
  auto client = messenger::start(std::move(co), p.cli.handlers());
  ASSERT_TRUE(client) << client.error();
  p.client = std::move(*client);
  auto peer = p.client->connect_blocking("127.0.0.1", p.server->port(), 20s);
  ASSERT_TRUE(peer) << peer.error();
  p.peer = *peer;
  ASSERT_TRUE(p.srv.wait([&] { return p.srv.up.size() == 1; }));
}

TEST(messenger, closing_a_peer_is_seen_by_both_sides) {
  connected_pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(p));
  auto& [srv, cli, server, client, peer] = p;
  client->close(peer.id);
  ASSERT_TRUE(cli.wait([&] { return cli.down.size() == 1; }));
  ASSERT_TRUE(srv.wait([&] { return srv.down.size() == 1; }));
  EXPECT_EQ(server->stats().peers_lost, 1u);
}

TEST(messenger, a_pause_of_both_ends_loses_no_peer) {
  // As when the machine (or both processes) stop for longer than the keep-alive timeout (1 s):
  // neither loop runs, and when they run again neither takes the other's silence for a loss.
  connected_pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(p));
  auto& [srv, cli, server, client, peer] = p;
  std::this_thread::sleep_for(300ms);  // a few keep-alives first
  server->post([] { std::this_thread::sleep_for(2500ms); });
  client->post([] { std::this_thread::sleep_for(2500ms); });
  std::this_thread::sleep_for(4s);  // the pause, then more than a keep-alive timeout of running
  EXPECT_TRUE(srv.down.empty()) << srv.down[0].second.message();
  EXPECT_TRUE(cli.down.empty()) << cli.down[0].second.message();
  client->send(peer.id, make_frame(5, {}));
  ASSERT_TRUE(srv.wait([&] { return srv.frames.size() == 1; }));
}

// Voluntary context switches of this process's messenger loops: each time one slept and woke.
std::uint64_t messenger_wakeups() {
  std::uint64_t total = 0;
  for (const auto& task : std::filesystem::directory_iterator{"/proc/self/task"}) {
    std::ifstream comm{task.path() / "comm"};
    std::string name;
    if (!std::getline(comm, name) || name != "rk-messenger")
      continue;
    std::ifstream status{task.path() / "status"};
    for (std::string line; std::getline(status, line);)
      if (line.starts_with("voluntary_ctxt_switches:"))
        total += std::stoull(line.substr(line.find(':') + 1));
  }
  return total;
}

// An idle connection costs a keep-alive each way per interval, and its loops wake for those and
// for their deadlines, not on a fixed period: with keep-alives every second, two loops idle for
// 3 s wake about a dozen times (a loop that checked its peers every 100 ms woke over 60 times).
TEST(messenger, an_idle_connection_wakes_its_loops_only_for_keepalives) {
  auto so = server_options();
  auto co = client_options();
  so.keepalive = co.keepalive = 1s;
  so.peer_timeout = co.peer_timeout = 8s;
  connected_pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(p, so, co));
  auto& [srv, cli, server, client, peer] = p;
  std::this_thread::sleep_for(500ms);  // the handshake's traffic settles
  const auto sent = server->stats().frames_sent + client->stats().frames_sent;
  const auto woke = messenger_wakeups();
  std::this_thread::sleep_for(3s);
  const auto keepalives = server->stats().frames_sent + client->stats().frames_sent - sent;
  const auto wakeups = messenger_wakeups() - woke;
  std::printf("3 s idle: %llu keep-alives, %llu wake-ups of the two loops\n",
              static_cast<unsigned long long>(keepalives), static_cast<unsigned long long>(wakeups));
  EXPECT_GE(keepalives, 2u) << "the connection is kept alive";
  EXPECT_LE(keepalives, 10u) << "one each way a second";
  EXPECT_LE(wakeups, 30u);
  EXPECT_TRUE(srv.down.empty());
  EXPECT_TRUE(cli.down.empty());
}

TEST(messenger, a_partition_drops_traffic_both_ways_until_it_heals) {
  connected_pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(p));
  auto& [srv, cli, server, client, peer] = p;
  // Only the server cuts (the client's node, 2): nothing passes either way, so both sides lose
  // the connection by their keep-alive timeouts.
  server->cut_off(2, 3s);
  // The drill is posted to the server's loop: once a task posted after it ran, it is in force
  // (without this, the client's frame could reach the server first).
  std::promise<void> in_force;
  server->post([&] { in_force.set_value(); });
  in_force.get_future().wait();
  std::promise<status> sent;
  server->send(srv.up[0].id, make_frame(7, {}), [&](status s) { sent.set_value(s); });
  client->send(peer.id, make_frame(8, {}));
  ASSERT_TRUE(srv.wait([&] { return srv.down.size() == 1; }));
  ASSERT_TRUE(cli.wait([&] { return cli.down.size() == 1; }));
  {
    auto f = sent.get_future();
    ASSERT_EQ(f.wait_for(20s), std::future_status::ready);
    const auto s = f.get();
    EXPECT_EQ(s.code(), errc::unavailable) << s.message();
  }
  EXPECT_TRUE(srv.wait([&] { return srv.frames.empty(); }, 0ms)) << "a frame crossed the partition";
  EXPECT_TRUE(cli.wait([&] { return cli.frames.empty(); }, 0ms)) << "a frame crossed the partition";
  EXPECT_GT(server->stats().dropped_of(drop_reason::partitioned), 0u);
  // While it lasts a new connection cannot authenticate; once it heals, one can.
  auto during = client->connect_blocking("127.0.0.1", server->port(), 1s);
  EXPECT_FALSE(during) << "connected through a partition";
  std::this_thread::sleep_for(3s);
  auto after = client->connect_blocking("127.0.0.1", server->port(), 20s);
  ASSERT_TRUE(after) << after.error();
  client->send(after->id, make_frame(9, {}));
  ASSERT_TRUE(srv.wait([&] { return srv.frames.size() == 1; }));
  EXPECT_EQ(srv.frames[0].header.type, 9);
}

TEST(messenger, a_slow_link_drill_paces_frames_in_order_then_lets_them_flow) {
  connected_pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(p));
  auto& [srv, cli, server, client, peer] = p;
  // 10 frames of 100 kB at 200 kB/s: 4.5 s at least, where loopback takes milliseconds.
  client->throttle(1, 2e5, 60s);
  std::this_thread::sleep_for(50ms);  // the drill is posted to the loop
  const auto start = std::chrono::steady_clock::now();
  for (std::uint16_t i = 0; i < 10; ++i)
    client->send(peer.id, make_frame(static_cast<std::uint16_t>(10 + i), std::vector<std::byte>(100000)));
  ASSERT_TRUE(srv.wait([&] { return srv.frames.size() == 10; }));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 4s);
  for (std::uint16_t i = 0; i < 10; ++i)
    EXPECT_EQ(srv.frames[i].header.type, 10 + i);
  // The other direction is not the drilled one: it is not held back.
  EXPECT_TRUE(srv.down.empty());
  // A drill ends: what follows is not held.
  client->throttle(1, 2e5, 1ms);
  std::this_thread::sleep_for(100ms);
  const auto again = std::chrono::steady_clock::now();
  for (std::uint16_t i = 0; i < 10; ++i)
    client->send(peer.id, make_frame(40, std::vector<std::byte>(100000)));
  ASSERT_TRUE(srv.wait([&] { return srv.frames.size() == 20; }));
  EXPECT_LT(std::chrono::steady_clock::now() - again, 3s);
}

}  // namespace
}  // namespace rekindle::transport
