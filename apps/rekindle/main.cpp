// rekindle: the admin shell. Each subcommand lives in its component; this file only wires the
// command line to it.

#include <CLI/CLI.hpp>

#include <iostream>

#include "apps/rekindle/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rekindle: the admin shell of a rekindle cluster", "rekindle"};
  app.set_version_flag("--version", std::string{"rekindle "} + REKINDLE_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  rekindle::apps::add_plan_command(app, exit_code);
  rekindle::apps::add_admin_commands(app, exit_code);
  rekindle::apps::add_demo_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a wrong command line is bad input (2), like a wrong file.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}
