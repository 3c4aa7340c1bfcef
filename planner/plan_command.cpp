#include "planner/plan_command.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>

#include "common/files.hpp"
#include "common/text.hpp"
#include "config/planner_files.hpp"
#include "planner/cost.hpp"
#include "planner/plan_file.hpp"
#include "planner/replan.hpp"
#include "planner/report.hpp"

namespace rekindle::planner {

namespace {

int report_errors(std::ostream& err, const std::vector<config::diagnostic>& errors) {
  err << "rekindle plan: " << errors.size() << " error" << (errors.size() == 1 ? "" : "s")
      << " in the input; nothing was planned\n";
  for (const auto& e : errors)
    err << "  " << e.to_string() << "\n";
  return plan_bad_input;
}

// Parses "NODE" or "NODE:DEVICE" against the cluster.
expected<lost_device> parse_lost(const problem& p, const std::string& text) {
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const int index = p.hardware.find_node(name);
  if (index < 0) {
    std::vector<std::string> names;
    for (const auto& n : p.hardware.nodes)
      names.push_back(n.name);
    return status{errc::invalid_argument, "--lose " + text + ": unknown node '" + name + "'" + did_you_mean(name, names)};
  }
  lost_device lost{static_cast<std::uint32_t>(index), std::nullopt};
  if (colon != std::string::npos) {
    const auto digits = text.substr(colon + 1);
    std::uint32_t device = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device);
    const auto& ids = p.hardware.nodes[lost.node].devices;
    if (ec != std::errc{} || ptr != digits.data() + digits.size() || digits.empty())
      return status{errc::invalid_argument, "--lose " + text + ": '" + digits + "' is not a device number"};
    if (std::find(ids.begin(), ids.end(), device) == ids.end())
      return status{errc::invalid_argument, "--lose " + text + ": node " + name + " has devices 0-" +
                                                std::to_string(ids.size() - 1)};
    lost.device = device;
  }
  return lost;
}

void print_plans(std::ostream& out, const problem& p, const std::vector<plan>& plans, bool explain) {
  out << format_table(p, plans) << "\n";
  if (explain) {
    for (std::size_t i = 0; i < plans.size(); ++i)
      out << format_explanation(p, plans[i], i + 1, i + 1 < plans.size() ? &plans[i + 1] : nullptr) << "\n";
    return;
  }
  out << "plan 1 runs on:\n" << format_placement(p, plans.front(), 8);
  if (plans.size() > 1)
    out << "why plan 1: " << compare(plans[0], plans[1], 2) << "\n";
  out << "(--explain shows every plan's step time term by term and its memory per device)\n";
}

// `--evaluate FILE`: scores the plans of a file instead of searching.
int evaluate_command(const plan_command_options& o, const problem& p, std::ostream& out, std::ostream& err) {
  const auto source = o.evaluate.string();
  auto text = read_file_bounded(o.evaluate, file_limits::config, "plan file");
  if (!text) {
    err << "rekindle plan: " << source << ": " << text.error().message() << "\n";
    return plan_bad_input;
  }
  auto shapes = parse_plan_file(*text, source, p);
  if (!shapes) {
    err << "rekindle plan: " << shapes.error().message() << "\n";
    return plan_bad_input;
  }
  std::vector<plan> plans;
  int code = plan_ok;
  for (std::size_t i = 0; i < shapes->size(); ++i) {
    const std::string which = shapes->size() == 1 ? "the plan" : "plan " + std::to_string(i + 1);
    auto e = evaluate(p, (*shapes)[i]);
    if (e.has_value()) {
      plans.push_back(std::move(*e));
      continue;
    }
    const bool too_big = e.error().code() == errc::resource_exhausted;
    err << "rekindle plan: " << source << ": " << which << (too_big ? " does not fit: " : " is not a plan of this cluster and model: ")
        << e.error().message() << "\n";
    code = std::max(code, too_big ? static_cast<int>(plan_infeasible) : static_cast<int>(plan_bad_input));
  }
  if (code != plan_ok)
    return code;
  if (o.json) {
    auto j = nlohmann::json::parse(format_json(p, plans, search_stats{}));
    j.erase("search");
    j["evaluated"] = source;
    out << j.dump(2) << "\n";
    return plan_ok;
  }
  out << "rekindle plan: " << describe_problem(p) << "\n";
  out << "evaluated " << plans.size() << (plans.size() == 1 ? " plan" : " plans") << " from " << source
      << " (nothing searched; rekindle plan without --evaluate finds the fastest)\n\n";
  out << format_table(p, plans) << "\n";
  for (std::size_t i = 0; i < plans.size(); ++i)
    out << format_explanation(p, plans[i], i + 1, nullptr) << "\n";
  return plan_ok;
}

}  // namespace

int plan_command(const plan_command_options& o, std::ostream& out, std::ostream& err) {
  auto cluster_file = config::load_plan_cluster(o.cluster);
  auto model_file = config::load_plan_model(o.model);
  if (!cluster_file.ok() || !model_file.ok()) {
    auto errors = cluster_file.errors;
    errors.insert(errors.end(), model_file.errors.begin(), model_file.errors.end());
    return report_errors(err, errors);
  }
  if (auto cross = config::check_plan_files(*cluster_file.value, *model_file.value); !cross.empty())
    return report_errors(err, cross);
  auto built = make_problem(*cluster_file.value, *model_file.value);
  if (!built.has_value()) {
    err << "rekindle plan: " << built.error().message() << "\n";
    return plan_bad_input;
  }
  const auto& p = *built;
  if (!o.evaluate.empty()) {
    if (!o.lose.empty()) {
      err << "rekindle plan: --lose re-plans the best plan of a search; it cannot be given with --evaluate\n";
      return plan_bad_input;
    }
    return evaluate_command(o, p, out, err);
  }
  std::vector<lost_device> lost;
  for (const auto& text : o.lose) {
    auto l = parse_lost(p, text);
    if (!l.has_value()) {
      err << "rekindle plan: " << l.error().message() << "\n";
      return plan_bad_input;
    }
    lost.push_back(*l);
  }
  search_options so;
  so.mode = o.mode;
  so.top = std::max<std::uint32_t>(1, o.top);
  so.budget = std::chrono::seconds{o.budget_seconds};
  auto found = search(p, so);
  if (!found.has_value()) {
    err << "rekindle plan: " << describe_problem(p) << "\n";
    if (found.error().code() != errc::resource_exhausted) {
      err << "rekindle plan: " << found.error().message() << "\n";
      return plan_bad_input;
    }
    err << "rekindle plan: no plan fits: " << found.error().message() << "\n";
    return plan_infeasible;
  }
  std::optional<replan_report> re;
  std::string replan_error;
  if (!lost.empty()) {
    auto r = replan(p, found->plans.front(), lost);
    if (r.has_value()) {
      re = replan_report{};
      for (const auto& text : o.lose)
        re->lost += (re->lost.empty() ? "" : ", ") + text;
      re->how = r->how;
      re->plans = std::move(r->plans);
      re->stats = r->stats;
    } else {
      replan_error = r.error().message();
    }
  }
  if (o.json) {
    out << format_json(p, found->plans, found->stats, re ? &*re : nullptr);
  } else {
    out << "rekindle plan: " << describe_problem(p) << "\n" << format_stats(found->stats) << "\n\n";
    print_plans(out, p, found->plans, o.explain);
    if (re) {
      char took[32];
      std::snprintf(took, sizeof took, "%.1f ms", re->stats.seconds * 1e3);
      out << "\nafter losing " << re->lost << ": re-planned in " << took << " (" << re->how << ")\n\n";
      print_plans(out, p, re->plans, o.explain);
    }
  }
  if (!replan_error.empty()) {
    err << "rekindle plan: after losing ";
    for (std::size_t i = 0; i < o.lose.size(); ++i)
      err << (i ? ", " : "") << o.lose[i];
    err << ": " << replan_error << "\n";
    return plan_infeasible;
  }
  return plan_ok;
}

}  // namespace rekindle::planner
