#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/admin_client.hpp"
#include "actors/job_status.hpp"
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

/// One admin command's reply, or the shell's exit status when there is none (see exit_code_of;
/// the reason is on stderr).
struct call_result {
  int code = 0;
  std::string text;
  std::string json;
};

/// A connection kept for many calls (a replay watching the job), closed when it goes away.
struct admin_session {
  std::unique_ptr<actors::admin_client> client;
};

/// The shell's exit status for an error: 2 bad input (invalid_argument, parse_error, out_of_range,
/// not_found, invalid_config), 3 refused (permission_denied, unauthenticated, failed_precondition),
/// 1 anything else (unreachable, timeout, I/O).
[[nodiscard]] int exit_code_of(errc code) noexcept;

using admin_sender = std::function<expected<actors::admin_reply>(actors::admin_client&)>;

/// Connects (retrying an unreachable supervisor with a countdown), sends with `send`, waits for
/// the reply. With `session`, its connection is used (and made, or made again, when there is none).
call_result call_with(const connection_options& o, const admin_sender& send, admin_session* session);

/// Sends one admin request (actors/messages.hpp) and waits for its reply.
template <class Request>
call_result call(const connection_options& o, const Request& request, admin_session* session = nullptr) {
  return call_with(
      o, [&](actors::admin_client& client) { return client.call(request, std::chrono::seconds{30}); }, session);
}

/// The whole event log, oldest first, as the supervisor lists it (pages of 1000), or nullopt after
/// saying on stderr why not (`code` set to the exit status).
std::optional<std::vector<nlohmann::json>> read_event_log(const connection_options& o, admin_session* session, int& code);

/// The job's status, or nullopt after saying on stderr why there is none (`code` set to the exit
/// status).
std::optional<actors::job_status> status_of(const connection_options& o, admin_session* session, int& code);

}  // namespace rekindle::apps
