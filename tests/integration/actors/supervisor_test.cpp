// The supervisor actor with real CAF, UCX and RocksDB, against node agents the test plays over the
// bridge: what it announces and what it stores when the store refuses an epoch, and restart limits
// that count on across a supervisor restart.

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "actors/node_context.hpp"
#include "actors/supervisor_actor.hpp"
#include "config/load.hpp"
#include "storage/state_store.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::actors {
namespace {

using namespace std::chrono_literals;

constexpr const char* token = "supervisor-test-token-0123456789";

config::spec two_nodes(const std::filesystem::path& data_dir, const std::string& recovery) {
  const std::string text = R"([cluster]
name = "t"
supervisor = "n0"
ranks_per_node = 2

[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 0

[[nodes]]
name = "n1"
host = "127.0.0.1"
port = 0

[job]
name = "sup"
steps = 1000000

[model]
layers = 1
heads = 2
width = 16
seq_len = 8

[checkpoint]
snapshot_every = 5
persist_every = 0

# The agents here are played by the test, which sends no node check.
[checks]
preflight = false

[timeouts]
heartbeat = "100ms"
node = "60s"
hang = "300s"
rendezvous = "120s"
collective = "60s"

[recovery]
backoff = "1ms"
backoff_max = "1ms"
)" + recovery + "\n[transport]\nnet_devices = \"lo\"\n\n[daemon]\ndata_dir = \"" + data_dir.string() +
                           "\"\n";
  auto r = config::parse(text, "supervisor-test.toml", data_dir);
  EXPECT_TRUE(r.ok()) << r.error_text();
  auto spec = r.value.value_or(config::spec{});
  spec.security.token = token;
  return spec;
}

caf::actor_system_config& with_types(caf::actor_system_config& cfg) {
  register_message_types(cfg);
  register_bridge_types(cfg);
  cfg.set("scheduler.max-threads", 2);
  return cfg;
}

transport::messenger_options messenger_for(std::uint32_t node, bool listen) {
  transport::messenger_options o;
  o.name = "node" + std::to_string(node);
  o.node = node;
  o.token = token;
  o.net_devices = "lo";
  if (listen)
    o.listen_host = "127.0.0.1";
  return o;
}

// The supervisor's daemon, as far as the supervisor needs one: its actor system, bridge and store.
struct supervisor_process {
  caf::actor_system_config cfg;
  caf::actor_system sys{with_types(cfg)};
  std::unique_ptr<bridge> b;
  std::unique_ptr<supervisor_link> link;
  real_clock time;
  node_context ctx;
  caf::actor supervisor;

  supervisor_process(const config::spec& spec, storage::state_store_options store_options) {
    auto started = bridge::start(sys, messenger_for(0, true));
    EXPECT_TRUE(started) << started.error();
    b = std::move(*started);
    link = std::make_unique<supervisor_link>(*b);
    ctx.spec = spec;
    ctx.node = node_id{0};
    ctx.data_dir = spec.daemon.data_dir;
    ctx.node_dir = ctx.data_dir / "n0";
    ctx.bridge = b.get();
    ctx.supervisor = link.get();
    ctx.time = &time;
    ctx.address = "127.0.0.1:" + std::to_string(b->port());
    std::filesystem::create_directories(ctx.node_dir);
    store_options.clk = &time;
    auto store = storage::state_store::open(ctx.node_dir / "state", std::move(store_options));
    EXPECT_TRUE(store) << store.error();
    supervisor = sys.spawn<supervisor_actor>(&ctx, std::move(*store));
  }
  ~supervisor_process() { stop(); }

  // Stops the supervisor before the nodes go, so that it does not see them leave.
  void stop() {
    if (stopped)
      return;
    stopped = true;
    caf::scoped_actor self{sys};
    self->send_exit(supervisor, caf::exit_reason::user_shutdown);
    self->wait_for(supervisor);
    b->shutdown();
  }
  bool stopped = false;
};

// A node's agent, played by the test: it connects, says hello and reports, and records what the
// supervisor sends it.
struct played_agent {
  caf::actor_system_config cfg;
  caf::actor_system sys{with_types(cfg)};
  std::unique_ptr<bridge> b;
  caf::scoped_actor self{sys};
  node_id node;
  transport::peer_id supervisor;
  /// Everything received, in order, as "type epoch" lines.
  std::vector<std::string> heard;

  played_agent(std::uint32_t n, std::uint16_t port) : node(n) {
    auto started = bridge::start(sys, messenger_for(n, false));
    EXPECT_TRUE(started) << started.error();
    b = std::move(*started);
    b->expose("agent", caf::actor{self});
    auto peer = b->connect_blocking("127.0.0.1", port, 30s);
    EXPECT_TRUE(peer) << peer.error();
    supervisor = peer->id;
    send(node_hello{node, "n" + std::to_string(n), "127.0.0.1:1", 1});
    // As a node's checkpoint actor does after each connection: it holds no copies.
    b->send(supervisor, "checkpoint", "supervisor", holdings_reported{node, 0});
  }
  ~played_agent() { b->shutdown(); }

  template <class T>
  void send(const T& msg) {
    b->send(supervisor, "agent", "supervisor", msg);
  }

  // Waits for a message of type T, recording every message on the way; nullopt after `timeout`.
  template <class T>
  std::optional<T> next(std::chrono::milliseconds timeout = 30000ms) {
    std::optional<T> got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!got && std::chrono::steady_clock::now() < deadline) {
      self->receive([&](const envelope&, const T& x) { got = x; heard.push_back(name_of(x)); },
                    [&](const envelope&, const abort_epoch& x) { heard.push_back("abort " + std::to_string(x.epoch.value())); },
                    [&](const envelope&, const assign_ranks& x) { heard.push_back("assign " + std::to_string(x.epoch.value())); },
                    [&](const envelope&, const start_training& x) { heard.push_back("start " + std::to_string(x.epoch.value())); },
                    [&](const envelope&, const job_finished& x) { heard.push_back("finished " + x.state); },
                    [&](caf::message&) {}, caf::after(200ms) >> [] {});
    }
    return got;
  }

  static std::string name_of(const assign_ranks& x) { return "assign " + std::to_string(x.epoch.value()); }
  static std::string name_of(const start_training& x) { return "start " + std::to_string(x.epoch.value()); }
  static std::string name_of(const abort_epoch& x) { return "abort " + std::to_string(x.epoch.value()); }
  static std::string name_of(const job_finished& x) { return "finished " + x.state; }
  static std::string name_of(const admin_reply&) { return "reply"; }

  // Registers this node's ranks of `a`'s epoch.
  void ranks_ready(const assign_ranks& a) {
    for (const auto& r : a.ranks)
      send(rank_ready{a.epoch, r.rank, node, r.local_index, 100 + r.rank.value(), {std::uint8_t(r.rank.value())}});
  }
};

// Both agents through one epoch: assignments in, registrations out, the start in. Returns the epoch.
epoch_t through_an_epoch(played_agent& a0, played_agent& a1) {
  const auto x0 = a0.next<assign_ranks>();
  const auto x1 = a1.next<assign_ranks>();
  EXPECT_TRUE(x0 && x1);
  if (!x0 || !x1)
    return epoch_t{0};
  a0.ranks_ready(*x0);
  a1.ranks_ready(*x1);
  const auto s0 = a0.next<start_training>();
  EXPECT_TRUE(s0.has_value());
  EXPECT_EQ(s0 ? s0->epoch : epoch_t{0}, x0->epoch);
  return x0->epoch;
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json{};
}

TEST(supervisor, an_epoch_the_store_refuses_is_never_announced_and_the_job_fails_saying_why) {
  testing::temp_dir dir{"rekindle-supervisor"};
  const auto spec = two_nodes(dir.path(), "");
  std::atomic<bool> refuse{false};
  storage::state_store_options o;
  o.refuse_write = [&](std::string_view what) -> status {
    if (refuse && what.find("'epoch'") != std::string_view::npos)
      return status{errc::io_error, "the disk refused (test)"};
    return {};
  };
  {
    supervisor_process sp{spec, o};
    played_agent a0{0, sp.b->port()}, a1{1, sp.b->port()};
    const auto first = through_an_epoch(a0, a1);
    ASSERT_EQ(first, epoch_t{1});
    // Rank 2 (on n1) dies; the next epoch cannot be stored.
    refuse = true;
    a1.send(rank_exited{first, rank_id{2}, node_id{1}, 0, 9, "killed by signal 9", 0});
    const auto end0 = a0.next<job_finished>();
    const auto end1 = a1.next<job_finished>();
    ASSERT_TRUE(end0 && end1);
    EXPECT_EQ(end0->state, "failed");
    EXPECT_NE(end0->reason.find("epoch 2 could not be made durable, so it was not announced"), std::string::npos)
        << end0->reason;
    EXPECT_NE(end0->reason.find("the disk refused (test)"), std::string::npos) << end0->reason;
    for (auto* a : {&a0, &a1})
      for (const auto& line : a->heard)
        EXPECT_TRUE(line.find(" 2") == std::string::npos) << "epoch 2 was announced: " << line;
    const auto status = read_json(dir.path() / "status.json");
    EXPECT_EQ(status.value("state", ""), "failed") << status.dump(2);
  }
  // The store still says epoch 1: a restarted supervisor moves on to epoch 2 and no one has seen it.
  auto store = storage::state_store::open(dir.path() / "n0" / "state");
  ASSERT_TRUE(store) << store.error();
  EXPECT_EQ((*store)->epoch(), epoch_t{1});
  const auto job = (*store)->job();
  ASSERT_TRUE(job && *job);
  EXPECT_EQ((**job).state, storage::job_state::failed);
}

TEST(supervisor, restart_limits_count_on_across_a_supervisor_restart) {
  testing::temp_dir dir{"rekindle-supervisor"};
  const auto spec = two_nodes(dir.path(), "max_restarts = 3\nmax_restarts_per_rank = 10\n");
  {
    // Two restarts of rank 1 under the first supervisor.
    supervisor_process sp{spec, {}};
    played_agent a0{0, sp.b->port()}, a1{1, sp.b->port()};
    auto e = through_an_epoch(a0, a1);
    for (int i = 0; i < 2; ++i) {
      a0.send(rank_exited{e, rank_id{1}, node_id{0}, 0, 9, "killed by signal 9", 0});
      e = through_an_epoch(a0, a1);
    }
    EXPECT_EQ(e, epoch_t{3});
    sp.stop();
  }
  {
    // The supervisor restarts: the agents say hello again, a new epoch starts, and the job may
    // restart a rank once more (3 of 3), not three more times.
    supervisor_process sp{spec, {}};
    played_agent a0{0, sp.b->port()}, a1{1, sp.b->port()};
    auto e = through_an_epoch(a0, a1);
    EXPECT_EQ(e, epoch_t{4}) << "a restarted supervisor moves past every epoch handed out";
    a0.send(rank_exited{e, rank_id{1}, node_id{0}, 0, 9, "killed by signal 9", 0});
    e = through_an_epoch(a0, a1);
    EXPECT_EQ(e, epoch_t{5});
    a0.send(rank_exited{e, rank_id{1}, node_id{0}, 0, 9, "killed by signal 9", 0});
    const auto end = a0.next<job_finished>();
    ASSERT_TRUE(end.has_value());
    EXPECT_EQ(end->state, "failed");
    EXPECT_NE(end->reason.find("4 restarts in this job (limit 3)"), std::string::npos) << end->reason;
  }
}

TEST(supervisor, a_nodes_record_of_steps_fills_the_losses_it_did_not_hear_without_overwriting_them) {
  // A supervisor that took over (or restarted) heard none of the steps trained before or while it
  // was away: each node replays its record when it connects. That record fills what is unknown,
  // and never overwrites what rank 0 reported.
  testing::temp_dir dir{"rekindle-supervisor"};
  supervisor_process sp{two_nodes(dir.path(), ""), {}};
  played_agent a0{0, sp.b->port()}, a1{1, sp.b->port()};
  const auto e = through_an_epoch(a0, a1);
  ASSERT_EQ(e, epoch_t{1});
  const auto report = [&](std::uint32_t rank, std::uint64_t step, double loss) {
    progress_report p{e, rank_id{rank}, step_t{step}, loss};
    p.step_ns = static_cast<std::int64_t>(step) * 1000000;
    return p;
  };
  a0.send(progress_batch{e, node_id{0}, {report(0, 2, 2.5)}});
  a0.send(admin_status{6, false});  // answered after the batch before it
  ASSERT_TRUE(a0.next<admin_reply>().has_value());
  a1.send(progress_batch{e, node_id{1}, {report(2, 1, 3.0), report(2, 2, 9.0), report(2, 3, 1.0)}, true});
  // A record of steps past the job's end is no step at all.
  a1.send(progress_batch{e, node_id{1}, {report(2, 2000000, 7.0)}, true});
  a1.send(admin_status{7, true});
  const auto reply = a1.next<admin_reply>();
  ASSERT_TRUE(reply.has_value());
  const auto status = nlohmann::json::parse(reply->json, nullptr, false);
  ASSERT_TRUE(status.contains("losses")) << reply->json;
  EXPECT_EQ(status["losses"], (nlohmann::json{3.0, 2.5, 1.0})) << status["losses"].dump();
  EXPECT_EQ(status["step_seconds"], (nlohmann::json{0.001, 0.002, 0.003})) << status["step_seconds"].dump();
  // A replayed record measures nothing about the ranks: rank 2's own step stays unknown.
  for (const auto& r : status["ranks"]) {
    if (r.value("rank", 99) == 2) {
      EXPECT_EQ(r.value("step", std::uint64_t{99}), 0u) << r.dump();
    }
  }
}

}  // namespace
}  // namespace rekindle::actors
