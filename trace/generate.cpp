// Synthetic traces: Poisson arrivals of faults drawn from a category mix.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <random>
#include <sstream>
#include <unordered_map>

#include "common/text.hpp"
#include "trace/cluster.hpp"
#include "trace/convert.hpp"

namespace rekindle::trace {

namespace {

constexpr std::array<generator_category, 11> categories{{
    {"gpu", fault_kind::node_down, "a GPU fault (ECC, Xid, fell off the bus): the node is down until repaired"},
    {"hbm", fault_kind::node_down, "an HBM fault (uncorrectable ECC): the node is down until repaired"},
    {"host", fault_kind::node_down, "a host fault (CPU, power, board, kernel): the node is down until repaired"},
    {"network", fault_kind::partition, "a NIC or cable fault: the node is cut off for an outage"},
    {"link", fault_kind::partition, "the link between two nodes is cut for an outage"},
    {"software", fault_kind::crash, "a rank's process crashes (exit code 1)"},
    {"hang", fault_kind::hang, "a rank hangs until it is killed"},
    {"slow", fault_kind::slow, "a node runs 2 times slower for an outage"},
    {"disk", fault_kind::disk_full, "a node's disk is full for an outage"},
    {"collective", fault_kind::collective_error, "a collective fails on a rank with no culprit"},
    {"checkpoint", fault_kind::corrupt_checkpoint, "the newest checkpoint of a rank is corrupt"},
}};

// Own distributions: the standard library's are allowed to differ between implementations.
class random_source {
 public:
  explicit random_source(std::uint64_t seed) : engine_(seed) {}
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Exponential with the given mean.
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  /// Uniform integer in [0, n).
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(uniform() * n); }

 private:
  std::mt19937_64 engine_;
};

double milliseconds(double seconds) { return std::round(seconds * 1000.0) / 1000.0; }

}  // namespace

std::span<const generator_category> generator_categories() noexcept { return categories; }

expected<std::vector<std::pair<std::string, double>>> parse_mix(std::string_view text) {
  std::vector<std::pair<std::string, double>> out;
  std::vector<std::string> names;
  for (const auto& c : categories)
    names.emplace_back(c.name);
  std::string all;
  for (const auto& n : names)
    all += (all.empty() ? "" : ", ") + n;
  if (trim(text).empty())
    return status{errc::parse_error, "--mix is empty; give weights such as 'gpu=0.5,software=0.5' (categories: " + all + ")"};
  double total = 0;
  for (auto item : split(text, ',')) {
    item = trim(item);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      return status{errc::parse_error, "--mix: '" + std::string{item} + "' is not CATEGORY=WEIGHT, e.g. gpu=0.5"};
    const std::string name{trim(item.substr(0, eq))};
    const auto value = trim(item.substr(eq + 1));
    if (std::find(names.begin(), names.end(), name) == names.end())
      return status{errc::parse_error, "--mix: '" + name + "' is not a category" + did_you_mean(name, names) +
                                           "; categories: " + all};
    double w = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), w);
    if (ec != std::errc{} || ptr != value.data() + value.size() || !std::isfinite(w) || w < 0)
      return status{errc::parse_error, "--mix: the weight of '" + name + "' must be a number of at least 0, got '" +
                                           std::string{value} + "'"};
    if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.first == name; }))
      return status{errc::parse_error, "--mix: '" + name + "' is given twice"};
    out.emplace_back(name, w);
    total += w;
  }
  if (!(total > 0))
    return status{errc::parse_error, "--mix: the weights add up to 0; give at least one a positive weight"};
  return out;
}

expected<fault_trace> generate(const cluster_shape& cluster, const generate_options& options) {
  if (!(options.rate > 0) || !std::isfinite(options.rate))
    return status{errc::invalid_argument, "--rate must be a number of faults per accelerator per day greater than 0"};
  if (!(options.days > 0) || !std::isfinite(options.days) || options.days > 36500)
    return status{errc::invalid_argument, "--days must be greater than 0 and at most 36500"};
  if (!(options.repair_mean > 0) || !(options.outage_mean > 0))
    return status{errc::invalid_argument, "--repair and --outage must be longer than 0"};
  if (!(options.domain_rate >= 0) || !std::isfinite(options.domain_rate))
    return status{errc::invalid_argument, "--domain-rate must be a number of failures per domain per day of at least 0"};
  // Every machine fails: the worker nodes and the spares.
  std::vector<std::uint32_t> workers;
  std::uint64_t accelerators = 0;
  for (std::uint32_t n = 0; n < cluster.nodes().size(); ++n)
    if (cluster.nodes()[n].ranks > 0) {
      workers.push_back(n);
      accelerators += cluster.nodes()[n].ranks;
    }
  const auto world = cluster.world();
  if (workers.empty() || world == 0)
    return status{errc::invalid_argument, "the cluster has no worker nodes"};
  // The failure domains, in the order they first appear, with their nodes.
  std::vector<std::pair<std::string, std::vector<std::uint32_t>>> domains;
  if (options.domain_rate > 0) {
    std::unordered_map<std::string, std::size_t> index;
    for (const auto n : workers) {
      const auto& d = cluster.nodes()[n].domain;
      if (d.empty())
        continue;
      const auto [it, fresh] = index.try_emplace(d, domains.size());
      if (fresh)
        domains.emplace_back(d, std::vector<std::uint32_t>{});
      domains[it->second].second.push_back(n);
    }
    if (domains.empty())
      return status{errc::invalid_argument,
                    "--domain-rate needs failure domains: give --rack-size R, or a cluster file whose nodes name a domain"};
  }
  auto mix = options.mix;
  if (mix.empty()) {
    auto parsed = parse_mix(default_mix);
    if (!parsed)
      return parsed.error();
    mix = *parsed;
  }
  std::vector<const generator_category*> chosen;
  std::vector<double> cumulative;
  double total = 0;
  for (const auto& [name, weight] : mix) {
    const std::string& wanted = name;  // clang 14 cannot capture a structured binding
    auto it = std::find_if(categories.begin(), categories.end(), [&](const generator_category& c) { return c.name == wanted; });
    if (it == categories.end())
      return status{errc::invalid_argument, "unknown category '" + name + "'"};
    if (weight <= 0)
      continue;
    total += weight;
    chosen.push_back(&*it);
    cumulative.push_back(total);
  }
  if (chosen.empty())
    return status{errc::invalid_argument, "--mix gives no category a positive weight"};
  const double expected_faults = (options.rate * static_cast<double>(accelerators) + options.domain_rate * static_cast<double>(domains.size())) * options.days;
  if (expected_faults > 10'000'000)
    return status{errc::invalid_argument, "--rate × accelerators × --days is " + std::to_string(std::llround(expected_faults)) +
                                              " faults; at most 10,000,000 are supported"};

  random_source rng{options.seed};
  const double horizon = options.days * 86400.0;
  const double mean_gap = 86400.0 / (options.rate * static_cast<double>(accelerators));
  fault_trace out;
  double t = 0;
  while (true) {
    t += rng.exponential(mean_gap);
    if (t >= horizon)
      break;
    const double pick = rng.uniform() * total;
    const auto index = static_cast<std::size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), pick) - cumulative.begin());
    const auto& category = *chosen[std::min(index, chosen.size() - 1)];
    fault_event ev;
    ev.at = milliseconds(t);
    ev.kind = category.kind;
    const auto& node = cluster.nodes()[workers[rng.below(static_cast<std::uint32_t>(workers.size()))]].name;
    switch (category.kind) {
      case fault_kind::node_down:
        ev.target = fault_target::of_node(node);
        ev.repair = std::max(0.001, milliseconds(rng.exponential(options.repair_mean)));
        break;
      case fault_kind::partition:
        if (category.name == "link" && workers.size() > 1) {
          auto other = node;
          while (other == node)
            other = cluster.nodes()[workers[rng.below(static_cast<std::uint32_t>(workers.size()))]].name;
          ev.target = fault_target::of_link(node, other);
        } else {
          ev.target = fault_target::of_node(node);
        }
        ev.duration = std::max(0.001, milliseconds(rng.exponential(options.outage_mean)));
        break;
      case fault_kind::slow:
        ev.target = fault_target::of_node(node);
        ev.factor = 2.0;
        ev.duration = std::max(0.001, milliseconds(rng.exponential(options.outage_mean)));
        break;
      case fault_kind::disk_full:
        ev.target = fault_target::of_node(node);
        ev.duration = std::max(0.001, milliseconds(rng.exponential(options.outage_mean)));
        break;
      default: ev.target = fault_target::of_rank(rng.below(world)); break;
    }
    ev.extensions = {{"x-category", nlohmann::json(std::string{category.name}).dump()}};
    out.events.push_back(std::move(ev));
  }
  if (!domains.empty()) {
    // A second stream: whole domains down at once, repaired together. Its own generator, so the
    // single-node faults are those of the same seed without domain failures.
    random_source domain_rng{options.seed ^ 0x9e3779b97f4a7c15ULL};
    const double domain_gap = 86400.0 / (options.domain_rate * static_cast<double>(domains.size()));
    double at = 0;
    std::vector<fault_event> extra;
    while (true) {
      at += domain_rng.exponential(domain_gap);
      if (at >= horizon)
        break;
      const auto& [name, members] = domains[domain_rng.below(static_cast<std::uint32_t>(domains.size()))];
      const double repair = std::max(0.001, milliseconds(domain_rng.exponential(options.repair_mean)));
      for (const auto n : members) {
        fault_event ev;
        ev.at = milliseconds(at);
        ev.kind = fault_kind::node_down;
        ev.target = fault_target::of_node(cluster.nodes()[n].name);
        ev.repair = repair;
        ev.extensions = {{"x-category", nlohmann::json("domain").dump()}, {"x-domain", nlohmann::json(name).dump()}};
        extra.push_back(std::move(ev));
      }
    }
    out.events.insert(out.events.end(), std::make_move_iterator(extra.begin()), std::make_move_iterator(extra.end()));
    std::stable_sort(out.events.begin(), out.events.end(), [](const fault_event& a, const fault_event& b) { return *a.at < *b.at; });
  }
  std::string mix_text;
  for (const auto& [name, weight] : mix) {
    std::ostringstream w;
    w << weight;
    mix_text += (mix_text.empty() ? "" : ",") + name + "=" + w.str();
  }
  std::ostringstream desc;
  desc << "synthetic: " << options.rate << " faults per accelerator per day over " << options.days << " days, mix " << mix_text
       << ", seed " << options.seed;
  if (!domains.empty())
    desc << "; " << options.domain_rate << " failures per domain per day over " << domains.size() << " domains";
  out.header.source = "rekindle trace generate";
  out.header.description = desc.str();
  out.header.nodes = static_cast<std::uint32_t>(cluster.nodes().size());
  out.header.world = world;
  out.header.duration = horizon;
  return out;
}

}  // namespace rekindle::trace
