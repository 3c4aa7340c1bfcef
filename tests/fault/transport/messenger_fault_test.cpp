#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <random>
#include <thread>
#include <fstream>
#include <mutex>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"
#include "transport/messenger.hpp"

namespace rekindle::transport {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

const std::string token = "fault-test-token-0123456789";

// A transport_peer process and a messenger connected to it.
struct connected_peer {
  testing::temp_dir dir{"rekindle-messenger"};
  std::unique_ptr<testing::child_process> process;
  std::unique_ptr<messenger> self;
  peer_info peer;
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<status> down;
  clock_type::time_point down_at;
  std::size_t echoes = 0;

  explicit connected_peer(std::chrono::milliseconds peer_timeout) {
    const auto port_file = dir.path() / "port";
    process = std::make_unique<testing::child_process>(
        std::vector<std::string>{(testing::bin_dir() / "tools/transport_peer").string(), "--token", token,
                                 "--port-file", port_file.string(), "--peer-timeout-ms",
                                 std::to_string(peer_timeout.count())},
        dir.path() / "peer.log");
    EXPECT_TRUE(testing::wait_until([&] { return std::filesystem::exists(port_file); }, 60s));
    std::uint16_t port = 0;
    std::ifstream(port_file) >> port;
    messenger_options o;
    o.name = "test";
    o.token = token;
    o.net_devices = "lo";
    o.keepalive = 100ms;
    o.peer_timeout = peer_timeout;
    auto m = messenger::start(o, {.on_peer_down =
                                      [this](const peer_info&, const status& why) {
                                        std::lock_guard lock{mutex};
                                        down = why;
                                        down_at = clock_type::now();
                                        cv.notify_all();
                                      },
                                  .on_frame =
                                      [this](const peer_info&, frame&&) {
                                        std::lock_guard lock{mutex};
                                        ++echoes;
                                        cv.notify_all();
                                      }});
    EXPECT_TRUE(m) << m.error();
    self = std::move(*m);
    auto p = self->connect_blocking("127.0.0.1", port, 30s);
    EXPECT_TRUE(p) << p.error();
    peer = *p;
  }

  bool echo_works() {
    frame f;
    f.header.type = 1;
    f.payload = shared_bytes::copy_of("ping");
    self->send(peer.id, std::move(f));
    std::unique_lock lock{mutex};
    return cv.wait_for(lock, 30s, [&] { return echoes > 0; });
  }

  // Time from `since` until the messenger reported the peer lost.
  std::optional<std::chrono::milliseconds> time_to_down(clock_type::time_point since, std::chrono::seconds limit) {
    std::unique_lock lock{mutex};
    if (!cv.wait_for(lock, limit, [&] { return down.has_value(); }))
      return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(down_at - since);
  }
};

TEST(messenger_fault, sigkill_of_the_peer_is_reported_at_once) {
  connected_peer c{1000ms};
  ASSERT_TRUE(c.echo_works());
  const auto killed = clock_type::now();
  c.process->signal(SIGKILL);
  auto t = c.time_to_down(killed, 30s);
  ASSERT_TRUE(t.has_value()) << "the dead peer was never reported";
  std::printf("killed peer reported after %lld ms: %s\n", static_cast<long long>(t->count()), c.down->to_string().c_str());
  // An endpoint error or, at the latest, the keep-alive timeout.
  EXPECT_LE(*t, 1000ms + 2000ms);
}

TEST(messenger_fault, a_stopped_peer_is_lost_after_the_keepalive_timeout) {
  connected_peer c{600ms};
  ASSERT_TRUE(c.echo_works());
  const auto stopped = clock_type::now();
  c.process->signal(SIGSTOP);
  auto t = c.time_to_down(stopped, 30s);
  ASSERT_TRUE(t.has_value()) << "the stopped peer was never reported";
  std::printf("stopped peer reported after %lld ms: %s\n", static_cast<long long>(t->count()), c.down->to_string().c_str());
  EXPECT_EQ(c.down->code(), errc::timeout) << *c.down;
  EXPECT_GE(*t, 500ms) << "reported before the timeout";
  EXPECT_LE(*t, 600ms + 2000ms);
}

// Processes killed at every point of their connection (TCP handshake, UCX wire-up, first frames)
// must never take the other side with them: a client killed while connecting to this process,
// and this process connecting to a server killed under it.
TEST(messenger_fault, processes_killed_while_connecting_never_take_the_other_side_down) {
  testing::temp_dir dir{"rekindle-messenger-kill"};
  messenger_options o;
  o.name = "survivor";
  o.listen_host = "127.0.0.1";
  o.token = token;
  o.net_devices = "lo";
  std::atomic<int> frames{0};
  auto m = messenger::start(o, {.on_frame = [&](const peer_info&, frame&&) { frames.fetch_add(1); }});
  ASSERT_TRUE(m) << m.error();
  const auto port = (*m)->port();
  std::mt19937 rng{5};
  for (int i = 0; i < 30; ++i) {
    testing::child_process client{{(testing::bin_dir() / "tools/transport_peer").string(), "--token", token,
                                   "--connect", std::to_string(port)},
                                  dir.path() / ("client-" + std::to_string(i) + ".log")};
    std::this_thread::sleep_for(std::chrono::microseconds{rng() % 60000});
    client.signal(SIGKILL);
    ASSERT_TRUE(client.wait_for(30s).has_value());
  }
  for (int i = 0; i < 30; ++i) {
    const auto port_file = dir.path() / ("port-" + std::to_string(i));
    testing::child_process server{{(testing::bin_dir() / "tools/transport_peer").string(), "--token", token,
                                   "--port-file", port_file.string()},
                                  dir.path() / ("server-" + std::to_string(i) + ".log")};
    ASSERT_TRUE(testing::wait_until([&] { return std::filesystem::exists(port_file); }, 60s));
    std::uint16_t server_port = 0;
    std::ifstream(port_file) >> server_port;
    std::atomic<bool> done{false};
    (*m)->connect("127.0.0.1", server_port, [&](expected<peer_info>) { done = true; });
    std::this_thread::sleep_for(std::chrono::microseconds{rng() % 3000});
    server.signal(SIGKILL);
    ASSERT_TRUE(server.wait_for(30s).has_value());
    ASSERT_TRUE(testing::wait_until([&] { return done.load(); }, 30s)) << "a connection never ended";
  }
  // Still serving: a new client connects and its frames arrive.
  testing::child_process client{{(testing::bin_dir() / "tools/transport_peer").string(), "--token", token,
                                 "--connect", std::to_string(port)},
                                dir.path() / "last-client.log"};
  const int before = frames.load();
  EXPECT_TRUE(testing::wait_until([&] { return frames.load() > before + 10; }, 60s));
}

}  // namespace
}  // namespace rekindle::transport
