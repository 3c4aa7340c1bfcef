#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "planner/search.hpp"

/// `rekindle plan`: the admin shell's planning command, as a function the thin main calls.

namespace rekindle::planner {

/// Exit codes of `rekindle plan`.
enum plan_exit : int {
  plan_ok = 0,
  /// A file or an option is wrong; every error is printed with its place.
  plan_bad_input = 2,
  /// No plan fits; the reason is printed.
  plan_infeasible = 3,
};

struct plan_command_options {
  /// The cluster file and the model file (docs/PLANNER.md).
  std::filesystem::path cluster;
  std::filesystem::path model;
  /// Print one JSON document instead of the text report. Default: false.
  bool json = false;
  /// Explain every plan: placement, step time term by term, memory per device, why it beat the
  /// next. Default: false.
  bool explain = false;
  /// Plans to list. Default: 3.
  std::uint32_t top = 3;
  /// Default: automatic.
  search_mode mode = search_mode::automatic;
  /// Seconds the search may take before it returns the best plans found so far. Default: 60.
  std::uint32_t budget_seconds = 60;
  /// Devices to lose after planning, each "NODE" or "NODE:DEVICE"; the report adds the re-plan of
  /// the best plan without them.
  std::vector<std::string> lose;
  /// A plan file to score instead of searching (planner/plan_file.hpp): every plan in it is
  /// evaluated term by term against the cluster and model, and nothing is searched. Empty: search.
  std::filesystem::path evaluate;
};

/// Reads both files, searches, and writes the report to `out` (errors and reasons to `err`).
/// Returns a plan_exit code.
int plan_command(const plan_command_options& options, std::ostream& out, std::ostream& err);

}  // namespace rekindle::planner
