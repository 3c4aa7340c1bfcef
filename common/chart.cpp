#include "common/chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rekindle {

namespace {

std::string number(double v) {
  char buf[32];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof buf, a != 0 && (a >= 1e5 || a < 1e-3) ? "%.3g" : a >= 100 ? "%.1f" : "%.4f", v);
  return buf;
}

}  // namespace

std::string render_chart(const std::vector<chart_point>& points, const std::vector<double>& marks, int width,
                         int height, std::optional<double> x_first, std::optional<double> x_last) {
  if (points.empty())
    return "(no data yet)\n";
  width = std::clamp(width, 10, 1000);
  height = std::clamp(height, 3, 200);
  const double x0 = points.front().x, x1 = points.back().x;
  double lo = points.front().low, hi = points.front().high;
  for (const auto& p : points) {
    lo = std::min({lo, p.low, p.y});
    hi = std::max({hi, p.high, p.y});
  }
  if (!(hi > lo)) {  // a flat line sits in the middle
    hi += 0.5;
    lo -= 0.5;
  }
  const auto column_of = [&](double x) {
    return x1 > x0 ? static_cast<int>(std::lround((x - x0) / (x1 - x0) * (width - 1))) : 0;
  };
  const auto row_of = [&](double y) {  // row 0 at the top
    return std::clamp(static_cast<int>(std::lround((hi - y) / (hi - lo) * (height - 1))), 0, height - 1);
  };
  // Per column: the mean of its points and their span.
  std::vector<double> sum(static_cast<std::size_t>(width), 0), low(static_cast<std::size_t>(width), 0),
      high(static_cast<std::size_t>(width), 0);
  std::vector<int> count(static_cast<std::size_t>(width), 0);
  for (const auto& p : points) {
    const auto c = static_cast<std::size_t>(column_of(p.x));
    low[c] = count[c] == 0 ? p.low : std::min(low[c], p.low);
    high[c] = count[c] == 0 ? p.high : std::max(high[c], p.high);
    sum[c] += p.y;
    ++count[c];
  }
  std::vector<std::string> grid(static_cast<std::size_t>(height), std::string(static_cast<std::size_t>(width), ' '));
  for (std::size_t c = 0; c < grid[0].size(); ++c) {
    if (count[c] == 0)
      continue;
    for (int r = row_of(high[c]); r <= row_of(low[c]); ++r)
      grid[static_cast<std::size_t>(r)][c] = '|';
    grid[static_cast<std::size_t>(row_of(sum[c] / count[c]))][c] = '*';
  }
  const std::string top = number(hi), mid = number((hi + lo) / 2), bottom = number(lo);
  const std::size_t label = std::max({top.size(), mid.size(), bottom.size()});
  std::string out;
  const auto margin = std::string(label + 1, ' ');
  if (!marks.empty()) {
    std::string line(static_cast<std::size_t>(width), ' ');
    for (double m : marks)
      if (m >= x0 && m <= x1)
        line[static_cast<std::size_t>(column_of(m))] = 'v';
    out += margin + " " + line + "\n";
  }
  for (int r = 0; r < height; ++r) {
    std::string l = r == 0 ? top : r == height / 2 ? mid : r == height - 1 ? bottom : "";
    out += std::string(label - l.size(), ' ') + l + " |" + grid[static_cast<std::size_t>(r)] + "\n";
  }
  out += margin + "+" + std::string(static_cast<std::size_t>(width), '-') + "\n";
  char a[32], b[32];
  std::snprintf(a, sizeof a, "%.0f", x_first.value_or(x0));
  std::snprintf(b, sizeof b, "%.0f", x_last.value_or(x1));
  const std::string first = std::string{"step "} + a, last = b;
  std::string axis = first;
  if (static_cast<int>(first.size() + last.size()) < width)
    axis += std::string(static_cast<std::size_t>(width) - first.size() - last.size(), ' ') + last;
  out += margin + " " + axis + "\n";
  return out;
}

}  // namespace rekindle
