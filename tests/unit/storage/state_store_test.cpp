#include "storage/state_store.hpp"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "common/checksum.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

namespace rekindle::storage {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A store in a fresh directory, driven by a fake clock.
struct store_fixture : ::testing::Test {
  testing::temp_dir dir{"rekindle-store"};
  fake_clock clk{std::chrono::seconds{5}};

  fs::path db_path() const { return dir.path() / "db"; }

  std::unique_ptr<state_store> open(state_store_options o = {}) {
    o.clk = &clk;
    auto s = state_store::open(db_path(), o);
    EXPECT_TRUE(s.has_value()) << s.to_status();
    return s ? std::move(*s) : nullptr;
  }
};

std::string be64(std::uint64_t v) {
  std::string k;
  for (int i = 7; i >= 0; --i)
    k.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return k;
}

// Writes raw `value` at `key` with RocksDB itself, as a bad disk or a bad program would.
void raw_put(const fs::path& db, const std::string& key, const std::string& value) {
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(o, db.string(), &raw).ok());
  std::unique_ptr<rocksdb::DB> d{raw};
  rocksdb::WriteOptions wo;
  wo.sync = true;
  ASSERT_TRUE(d->Put(wo, key, value).ok());
  ASSERT_TRUE(d->Close().ok());
}

std::string raw_get(const fs::path& db, const std::string& key) {
  rocksdb::Options o;
  rocksdb::DB* raw = nullptr;
  EXPECT_TRUE(rocksdb::DB::Open(o, db.string(), &raw).ok());
  std::unique_ptr<rocksdb::DB> d{raw};
  std::string v;
  EXPECT_TRUE(d->Get(rocksdb::ReadOptions{}, key, &v).ok()) << key;
  EXPECT_TRUE(d->Close().ok());
  return v;
}

// A record with a valid checksum around `body` (type, version, payload).
std::string sealed(std::string body) {
  const auto sum = xxh64(std::span<const std::byte>{reinterpret_cast<const std::byte*>(body.data()), body.size()});
  for (int i = 0; i < 8; ++i)
    body.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  return body;
}

membership world(epoch_t e, std::uint32_t n) {
  membership m;
  m.epoch = e;
  for (std::uint32_t r = n; r-- > 0;)
    m.ranks.push_back(rank_member{rank_id{r}, node_id{r / 2}, r % 2, "cpu",
                                  {std::byte{10}, std::byte{static_cast<unsigned char>(r)}}});
  return m;
}

checkpoint_manifest manifest(std::uint64_t step, std::uint32_t world_size, std::uint32_t shards) {
  checkpoint_manifest m;
  m.step = step_t{step};
  m.world_size = world_size;
  m.layout_version = 1;
  for (std::uint32_t r = 0; r < shards; ++r)
    m.shards.push_back(shard_entry{rank_id{r}, "s" + std::to_string(step) + "-r" + std::to_string(r) + ".shard",
                                   1000 + r, 0xabc0 + r});
  return m;
}

TEST_F(store_fixture, a_new_store_is_empty) {
  auto s = open();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->epoch(), epoch_t{0});
  auto job = s->job();
  ASSERT_TRUE(job.has_value());
  EXPECT_FALSE(job->has_value());
  auto m = s->latest_membership();
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->has_value());
  EXPECT_TRUE(s->committed_checkpoints()->empty());
  EXPECT_TRUE(s->ranks()->empty());
  EXPECT_EQ(*s->total_restarts(), 0u);
  EXPECT_EQ(s->last_event_seq(), 0u);
  EXPECT_FALSE(s->latest_membership()->has_value());
}

TEST_F(store_fixture, job_and_epoch_survive_a_reopen) {
  job_record j{"train", "/etc/rekindle/local.toml", 0x1234, job_state::recovering, "rank 3 exited",
               clk.wall_now()};
  {
    auto s = open();
    ASSERT_TRUE(s->put_job(j).ok());
    EXPECT_TRUE(s->put_epoch(epoch_t{1}).ok());
    EXPECT_TRUE(s->put_epoch(epoch_t{3})) << "the policy may skip epochs";
    EXPECT_EQ(s->epoch(), epoch_t{3});
    EXPECT_EQ(s->put_epoch(epoch_t{3}).code(), errc::failed_precondition) << "compare-and-set: not twice";
    EXPECT_EQ(s->put_epoch(epoch_t{2}).code(), errc::failed_precondition) << "never backwards";
    EXPECT_EQ(s->epoch(), epoch_t{3});
    ASSERT_TRUE(s->close().ok());
    EXPECT_TRUE(s->close().ok()) << "close is idempotent";
    EXPECT_EQ(s->put_epoch(epoch_t{4}).code(), errc::failed_precondition);
  }
  auto s = open();
  EXPECT_EQ(s->epoch(), epoch_t{3});
  EXPECT_EQ(s->put_epoch(epoch_t{3}).code(), errc::failed_precondition) << "an epoch is never handed out twice";
  EXPECT_TRUE(s->put_epoch(epoch_t{4}).ok());
  auto got = s->job();
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, j);
  EXPECT_EQ(to_string((*got)->state), "recovering");
}

TEST_F(store_fixture, membership_per_epoch) {
  auto s = open();
  EXPECT_EQ(s->put_membership(world(epoch_t{1}, 4)).code(), errc::failed_precondition)
      << "a membership may not run ahead of the epoch";
  ASSERT_TRUE(s->put_epoch(s->epoch().next()).ok());
  ASSERT_TRUE(s->put_membership(world(epoch_t{1}, 4)).ok());
  auto m1 = s->latest_membership();
  ASSERT_TRUE(m1.has_value() && m1->has_value()) << m1.to_status();
  ASSERT_EQ((*m1)->ranks.size(), 4u);
  EXPECT_EQ((*m1)->ranks[0].rank, rank_id{0}) << "ranks come back sorted";
  EXPECT_EQ((*m1)->ranks[3].node, node_id{1});
  EXPECT_EQ((*m1)->ranks[3].local_index, 1u);
  EXPECT_EQ((*m1)->ranks[3].address, (std::vector<std::byte>{std::byte{10}, std::byte{3}}));
  ASSERT_TRUE(s->put_epoch(s->epoch().next()).ok());
  auto m2 = world(epoch_t{2}, 3);
  m2.spares_in_use = {node_id{7}};
  m2.stages = {1, 3};
  ASSERT_TRUE(s->put_membership(m2).ok());

  auto bad = world(epoch_t{2}, 2);
  bad.ranks.push_back(bad.ranks.front());
  const auto st = s->put_membership(bad);
  EXPECT_EQ(st.code(), errc::invalid_argument);
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st;

  auto latest = s->latest_membership();
  ASSERT_TRUE(latest.has_value() && latest->has_value());
  EXPECT_EQ((*latest)->epoch, epoch_t{2});
  EXPECT_EQ((*latest)->spares_in_use, std::vector<node_id>{node_id{7}});
  EXPECT_EQ((*latest)->stages, (std::vector<std::uint32_t>{1, 3})) << "the world's pipeline split";
  EXPECT_TRUE((*m1)->stages.empty());
  EXPECT_EQ((*latest)->ranks.size(), 3u);
}

TEST_F(store_fixture, the_reloaded_world_begins_at_the_oldest_epoch_that_numbers_its_ranks_alike) {
  auto s = open();
  EXPECT_FALSE(s->world_since()->has_value()) << "no world stored";
  // Epochs 1-2: 4 ranks; 3: 3 ranks (a lost node, no spare); 4 has no world (it never started);
  // 5-6: 4 ranks again, placed differently in 6 (a spare took a node's ranks: same numbering).
  for (const auto& [e, n] : std::vector<std::pair<std::uint64_t, std::uint32_t>>{{1, 4}, {2, 4}, {3, 3}, {5, 4}, {6, 4}}) {
    while (s->epoch() < epoch_t{e})
      ASSERT_TRUE(s->put_epoch(s->epoch().next()).ok());
    auto m = world(epoch_t{e}, n);
    if (e == 6)
      m.ranks[0].node = node_id{9};
    ASSERT_TRUE(s->put_membership(m).ok());
  }
  auto since = s->world_since();
  ASSERT_TRUE(since.has_value()) << since.to_status();
  EXPECT_EQ(*since, epoch_t{5}) << "epochs 5 and 6 number 4 ranks alike; 3 numbered 3";
  ASSERT_TRUE(s->put_epoch(s->epoch().next()).ok());
  ASSERT_TRUE(s->put_membership(world(epoch_t{7}, 2)).ok());
  EXPECT_EQ(*s->world_since(), epoch_t{7});
}

TEST_F(store_fixture, restart_counters_and_snapshot_steps) {
  {
    auto s = open();
    EXPECT_EQ(s->record_restart(rank_id{2})->rank, 1u);
    EXPECT_EQ(s->record_restart(rank_id{2})->rank, 2u);
    const auto c = s->record_restart(rank_id{0});
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->rank, 1u);
    EXPECT_EQ(c->total, 3u);
    ASSERT_TRUE(s->set_snapshot_step(rank_id{2}, step_t{40}).ok());
    ASSERT_TRUE(s->set_snapshot_step(rank_id{5}, step_t{45}).ok());
  }
  auto s = open();
  EXPECT_EQ(*s->total_restarts(), 3u);
  EXPECT_EQ(*s->rank(rank_id{2}), (rank_record{rank_id{2}, 2, step_t{40}}));
  EXPECT_EQ(*s->rank(rank_id{9}), (rank_record{rank_id{9}, 0, std::nullopt}));
  auto all = s->ranks();
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].rank, rank_id{0});
  EXPECT_EQ((*all)[2], (rank_record{rank_id{5}, 0, step_t{45}}));
}

TEST_F(store_fixture, checkpoint_manifests_follow_their_state_machine) {
  auto s = open();
  ASSERT_TRUE(s->put_checkpoint(manifest(10, 4, 4)).ok());
  ASSERT_TRUE(s->commit_checkpoint(step_t{10}).ok());
  clk.advance(1s);
  ASSERT_TRUE(s->put_checkpoint(manifest(20, 4, 2)).ok());
  auto st = s->commit_checkpoint(step_t{20});
  EXPECT_EQ(st.code(), errc::failed_precondition);
  EXPECT_NE(st.message().find("2 of 4 shards missing (ranks 2, 3)"), std::string::npos) << st;
  ASSERT_TRUE(s->put_checkpoint(manifest(20, 4, 4)).ok()) << "a pending manifest may be replaced";
  ASSERT_TRUE(s->commit_checkpoint(step_t{20}).ok());
  ASSERT_TRUE(s->put_checkpoint(manifest(30, 4, 1)).ok());

  EXPECT_EQ(s->put_checkpoint(manifest(20, 4, 4)).code(), errc::failed_precondition);
  EXPECT_EQ(s->commit_checkpoint(step_t{20}).code(), errc::failed_precondition);
  EXPECT_EQ(s->commit_checkpoint(step_t{99}).code(), errc::not_found);

  auto committed = s->committed_checkpoints();
  ASSERT_TRUE(committed.has_value());
  ASSERT_EQ(committed->size(), 2u);
  EXPECT_EQ((*committed)[0].step, step_t{20}) << "newest first";
  EXPECT_EQ((*committed)[1].step, step_t{10});
  EXPECT_TRUE((*committed)[0].committed);
  EXPECT_EQ((*committed)[0].commit_time, clk.wall_now());
  EXPECT_EQ((*committed)[0].shards[3].checksum, 0xabc3u);
  EXPECT_EQ(s->checkpoints()->size(), 3u);
  EXPECT_FALSE(s->checkpoint(step_t{30})->committed);

  ASSERT_TRUE(s->delete_checkpoint(step_t{10}).ok());
  EXPECT_EQ(s->delete_checkpoint(step_t{10}).code(), errc::not_found);
  EXPECT_EQ(s->checkpoint(step_t{10}).to_status().code(), errc::not_found);
  EXPECT_EQ(s->committed_checkpoints()->size(), 1u);
}

TEST_F(store_fixture, bad_manifests_are_refused) {
  auto s = open();
  auto m = manifest(5, 2, 2);
  m.shards[1].rank = rank_id{2};
  EXPECT_EQ(s->put_checkpoint(m).code(), errc::invalid_argument);
  m = manifest(5, 2, 2);
  m.shards[1].rank = rank_id{0};
  EXPECT_EQ(s->put_checkpoint(m).code(), errc::invalid_argument);
  for (const char* name : {"", "..", "a/b.shard"}) {
    m = manifest(5, 2, 2);
    m.shards[0].file = name;
    EXPECT_EQ(s->put_checkpoint(m).code(), errc::invalid_argument) << name;
  }
  EXPECT_EQ(s->checkpoint(step_t{5}).to_status().code(), errc::not_found);
}

event make_event(std::string kind, std::uint32_t rank) {
  event e;
  e.kind = std::move(kind);
  e.epoch = epoch_t{3};
  e.rank = rank_id{rank};
  e.fields = {{"signal", "9"}, {"note", "x=y z"}};
  return e;
}

TEST_F(store_fixture, events_are_numbered_stamped_and_read_back) {
  {
    auto s = open();
    for (std::uint32_t i = 0; i < 5; ++i) {
      EXPECT_EQ(*s->append_event(make_event("rank_exited", i)), i + 1);
      clk.advance(1s);
    }
    ASSERT_TRUE(s->flush_events().ok());
    EXPECT_EQ(s->durable_event_seq(), 5u);
    auto all = s->events_after(0);
    ASSERT_TRUE(all.has_value()) << all.to_status();
    ASSERT_EQ(all->size(), 5u);
    EXPECT_EQ((*all)[2].seq, 3u);
    EXPECT_EQ((*all)[2].rank, rank_id{2});
    EXPECT_FALSE((*all)[2].node.has_value());
    EXPECT_EQ((*all)[2].field("note"), "x=y z");
    EXPECT_FALSE((*all)[2].field("missing").has_value());
    EXPECT_EQ((*all)[0].wall, fake_clock{std::chrono::seconds{5}}.wall_now()) << "stamped from the store's clock";
    EXPECT_EQ((*all)[4].steady - (*all)[0].steady, 4s);

    auto range = s->events(2, 3);
    ASSERT_EQ(range->size(), 2u);
    EXPECT_EQ(range->front().seq, 2u);
    EXPECT_EQ(s->events_after(3, 1)->front().seq, 4u) << "follow: read after the last seen sequence";
    EXPECT_TRUE(s->events_after(5)->empty());

    // An explicit wall time is kept.
    event early = make_event("replayed", 9);
    early.wall = (*all)[0].wall - 1h;
    ASSERT_EQ(*s->append_event(early), 6u);
    ASSERT_TRUE(s->flush_events().ok());
    EXPECT_EQ(s->events(6, 6)->front().wall, early.wall);
  }
  auto s = open();
  EXPECT_EQ(s->last_event_seq(), 6u);
  EXPECT_EQ(*s->append_event(make_event("supervisor_started", 0)), 7u) << "numbering resumes after a reopen";
}

TEST_F(store_fixture, bad_events_are_refused) {
  auto s = open();
  EXPECT_EQ(s->append_event(event{}).to_status().code(), errc::invalid_argument);
  auto e = make_event("x", 0);
  e.fields.emplace_back("", "v");
  EXPECT_EQ(s->append_event(e).to_status().code(), errc::invalid_argument);
  e = make_event("x", 0);
  e.fields.emplace_back("big", std::string(2 << 20, 'a'));
  EXPECT_EQ(s->append_event(e).to_status().code(), errc::invalid_argument);
  EXPECT_EQ(s->last_event_seq(), 0u) << "a refused event takes no number";
}

TEST_F(store_fixture, events_wait_for_their_batch_until_flushed) {
  state_store_options o;
  o.event_batch = 1000;
  o.event_delay = std::chrono::hours{1};
  auto s = open(o);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(s->append_event(make_event("progress", 0)).has_value());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(s->durable_event_seq(), 0u) << "no batch is full and no delay passed";
  EXPECT_TRUE(s->events_after(0)->empty());
  ASSERT_TRUE(s->flush_events().ok());
  EXPECT_EQ(s->durable_event_seq(), 10u);
  EXPECT_EQ(s->events_after(0)->size(), 10u);
}

TEST_F(store_fixture, events_become_durable_by_size_or_delay) {
  state_store_options o;
  o.event_batch = 4;
  o.event_delay = std::chrono::hours{1};
  auto s = open(o);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(s->append_event(make_event("progress", 0)).has_value());
  EXPECT_TRUE(testing::wait_until([&] { return s->durable_event_seq() == 4; }, 10s)) << "a full batch is written";
  s.reset();
  o.event_batch = 1000;
  o.event_delay = 5ms;
  s = open(o);
  ASSERT_TRUE(s->append_event(make_event("progress", 0)).has_value());
  EXPECT_TRUE(testing::wait_until([&] { return s->durable_event_seq() == 5; }, 10s)) << "the delay passed";
}

TEST_F(store_fixture, close_writes_pending_events) {
  state_store_options o;
  o.event_batch = 1000;
  o.event_delay = std::chrono::hours{1};
  {
    auto s = open(o);
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(s->append_event(make_event("progress", 0)).has_value());
  }
  auto s = open();
  EXPECT_EQ(s->events_after(0)->size(), 3u);
}

TEST_F(store_fixture, too_many_pending_events_are_refused) {
  state_store_options o;
  o.event_batch = 1000;
  o.event_delay = std::chrono::hours{1};
  o.event_max_pending = 3;
  auto s = open(o);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(s->append_event(make_event("progress", 0)).has_value());
  EXPECT_EQ(s->append_event(make_event("progress", 0)).to_status().code(), errc::resource_exhausted);
  ASSERT_TRUE(s->flush_events().ok());
  EXPECT_TRUE(s->append_event(make_event("progress", 0)).has_value());
}

TEST_F(store_fixture, concurrent_appends_get_distinct_gapless_numbers) {
  auto s = open();
  constexpr int threads = 4, per_thread = 250;
  std::vector<std::thread> ts;
  std::vector<std::vector<std::uint64_t>> got(threads);
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto e = make_event("progress", static_cast<std::uint32_t>(t));
        e.fields = {{"i", std::to_string(i)}};
        got[static_cast<std::size_t>(t)].push_back(*s->append_event(e));
      }
    });
  for (auto& t : ts)
    t.join();
  ASSERT_TRUE(s->flush_events().ok());
  auto all = s->events_after(0);
  ASSERT_EQ(all->size(), static_cast<std::size_t>(threads * per_thread));
  std::set<std::uint64_t> seqs;
  for (std::size_t i = 0; i < all->size(); ++i) {
    EXPECT_EQ((*all)[i].seq, i + 1);
    seqs.insert((*all)[i].seq);
  }
  // Each thread's events are stored in the order it appended them.
  for (int t = 0; t < threads; ++t)
    for (int i = 1; i < per_thread; ++i)
      EXPECT_LT(got[static_cast<std::size_t>(t)][static_cast<std::size_t>(i - 1)],
                got[static_cast<std::size_t>(t)][static_cast<std::size_t>(i)]);
  EXPECT_EQ(seqs.size(), all->size());
}

TEST_F(store_fixture, load_returns_everything_a_supervisor_resumes_from) {
  {
    auto s = open();
    ASSERT_TRUE(s->put_job(job_record{"j", "src", 1, job_state::running, "", clk.wall_now()}).ok());
    ASSERT_TRUE(s->put_epoch(s->epoch().next()).ok());
    ASSERT_TRUE(s->put_epoch(s->epoch().next()).ok());
    ASSERT_TRUE(s->put_membership(world(epoch_t{1}, 2)).ok());
    ASSERT_TRUE(s->put_membership(world(epoch_t{2}, 3)).ok());
    ASSERT_TRUE(s->record_restart(rank_id{1}).has_value());
    ASSERT_TRUE(s->put_checkpoint(manifest(10, 3, 3)).ok());
    ASSERT_TRUE(s->commit_checkpoint(step_t{10}).ok());
    ASSERT_TRUE(s->append_event(make_event("epoch_bumped", 0)).has_value());
  }
  auto s = open();
  auto c = s->load();
  ASSERT_TRUE(c.has_value()) << c.to_status();
  ASSERT_TRUE(c->job.has_value());
  EXPECT_EQ(c->job->state, job_state::running);
  EXPECT_EQ(c->epoch, epoch_t{2});
  ASSERT_TRUE(c->latest_membership.has_value());
  EXPECT_EQ(c->latest_membership->ranks.size(), 3u);
  EXPECT_EQ(c->total_restarts, 1u);
  ASSERT_EQ(c->ranks.size(), 1u);
  ASSERT_EQ(c->checkpoints.size(), 1u);
  EXPECT_TRUE(c->checkpoints[0].committed);
  EXPECT_EQ(c->last_event_seq, 1u);
}

// ---- bad input: every corrupt value is reported with its key, byte offset and field ----

TEST_F(store_fixture, a_flipped_byte_fails_the_checksum_and_names_the_key) {
  {
    auto s = open();
    ASSERT_TRUE(s->put_job(job_record{"train", "f", 1, job_state::running, "", {}}).ok());
  }
  std::string v = raw_get(db_path(), "job");
  v[4] = static_cast<char>(v[4] ^ 0x40);
  raw_put(db_path(), "job", v);
  auto s = open();
  const auto st = s->job().to_status();
  EXPECT_EQ(st.code(), errc::data_loss);
  EXPECT_NE(st.message().find("key 'job' byte " + std::to_string(v.size() - 8) + ": checksum mismatch"),
            std::string::npos)
      << st;
}

TEST_F(store_fixture, a_truncated_or_malformed_value_names_the_field) {
  { auto s = open(); }
  // Too short for any record.
  raw_put(db_path(), "job", "abc");
  {
    auto s = open();
    const auto st = s->job().to_status();
    EXPECT_EQ(st.code(), errc::data_loss);
    EXPECT_NE(st.message().find("key 'job': value of 3 bytes is shorter than the smallest record"), std::string::npos)
        << st;
  }
  // Valid checksum, but the payload stops inside a string: type 2 (job), version 1, name length 100.
  raw_put(db_path(), "job", sealed(std::string{"\x02\x01", 2} + std::string{"\x64\0\0\0ab", 6}));
  {
    auto s = open();
    const auto st = s->job().to_status();
    EXPECT_EQ(st.code(), errc::data_loss);
    EXPECT_NE(st.message().find("key 'job' byte 6: field 'name' is truncated (needs 100 bytes, 2 left)"),
              std::string::npos)
        << st;
  }
  // A membership whose rank count cannot fit: never allocates, names the field.
  const std::string mkey = "member/" + be64(1);
  raw_put(db_path(), mkey, sealed(std::string{"\x04\x01", 2} + std::string(8, '\0') + std::string{"\xff\xff\xff\x7f", 4}));
  {
    auto s = open();
    const auto st = s->latest_membership().to_status();
    EXPECT_EQ(st.code(), errc::data_loss);
    EXPECT_NE(st.message().find("key 'member/1' byte 10: field 'ranks' counts 2147483647 entries but only 0 bytes follow"),
              std::string::npos)
        << st;
  }
  // The wrong record type under a key.
  raw_put(db_path(), "job", sealed(std::string{"\x07\x01", 2}));
  {
    auto s = open();
    const auto st = s->job().to_status();
    EXPECT_NE(st.message().find("key 'job' byte 0: record type 7, expected 2"), std::string::npos) << st;
  }
  // A version from the future.
  raw_put(db_path(), "job", sealed(std::string{"\x02\x09", 2}));
  {
    auto s = open();
    const auto st = s->job().to_status();
    EXPECT_NE(st.message().find("key 'job' byte 1: record version 9"), std::string::npos) << st;
  }
  // An enum out of range: job state 9.
  raw_put(db_path(), "job",
          sealed(std::string{"\x02\x01", 2} + std::string(4, '\0') + std::string(4, '\0') + std::string(8, '\0') + "\x09"));
  {
    auto s = open();
    const auto st = s->job().to_status();
    EXPECT_NE(st.message().find("key 'job' byte 18: field 'state': value 9 is not a job state"), std::string::npos)
        << st;
  }
}

TEST_F(store_fixture, a_membership_of_record_version_1_reads_with_no_pipeline_split) {
  { auto s = open(); }
  // As written before memberships kept the split: epoch 3, no ranks, no spares in use.
  std::string epoch(8, '\0');
  epoch[0] = 3;
  raw_put(db_path(), "member/" + be64(3), sealed(std::string{"\x04\x01", 2} + epoch + std::string(8, '\0')));
  auto s = open();
  auto m = s->latest_membership();
  ASSERT_TRUE(m.has_value() && m->has_value()) << m.to_status();
  EXPECT_EQ((*m)->epoch, epoch_t{3});
  EXPECT_TRUE((*m)->ranks.empty());
  EXPECT_TRUE((*m)->stages.empty());
  // Version 3 is not one this build reads.
  s.reset();
  raw_put(db_path(), "member/" + be64(4), sealed(std::string{"\x04\x03", 2} + epoch + std::string(8, '\0')));
  s = open();
  const auto st = s->latest_membership().to_status();
  EXPECT_NE(st.message().find("record version 3 is not one this build reads (1..2)"), std::string::npos) << st;
}

TEST_F(store_fixture, a_corrupt_event_fails_the_read_that_reaches_it) {
  {
    auto s = open();
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(s->append_event(make_event("progress", 0)).has_value());
  }
  std::string v = raw_get(db_path(), "event/" + be64(2));
  v[20] = static_cast<char>(v[20] ^ 1);
  raw_put(db_path(), "event/" + be64(2), v);
  auto s = open();
  EXPECT_EQ(s->events(1, 1)->size(), 1u) << "events before the bad one still read";
  const auto st = s->events_after(0).to_status();
  EXPECT_EQ(st.code(), errc::data_loss);
  EXPECT_NE(st.message().find("key 'event/2'"), std::string::npos) << st;
  EXPECT_EQ(s->events_after(2)->size(), 1u) << "and so do the ones after it";
}

// ---- opening ----

TEST_F(store_fixture, a_second_open_of_the_same_database_is_unavailable) {
  auto s = open();
  auto again = state_store::open(db_path());
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), errc::unavailable) << again.error();
  EXPECT_NE(again.error().message().find(db_path().string()), std::string::npos);
}

TEST_F(store_fixture, opening_without_create_needs_a_database) {
  state_store_options o;
  o.create_if_missing = false;
  auto missing = state_store::open(dir.path() / "nope", o);
  EXPECT_EQ(missing.to_status().code(), errc::not_found);
  fs::create_directories(dir.path() / "empty");
  auto empty = state_store::open(dir.path() / "empty", o);
  EXPECT_EQ(empty.to_status().code(), errc::not_found);
  EXPECT_NE(empty.to_status().message().find("no CURRENT file"), std::string::npos) << empty.to_status();
  { auto s = open(); }
  EXPECT_TRUE(state_store::open(db_path(), o).has_value());
}

TEST_F(store_fixture, a_corrupt_database_is_data_loss) {
  { auto s = open(); }
  std::ofstream{db_path() / "CURRENT", std::ios::trunc} << "garbage";
  auto s = state_store::open(db_path());
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), errc::data_loss) << s.error();
  EXPECT_NE(s.error().message().find(db_path().string() + ": open"), std::string::npos) << s.error();
}

TEST_F(store_fixture, a_database_from_a_newer_build_is_refused) {
  { auto s = open(); }
  raw_put(db_path(), "meta/format", sealed(std::string{"\x01\x01", 2} + std::string{"\x02\0\0\0", 4} + std::string(8, '\0')));
  auto s = state_store::open(db_path());
  EXPECT_EQ(s.to_status().code(), errc::unsupported) << s.to_status();
}

TEST_F(store_fixture, a_database_without_format_record_is_refused) {
  raw_put(db_path(), "job", "x");
  auto s = state_store::open(db_path());
  EXPECT_EQ(s.to_status().code(), errc::data_loss);
  EXPECT_NE(s.to_status().message().find("no format record"), std::string::npos) << s.to_status();
}

// A file system whose write-ahead log syncs take `sync_delay` once armed, as on a disk busy
// writing back other data; `syncing` counts the syncs under way.
class slow_log_sync_fs : public rocksdb::FileSystemWrapper {
 public:
  explicit slow_log_sync_fs(std::chrono::milliseconds sync_delay)
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()), delay_(sync_delay) {}
  const char* Name() const override { return "slow_log_sync_fs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* dbg) override {
    auto s = target()->NewWritableFile(f, o, r, dbg);
    if (s.ok() && f.ends_with(".log"))
      *r = std::make_unique<file>(std::move(*r), this);
    return s;
  }
  std::atomic<bool> armed{false};
  std::atomic<int> syncing{0};

 private:
  class file : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    file(std::unique_ptr<rocksdb::FSWritableFile> f, slow_log_sync_fs* fs)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override { return slow(o, dbg, false); }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override { return slow(o, dbg, true); }

   private:
    rocksdb::IOStatus slow(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg, bool full) {
      if (fs_->armed) {
        ++fs_->syncing;
        std::this_thread::sleep_for(fs_->delay_);
        --fs_->syncing;
      }
      return full ? target()->Fsync(o, dbg) : target()->Sync(o, dbg);
    }
    slow_log_sync_fs* fs_;
  };
  std::chrono::milliseconds delay_;
};

TEST_F(store_fixture, a_write_does_not_queue_behind_the_sync_of_the_event_log) {
  // The event writer syncs its batches while the supervisor writes on (a rank's snapshot step
  // every few steps): when a sync took seconds, each of those writes waited for it, and the
  // supervisor stalled with it.
  auto fs = std::make_shared<slow_log_sync_fs>(std::chrono::milliseconds{4000});
  const auto env = rocksdb::NewCompositeEnv(fs);
  state_store_options o;
  o.env = env.get();
  auto s = open(o);
  ASSERT_TRUE(s->record_restart(rank_id{0}).has_value());
  fs->armed = true;
  ASSERT_TRUE(s->append_event(make_event("rank_exited", 0)).has_value());
  ASSERT_TRUE(testing::wait_until([&] { return fs->syncing.load() > 0; }, std::chrono::seconds{20}))
      << "the event writer never synced";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->set_snapshot_step(rank_id{0}, step_t{5}).ok());
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(waited, std::chrono::milliseconds{2000})
      << "the write waited " << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
      << " ms for a sync of 4000 ms";
  // Nor does a reader of the log (`rekindle events`, answered by the supervisor's actor): the
  // event is read from its write.
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->flush_events_readable().ok());
  const auto read_waited = std::chrono::steady_clock::now() - t1;
  EXPECT_LT(read_waited, std::chrono::milliseconds{2000})
      << "the reader waited " << std::chrono::duration_cast<std::chrono::milliseconds>(read_waited).count()
      << " ms for a sync of 4000 ms";
  const auto seen = s->events_after(0);
  ASSERT_TRUE(seen.has_value()) << seen.error();
  ASSERT_FALSE(seen->empty());
  EXPECT_EQ(seen->back().kind, "rank_exited");
  fs->armed = false;
  ASSERT_TRUE(s->flush_events().ok());
  EXPECT_EQ(s->durable_event_seq(), s->last_event_seq());
  ASSERT_TRUE(s->close().ok());
}

}  // namespace
}  // namespace rekindle::storage
