#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "common/chart.hpp"

namespace rekindle {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

TEST(chart, a_falling_curve_starts_top_left_and_ends_bottom_right) {
  std::vector<chart_point> points;
  for (int i = 1; i <= 100; ++i)
    points.push_back({double(i), 10.0 / i, 10.0 / i, 10.0 / i});
  const auto lines = lines_of(render_chart(points, {}, 40, 8));
  ASSERT_EQ(lines.size(), 8u + 2u);  // plot rows, axis, labels
  EXPECT_EQ(lines[0].substr(0, 8), "10.0000 ");
  EXPECT_NE(lines[0][9], ' ');                 // steps 1-2 reach the top of the first column
  EXPECT_EQ(lines[0].find_last_not_of(' '), 9u);  // and nothing else does
  EXPECT_EQ(lines[7].substr(0, 7), " 0.1000");
  EXPECT_EQ(lines[7].back(), '*');             // step 100 at the bottom of the last
  EXPECT_NE(lines[8].find("+----"), std::string::npos);
  EXPECT_NE(lines[9].find("step 1"), std::string::npos);
  EXPECT_EQ(lines[9].substr(lines[9].size() - 3), "100");
}

TEST(chart, spans_show_the_range_of_a_bucket_and_marks_the_failures) {
  std::vector<chart_point> points{{0, 5, 1, 9}, {10, 5, 5, 5}};
  const auto lines = lines_of(render_chart(points, {10, 99}, 20, 9));
  // A mark row first: only the failure at step 10 is in range.
  ASSERT_EQ(lines.size(), 1u + 9u + 2u);
  EXPECT_EQ(std::count(lines[0].begin(), lines[0].end(), 'v'), 1);
  EXPECT_EQ(lines[0].back(), 'v');
  int bars = 0, stars = 0;
  for (std::size_t r = 1; r <= 9; ++r) {
    const auto first = lines[r][lines[r].find('|') + 1];
    bars += first == '|';
    stars += first == '*';
  }
  EXPECT_EQ(stars, 1);
  EXPECT_EQ(bars, 8);  // 1 to 9 covers every row
}

TEST(chart, nothing_to_draw_says_so) {
  EXPECT_EQ(render_chart({}, {}, 60, 10), "(no data yet)\n");
  // One flat point still draws, in the middle.
  const auto lines = lines_of(render_chart({{5, 2, 2, 2}}, {}, 10, 5));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_NE(lines[2].find('*'), std::string::npos);
  // Points standing for ranges of steps label the axis with the whole range.
  const auto ranged = lines_of(render_chart({{50, 2, 2, 2}, {100, 1, 1, 1}}, {}, 20, 3, 1.0, 100.0));
  EXPECT_NE(ranged.back().find("step 1 "), std::string::npos) << ranged.back();
  EXPECT_EQ(ranged.back().substr(ranged.back().size() - 3), "100");
}

}  // namespace
}  // namespace rekindle
