#include <gtest/gtest.h>

#include "policy/recovery_meter.hpp"

namespace rekindle::policy {
namespace {

constexpr std::int64_t ms = 1'000'000;

TEST(recovery_meter, times_each_phase_from_injection_to_the_first_step_past_the_restore_step) {
  recovery_meter m;
  EXPECT_FALSE(m.recovering());
  // Injected at 100 ms, seen at 150 ms with the job at step 47.
  ASSERT_TRUE(m.open("rank 2 killed by signal 9", rank_id{2}, node_id{1}, 47, 100 * ms, 150 * ms));
  EXPECT_TRUE(m.recovering());
  m.on_epoch(epoch_t{3});
  m.on_ready(900 * ms);
  m.on_ready(950 * ms);  // the first time every rank was ready counts
  m.on_start(step_t{40}, "local memory", 1000 * ms);
  m.on_restored(20 * ms, 5 * ms, "local memory");
  m.on_restored(30 * ms, 3 * ms, "buddy memory on n0");
  EXPECT_EQ(m.on_progress(40, 1100 * ms), nullptr) << "no rank past the restore step yet";
  m.on_step(41, 60 * ms);
  m.on_step(41, 80 * ms);  // the slowest rank's first step counts
  m.on_step(42, 500 * ms);  // a later step does not
  const auto* done = m.on_progress(41, 1200 * ms);
  ASSERT_NE(done, nullptr);
  EXPECT_FALSE(m.recovering());
  EXPECT_EQ(m.on_progress(42, 1300 * ms), nullptr) << "a recovery ends once";
  const auto& r = m.records().at(0);
  EXPECT_EQ(r.epoch, 3u);
  EXPECT_EQ(r.rank, rank_id{2});
  EXPECT_EQ(r.node, node_id{1});
  EXPECT_DOUBLE_EQ(r.detect_s(), 0.05);
  EXPECT_DOUBLE_EQ(r.respawn_s(), 0.75);
  EXPECT_DOUBLE_EQ(r.rendezvous_s(), 0.1 + 0.03) << "start - ready, plus the slowest rank's connection";
  EXPECT_DOUBLE_EQ(r.restore_s(), 0.005);
  EXPECT_DOUBLE_EQ(r.total_s(), 1.1) << "from the injection";
  EXPECT_DOUBLE_EQ(r.first_step_s(), 0.08);
  EXPECT_NEAR(r.between_s(), 1.1 - 0.05 - 0.75 - 0.13 - 0.005 - 0.08, 1e-12);
  EXPECT_NEAR(r.detect_s() + r.respawn_s() + r.rendezvous_s() + r.restore_s() + r.first_step_s() + r.between_s(),
              r.total_s(), 1e-12)
      << "the phases add up to the total";
  EXPECT_EQ(r.steps_lost(), 7u);
  EXPECT_EQ(r.source, "buddy memory on n0") << "a rank that read from elsewhere names the source";
  EXPECT_NE(r.summary().find("lost 7 step(s)"), std::string::npos) << r.summary();
}

TEST(recovery_meter, a_failure_while_recovering_folds_into_the_open_recovery) {
  recovery_meter m;
  ASSERT_TRUE(m.open("node n1 lost", std::nullopt, node_id{1}, 10, 0, 5 * ms));
  EXPECT_FALSE(m.open("rank 3 exited", rank_id{3}, node_id{1}, 10, 0, 6 * ms));
  ASSERT_EQ(m.records().size(), 1u);
  EXPECT_EQ(m.records()[0].cause, "node n1 lost");
  EXPECT_DOUBLE_EQ(m.records()[0].detect_s(), 0.0) << "not injected: no detection time";
  EXPECT_EQ(m.on_progress(100, 7 * ms), nullptr) << "not done before the ranks were started";
  m.on_start(step_t{8}, "none", 8 * ms);
  ASSERT_NE(m.on_progress(9, 9 * ms), nullptr);
  EXPECT_DOUBLE_EQ(m.records()[0].total_s(), 0.004) << "from detection when nothing was injected";
  // Once done, a new failure opens a new recovery, and epochs no longer touch the old one.
  m.on_epoch(epoch_t{9});
  EXPECT_EQ(m.records()[0].epoch, 0u);
  EXPECT_TRUE(m.open("rank 0 exited", rank_id{0}, node_id{0}, 20, 0, 10 * ms));
  EXPECT_EQ(m.records().size(), 2u);
  EXPECT_TRUE(m.recovering());
}

TEST(recovery_meter, a_finished_recovery_is_kept_in_event_fields_and_read_back_by_the_next_supervisor) {
  recovery_meter m;
  ASSERT_TRUE(m.open("node n1 lost", std::nullopt, node_id{1}, 47, 0, 150 * ms));
  m.on_epoch(epoch_t{3});
  m.on_ready(900 * ms);
  m.on_start(step_t{40}, "buddy memory on n0", 1000 * ms);
  m.on_restored(20 * ms, 5 * ms, "buddy memory on n0");
  m.on_step(41, 70 * ms);
  const auto* done = m.on_progress(41, 1200 * ms);
  ASSERT_NE(done, nullptr);
  const auto fields = to_fields(*done);
  const auto back = from_fields(fields, std::nullopt, node_id{1});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->cause, "node n1 lost");
  EXPECT_EQ(back->epoch, 3u);
  EXPECT_EQ(back->restored_step, 40u);
  EXPECT_EQ(back->failed_at_step, 47u);
  EXPECT_EQ(back->source, "buddy memory on n0");
  EXPECT_EQ(back->node, node_id{1});
  EXPECT_TRUE(back->done);
  EXPECT_EQ(back->summary(), done->summary()) << "every figure survives";
  EXPECT_DOUBLE_EQ(back->first_step_s(), 0.07);

  // The next supervisor lists it before its own.
  recovery_meter next;
  next.restore({*back});
  ASSERT_TRUE(next.open("supervisor restarted", std::nullopt, node_id{0}, 60, 0, 2000 * ms));
  ASSERT_EQ(next.records().size(), 2u);
  EXPECT_EQ(next.records()[0].cause, "node n1 lost");
  EXPECT_TRUE(next.recovering()) << "the open recovery is the new one";
  next.restore({*back});
  EXPECT_EQ(next.records().size(), 2u) << "restore comes before the first open, or not at all";

  // Fields that are not a recovery (missing, negative, out of range) are none.
  auto missing = fields;
  missing.erase(missing.begin());
  EXPECT_FALSE(from_fields(missing, std::nullopt, std::nullopt).has_value());
  for (const char* bad : {"-1", "1e3", "99999999999999999999", ""}) {
    auto wrong = fields;
    for (auto& [k, v] : wrong)
      if (k == "restored_step")
        v = bad;
    EXPECT_FALSE(from_fields(wrong, std::nullopt, std::nullopt).has_value()) << bad;
  }
}

}  // namespace
}  // namespace rekindle::policy
