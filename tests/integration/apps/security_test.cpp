// Security of a running cluster: what a peer holding only the read-only token can do when it
// talks to a daemon directly (not through the shell), and who may read what the daemons write.

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "actors/node_context.hpp"
#include "tests/support/cluster.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string admin_token = "admin-secret-0123456789abcdef";
const std::string ro_token = "look-only-0123456789abcdef";

// The port a node's daemon listens on, from its log.
std::uint16_t port_of(const testing::local_cluster& c, const std::string& node) {
  std::smatch m;
  const auto log = c.log(node);
  if (!std::regex_search(log, m, std::regex{"listening on 127\\.0\\.0\\.1:([0-9]+)"}))
    return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1].str()));
}

// Everything a cluster shows people: both daemons' logs, the status as JSON and the effective
// configuration rekindled prints.
std::string shown_to_people(const testing::local_cluster& c) {
  const auto config = testing::run_process({(testing::bin_dir() / "rekindled").string(), "--check-config", c.config().string()});
  return c.log("n0") + c.log("n1") + c.status().dump() + config.out + config.err;
}

// A process of the test's own: an actor system and a bridge presenting `token`.
struct intruder {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<actors::bridge> b;
  explicit intruder(const std::string& token) {
    actors::configure_actor_system(cfg, 1);
    sys = std::make_unique<caf::actor_system>(cfg);
    transport::messenger_options o;
    o.name = "intruder";
    o.node = 0xfffffff0u;
    o.token = token;
    o.net_devices = "lo";
    auto started = actors::bridge::start(*sys, o);
    EXPECT_TRUE(started) << started.error();
    b = std::move(*started);
  }
  ~intruder() { b->shutdown(); }
};

// S2: a read-only peer sends every control message kind straight to n1's agent and checkpoint
// actor, with an epoch far ahead so no fence could stop them: nothing happens to the job. The
// same kill_request with the cluster token does kill the rank (the test can see a kill).
TEST(security, a_read_only_peer_commands_no_daemon_directly) {
  testing::local_cluster c{{.steps = 1000000,
                            .persist_every = 0,
                            .extra = testing::token_files_toml}};
  testing::write_token_files(c, admin_token, ro_token);
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto port = port_of(c, "n1");
  ASSERT_NE(port, 0) << c.log("n1");
  const int pid_before = c.rank_pid(2);

  intruder ro{ro_token};
  auto peer = ro.b->connect_blocking("127.0.0.1", port, 30s);
  ASSERT_TRUE(peer) << peer.error();
  ASSERT_EQ(peer->role, transport::peer_role::readonly);
  ro.b->send(peer->id, "shell", "agent", actors::kill_request{epoch_t{1000}, rank_id{2}, SIGKILL, "intruder"});
  ro.b->send(peer->id, "shell", "agent", actors::fail_node{"intruder"});
  for (const auto& m : actors::one_message_of_every_type())
    for (const auto* to : {"agent", "checkpoint", "supervisor"})
      ro.b->send_made(peer->id, "shell", to, m);
  std::this_thread::sleep_for(3s);
  auto s = c.status();
  EXPECT_EQ(s["state"], "running") << c.log("n1");
  EXPECT_EQ(s["epoch"], 1) << "nothing was changed: " << c.log("n1");
  EXPECT_EQ(s["recoveries"].size(), 0u);
  EXPECT_EQ(c.rank_pid(2), pid_before) << "rank 2 was killed";
  EXPECT_NE(c.log("n1").find("its token is read-only and it may only send admin requests"), std::string::npos)
      << c.log("n1");

  // Neither secret is ever written where others look: logs, the status, the effective configuration.
  const auto printed = shown_to_people(c);
  for (const auto& secret : {admin_token, ro_token})
    EXPECT_EQ(printed.find(secret), std::string::npos) << "a token appears in the logs, the status or the config";

  // The same request with the cluster token is obeyed.
  intruder admin{admin_token};
  auto apeer = admin.b->connect_blocking("127.0.0.1", port, 30s);
  ASSERT_TRUE(apeer) << apeer.error();
  admin.b->send(apeer->id, "supervisor", "agent", actors::kill_request{epoch_t{1}, rank_id{2}, SIGKILL, "admin"});
  EXPECT_TRUE(c.wait_for([](const nlohmann::json& st) { return !st["recoveries"].empty(); }, 60s)) << c.log("n1");
}

// Item 5 of the reliability issue, end to end: the supervisor's port gets the packet that once
// aborted a daemon inside UCX, random bytes on a hundred connections, and three hundred
// connections that say nothing, while the job trains: the job notices nothing.
TEST(security, attacks_on_the_supervisors_port_leave_the_job_training) {
  testing::local_cluster c{{.steps = 1000000, .persist_every = 0}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto port = port_of(c, "n0");
  ASSERT_NE(port, 0) << c.log("n0");
  const auto connect = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    return fd;
  };
  const auto send_all = [](int fd, const std::string& bytes) {
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  };
  std::string ucx_killer(8, '\xff');
  ucx_killer += '\0';
  ucx_killer += std::string(256, 'x');
  int fd = connect();
  send_all(fd, ucx_killer);
  ::close(fd);
  std::mt19937 rng{17};
  for (int i = 0; i < 100; ++i) {
    std::string junk(rng() % 2000, '\0');
    for (auto& ch : junk)
      ch = static_cast<char>(rng());
    if (i % 2 == 0 && junk.size() > 8)
      junk.replace(0, 5, std::string{"RKND\x01"});
    fd = connect();
    send_all(fd, junk);
    ::close(fd);
  }
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i)
    silent.push_back(connect());
  const auto step = c.status()["step"].get<std::uint64_t>();
  EXPECT_TRUE(c.wait_step(step + 20, 120s)) << c.log("n0");
  for (int f : silent)
    ::close(f);
  auto s = c.status();
  EXPECT_EQ(s["state"], "running");
  EXPECT_EQ(s["epoch"], 1) << "no recovery was needed: " << c.log("n0");
  EXPECT_EQ(s["recoveries"].size(), 0u);
  // The shell still reaches the supervisor.
  EXPECT_EQ(c.admin({"status"}).exit_code, 0);
}

// M6: what the daemons write (state store, checkpoints, logs, addresses) is the owner's alone,
// and a token file others can read gets a warning.
TEST(security, the_daemons_files_are_the_owners_alone) {
  testing::local_cluster c{{.steps = 60, .persist_every = 10,
                            .extra = "\n[security]\ntoken_file = \"open.token\"\n"}};
  const auto dir = c.config().parent_path();
  std::ofstream(dir / "open.token") << admin_token << "\n";
  fs::permissions(dir / "open.token", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                          fs::perms::others_read,
                  fs::perm_options::replace);
  c.start_all();
  const auto report = c.wait_done(240s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  EXPECT_NE(c.log("n0").find("can be read by other users (mode 0644)"), std::string::npos) << c.log("n0");
  std::size_t checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(c.data_dir())) {
    const auto p = e.symlink_status().permissions();
    EXPECT_EQ(p & (fs::perms::group_all | fs::perms::others_all), fs::perms::none)
        << e.path() << " is open to other users";
    ++checked;
  }
  EXPECT_GT(checked, 10u) << "the state store, checkpoints and logs were all looked at";
}

}  // namespace
}  // namespace rekindle
