#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rekindle {

/// One point of a line chart: x (a step), y (its value) and the lowest and highest y of the
/// steps it stands for.
struct chart_point {
  double x = 0;
  double y = 0;
  double low = 0;
  double high = 0;
};

/// A line chart for a terminal: `height` rows of `width` columns of plot, a y axis labelled with
/// the highest, middle and lowest value, an x axis labelled with the first and last x. Each
/// column shows the mean of the points that fall in it ('*'), and the span from their lowest to
/// highest value ('|') when it covers other rows. Columns of an x in `marks` get a 'v' above the
/// plot (failures on a loss curve). The x axis is labelled `x_first` and `x_last` when given (a
/// point standing for a range of steps), else the first and last x. Points must be in increasing
/// x; none gives "(no data yet)".
std::string render_chart(const std::vector<chart_point>& points, const std::vector<double>& marks, int width,
                         int height, std::optional<double> x_first = {}, std::optional<double> x_last = {});

}  // namespace rekindle
