#include <gtest/gtest.h>

#include "actors/rank_session.hpp"
#include "common/clock.hpp"
#include "storage/snapshot_slot.hpp"
#include "tests/support/bridge_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <optional>
#include <string>
#include <vector>

namespace rekindle::actors {
namespace {

using namespace std::chrono_literals;

// A rank's session over a real bridge to a stand-in agent (a scoped actor named "agent" in a
// second actor system), on a clock the test moves.
class rank_session_fixture : public ::testing::Test {
 protected:
  // A worker's heartbeats go every `heartbeat` (a quarter of the node timeout).
  void start(std::chrono::nanoseconds heartbeat, std::optional<std::uint32_t> local_index = 0) {
    agent_.b->expose("agent", caf::actor{self_});
    auto peer = rank_.b->connect_blocking("127.0.0.1", agent_.b->port(), 30s);
    ASSERT_TRUE(peer) << peer.error();
    worker_context ctx;
    ctx.spec.timeouts.heartbeat = heartbeat;
    ctx.spec.timeouts.node = 4 * heartbeat;
    ASSERT_EQ(ctx.spec.timeouts.keepalive(), heartbeat);
    ctx.node = node_id{1};
    ctx.local_index = local_index;
    ctx.node_dir = dir_.path();
    ctx.bridge = rank_.b.get();
    ctx.agent = peer->id;
    ctx.time = &time_;
    session_ = std::make_unique<rank_session>(*rank_.sys, std::move(ctx), std::nullopt);
  }

  static progress_report step(std::uint64_t epoch, std::uint64_t s) {
    progress_report p;
    p.epoch = epoch_t{epoch};
    p.rank = rank_id{0};
    p.step = step_t{s};
    p.loss = 1.0 / static_cast<double>(s + 1);
    return p;
  }

  // What the agent receives next within `within`, heartbeats left out unless `heartbeats`:
  // "batch e<epoch>:<step>,<step>…", "trouble <detail>", "heartbeat <local index>", or "" when
  // nothing came.
  std::string next(std::chrono::milliseconds within = 30s, bool heartbeats = false) {
    const auto until = std::chrono::steady_clock::now() + within;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left <= 0ms)
        return "";
      std::string got;
      self_->receive(
          [&](const envelope&, const progress_batch& b) {
            got = "batch e" + std::to_string(b.epoch.value()) + ":";
            for (std::size_t i = 0; i < b.reports.size(); ++i)
              got += (i ? "," : "") + std::to_string(b.reports[i].step.value());
          },
          [&](const envelope&, const rank_trouble& t) { got = "trouble " + t.detail; },
          [&](const envelope&, const worker_heartbeat& h) {
            got = heartbeats ? "heartbeat " + std::to_string(h.local_index) : "";
          },
          caf::after(left) >> [] {});
      if (!got.empty())
        return got;
    }
  }

  testing::temp_dir dir_{"rank-session"};
  fake_clock time_;
  testing::bridge_process agent_{true, 0}, rank_{false, 1};
  caf::scoped_actor self_{*agent_.sys};
  std::unique_ptr<rank_session> session_;
};

// A step costs the control plane no message of its own once an epoch trains: its report waits
// for the next message to the agent (the heartbeat, or what the rank says next, which must not
// overtake it). While the epoch is young (a recovery's first steps) each report goes at once, and
// so does a full batch, the reports of a finished epoch when the next begins, and what is left
// when the rank ends.
TEST_F(rank_session_fixture, step_reports_wait_for_the_next_message_once_the_epoch_is_no_longer_young) {
  start(1h);  // one heartbeat at the start, then none during the test
  session_->report(step(1, 1));
  EXPECT_EQ(next(), "batch e1:1") << "the epoch's first step";
  time_.advance(progress_batching::prompt_for / 2);
  session_->report(step(1, 2));
  EXPECT_EQ(next(), "batch e1:2") << "a step while the epoch is young";

  time_.advance(progress_batching::prompt_for);
  for (std::uint64_t s = 3; s <= 5; ++s)
    session_->report(step(1, s));
  EXPECT_EQ(next(500ms), "") << "the reports went on their own";
  session_->to_agent(rank_trouble{epoch_t{1}, rank_id{0}, node_id{1}, false, "after step 5"});
  EXPECT_EQ(next(), "batch e1:3,4,5") << "the waiting reports first, in one batch";
  EXPECT_EQ(next(), "trouble after step 5");

  session_->report(step(1, 6));
  session_->report(step(2, 6));  // a new epoch, young: both go now, one batch per epoch
  EXPECT_EQ(next(), "batch e1:6");
  EXPECT_EQ(next(), "batch e2:6");

  time_.advance(2 * progress_batching::prompt_for);
  std::string full = "batch e2:";
  for (std::uint64_t s = 7; s < 7 + progress_batching::max_batch; ++s) {
    session_->report(step(2, s));
    full += (s > 7 ? "," : "") + std::to_string(s);
  }
  EXPECT_EQ(next(), full) << "a full batch goes without waiting";

  const auto last = 7 + progress_batching::max_batch;
  session_->report(step(2, last));
  EXPECT_EQ(next(500ms), "");
  session_->flush_progress();
  EXPECT_EQ(next(), "batch e2:" + std::to_string(last)) << "the last step, flushed";

  session_->report(step(2, last + 1));
  session_.reset();  // a program that ends without a word
  EXPECT_EQ(next(), "batch e2:" + std::to_string(last + 1)) << "what waited when the session ended";
}

// With heartbeats running, the reports that wait ride on them: every batch is followed at once by
// a heartbeat, and every report arrives, in order.
TEST_F(rank_session_fixture, waiting_step_reports_go_with_the_heartbeat) {
  start(50ms);
  time_.advance(2 * progress_batching::prompt_for);
  session_->report(step(1, 1));
  EXPECT_EQ(next(), "batch e1:1") << "the epoch's first step";
  time_.advance(2 * progress_batching::prompt_for);
  for (std::uint64_t s = 2; s <= 4; ++s)
    session_->report(step(1, s));
  std::string steps;
  while (steps != "2,3,4") {
    const auto got = next(30s, true);
    if (got == "heartbeat 0")
      continue;
    ASSERT_TRUE(got.starts_with("batch e1:")) << got;
    steps += (steps.empty() ? "" : ",") + got.substr(9);
    ASSERT_TRUE(std::string{"2,3,4"}.starts_with(steps)) << steps;
    EXPECT_EQ(next(30s, true), "heartbeat 0") << "a batch goes right before a heartbeat";
  }
}

// A standby has no rank for its agent to watch: it sends no heartbeat (the transport's keep-alives
// keep its connection) until it takes a local rank, and then heartbeats that name it.
TEST_F(rank_session_fixture, a_standby_sends_heartbeats_only_once_it_takes_a_rank) {
  const auto slot_name = storage::snapshot_slot::name_for(dir_.path(), config::spec{}.job.name, 2);
  auto slot = storage::snapshot_slot::create(slot_name, 4096);
  ASSERT_TRUE(slot) << slot.error();
  struct remove_slot {
    std::string name;
    ~remove_slot() { (void)storage::snapshot_slot::remove(name); }
  } remove{slot_name};

  start(20ms, std::nullopt);
  EXPECT_EQ(next(500ms, true), "") << "25 heartbeat intervals of a standby";
  ASSERT_TRUE(session_->activate(2).ok());
  EXPECT_EQ(next(30s, true), "heartbeat 2");
  EXPECT_EQ(next(30s, true), "heartbeat 2") << "and on";
}

}  // namespace
}  // namespace rekindle::actors
