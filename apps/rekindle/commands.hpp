#pragma once

#include <CLI/CLI.hpp>

/// The subcommands of `rekindle`. Each adds itself to the app and, when it runs, stores its exit
/// code in `exit_code`. A new subcommand (status, events, replay, ...) is one more function here
/// and one more file beside plan.cpp.

namespace rekindle::apps {

/// `rekindle plan --cluster FILE --model FILE [--json] [--explain] [--top N] [--search MODE] [--lose NODE[:DEVICE]]`.
void add_plan_command(CLI::App& app, int& exit_code);

/// `rekindle status`, `rekindle kill rank R [--signal S] --yes`, `rekindle stop --yes`: one-shot
/// commands to the running job's supervisor.
void add_admin_commands(CLI::App& app, int& exit_code);

/// `rekindle demo [--data-dir DIR] [--steps N] [--no-faults]`: a local cluster, a job, injected
/// failures and the recovery report.
void add_demo_command(CLI::App& app, int& exit_code);

/// `rekindle checkpoint list DIR [--json]`, `rekindle checkpoint verify DIR [--json]`: a checkpoint
/// directory read offline.
void add_checkpoint_commands(CLI::App& app, int& exit_code);

/// `rekindle checkpoint now`: the running job writes a checkpoint at its next anchor.
void add_checkpoint_now_command(CLI::App* checkpoint, int& exit_code);

}  // namespace rekindle::apps
