#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rekindle::web {

/// A label's name and value, e.g. {"node", "n0"}.
using label = std::pair<std::string, std::string>;
using labels = std::vector<label>;

/// The metrics of one scrape in Prometheus' text exposition format (version 0.0.4): families of
/// counters, gauges and histograms, each with its HELP and TYPE, written in the order first added.
///
/// Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]* (not starting
/// with "__"); a counter's name ends in `_total`. A name that breaks these, or a family added twice
/// with another type, is a programming error: the family is left out and counted in `rejected()`,
/// so one bad metric never breaks the scrape. Label values are escaped (backslash, quote, newline).
class exposition {
 public:
  void gauge(std::string_view name, std::string_view help, double value, labels l = {});
  void counter(std::string_view name, std::string_view help, double value, labels l = {});
  /// A histogram of `observations` over the upper bounds `bounds` (ascending; +Inf is added).
  void histogram(std::string_view name, std::string_view help, const std::vector<double>& bounds,
                 const std::vector<double>& observations, labels l = {});
  /// Declares a family with no sample yet (it is written with its HELP and TYPE only).
  void declare(std::string_view name, std::string_view help, std::string_view type);

  [[nodiscard]] std::string text() const;
  [[nodiscard]] std::size_t rejected() const noexcept { return rejected_; }

  /// The content type of text().
  static constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct family {
    std::string help;
    std::string type;
    std::vector<std::string> lines;
  };
  family* find_or_add(std::string_view name, std::string_view help, std::string_view type);
  void sample(std::string_view name, std::string_view help, std::string_view type, double value, const labels& l);

  std::vector<std::string> order_;
  std::map<std::string, family, std::less<>> families_;
  std::size_t rejected_ = 0;
};

/// Whether `name` is a valid metric name; a valid label name.
[[nodiscard]] bool valid_metric_name(std::string_view name) noexcept;
[[nodiscard]] bool valid_label_name(std::string_view name) noexcept;
/// A sample value as the format writes it: shortest round-trip decimal, NaN, +Inf, -Inf.
[[nodiscard]] std::string format_value(double v);

}  // namespace rekindle::web
