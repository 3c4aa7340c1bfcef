#include <gtest/gtest.h>

#include "trace/event_log.hpp"

namespace rekindle::trace {
namespace {

logged_event at(double s, std::string kind, std::optional<std::uint32_t> rank = {}, std::optional<std::string> node = {},
                std::map<std::string, std::string> fields = {}) {
  return {1000.0 + s, std::move(kind), rank, std::move(node), std::move(fields)};
}

TEST(event_log, injected_faults_and_failures_of_their_own_become_one_event_each) {
  const std::vector<logged_event> log{
      at(-5, "job_created"),
      at(-1, "fault_injected", 0, "n0", {{"fault", "kill"}, {"signal", "9"}}),  // before training: ignored
      at(0, "started"),
      at(1.5, "fault_injected", 2, "n1", {{"fault", "kill"}, {"signal", "15"}}),
      at(1.6, "rank_exited", 2, "n1", {{"signal", "15"}, {"exit_code", "0"}}),  // its consequence
      at(3, "fault_injected", 3, "n1", {{"fault", "slow"}, {"factor", "2.5"}}),
      at(5.25, "fault_injected", 3, "n1", {{"fault", "slow"}, {"factor", "1"}}),
      at(6, "rank_exited", 1, "n0", {{"signal", "0"}, {"exit_code", "139"}}),  // crashed by itself
      at(7, "fault_injected", 1, "n0", {{"fault", "hang"}}),
      at(17, "rank_hung", 1, "n0"),
      at(17.01, "rank_unresponsive", 1, "n0"),
      at(17.02, "rank_exited", 1, "n0", {{"signal", "9"}, {"exit_code", "0"}}),
      at(20, "rank_unresponsive", 0, "n0"),  // a stopped process, found by itself
      at(20.1, "rank_exited", 0, "n0", {{"signal", "9"}}),
      at(30, "fault_injected", {}, "n1", {{"fault", "partition"}, {"link", "n0,n1"}, {"duration_s", "4.000000"}}),
      at(33, "node_lost", {}, "n1"),
      at(40, "node_lost", {}, "s0"),  // lost by itself
      at(41, "checkpoint_committed"),
  };
  trace_header h;
  h.source = "test";
  const auto t = trace_from_event_log(log, h);
  ASSERT_TRUE(t) << t.error();
  ASSERT_EQ(t->events.size(), 7u) << to_jsonl(*t);
  const auto& e = t->events;
  EXPECT_EQ(e[0].kind, fault_kind::kill);
  EXPECT_EQ(*e[0].at, 1.5);
  EXPECT_EQ(e[0].target, fault_target::of_rank(2));
  EXPECT_EQ(e[0].signal, 15);
  EXPECT_EQ(e[1].kind, fault_kind::slow);
  EXPECT_EQ(e[1].factor, 2.5);
  ASSERT_TRUE(e[1].duration.has_value());
  EXPECT_DOUBLE_EQ(*e[1].duration, 2.25);
  EXPECT_EQ(e[2].kind, fault_kind::crash);
  EXPECT_EQ(e[2].exit_code, 139);
  EXPECT_EQ(e[3].kind, fault_kind::hang);
  EXPECT_EQ(*e[3].at, 7.0);
  EXPECT_EQ(e[4].kind, fault_kind::hang) << "a stopped process is a hang";
  EXPECT_EQ(e[4].target, fault_target::of_rank(0));
  EXPECT_EQ(e[5].kind, fault_kind::partition);
  EXPECT_EQ(e[5].target, fault_target::of_link("n0", "n1"));
  EXPECT_EQ(*e[5].duration, 4.0);
  EXPECT_EQ(e[6].kind, fault_kind::node_down);
  EXPECT_EQ(e[6].target, fault_target::of_node("s0"));
  EXPECT_EQ(t->header.source, "test");
  EXPECT_EQ(*t->header.duration, 41.0);
  // What it writes reads back the same.
  const auto again = parse(to_jsonl(*t), "exported");
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(*again.value, *t);
}

TEST(event_log, a_job_that_never_trained_has_no_trace) {
  const auto t = trace_from_event_log({at(0, "job_created"), at(1, "node_up", {}, "n0")}, {});
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("no 'started' event"), std::string::npos);
}

}  // namespace
}  // namespace rekindle::trace
