#include <iostream>
#include <memory>

#include "apps/rekindle/commands.hpp"
#include "planner/plan_command.hpp"

namespace rekindle::apps {

void add_plan_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<planner::plan_command_options>();
  auto* cmd = app.add_subcommand("plan", "Find the fastest ways to train a model on a mixed cluster");
  cmd->footer(
      "Lists the best plans: data, tensor and pipeline degrees, layers per stage, micro-batches per replica and the\n"
      "devices of every stage, with the predicted step time and memory per device (docs/PLANNER.md).\n"
      "Exit status: 0 plans found (or scored), 2 bad input (every error with file:line:column), 3 no plan fits (or a scored plan does not fit), with the reason.");
  cmd->add_option("--cluster", options->cluster, "Cluster file: device types, nodes, network (docs/PLANNER.md)")
      ->required();
  cmd->add_option("--model", options->model, "Model file: transformer shape, batch, precision (docs/PLANNER.md)")
      ->required();
  cmd->add_flag("--json", options->json, "Print one JSON document instead of the text report");
  cmd->add_flag("--explain", options->explain,
                "For every plan: where each replica runs, the step time term by term, memory per device, and "
                "why it beat the next plan");
  cmd->add_option("--top", options->top, "Plans to list, best first (default 3)")->check(CLI::Range(1, 100));
  cmd->add_option("--budget", options->budget_seconds,
                  "Seconds the search may take; then it lists the best plans found so far, marked (stopped early) "
                  "(default 60)")
      ->check(CLI::Range(1, 86400));
  auto mode = std::make_shared<std::string>("auto");
  cmd->add_option("--search", *mode, "auto (default: exhaustive when the space is small, else fast), fast, or exhaustive")
      ->check(CLI::IsMember({"auto", "fast", "exhaustive"}));
  cmd->add_option("--lose", options->lose,
                  "Also re-plan the best plan after losing these devices: NODE or NODE:DEVICE, repeatable or "
                  "comma-separated")
      ->delimiter(',');
  cmd->add_option("--evaluate", options->evaluate,
                  "Score the plans of this file instead of searching: the --json output of an earlier run, or a "
                  "plan written by hand (docs/PLANNER.md); each plan's step time term by term and memory per device");
  cmd->callback([options, mode, &exit_code] {
    options->mode = *mode == "fast"         ? planner::search_mode::fast
                    : *mode == "exhaustive" ? planner::search_mode::exhaustive
                                            : planner::search_mode::automatic;
    exit_code = planner::plan_command(*options, std::cout, std::cerr);
  });
}

}  // namespace rekindle::apps
