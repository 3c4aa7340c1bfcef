#include <CLI/CLI.hpp>

#include "apps/rekindle/commands.hpp"
#include "apps/rekindle/trace_commands.hpp"

namespace rekindle::apps {

std::unique_ptr<CLI::App> make_app(int& exit_code) {
  auto app = std::make_unique<CLI::App>(
      "rekindle: drive a rekindle cluster; plan deployments and replay failure traces offline.\n"
      "Without a command on a terminal: the interactive shell (rekindle shell).",
      "rekindle");
  app->set_version_flag("--version", std::string{"rekindle "} + REKINDLE_VERSION);
  app->require_subcommand(0, 1);
  add_plan_command(*app, exit_code);
  add_profile_command(*app, exit_code);
  add_admin_commands(*app, exit_code);
  add_demo_command(*app, exit_code);
  add_checkpoint_commands(*app, exit_code);
  add_trace_commands(*app);
  add_replay_command(*app, exit_code);
  add_diagnose_commands(*app, exit_code);
  add_shell_command(*app, exit_code);
  return app;
}

std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

}  // namespace rekindle::apps
