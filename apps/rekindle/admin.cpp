#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/admin_client.hpp"
#include "apps/rekindle/commands.hpp"
#include "common/logging.hpp"
#include "config/embedded.hpp"
#include "config/load.hpp"

namespace rekindle::apps {

namespace {

struct connection_options {
  std::string config;
  std::string connect;
  std::string token_file;
  std::string data_dir;
  bool json = false;
};

void add_connection_options(CLI::App* cmd, connection_options& o) {
  cmd->add_option("--config", o.config, "The cluster configuration (default: the embedded local.toml)");
  cmd->add_option("--connect", o.connect, "host:port of the supervisor's daemon (default: from the configuration)");
  cmd->add_option("--token-file", o.token_file, "Token to present (default: security.token_file)");
  cmd->add_option("--data-dir", o.data_dir, "Overrides daemon.data_dir when looking for the supervisor's address");
  cmd->add_flag("--json", o.json, "Print JSON for scripts");
}

// Runs one admin command; returns the shell's exit status (the reply's code, 1 when unreachable).
int run(const connection_options& o, const std::string& command, const std::vector<std::string>& args) {
  init_logging("rekindle", log_level::error);
  const auto loaded = o.config.empty() || o.config == "-"
                          ? config::parse(config::embedded_default_text(), std::string{config::embedded_default_name}, {})
                          : config::load_file(o.config);
  if (!loaded.ok()) {
    std::cerr << "rekindle: " << loaded.error_text() << "\n";
    return 2;
  }
  actors::admin_target target;
  target.address = o.connect;
  target.data_dir = o.data_dir;
  if (!o.token_file.empty()) {
    std::ifstream in(o.token_file);
    if (!in) {
      std::cerr << "rekindle: cannot read token file " << o.token_file << "\n";
      return 2;
    }
    std::getline(in, target.token);
  }
  auto client = actors::admin_client::connect(*loaded.value, target, std::chrono::seconds{10});
  if (!client) {
    std::cerr << "rekindle: " << client.error().message() << "\n";
    return client.error().code() == errc::unauthenticated ? 3 : 1;
  }
  auto reply = (*client)->call(command, args, std::chrono::seconds{30});
  if (!reply) {
    std::cerr << "rekindle: " << reply.error().message() << "\n";
    return 1;
  }
  if (reply->code != 0) {
    std::cerr << "rekindle: " << reply->text << "\n";
    return reply->code;
  }
  if (o.json && !reply->json.empty())
    std::cout << reply->json << "\n";
  else if (!reply->text.empty())
    std::cout << reply->text << "\n";
  else
    std::cout << reply->json << "\n";
  return 0;
}

}  // namespace

void add_admin_commands(CLI::App& app, int& exit_code) {
  {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand("status", "The job's state, epoch, step, loss, committed step, nodes, ranks and recoveries (JSON)");
    add_connection_options(cmd, *o);
    cmd->callback([o, &exit_code] { exit_code = run(*o, "status", {}); });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto rank = std::make_shared<int>(-1);
    auto signal = std::make_shared<int>(9);
    auto yes = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("kill", "Fault drill: kill a rank's process with a signal");
    add_connection_options(cmd, *o);
    auto what = std::make_shared<std::string>();
    cmd->add_option("what", *what, "'rank'")->required()->check(CLI::IsMember({"rank"}));
    cmd->add_option("id", *rank, "The rank")->required();
    cmd->add_option("--signal", *signal, "Signal number (default 9, SIGKILL)");
    cmd->add_flag("--yes", *yes, "Do it without asking (required when not interactive)");
    cmd->callback([o, what, rank, signal, yes, &exit_code] {
      if (!*yes) {
        std::cerr << "rekindle: kill is destructive; add --yes to confirm\n";
        exit_code = 2;
        return;
      }
      exit_code = run(*o, "kill", {std::to_string(*rank), std::to_string(*signal)});
    });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto what = std::make_shared<std::string>();
    auto node = std::make_shared<std::string>();
    auto yes = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("fail", "Fault drill: a node's daemon dies at once, as a lost node does");
    add_connection_options(cmd, *o);
    cmd->add_option("what", *what, "'node'")->required()->check(CLI::IsMember({"node"}));
    cmd->add_option("name", *node, "The node")->required();
    cmd->add_flag("--yes", *yes, "Do it without asking (required when not interactive)");
    cmd->callback([o, what, node, yes, &exit_code] {
      if (!*yes) {
        std::cerr << "rekindle: fail node is destructive; add --yes to confirm\n";
        exit_code = 2;
        return;
      }
      exit_code = run(*o, "fail-node", {*node});
    });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto yes = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("stop", "Stop the job: every rank ends, state is kept");
    add_connection_options(cmd, *o);
    cmd->add_flag("--yes", *yes, "Do it without asking (required when not interactive)");
    cmd->callback([o, yes, &exit_code] {
      if (!*yes) {
        std::cerr << "rekindle: stop is destructive; add --yes to confirm\n";
        exit_code = 2;
        return;
      }
      exit_code = run(*o, "stop", {});
    });
  }
}

}  // namespace rekindle::apps
