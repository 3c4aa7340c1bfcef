// rekindle: the admin shell. Each subcommand lives in its component; this file only wires the
// command line to it. The offline tools (plan, trace, simulate) work without a cluster.

#include <malloc.h>

#include <CLI/CLI.hpp>

#include "apps/rekindle/commands.hpp"
#include "apps/rekindle/trace_commands.hpp"
#include "common/memory.hpp"

int main(int argc, char** argv) {
  // The simulator allocates and frees buffers of 16,384 elements at every recovery, between
  // hundreds of thousands of small map nodes. By default glibc maps and unmaps each large buffer
  // (above 128 KiB), and consolidates its fast bins before each large allocation; refaulting the
  // pages and the consolidation cost about 40% of a simulation.
  rekindle::keep_large_frees_in_process();
  mallopt(M_MXFAST, 0);
  CLI::App app{"rekindle: drive a rekindle cluster; plan deployments and replay failure traces offline", "rekindle"};
  app.set_version_flag("--version", std::string{"rekindle "} + REKINDLE_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  rekindle::apps::add_plan_command(app, exit_code);
  rekindle::apps::add_admin_commands(app, exit_code);
  rekindle::apps::add_demo_command(app, exit_code);
  rekindle::apps::add_checkpoint_commands(app, exit_code);
  rekindle::apps::add_trace_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    // A command ended with its own exit code, having said why.
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a wrong command line is bad input (2), like a wrong file.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
