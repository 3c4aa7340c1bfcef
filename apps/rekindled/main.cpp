// rekindled: the node daemon.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "config/embedded.hpp"
#include "config/load.hpp"

namespace {

/// Exit codes scripts can rely on.
enum exit_code : int {
  exit_ok = 0,
  exit_bad_config = 2,
};

int check_config(const std::string& path) {
  using namespace rekindle;
  const auto result = path == "-" || path.empty()
                          ? config::parse(config::embedded_default_text(), std::string{config::embedded_default_name}, {})
                          : config::load_file(path);
  for (const auto& w : result.warnings)
    std::cerr << "warning: " << w.to_string() << "\n";
  if (!result.ok()) {
    std::cerr << "rekindled: " << result.errors.size() << " error" << (result.errors.size() == 1 ? "" : "s")
              << " in the configuration; nothing was started\n";
    for (const auto& e : result.errors)
      std::cerr << "  " << e.to_string() << "\n";
    return exit_bad_config;
  }
  std::cout << config::to_toml(*result.value);
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rekindled: the rekindle node daemon (one per node; one hosts the supervisor)", "rekindled"};
  app.set_version_flag("--version", std::string{"rekindled "} + REKINDLE_VERSION);
  std::string check_path;
  app.add_option("--check-config", check_path,
                 "Validate a configuration file and print the effective configuration with every default "
                 "filled in, or every error with file:line:column; '-' checks the embedded default")
      ->required();
  CLI11_PARSE(app, argc, argv);
  return check_config(check_path);
}
