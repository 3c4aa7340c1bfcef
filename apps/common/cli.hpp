#pragma once

// What the command-line programs share about their command lines: how a bad one ends, and how
// whole-number options are checked.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "common/text.hpp"

namespace rekindle::apps {

/// Parses the command line. nullopt: go on. Otherwise the program's exit status: 0 after --help
/// or --version, `usage_status` after a wrong command line, which is said on stderr (CLI11's own
/// exit codes, 100 and up, are documented nowhere).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, std::string_view program,
                                             int usage_status) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::cerr << program << ": " << e.what() << "\nRun with --help for the options.\n";
    return usage_status;
  }
  return std::nullopt;
}

/// A whole-number option from `min` to `max`. CLI11 reads "-5" into an unsigned option as 2^64-5
/// and "1e3" as 1000; every such option is checked here first, by the one parser every number
/// from outside goes through (parse_whole_number), so the error says the range.
inline CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const auto v = parse_whole_number(text, min, max);
        return v ? std::string{} : v.error().message();
      },
      "UINT in [" + std::to_string(min) + " - " + std::to_string(max) + "]");
}

}  // namespace rekindle::apps
