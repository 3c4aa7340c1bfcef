#pragma once

namespace CLI {
class App;
}

namespace rekindle::apps {

/// Adds the offline trace tools to the `rekindle` program: `trace convert`, `trace generate`,
/// `trace check` and `simulate`. Their logic is in trace/commands.hpp; this is the command line.
/// A command that fails ends parsing with CLI::RuntimeError carrying its exit code (0 ok,
/// 1 failure, 2 bad input), which main() returns.
void add_trace_commands(CLI::App& app);

}  // namespace rekindle::apps
