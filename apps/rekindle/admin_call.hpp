#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "actors/admin_client.hpp"
#include "apps/rekindle/commands.hpp"
#include "common/expected.hpp"
#include "config/spec.hpp"

/// What the commands that talk to a running job share: their connection options and one call to
/// the supervisor.

namespace rekindle::apps {

/// A command's connection options, starting from the defaults (the shell's options).
struct connection_options : connection_defaults {
  connection_options();
  bool json = false;
};

/// What a connection needs: the configuration (the embedded default when none is named) and
/// where and how to reach the supervisor.
struct connection_target {
  config::spec spec;
  actors::admin_target target;
};
/// Errors: the configuration's diagnostics (invalid_config), an unreadable token file.
expected<connection_target> resolve(const connection_defaults& o);

/// --config, --connect, --token-file, --data-dir, --retries, --json.
void add_connection_options(CLI::App* cmd, connection_options& o);

/// One admin command's reply, or the shell's exit status when there is none (1 unreachable,
/// 2 bad input, 3 refused; the reason is on stderr).
struct call_result {
  int code = 0;
  std::string text;
  std::string json;
};

/// A connection kept for many calls (a replay watching the job), closed when it goes away.
struct admin_session {
  std::unique_ptr<actors::admin_client> client;
};

/// Connects (retrying an unreachable supervisor with a countdown), sends `command`, waits for the
/// reply. With `session`, its connection is used (and made, or made again, when there is none).
call_result call(const connection_options& o, const std::string& command, const std::vector<std::string>& args,
                 admin_session* session = nullptr);

}  // namespace rekindle::apps
