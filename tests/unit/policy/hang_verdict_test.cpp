#include <gtest/gtest.h>

#include <map>

#include "policy/hang_verdict.hpp"

namespace rekindle::policy {
namespace {

using namespace std::chrono_literals;

collective_position at(std::uint64_t seq, collective_phase phase, std::chrono::nanoseconds d = 1s,
                       collective_kind k = collective_kind::allreduce) {
  return {seq, k, phase, d};
}

TEST(hang_verdict, the_rank_that_never_entered_the_collective_is_named_against_those_waiting_in_it) {
  const std::vector<rank_report> ranks = {{rank_id{0}, at(12, collective_phase::inside, 6s)},
                                          {rank_id{1}, at(11, collective_phase::done, 7s)},
                                          {rank_id{2}, at(12, collective_phase::failed)},
                                          {rank_id{3}, std::nullopt}};
  const auto v = judge_hang(ranks, rank_id{1});
  EXPECT_EQ(v.seq, 12u);
  EXPECT_EQ(v.kind, collective_kind::allreduce);
  EXPECT_EQ(v.waiting, (std::vector<rank_id>{rank_id{0}, rank_id{2}}));
  EXPECT_EQ(v.missing, (std::vector<rank_id>{rank_id{1}}));
  EXPECT_EQ(v.unknown, (std::vector<rank_id>{rank_id{3}}));
  EXPECT_EQ(v.text,
            "rank 1 never entered collective #12 (allreduce): its last was #11 (done for 7.00 s); ranks 0, 2 waited in "
            "collective #12 (allreduce), rank 1 never entered it; no position from rank 3");
  const auto fv = v.fields();
  const std::map<std::string, std::string> f(fv.begin(), fv.end());
  EXPECT_EQ(f.at("waiting"), "0,2");
  EXPECT_EQ(f.at("missing"), "1");
  EXPECT_EQ(f.at("unknown"), "3");
  EXPECT_EQ(f.at("collective_kind"), "allreduce");
}

TEST(hang_verdict, pipeline_stages_waiting_point_to_point_name_the_stage_they_wait_for) {
  // Replica 0 of stages 0-1: rank 1 stopped in its forward pass, rank 0 waits for its gradient;
  // replica 1 (ranks 2, 3) waits in the gradients' all-reduce.
  auto waiting_for_1 = at(7, collective_phase::done, 9s);
  waiting_for_1.p2p = {collective_kind::recv, collective_phase::inside, 1, 8s};
  auto stopped = at(7, collective_phase::done, 9s);
  stopped.p2p = {collective_kind::send, collective_phase::done, 0, 8s};
  const std::vector<rank_report> ranks = {{rank_id{0}, waiting_for_1},
                                          {rank_id{1}, stopped},
                                          {rank_id{2}, at(8, collective_phase::inside, 5s)},
                                          {rank_id{3}, at(8, collective_phase::inside, 5s)}};
  const auto v = judge_hang(ranks, rank_id{1});
  ASSERT_EQ(v.p2p_waiting.size(), 1u);
  EXPECT_EQ(v.p2p_waiting[0].rank, rank_id{0});
  EXPECT_EQ(v.p2p_waiting[0].peer, rank_id{1});
  EXPECT_EQ(v.text,
            "rank 1 never entered collective #8 (allreduce): its last was #7 (done for 9.00 s); 1 rank waits point to "
            "point for it; ranks 2, 3 waited in collective #8 (allreduce), ranks 0, 1 never entered it; point to point, "
            "rank 0 is inside recv from rank 1 for 8.00 s");
  const auto fv = v.fields();
  const std::map<std::string, std::string> f(fv.begin(), fv.end());
  EXPECT_EQ(f.at("p2p_waiting"), "0<1");
  // A finished send waits for nobody; a failed recv still does.
  waiting_for_1.p2p.phase = collective_phase::failed;
  const auto failed = judge_hang({{rank_id{0}, waiting_for_1}, {rank_id{1}, stopped}}, rank_id{1});
  ASSERT_EQ(failed.p2p_waiting.size(), 1u);
  EXPECT_NE(failed.text.find("rank 0 is failed in recv from rank 1"), std::string::npos) << failed.text;
}

TEST(hang_verdict, a_rank_stuck_inside_a_collective_is_said_to_be_inside) {
  const std::vector<rank_report> ranks = {{rank_id{0}, at(3, collective_phase::inside, 20s, collective_kind::barrier)},
                                          {rank_id{1}, at(3, collective_phase::inside, 20s, collective_kind::barrier)}};
  const auto v = judge_hang(ranks, rank_id{0});
  EXPECT_TRUE(v.missing.empty());
  EXPECT_EQ(v.waiting.size(), 2u);
  EXPECT_EQ(v.text.rfind("rank 0 is inside collective #3 (barrier) for 20.00 s", 0), 0u) << v.text;
}

TEST(hang_verdict, without_a_collective_to_wait_in_it_says_so) {
  const std::vector<rank_report> idle = {{rank_id{0}, at(0, collective_phase::idle)}, {rank_id{1}, std::nullopt}};
  auto v = judge_hang(idle, rank_id{0});
  EXPECT_EQ(v.seq, 0u);
  EXPECT_EQ(v.text, "rank 0 entered no collective this epoch; no position from rank 1");
  v = judge_hang(idle, rank_id{1});
  EXPECT_EQ(v.text.rfind("rank 1 reported no collective position", 0), 0u) << v.text;
  const std::vector<rank_report> computing = {{rank_id{0}, at(5, collective_phase::done, 2s)},
                                              {rank_id{1}, at(5, collective_phase::done, 2s)}};
  v = judge_hang(computing, rank_id{1});
  EXPECT_EQ(v.text, "rank 1 left collective #5 (allreduce) 2.00 s before and no rank waits in a collective");
  EXPECT_TRUE(v.waiting.empty());
  EXPECT_TRUE(v.missing.empty());
}

TEST(hang_verdict, a_whole_world_is_named_in_ranges_and_bounded) {
  std::vector<rank_report> ranks;
  for (std::uint32_t r = 0; r < 16384; ++r)
    ranks.push_back({rank_id{r}, r == 7 ? at(3, collective_phase::done, 1s) : at(4, collective_phase::inside, 9s)});
  const auto v = judge_hang(ranks, rank_id{7});
  EXPECT_EQ(v.missing, (std::vector<rank_id>{rank_id{7}}));
  EXPECT_EQ(v.waiting.size(), 16383u);
  const auto f = v.fields();
  std::map<std::string, std::string> m(f.begin(), f.end());
  EXPECT_EQ(m.at("waiting"), "0-6,8-16383");
  EXPECT_NE(v.text.find("ranks 0-6, 8-16383 waited in collective #4"), std::string::npos) << v.text;
  // Scattered ranks: 24 items, then how many more.
  std::vector<rank_report> odd;
  for (std::uint32_t r = 0; r < 200; ++r)
    odd.push_back({rank_id{r}, r % 2 == 0 ? std::optional<collective_position>{at(4, collective_phase::inside, 9s)} : std::nullopt});
  const auto o = judge_hang(odd, rank_id{1});
  std::map<std::string, std::string> om;
  for (auto& [k, val] : o.fields())
    om[k] = val;
  EXPECT_EQ(om.at("unknown").substr(0, 9), "1,3,5,7,9");
  EXPECT_NE(om.at("unknown").find(",47,and 76 more"), std::string::npos) << om.at("unknown");
  EXPECT_LT(o.text.size(), 600u) << o.text;
}

}  // namespace
}  // namespace rekindle::policy
