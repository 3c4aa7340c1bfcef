#pragma once

#include <string>
#include <vector>

#include "planner/plan.hpp"
#include "planner/problem.hpp"
#include "planner/search.hpp"

/// Reports of plans for people (a table, explanations) and for programs (JSON). Pure functions.

namespace rekindle::planner {

/// "rekindle plan: cluster mixed (32 devices: 16 × a100, 16 × h100), model gpt-1.3b (...)".
[[nodiscard]] std::string describe_problem(const problem& p);

/// "fast search: 1,234 layouts, 5,678 plans evaluated in 0.21 s".
[[nodiscard]] std::string format_stats(const search_stats& stats);

/// The ranked plans as a table: step time, throughput, degrees, layers per stage, devices and
/// the fullest device's memory, one line per plan.
[[nodiscard]] std::string format_table(const problem& p, const std::vector<plan>& plans);

/// Where every replica runs, one line per replica ("replica 0 (64 micro-batches): stage 0 on
/// h100 h0[0-1], stage 1 on h100 h0[2-3]"); at most `limit` replicas, then a count of the rest.
[[nodiscard]] std::string format_placement(const problem& p, const plan& pl, std::size_t limit);

/// One plan in full: stages, placement, the step time term by term, memory per device, and why it
/// beat `next` (the plan ranked after it) when there is one.
[[nodiscard]] std::string format_explanation(const problem& p, const plan& pl, std::size_t rank, const plan* next);

/// Why `a` is faster than `b`, in one sentence: the step time difference and the terms that
/// differ most ("plan 2 spends 0.120 s more on compute and 0.030 s more on data-parallel
/// reduction; it saves 0.050 s of pipeline bubble").
[[nodiscard]] std::string compare(const plan& a, const plan& b, std::size_t b_rank);

/// A re-plan to report after the plans: what was lost, how the new plan came about, the plans.
struct replan_report {
  /// The lost devices as given, e.g. "h1, a0:3".
  std::string lost;
  std::string how;
  std::vector<plan> plans;
  search_stats stats;
};

/// Everything as one JSON document: cluster, model, search statistics, and every plan with its
/// stages, replicas (node, type and devices of every stage), breakdown, memory and comparison
/// with the next plan; the re-plan when there is one.
[[nodiscard]] std::string format_json(const problem& p, const std::vector<plan>& plans, const search_stats& stats,
                                      const replan_report* replan = nullptr, int indent = 2);

}  // namespace rekindle::planner
