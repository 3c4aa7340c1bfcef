// rekindle: the admin shell. Each subcommand lives in its component; app.cpp wires them into one
// command line. The offline tools (plan, trace, simulate) work without a cluster.

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "apps/rekindle/commands.hpp"
#include "common/memory.hpp"
#include "common/text.hpp"

int main(int argc, char** argv) {
  // The simulator allocates and frees buffers of 16,384 elements at every recovery, between
  // hundreds of thousands of small map nodes. By default glibc maps and unmaps each large buffer
  // (above 128 KiB), and consolidates its fast bins before each large allocation; refaulting the
  // pages and the consolidation cost about 40% of a simulation.
  rekindle::keep_large_frees_in_process();
  mallopt(M_MXFAST, 0);
  int exit_code = 0;
  auto app = rekindle::apps::make_app(exit_code);
  if (argc < 2) {
    // On a terminal, no command opens the shell; a script gets the usage.
    if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO))
      return rekindle::apps::run_shell({});
    std::cerr << app->help() << "rekindle: a command is required (or 'rekindle shell')\n";
    return 2;
  }
  if (const std::string first = argv[1]; !first.empty() && first[0] != '-') {
    const auto names = rekindle::apps::command_names(*app);
    if (std::find(names.begin(), names.end(), first) == names.end()) {
      std::cerr << "rekindle: unknown command '" << first << "'" << rekindle::did_you_mean(first, names)
                << "; 'rekindle --help' lists the commands\n";
      return 2;
    }
  }
  try {
    app->parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    // A command ended with its own exit code, having said why.
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a wrong command line is bad input (2), like a wrong file.
    return app->exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
