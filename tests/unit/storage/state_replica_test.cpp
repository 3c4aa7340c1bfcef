#include "storage/state_replica.hpp"

#include <gtest/gtest.h>

#include "tests/support/temp_dir.hpp"

namespace rekindle::storage {
namespace {

namespace fs = std::filesystem;

struct replica_fixture : ::testing::Test {
  testing::temp_dir dir{"rekindle-replica"};
  fake_clock clk{std::chrono::seconds{5}};

  std::unique_ptr<state_store> open_store(const std::string& name) {
    auto s = state_store::open(dir.path() / name, {.clk = &clk});
    EXPECT_TRUE(s.has_value()) << s.to_status();
    return s ? std::move(*s) : nullptr;
  }
  std::unique_ptr<state_replica> open_replica() {
    auto r = state_replica::open(dir.path() / "replica");
    EXPECT_TRUE(r.has_value()) << r.to_status();
    return r ? std::move(*r) : nullptr;
  }

  // Pulls until the replica holds everything `leader` has; returns how many chunks it took.
  static int catch_up(const state_store& leader, state_replica& replica, std::size_t max_bytes = 1 << 20) {
    for (int chunks = 0; chunks < 10000; ++chunks) {
      auto c = leader.changes_since(replica.position(), max_bytes);
      EXPECT_TRUE(c.has_value()) << c.to_status();
      if (!c)
        return -1;
      if (c->batches.empty() && !c->reset && c->next.complete() && replica.position().complete())
        return chunks;
      EXPECT_TRUE(replica.apply(*c).ok());
    }
    ADD_FAILURE() << "the replica never caught up";
    return -1;
  }

  // A job with an epoch, a world, restarts, a committed checkpoint and `events` events.
  static void write_job(state_store& s, std::uint64_t epoch, int events) {
    job_record job;
    job.name = "replicated";
    job.state = job_state::running;
    ASSERT_TRUE(s.put_job(job).ok());
    ASSERT_TRUE(s.put_epoch(epoch_t{epoch}).ok());
    membership m;
    m.epoch = epoch_t{epoch};
    m.ranks = {{rank_id{0}, node_id{0}, 0, "cpu", {}}, {rank_id{1}, node_id{1}, 0, "cpu", {}}};
    ASSERT_TRUE(s.put_membership(m).ok());
    ASSERT_TRUE(s.record_restart(rank_id{1}).has_value());
    checkpoint_manifest c;
    c.step = step_t{100 * epoch};
    c.world_size = 1;
    c.shards = {{rank_id{0}, "rank0.shard", 10, 7}};
    ASSERT_TRUE(s.put_checkpoint(c).ok());
    ASSERT_TRUE(s.commit_checkpoint(c.step).ok());
    for (int i = 0; i < events; ++i) {
      event e;
      e.kind = "step";
      e.fields = {{"i", std::to_string(i)}};
      ASSERT_TRUE(s.append_event(std::move(e)).has_value());
    }
    ASSERT_TRUE(s.flush_events().ok());
  }
};

TEST_F(replica_fixture, a_replica_follows_its_leader_and_opens_as_the_same_store) {
  auto leader = open_store("leader");
  write_job(*leader, 3, 50);
  auto replica = open_replica();
  EXPECT_FALSE(replica->position().complete());
  ASSERT_GE(catch_up(*leader, *replica), 1);
  EXPECT_TRUE(replica->position().complete());
  EXPECT_EQ(replica->position().source, leader->identity());

  // Later writes arrive from the leader's log, not as another copy.
  write_job(*leader, 4, 20);
  auto more = leader->changes_since(replica->position(), 1 << 20);
  ASSERT_TRUE(more.has_value()) << more.to_status();
  EXPECT_FALSE(more->reset);
  EXPECT_FALSE(more->batches.empty());
  ASSERT_TRUE(replica->apply(*more).ok());
  EXPECT_EQ(catch_up(*leader, *replica), 0);
  ASSERT_TRUE(replica->close().ok());

  auto taken_over = open_store("replica");
  auto want = leader->load();
  auto got = taken_over->load();
  ASSERT_TRUE(want.has_value() && got.has_value());
  EXPECT_EQ(taken_over->epoch(), epoch_t{4});
  EXPECT_EQ(got->job->name, "replicated");
  EXPECT_EQ(got->latest_membership, want->latest_membership);
  EXPECT_EQ(got->total_restarts, 2u);
  EXPECT_EQ(got->checkpoints, want->checkpoints);
  EXPECT_EQ(got->last_event_seq, 70u);
  EXPECT_EQ(taken_over->last_event_seq(), 70u);
  EXPECT_NE(taken_over->identity(), leader->identity());
}

TEST_F(replica_fixture, a_copy_comes_in_parts_and_writes_during_it_are_not_lost) {
  auto leader = open_store("leader");
  write_job(*leader, 1, 300);
  auto replica = open_replica();
  auto first = leader->changes_since(replica->position(), 512);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->reset);
  EXPECT_TRUE(first->next.copying);
  ASSERT_TRUE(replica->apply(*first).ok());
  // The leader moves on while the copy is under way.
  write_job(*leader, 2, 10);
  const int chunks = catch_up(*leader, *replica, 512);
  EXPECT_GT(chunks, 5);  // 300 events do not fit in 512 bytes
  ASSERT_TRUE(replica->close().ok());
  auto copy = open_store("replica");
  EXPECT_EQ(copy->epoch(), epoch_t{2});
  EXPECT_EQ(copy->last_event_seq(), 310u);
  auto events = copy->events_after(0);
  ASSERT_TRUE(events.has_value());
  EXPECT_EQ(events->size(), 310u);
}

TEST_F(replica_fixture, the_position_survives_a_reopen_and_a_replica_of_another_store_starts_over) {
  auto a = open_store("a");
  write_job(*a, 5, 5);
  {
    auto replica = open_replica();
    catch_up(*a, *replica);
  }
  auto replica = open_replica();
  EXPECT_TRUE(replica->position().complete());
  EXPECT_EQ(replica->position().source, a->identity());
  EXPECT_EQ(catch_up(*a, *replica), 0);

  // A new leader: the replica is cleared, so nothing of the old one's stays.
  auto b = open_store("b");
  job_record job;
  job.name = "other";
  ASSERT_TRUE(b->put_job(job).ok());
  auto chunk = b->changes_since(replica->position(), 1 << 20);
  ASSERT_TRUE(chunk.has_value());
  EXPECT_TRUE(chunk->reset);
  catch_up(*b, *replica);
  ASSERT_TRUE(replica->close().ok());
  auto copy = open_store("replica");
  EXPECT_EQ(copy->epoch(), epoch_t{0});
  auto j = copy->job();
  ASSERT_TRUE(j.has_value() && j->has_value());
  EXPECT_EQ((*j)->name, "other");
  auto ckpts = copy->checkpoints();
  ASSERT_TRUE(ckpts.has_value());
  EXPECT_TRUE(ckpts->empty());
}

TEST_F(replica_fixture, a_replica_ahead_of_its_leader_gets_a_full_copy) {
  auto leader = open_store("leader");
  write_job(*leader, 1, 1);
  replica_position ahead;
  ahead.source = leader->identity();
  ahead.next = 1'000'000;
  auto c = leader->changes_since(ahead, 1 << 20);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->reset);
  EXPECT_FALSE(c->batches.empty());
  EXPECT_EQ(c->next.source, leader->identity());
  EXPECT_LE(c->next.next, 1'000'000u);
}

TEST_F(replica_fixture, a_batch_that_is_not_a_write_batch_is_refused_and_nothing_moves) {
  auto leader = open_store("leader");
  write_job(*leader, 1, 1);
  auto replica = open_replica();
  catch_up(*leader, *replica);
  const auto before = replica->position();
  replication_chunk bad;
  bad.next = before;
  bad.next.next += 5;
  const auto header = [](std::uint32_t count) {
    std::string h(8, '\0');
    for (int i = 0; i < 4; ++i)
      h.push_back(static_cast<char>((count >> (8 * i)) & 0xff));
    return h;
  };
  const std::string cases[] = {
      "short", std::string(40, '\x7f'), std::string(64, '\0'),
      header(1) + "\x02\x01k\x01v",          // a merge, which the store never writes
      header(2) + "\x01\x01k\x01v",          // the header counts two records, the batch holds one
      header(1) + "\x01\x05k",                // a key that runs past the batch
      header(1) + "\x01\xff\xff\xff\xff\xff",  // a length that is no varint32
      // Found by fuzzing: RocksDB's own walk of this batch fails an assertion.
      std::string("\xff\xff\xff\xff\xff\xfd\xda\x00\x00\x00\x0a\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff"
                  "\x21\xff\xff\xff\xff\xff\x00",
                  30),
  };
  for (const std::string& junk : cases) {
    bad.batches = {junk};
    const auto st = replica->apply(bad);
    EXPECT_EQ(st.code(), errc::invalid_argument) << st;
    EXPECT_NE(st.message().find("batch 1 of 1"), std::string::npos) << st;
    EXPECT_EQ(replica->position().next, before.next);
  }
  ASSERT_TRUE(replica->close().ok());
  auto copy = open_store("replica");
  EXPECT_EQ(copy->epoch(), epoch_t{1});
}

}  // namespace
}  // namespace rekindle::storage
