// The simulator's model: keys, values, the model file and its errors.

#include <gtest/gtest.h>

#include "tests/support/temp_dir.hpp"
#include "trace/model.hpp"

namespace rekindle::trace {
namespace {

using namespace std::chrono_literals;

TEST(trace_model, set_reads_every_kind_of_value) {
  model m;
  ASSERT_TRUE(set_model(m, "step_time", "8s").ok());
  ASSERT_TRUE(set_model(m, "snapshot_stall", "0.25").ok()) << "a bare number is seconds";
  ASSERT_TRUE(set_model(m, "state_size", "16GiB").ok());
  ASSERT_TRUE(set_model(m, "buddy_bandwidth", "12.5GB/s").ok());
  ASSERT_TRUE(set_model(m, "disk_bandwidth", "2e9").ok());
  ASSERT_TRUE(set_model(m, "snapshot_every", "20").ok());
  ASSERT_TRUE(set_model(m, "spares", "4").ok());
  ASSERT_TRUE(set_model(m, "regrow_below", "0.5").ok());
  ASSERT_TRUE(set_model(m, "heartbeat", "200ms").ok()) << "an alias of tick";
  EXPECT_EQ(m.step_time, 8s);
  EXPECT_EQ(m.snapshot_stall, 250ms);
  EXPECT_EQ(m.state_size, std::uint64_t{16} << 30);
  EXPECT_EQ(m.buddy_bandwidth, 12.5e9);
  EXPECT_EQ(m.disk_bandwidth, 2e9);
  EXPECT_EQ(m.snapshot_every, 20u);
  EXPECT_EQ(m.spares, 4u);
  EXPECT_EQ(m.regrow_below, 0.5);
  EXPECT_EQ(m.tick, 200ms);
}

TEST(trace_model, set_errors_name_the_key) {
  model m;
  auto st = set_model(m, "step_tme", "5s");
  EXPECT_EQ(st.message(), "'step_tme' is not a model key (did you mean 'step_time'?)");
  EXPECT_NE(set_model(m, "step_time", "5 parsecs").message().find("step_time: '5 parsecs' is not a duration"),
            std::string::npos);
  EXPECT_EQ(set_model(m, "snapshot_every", "0").message(), "snapshot_every: must be at least 1, got 0");
  EXPECT_NE(set_model(m, "memory_bandwidth", "fast").message().find("memory_bandwidth: 'fast' is not a bandwidth"),
            std::string::npos);
  EXPECT_NE(set_model(m, "regrow_below", "2").message().find("expected a share between 0 and 1"), std::string::npos);
  EXPECT_EQ(set_model(m, "step_time", "0s").message(), "step_time: must be longer than 0, got 0s");
  EXPECT_EQ(m.step_time, model{}.step_time) << "a failed set changes nothing";
}

TEST(trace_model, validate_relations) {
  model m;
  m.step_time = 12s;
  EXPECT_NE(validate(m).message().find("hang_timeout (10s) must exceed step_time (12s)"), std::string::npos);
  m = model{};
  m.backoff = 10s;
  EXPECT_FALSE(validate(m).ok());
  EXPECT_TRUE(validate(model{}).ok());
}

TEST(trace_model, file_round_trip_and_errors_with_line_and_column) {
  model m;
  m.step_time = 7s;
  m.state_size = std::uint64_t{3} << 30;
  m.buddy_bandwidth = 1e9;
  m.regrow_below = 0.25;
  auto back = parse_model(to_toml(m), "m.toml", model{});
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_EQ(to_toml(*back), to_toml(m));
  EXPECT_EQ(back->step_time, 7s);

  auto bad = parse_model("step_time = \"5s\"\nstate_sise = \"1GiB\"\nsnapshot_every = -3\n[recovery]\nx = 1\n", "m.toml", model{});
  ASSERT_FALSE(bad.has_value());
  const auto& text = bad.error().message();
  EXPECT_NE(text.find("m.toml:2:14: state_sise: 'state_sise' is not a model key (did you mean 'state_size'?)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("m.toml:3:18: snapshot_every: expected a whole number of at least 0, got '-3'"), std::string::npos) << text;
  EXPECT_NE(text.find("m.toml:4:1: recovery: expected a value"), std::string::npos) << text;
  auto syntax = parse_model("step_time = \n", "m.toml", model{});
  ASSERT_FALSE(syntax.has_value());
  EXPECT_NE(syntax.error().message().find("m.toml:1:"), std::string::npos) << syntax.error();
  auto relation = parse_model("step_time = \"30s\"\n", "m.toml", model{});
  ASSERT_FALSE(relation.has_value());
  EXPECT_NE(relation.error().message().find("m.toml: hang_timeout (10s) must exceed step_time (30s)"), std::string::npos);
}

TEST(trace_model, a_file_overrides_its_base) {
  testing::temp_dir dir;
  model base;
  base.snapshot_every = 5;
  auto m = load_model(dir.write("m.toml", "process_start = \"45s\"\n"), base);
  ASSERT_TRUE(m.has_value()) << m.error();
  EXPECT_EQ(m->process_start, 45s);
  EXPECT_EQ(m->snapshot_every, 5u) << "what the file does not say comes from the base";
  EXPECT_FALSE(load_model(dir.path() / "absent.toml", base).has_value());
}

}  // namespace
}  // namespace rekindle::trace
