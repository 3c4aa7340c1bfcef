#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

/// The subcommands of `rekindle`. Each adds itself to the app and, when it runs, stores its exit
/// code in `exit_code`. A new subcommand (status, events, replay, ...) is one more function here
/// and one more file beside plan.cpp.

namespace rekindle::apps {

/// The whole command line of `rekindle`: every subcommand, storing its exit code in `exit_code`.
/// The shell makes a fresh one for each line it runs.
std::unique_ptr<CLI::App> make_app(int& exit_code);
/// The names of `app`'s subcommands.
std::vector<std::string> command_names(CLI::App& app);

/// Where the admin commands connect unless their own options say otherwise (the shell's options).
struct connection_defaults {
  std::string config;
  std::string connect;
  std::string token_file;
  std::string data_dir;
  int retries = 3;
};
void set_connection_defaults(const connection_defaults& d);

/// `rekindle shell [--config F] [--connect H:P] [--token-file F] [--data-dir D]`: the interactive
/// shell (line editing, history, completion, confirmation of destructive commands); reads
/// commands line by line from a pipe too.
void add_shell_command(CLI::App& app, int& exit_code);
/// Runs the shell until `exit` or end of input; returns the status of the last command.
int run_shell(const connection_defaults& d);
/// Set by Ctrl-C in the shell: a command that runs until interrupted (events --follow) ends.
std::atomic<bool>& stop_requested();
/// The job's rank numbers and node names, for completion; nothing when no supervisor answers.
std::optional<std::pair<std::vector<std::string>, std::vector<std::string>>> ranks_and_nodes();

/// `rekindle plan --cluster FILE --model FILE [--json] [--explain] [--top N] [--search MODE] [--lose NODE[:DEVICE]]`.
void add_plan_command(CLI::App& app, int& exit_code);

/// `rekindle profile [--config FILE] [--micro-batches B,...] [--tensor T,...] [--out FILE]`: the
/// built-in model's layers timed on this machine, written as a planner model file.
void add_profile_command(CLI::App& app, int& exit_code);

/// `rekindle status`, `rekindle kill rank R [--signal S] --yes`, `rekindle stop --yes`: one-shot
/// commands to the running job's supervisor.
void add_admin_commands(CLI::App& app, int& exit_code);

/// `rekindle demo [--data-dir DIR] [--steps N] [--no-faults]`: a local cluster, a job, injected
/// failures and the recovery report.
void add_demo_command(CLI::App& app, int& exit_code);

/// `rekindle checkpoint list DIR [--json]`, `rekindle checkpoint verify DIR [--json]`,
/// `rekindle checkpoint export DIR --out OUT [--step N]`: a checkpoint directory read offline.
void add_checkpoint_commands(CLI::App& app, int& exit_code);

/// `rekindle replay FILE [--speed X] [--yes]`: a failure trace injected into the running job.
void add_replay_command(CLI::App& app, int& exit_code);

/// `rekindle diagnose hang [--all] [--stack] [--json]`: the verdicts of the supervisor's detectors.
void add_diagnose_commands(CLI::App& app, int& exit_code);

/// `rekindle checkpoint now`: the running job writes a checkpoint at its next anchor.
void add_checkpoint_now_command(CLI::App* checkpoint, int& exit_code);

}  // namespace rekindle::apps
