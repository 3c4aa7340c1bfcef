#include <gtest/gtest.h>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "tests/support/bridge_process.hpp"

#include <algorithm>
#include <set>
#include <atomic>
#include <thread>

namespace rekindle::actors {
namespace {

using namespace std::chrono_literals;

using process = testing::bridge_process;

// A peer holding only the read-only token may ask (admin requests, which the supervisor answers
// or refuses), never command: every other message kind, sent straight to an agent, a checkpoint
// actor or the supervisor, stops at the bridge. The same messages from the cluster token pass.
TEST(bridge, a_read_only_peer_reaches_no_actor_with_anything_but_an_admin_request) {
  const std::string admin_token = "bridge-test-token-0123456789", ro_token = "look-only-0123456789abcdef";
  process server{true, 0, admin_token, ro_token};
  auto received = std::make_shared<std::atomic<int>>(0);
  auto recorder = server.sys->spawn([received](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler([received](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
      received->fetch_add(1);
      return caf::message{};
    });
    return {[](caf::exit_msg&) {}};
  });
  for (const auto* name : {"agent", "checkpoint", "supervisor", "worker"})
    server.b->expose(name, recorder);
  const auto all = one_message_of_every_type();
  const auto may = static_cast<int>(std::count_if(all.begin(), all.end(), read_only_may_send));
  const int must_not = static_cast<int>(all.size()) - may;
  ASSERT_GT(must_not, 30) << "every control message kind";
  ASSERT_EQ(may, 14) << "the admin requests";

  process ro{false, 1, ro_token}, admin{false, 2, admin_token};
  auto ro_peer = ro.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(ro_peer) << ro_peer.error();
  ASSERT_EQ(ro_peer->role, transport::peer_role::readonly);
  const std::vector<std::string> targets{"agent", "checkpoint", "supervisor"};
  for (const auto& to : targets)
    for (const auto& m : all)
      ro.b->send_made(ro_peer->id, "shell", to, m);
  const auto until = [](auto f) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!f() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    return f();
  };
  const auto n = static_cast<int>(targets.size());
  EXPECT_TRUE(until([&] { return static_cast<int>(server.b->refused()) == n * must_not; }))
      << server.b->refused() << " refused of " << n * must_not;
  EXPECT_TRUE(until([&] { return received->load() == n * may; })) << received->load() << " delivered";
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(received->load(), n * may) << "a message of a read-only peer beyond the admin requests got through";

  // The cluster token's peer: everything is delivered, nothing more is refused.
  auto admin_peer = admin.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(admin_peer) << admin_peer.error();
  for (const auto& m : all)
    admin.b->send_made(admin_peer->id, "agent", "agent", m);
  EXPECT_TRUE(until([&] { return received->load() == n * may + static_cast<int>(all.size()); })) << received->load();
  EXPECT_EQ(static_cast<int>(server.b->refused()), n * must_not);
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
}

TEST(bridge, messages_reach_named_actors_with_their_envelope_and_replies_come_back) {
  process server{true, 0}, client{false, 1};
  // The server's actor answers every heartbeat through the bridge.
  auto* sb = server.b.get();
  auto echo = server.sys->spawn([sb](caf::event_based_actor*) -> caf::behavior {
    return {[sb](const envelope& from, const node_heartbeat& hb) {
      sb->send(from.peer, "supervisor", from.actor, node_heartbeat{node_id{0}, hb.sequence + 1});
    }};
  });
  server.b->expose("supervisor", echo);
  caf::scoped_actor self{*client.sys};
  client.b->expose("agent", caf::actor{self});
  auto peer = client.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(peer) << peer.error();
  client.b->send(peer->id, "agent", "supervisor", node_heartbeat{node_id{1}, 41});
  bool got = false;
  self->receive([&](const envelope& from, const node_heartbeat& hb) {
    got = true;
    EXPECT_EQ(hb.sequence, 42u);
    EXPECT_EQ(from.actor, "supervisor");
    EXPECT_EQ(from.node, node_id{0});
  }, caf::after(30s) >> [] {});
  EXPECT_TRUE(got);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

// With a standby: a process obeys only the supervisor etcd names. An old leader cut off by a
// partition still reaches it, and nothing its supervisor sends is delivered; its other actors are.
TEST(bridge, only_the_followed_leaders_supervisor_is_obeyed) {
  process old_leader{true, 0}, new_leader{true, 1}, agent{false, 2};
  caf::scoped_actor self{*agent.sys};
  agent.b->expose("agent", caf::actor{self});
  auto to_old = agent.b->connect_blocking("127.0.0.1", old_leader.b->port(), 30s);
  auto to_new = agent.b->connect_blocking("127.0.0.1", new_leader.b->port(), 30s);
  ASSERT_TRUE(to_old) << to_old.error();
  ASSERT_TRUE(to_new) << to_new.error();
  // Each server answers the agent's heartbeat from its "supervisor" and its "checkpoint".
  const auto answer_from = [](process& p, std::uint64_t mark) {
    auto* b = p.b.get();
    auto a = p.sys->spawn([b, mark](caf::event_based_actor*) -> caf::behavior {
      return {[b, mark](const envelope& from, const node_heartbeat&) {
        b->send(from.peer, "supervisor", "agent", node_heartbeat{node_id{0}, mark});
        b->send(from.peer, "checkpoint", "agent", node_heartbeat{node_id{0}, mark + 1});
      }};
    });
    p.b->expose("supervisor", a);
    return a;
  };
  auto old_sup = answer_from(old_leader, 100);
  auto new_sup = answer_from(new_leader, 200);
  const auto received = [&](std::size_t want) {
    std::multiset<std::pair<std::string, std::uint64_t>> got;
    for (std::size_t i = 0; i < want; ++i)
      self->receive([&](const envelope& from, const node_heartbeat& hb) { got.insert({from.actor, hb.sequence}); },
                    caf::after(30s) >> [] {});
    // Nothing more arrives.
    self->receive([&](const envelope& from, const node_heartbeat& hb) { got.insert({from.actor, hb.sequence}); },
                  caf::after(300ms) >> [] {});
    return got;
  };

  agent.b->follow_leader(to_new->id);
  agent.b->send(to_old->id, "agent", "supervisor", node_heartbeat{node_id{2}, 1});
  agent.b->send(to_new->id, "agent", "supervisor", node_heartbeat{node_id{2}, 1});
  auto got = received(3);
  EXPECT_EQ(got, (std::multiset<std::pair<std::string, std::uint64_t>>{
                     {"checkpoint", 101}, {"supervisor", 200}, {"checkpoint", 201}}));
  EXPECT_EQ(agent.b->not_from_leader(), 1u);

  // Between leaders: no supervisor is obeyed.
  agent.b->follow_leader(std::nullopt);
  agent.b->send(to_old->id, "agent", "supervisor", node_heartbeat{node_id{2}, 2});
  agent.b->send(to_new->id, "agent", "supervisor", node_heartbeat{node_id{2}, 2});
  got = received(2);
  EXPECT_EQ(got, (std::multiset<std::pair<std::string, std::uint64_t>>{{"checkpoint", 101}, {"checkpoint", 201}}));
  EXPECT_EQ(agent.b->not_from_leader(), 3u);
  caf::anon_send_exit(old_sup, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(new_sup, caf::exit_reason::user_shutdown);
}

TEST(bridge, a_fenced_message_of_an_older_epoch_is_dropped_and_counted_and_a_fact_passes) {
  process server{true, 0}, client{false, 1};
  caf::scoped_actor self{*server.sys};
  server.b->expose("supervisor", caf::actor{self});
  auto peer = client.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(peer) << peer.error();
  server.b->set_epoch(epoch_t{5});
  server.b->set_epoch(epoch_t{4});  // never moves back
  EXPECT_EQ(server.b->epoch(), epoch_t{5});
  // A zombie rank of epoch 3 registers, a rank of epoch 5 reports trouble: the stamp is the
  // message's own epoch, and only the current one is delivered.
  client.b->send(peer->id, "agent", "supervisor", rank_ready{epoch_t{3}, rank_id{1}, node_id{1}, 0, 1, {}});
  client.b->send(peer->id, "agent", "supervisor", rank_trouble{epoch_t{5}, rank_id{2}, node_id{1}, false, "current"});
  // A process of epoch 3 exited: a fact, whatever the epoch, never dropped.
  client.b->send(peer->id, "agent", "supervisor", rank_exited{epoch_t{3}, rank_id{1}, node_id{1}, 0, 9, "exited", 0});
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i)
    self->receive([&](const envelope&, const rank_ready&) { seen.push_back("zombie"); },
                  [&](const envelope& from, const rank_trouble& t) {
                    EXPECT_EQ(from.epoch, epoch_t{5});
                    seen.push_back(t.detail);
                  },
                  [&](const envelope& from, const rank_exited& e) {
                    EXPECT_EQ(from.epoch, epoch_t{0}) << "facts travel unstamped";
                    seen.push_back(e.detail);
                  },
                  caf::after(2s) >> [] {});
  EXPECT_EQ(seen, (std::vector<std::string>{"current", "exited"}));
  EXPECT_EQ(server.b->stats().dropped_of(transport::drop_reason::stale_epoch), 1u);
  EXPECT_TRUE(fenced<rank_ready> && fenced<kill_request> && fenced<start_training>);
  EXPECT_FALSE(fenced<rank_exited> || fenced<snapshot_held> || fenced<shard_persisted> || fenced<node_heartbeat>);
}

TEST(bridge, a_delivered_message_moves_the_epoch_forward_before_its_receiver_acts) {
  // The receiver has not called set_epoch(7) yet when a message of epoch 6 arrives behind one of
  // epoch 7 (e.g. an agent's mailbox still holds the new assignment): the bridge drops it anyway.
  process server{true, 0}, client{false, 1};
  caf::scoped_actor self{*server.sys};
  server.b->expose("agent", caf::actor{self});
  auto peer = client.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(peer) << peer.error();
  client.b->send(peer->id, "supervisor", "agent", rank_trouble{epoch_t{7}, rank_id{2}, node_id{1}, false, "new"});
  client.b->send(peer->id, "supervisor", "agent", rank_trouble{epoch_t{6}, rank_id{2}, node_id{1}, false, "old"});
  client.b->send(peer->id, "supervisor", "agent", rank_trouble{epoch_t{7}, rank_id{2}, node_id{1}, false, "new too"});
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i)
    self->receive([&](const envelope&, const rank_trouble& t) { seen.push_back(t.detail); }, caf::after(2s) >> [] {});
  EXPECT_EQ(seen, (std::vector<std::string>{"new", "new too"}));
  EXPECT_EQ(server.b->epoch(), epoch_t{7});
  EXPECT_EQ(server.b->stats().dropped_of(transport::drop_reason::stale_epoch), 1u);
  EXPECT_EQ(server.b->stale_delivered(), 0u);
  EXPECT_EQ(server.b->fence_summary(), "fence: 1 stale dropped, 0 stale delivered, 0 not from the leader, 0 refused");
}

TEST(bridge, bulk_payloads_travel_beside_their_header) {
  process server{true, 0}, client{false, 1};
  caf::scoped_actor self{*server.sys};
  server.b->expose("checkpoint", caf::actor{self});
  auto peer = client.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(peer) << peer.error();
  std::vector<std::byte> data(3 << 20);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = std::byte(static_cast<unsigned char>(i * 7));
  client.b->send_bulk(peer->id, "checkpoint", "checkpoint",
                      replica_header{epoch_t{1}, rank_id{2}, step_t{10}, data.size(), 99},
                      transport::shared_bytes::copy_of(data));
  bool got = false;
  self->receive([&](const envelope&, const bulk_payload& p, const replica_header& h) {
    got = true;
    EXPECT_EQ(h.rank, rank_id{2});
    ASSERT_EQ(p.bytes.size(), data.size());
    EXPECT_TRUE(std::equal(data.begin(), data.end(), p.bytes.span().begin()));
  }, caf::after(30s) >> [] {});
  EXPECT_TRUE(got);
}

TEST(bridge, a_frame_for_an_unknown_actor_is_counted) {
  process server{true, 0}, client{false, 1};
  auto peer = client.b->connect_blocking("127.0.0.1", server.b->port(), 30s);
  ASSERT_TRUE(peer) << peer.error();
  client.b->send(peer->id, "agent", "nobody", abort_epoch{epoch_t{1}});
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (server.b->undeliverable() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server.b->undeliverable(), 1u);
}

}  // namespace
}  // namespace rekindle::actors
