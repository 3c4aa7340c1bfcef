#include "web/exposition.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace rekindle::web {
namespace {

TEST(exposition, families_are_written_with_help_and_type_in_the_order_first_added) {
  exposition x;
  x.gauge("rekindle_b", "B.", 2);
  x.counter("rekindle_a_total", "A.", 3, {{"kind", "x"}});
  x.gauge("rekindle_b", "B.", 5, {{"node", "n1"}});
  EXPECT_EQ(x.text(),
            "# HELP rekindle_b B.\n# TYPE rekindle_b gauge\nrekindle_b 2\nrekindle_b{node=\"n1\"} 5\n"
            "# HELP rekindle_a_total A.\n# TYPE rekindle_a_total counter\nrekindle_a_total{kind=\"x\"} 3\n");
  EXPECT_EQ(x.rejected(), 0u);
}

TEST(exposition, label_values_and_help_are_escaped) {
  exposition x;
  x.gauge("m", "a \\ b\nc", 1, {{"v", "q\"uote\\back\nline"}});
  EXPECT_EQ(x.text(), "# HELP m a \\\\ b\\nc\n# TYPE m gauge\nm{v=\"q\\\"uote\\\\back\\nline\"} 1\n");
}

TEST(exposition, values_are_shortest_round_trip_and_special_values_are_spelled) {
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(1e21), "1e+21");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(exposition, a_histogram_has_cumulative_buckets_up_to_inf_a_sum_and_a_count) {
  exposition x;
  x.histogram("rekindle_h_seconds", "H.", {0.5, 1, 2}, {0.2, 0.7, 0.9, 5}, {{"kind", "k"}});
  EXPECT_EQ(x.text(),
            "# HELP rekindle_h_seconds H.\n# TYPE rekindle_h_seconds histogram\n"
            "rekindle_h_seconds_bucket{kind=\"k\",le=\"0.5\"} 1\n"
            "rekindle_h_seconds_bucket{kind=\"k\",le=\"1\"} 3\n"
            "rekindle_h_seconds_bucket{kind=\"k\",le=\"2\"} 3\n"
            "rekindle_h_seconds_bucket{kind=\"k\",le=\"+Inf\"} 4\n"
            "rekindle_h_seconds_sum{kind=\"k\"} 6.8\n"
            "rekindle_h_seconds_count{kind=\"k\"} 4\n");
}

TEST(exposition, an_empty_histogram_still_has_its_buckets_at_zero) {
  exposition x;
  x.histogram("h", "H.", {1}, {});
  EXPECT_NE(x.text().find("h_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"), std::string::npos);
}

TEST(exposition, bad_names_and_mismatched_types_are_left_out_and_counted) {
  exposition x;
  x.gauge("9starts_with_a_digit", "", 1);
  x.gauge("has-dash", "", 1);
  x.counter("rekindle_counter_without_suffix", "", 1);
  x.gauge("ok", "", 1, {{"__reserved", "v"}});
  x.gauge("ok", "", 1, {{"bad-label", "v"}});
  x.counter("ok", "", 1);  // "ok" is a gauge already
  x.histogram("h", "", {2, 1}, {1});  // bounds not ascending
  x.histogram("h2", "", {1}, {1}, {{"le", "x"}});  // le is the histogram's own
  EXPECT_EQ(x.rejected(), 8u);
  const auto text = x.text();
  EXPECT_EQ(text.find("9starts"), std::string::npos);
  EXPECT_EQ(text.find("has-dash"), std::string::npos);
  EXPECT_EQ(text.find("without_suffix"), std::string::npos);
  EXPECT_EQ(text.find("reserved"), std::string::npos);
  EXPECT_EQ(text.find("h2_bucket"), std::string::npos);
}

TEST(exposition, names_follow_the_grammar) {
  EXPECT_TRUE(valid_metric_name("rekindle_job_step"));
  EXPECT_TRUE(valid_metric_name("a:b_c1"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_FALSE(valid_metric_name("a b"));
  EXPECT_TRUE(valid_label_name("node"));
  EXPECT_FALSE(valid_label_name("a:b"));
  EXPECT_FALSE(valid_label_name("__name__"));
  EXPECT_FALSE(valid_label_name("1a"));
}

}  // namespace
}  // namespace rekindle::web
