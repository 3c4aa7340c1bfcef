#include <algorithm>
#include <charconv>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>
#include <iostream>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "actors/admin_client.hpp"
#include "apps/common/cli.hpp"
#include "apps/rekindle/admin_call.hpp"
#include "common/chart.hpp"
#include "common/files.hpp"
#include "common/logging.hpp"
#include "common/text.hpp"
#include "config/embedded.hpp"
#include "config/load.hpp"
#include "trace/event_log.hpp"

namespace rekindle::apps {

namespace {

connection_defaults& defaults() {
  static connection_defaults d;
  return d;
}

// Waits `seconds` before the next attempt, counting down on stderr (in place on a terminal).
void count_down(int seconds, int attempt, int attempts) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  for (int left = seconds; left > 0; --left) {
    if (tty || left == seconds)
      std::cerr << (tty ? "\r" : "") << "rekindle: retrying in " << left << " s (attempt " << attempt + 1 << " of "
                << attempts << "; Ctrl-C gives up) " << (tty ? "" : "\n") << std::flush;
    std::this_thread::sleep_for(std::chrono::seconds{1});
  }
  if (tty)
    std::cerr << "\r" << std::string(72, ' ') << "\r" << std::flush;
}


}  // namespace

connection_options::connection_options() : connection_defaults(defaults()) {}

void add_connection_options(CLI::App* cmd, connection_options& o) {
  cmd->add_option("--config", o.config, "The cluster configuration (default: the embedded local.toml)");
  cmd->add_option("--connect", o.connect, "host:port of the supervisor's daemon (default: from the configuration)");
  cmd->add_option("--token-file", o.token_file, "Token to present (default: security.token_file)");
  cmd->add_option("--data-dir", o.data_dir, "Overrides daemon.data_dir when looking for the supervisor's address");
  cmd->add_option("--retries", o.retries,
                  "Attempts to reach an unreachable supervisor, 1, 2, 4, ... s apart, with a countdown (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--json", o.json, "Print JSON for scripts");
}

expected<connection_target> resolve(const connection_defaults& o) {
  const auto loaded = o.config.empty() || o.config == "-"
                          ? config::parse(config::embedded_default_text(), std::string{config::embedded_default_name}, {})
                          : config::load_file(o.config);
  if (!loaded.ok())
    return status{errc::invalid_config, loaded.error_text()};
  connection_target out{*loaded.value, {}};
  out.target.address = o.connect;
  out.target.data_dir = o.data_dir;
  if (!o.token_file.empty()) {
    auto text = read_file_bounded(o.token_file, file_limits::token, "token file");
    if (!text)
      return status{errc::invalid_argument, "--token-file " + o.token_file + ": " + text.error().message()};
    out.target.token = std::string{trim(text->substr(0, text->find('\n')))};
  }
  return out;
}

int exit_code_of(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument:
    case errc::invalid_config:
    case errc::parse_error:
    case errc::out_of_range:
    case errc::not_found: return 2;
    case errc::permission_denied:
    case errc::unauthenticated:
    case errc::failed_precondition: return 3;
    default: return 1;
  }
}

call_result call_with(const connection_options& o, const admin_sender& send, admin_session* session) {
  const auto answer = [](expected<actors::admin_reply> reply) -> call_result {
    if (!reply) {
      std::cerr << "rekindle: " << reply.error().message() << "\n";
      return {exit_code_of(reply.error().code())};
    }
    return {0, std::move(reply->text), std::move(reply->json)};
  };
  if (session != nullptr && session->client) {
    // One connection for many calls; a broken one (no answer at all) is made again below.
    auto reply = send(*session->client);
    if (reply || reply.error().code() != errc::timeout)
      return answer(std::move(reply));
    session->client.reset();
  }
  init_logging("rekindle", log_level::error);
  const auto where = resolve(o);
  if (!where) {
    std::cerr << "rekindle: " << where.error().message() << "\n";
    return {2};
  }
  const auto& [spec, target] = *where;
  auto client = actors::admin_client::connect(spec, target, std::chrono::seconds{10});
  // An unreachable supervisor (restarting, or its node rebooting) is tried again, visibly; a
  // refused token or a bad address is not.
  for (int attempt = 1; !client && client.error().code() == errc::unavailable && attempt < o.retries; ++attempt) {
    std::cerr << "rekindle: " << client.error().message() << "\n";
    count_down(1 << std::min(attempt - 1, 5), attempt, o.retries);
    client = actors::admin_client::connect(spec, target, std::chrono::seconds{10});
  }
  if (!client) {
    std::cerr << "rekindle: " << client.error().message() << "\n";
    return {exit_code_of(client.error().code())};
  }
  auto reply = send(**client);
  if (session != nullptr)
    session->client = std::move(*client);
  return answer(std::move(reply));
}

std::optional<actors::job_status> status_of(const connection_options& o, admin_session* session, int& code) {
  const auto r = call(o, actors::admin_status{}, session);
  code = r.code;
  if (r.code != 0)
    return std::nullopt;
  auto st = actors::parse_job_status(r.json);
  if (!st) {
    std::cerr << "rekindle: the supervisor's answer to status: " << st.error().message() << "\n";
    code = 1;
    return std::nullopt;
  }
  return std::move(*st);
}

namespace {

// Runs one admin request and prints its reply; returns the shell's exit status.
template <class Request>
int run(const connection_options& o, const Request& request) {
  const auto r = call(o, request);
  if (r.code != 0)
    return r.code;
  if (o.json && !r.json.empty())
    std::cout << r.json << "\n";
  else if (!r.text.empty())
    std::cout << r.text << "\n";
  else
    std::cout << r.json << "\n";
  return 0;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width)
    s.append(width - s.size(), ' ');
  return s;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string ms_text(double seconds) { return fixed(seconds * 1000.0, seconds < 0.01 ? 2 : 0) + " ms"; }

// The status as one line for people (EXPERIENCE.md).
void print_status(const actors::job_status& j) {
  std::string state = j.state;
  std::transform(state.begin(), state.end(), state.begin(), [](unsigned char c) { return std::toupper(c); });
  std::cout << "job " << j.job << "  " << state << "  epoch " << j.epoch;
  if (j.command) {
    // A program without the API reports no steps.
    std::cout << "  " << j.world << " ranks running: " << *j.command << "\n";
    std::cout << (j.recoveries.empty() ? std::string{"no failure so far"}
                                       : std::to_string(j.recoveries.size()) + " failure(s); every rank's program "
                                                                               "started again after each")
              << "\n";
    return;
  }
  std::cout << "  step " << j.step << "/" << j.total_steps;
  if (j.loss)
    std::cout << "  loss " << fixed(*j.loss, 3);
  if (j.tokens_per_s)
    std::cout << "  " << fixed(*j.tokens_per_s / 1000.0, 1) << "k tok/s";
  std::cout << "\n";
  if (j.committed_step)
    std::cout << "committed in memory: step " << *j.committed_step;
  else
    std::cout << "committed in memory: none yet";
  const auto& c = j.checkpoint;
  std::cout << " · on disk: " << (c.last_step ? "step " + std::to_string(*c.last_step) : "none");
  if (c.writing_step)
    std::cout << " (writing step " << *c.writing_step << ")";
  if (c.error)
    std::cout << "\nCHECKPOINT FAILING: " << *c.error;
  std::cout << "\n";
  if (j.recoveries.empty()) {
    std::cout << "no failure so far\n";
  } else {
    const auto& r = j.recoveries.back();
    std::cout << j.recoveries.size() << " recover" << (j.recoveries.size() == 1 ? "y" : "ies") << "; last: " << r.cause
              << (r.done ? " · recovered in " + fixed(r.total_s, 2) + " s" : " · recovering") << " · lost "
              << r.steps_lost << " step(s)\n";
  }
}

void print_ranks(const actors::job_status& j) {
  // Of the last step: its time, split into compute, collectives and filling batches; score: its
  // straggler ratio; micro-batches: the rank's share of a step; speed: its measured micro-batches
  // per second of compute.
  // With pipeline stages: each rank's replica and stage ("1/0": replica 1, stage 0).
  const bool stages = std::any_of(j.ranks.begin(), j.ranks.end(), [](const actors::rank_status_view& r) { return r.stage.has_value(); });
  std::cout << "rank  node  " << (stages ? "replica/stage  " : "")
            << "state       step    step-time  compute  comm     data     score  micro-batches  speed    "
               "restarts  last-snapshot\n";
  for (const auto& r : j.ranks)
    std::cout << pad(std::to_string(r.rank), 6) << pad(r.node, 6)
              << (stages ? pad(r.stage && r.replica ? std::to_string(*r.replica) + "/" + std::to_string(*r.stage) : "-", 15) : "")
              << pad(r.state, 12) << pad(std::to_string(r.step), 8)
              << pad(ms_text(r.step_time_s), 11) << pad(ms_text(r.compute_time_s), 9)
              << pad(ms_text(r.communication_time_s), 9) << pad(ms_text(r.data_time_s), 9)
              << pad(r.straggler_ratio ? fixed(*r.straggler_ratio, 2) + "x" : "-", 7)
              << pad(r.micro_batches ? std::to_string(*r.micro_batches) : "-", 15)
              << pad(r.speed ? fixed(*r.speed, 0) + "/s" : "-", 9) << pad(std::to_string(r.restarts), 10)
              << r.last_snapshot << "\n";
}

void print_nodes(const actors::job_status& j) {
  const bool domains = std::any_of(j.nodes.begin(), j.nodes.end(), [](const actors::node_status& n) { return !n.domain.empty(); });
  std::cout << "node  up   standby  check        buddy  " << (domains ? "domain  " : "") << "ranks\n";
  std::string quarantined;
  for (const auto& n : j.nodes) {
    std::string ranks;
    for (const auto& r : j.ranks)
      if (r.node == n.name)
        ranks += (ranks.empty() ? "" : ",") + std::to_string(r.rank);
    std::cout << pad(n.name, 6) << pad(n.up ? "yes" : "NO", 5) << pad(n.standby_ready ? "warm" : "-", 9)
              << pad(n.check.empty() ? "-" : n.check, 13) << pad(n.buddy.empty() ? "-" : n.buddy, 7)
              << (domains ? pad(n.domain.empty() ? "-" : n.domain, 8) : std::string{}) << (ranks.empty() ? "-" : ranks) << "\n";
    if (n.check == "quarantined")
      quarantined += "  " + n.name + ": " + n.check_detail + "\n";
  }
  if (!quarantined.empty())
    std::cout << "quarantined (rekindle check shows every figure):\n" << quarantined;
}

void print_recoveries(const actors::job_status& j) {
  if (j.recoveries.empty()) {
    std::cout << "no failure so far\n";
    return;
  }
  std::cout << "epoch  cause                                     detect   respawn  rendezvous  restore  1st step "
               "between  total    restored-from          lost\n";
  for (const auto& r : j.recoveries)
    std::cout << pad(std::to_string(r.epoch), 7) << pad(r.cause.substr(0, 40), 42) << pad(ms_text(r.detect_s), 9)
              << pad(ms_text(r.respawn_s), 9) << pad(ms_text(r.rendezvous_s), 12) << pad(ms_text(r.restore_s), 9)
              << pad(r.done ? ms_text(r.first_step_s) : "…", 9) << pad(r.done ? ms_text(r.between_s) : "…", 9)
              << pad(r.done ? ms_text(r.total_s) : "…", 9) << pad(r.source + " @" + std::to_string(r.restored_step), 23)
              << r.steps_lost << "\n";
  std::cout << "(the phases and 'between', the messages between them, add up to the total)\n";
}

// A view of the status: the whole JSON (or `key` of it) with --json, else `print`.
int show_status(const connection_options& o, const char* key, void (*print)(const actors::job_status&)) {
  int code = 0;
  const auto st = status_of(o, nullptr, code);
  if (!st)
    return code;
  if (o.json) {
    const nlohmann::json j = *st;
    std::cout << (key ? j.at(key) : j).dump(2) << "\n";
  } else {
    print(*st);
  }
  return 0;
}

void print_event(const nlohmann::json& e) {
  std::cout << pad(std::to_string(e.value("seq", 0)), 6) << e.value("time", "") << "  " << pad(e.value("kind", ""), 22)
            << "epoch " << e.value("epoch", 0);
  if (e.contains("rank"))
    std::cout << "  rank " << e["rank"].get<std::uint32_t>();
  if (e.contains("node"))
    std::cout << "  " << e["node"].get<std::string>();
  if (e.contains("detail"))
    std::cout << "  " << e["detail"].get<std::string>();
  std::cout << "\n";
}

// events [--since SEQ] [--follow]: the event log; with --follow, new events as they come.
int show_events(const connection_options& o, std::uint64_t since, bool follow) {
  for (;;) {
    const auto r = call(o, actors::admin_events{0, since});
    if (r.code != 0)
      return r.code;
    for (const auto& e : nlohmann::json::parse(r.json)) {
      if (o.json)
        std::cout << e.dump() << "\n";
      else
        print_event(e);
      since = std::max<std::uint64_t>(since, e.value("seq", 0));
    }
    std::cout.flush();
    if (!follow)
      return 0;
    for (int i = 0; i < 5; ++i) {
      if (stop_requested())
        return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
  }
}

// loss: the curve in one bucket per column.
int show_loss(const connection_options& o, int width, int height) {
  if (width == 0) {
    const char* columns = std::getenv("COLUMNS");
    width = std::clamp((columns != nullptr ? std::atoi(columns) : 80) - 12, 10, 1000);
  }
  const auto r = call(o, actors::admin_loss{0, static_cast<std::uint32_t>(width)});
  if (r.code != 0)
    return r.code;
  const auto j = nlohmann::json::parse(r.json);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::vector<chart_point> points;
  for (const auto& p : j.value("points", nlohmann::json::array()))
    points.push_back({p.value("step", 0.0), p.value("loss", 0.0), p.value("min", 0.0), p.value("max", 0.0)});
  std::vector<double> marks;
  for (const auto& f : j.value("failures", nlohmann::json::array()))
    marks.push_back(f.value("step", 0.0));
  std::cout << "loss over " << j.value("steps", 0) << " steps";
  if (!marks.empty())
    std::cout << "; v: " << marks.size() << " failure" << (marks.size() == 1 ? "" : "s");
  std::cout << "\n" << render_chart(points, marks, width, height, 1.0, j.value("steps", 0.0));
  return 0;
}

}  // namespace

std::optional<std::vector<nlohmann::json>> read_event_log(const connection_options& o, admin_session* session, int& code) {
  std::vector<nlohmann::json> out;
  for (std::uint64_t since = 0;;) {
    const auto r = call(o, actors::admin_events{0, since}, session);
    if (r.code != 0) {
      code = r.code;
      return std::nullopt;
    }
    const auto page = nlohmann::json::parse(r.json);
    for (const auto& e : page) {
      since = std::max<std::uint64_t>(since, e.value("seq", 0));
      out.push_back(e);
    }
    if (page.size() < 1000)
      return out;
  }
}

namespace {

// events --export-trace FILE: what happened to the job, as a trace the simulator and replay read.
int export_trace(const connection_options& o, const std::string& file) {
  admin_session session;
  int code = 0;
  const auto job = status_of(o, &session, code);
  if (!job)
    return code;
  const auto events = read_event_log(o, &session, code);
  if (!events)
    return code;
  std::vector<trace::logged_event> log;
  {
    for (const auto& e : *events) {
      trace::logged_event le;
      le.unix_s = e.value("unix_s", 0.0);
      le.kind = e.value("kind", "");
      if (e.contains("rank"))
        le.rank = e["rank"].get<std::uint32_t>();
      if (e.contains("node"))
        le.node = e["node"].get<std::string>();
      const auto fields = e.value("fields", nlohmann::json::object());
      for (const auto& [k, v] : fields.items())
        if (v.is_string())
          le.fields[k] = v.get<std::string>();
      log.push_back(std::move(le));
    }
  }
  trace::trace_header h;
  h.source = "rekindle event log of job " + job->job;
  h.description = "exported by rekindle events --export-trace";
  h.nodes = static_cast<std::uint32_t>(job->nodes.size());
  h.world = job->world;
  const auto t = trace::trace_from_event_log(log, h);
  if (!t) {
    std::cerr << "rekindle: " << t.error().message() << "\n";
    return 3;
  }
  if (auto w = trace::write_file(*t, file); !w.ok()) {
    std::cerr << "rekindle: " << w.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << t->events.size() << " fault event(s) from " << log.size() << " log entries to " << file << "\n";
  return 0;
}

// A command that changes the job, confirmed with --yes: `NAME [KEYWORD] ARGUMENTS... --yes`. The
// caller binds the arguments to typed values with CLI11 and `make` builds the request from them.
struct confirmed_command {
  const char* name;
  const char* help;
  const char* why_confirm;
  /// A fixed word before the arguments ("rank", "node"), or nullptr.
  const char* keyword;
};

template <class Make>
CLI::App* add_confirmed(CLI::App& app, const confirmed_command& c, int& exit_code, Make make) {
  auto o = std::make_shared<connection_options>();
  auto keyword = std::make_shared<std::string>();
  auto yes = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(c.name, c.help);
  add_connection_options(cmd, *o);
  if (c.keyword != nullptr)
    cmd->add_option("what", *keyword, std::string{"'"} + c.keyword + "'")->required()->check(CLI::IsMember({c.keyword}));
  cmd->add_flag("--yes", *yes, "Do it without asking (required when not interactive)");
  // The callback owns what the options write into.
  cmd->callback([o, keyword, yes, why = std::string{c.why_confirm}, make = std::move(make), &exit_code] {
    if (!*yes) {
      std::cerr << "rekindle: " << why << "; add --yes to confirm\n";
      exit_code = 2;
      return;
    }
    exit_code = run(*o, make());
  });
  return cmd;
}

// A drill's --for: a duration from 100ms to 1h, bound to `target`.
void add_drill_duration(CLI::App* cmd, const std::shared_ptr<std::chrono::nanoseconds>& target, const std::string& help) {
  cmd->add_option_function<std::string>(
      "--for",
      [target](const std::string& text) {
        const auto d = parse_duration(text);
        if (!d || *d < std::chrono::milliseconds{100} || *d > std::chrono::hours{1})
          throw CLI::ValidationError("--for", "a duration from 100ms to 1h, not '" + text + "' (e.g. 5s, 500ms, 2m)");
        *target = *d;
      },
      help);
}

// A required number argument within [lo, hi], bound to `target`; anything else is refused before
// the supervisor is asked: "'x' is not <what>".
template <class T>
CLI::Option* add_number(CLI::App* cmd, const std::string& name, T& target, T lo, T hi, const std::string& what,
                        const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          name,
          [&target, lo, hi, what](const std::string& text) {
            T value{};
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
            if (ec != std::errc{} || end != text.data() + text.size() || !(value >= lo && value <= hi))
              throw CLI::ValidationError("'" + text + "' is not " + what);
            target = value;
          },
          help)
      ->required();
}

// A rank argument ("id"), bound to `rank`.
void add_rank(CLI::App* cmd, std::uint32_t& rank) {
  add_number<std::uint32_t>(cmd, "id", rank, 0, 999999, "a rank number", "The rank");
}

}  // namespace

void set_connection_defaults(const connection_defaults& d) { defaults() = d; }

std::optional<std::pair<std::vector<std::string>, std::vector<std::string>>> ranks_and_nodes() {
  const auto where = resolve(defaults());
  if (!where)
    return std::nullopt;
  auto client = actors::admin_client::connect(where->spec, where->target, std::chrono::seconds{2});
  if (!client)
    return std::nullopt;
  auto reply = (*client)->call(actors::admin_status{}, std::chrono::seconds{2});
  if (!reply)
    return std::nullopt;
  const auto st = actors::parse_job_status(reply->json);
  if (!st)
    return std::nullopt;
  std::pair<std::vector<std::string>, std::vector<std::string>> out;
  for (const auto& r : st->ranks)
    out.first.push_back(std::to_string(r.rank));
  for (const auto& n : st->nodes)
    out.second.push_back(n.name);
  return out;
}

void add_admin_commands(CLI::App& app, int& exit_code) {
  {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand("status", "The job's state, epoch, step, loss, throughput, committed step, checkpoint "
                                             "on disk and last failure (--json: everything, with nodes, ranks and recoveries)");
    add_connection_options(cmd, *o);
    cmd->callback([o, &exit_code] { exit_code = show_status(*o, nullptr, print_status); });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand("ranks", "Every rank: node, state, step, step time, micro-batches per step, measured "
                                            "speed, restarts, last snapshot");
    add_connection_options(cmd, *o);
    cmd->callback([o, &exit_code] { exit_code = show_status(*o, "ranks", print_ranks); });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand("nodes", "Every node: up, warm standby, its ranks");
    add_connection_options(cmd, *o);
    cmd->callback([o, &exit_code] { exit_code = show_status(*o, "nodes", print_nodes); });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand("recoveries", "Each failure: detection, respawn, rendezvous, restore, first step and total "
                                                 "time, where the state came from, steps lost");
    add_connection_options(cmd, *o);
    cmd->callback([o, &exit_code] { exit_code = show_status(*o, "recoveries", print_recoveries); });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto since = std::make_shared<std::uint64_t>(0);
    auto follow = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("events", "The job's event log, oldest first (--json: one JSON object per line)");
    add_connection_options(cmd, *o);
    cmd->add_option("--since", *since, "Only events after this sequence number")
        ->check(apps::whole_number(0, std::numeric_limits<std::int64_t>::max()));
    cmd->add_flag("--follow", *follow, "Keep printing new events as they come (until interrupted)");
    auto export_file = std::make_shared<std::string>();
    cmd->add_option("--export-trace", *export_file,
                    "Write what happened to the job as a failure trace (docs/TRACES.md) to this file instead");
    cmd->callback([o, since, follow, export_file, &exit_code] {
      exit_code = export_file->empty() ? show_events(*o, *since, *follow) : export_trace(*o, *export_file);
    });
  }
  {
    auto rank = std::make_shared<std::uint32_t>(0);
    auto signal = std::make_shared<int>(9);
    auto* cmd = add_confirmed(app,
                              {"kill", "Fault drill: kill a rank's process with a signal", "kill is destructive", "rank"},
                              exit_code, [rank, signal] { return actors::admin_kill{0, rank_id{*rank}, *signal}; });
    add_rank(cmd, *rank);
    cmd->add_option("--signal", *signal, "Signal number (default 9, SIGKILL)")->check(CLI::Range(1, 64));
  }
  {
    auto rank = std::make_shared<std::uint32_t>(0);
    auto* cmd = add_confirmed(app,
                              {"hang",
                               "Fault drill: a rank stops before its next step, alive, as behind a stuck kernel; its "
                               "peers wait until the supervisor finds and replaces it",
                               "hang stalls the whole job until the rank is replaced", "rank"},
                              exit_code,
                              [rank] { return actors::admin_drill{0, rank_id{*rank}, actors::drill_kind::hang, 1.0}; });
    add_rank(cmd, *rank);
  }
  {
    auto rank = std::make_shared<std::uint32_t>(0);
    auto factor = std::make_shared<double>(1.0);
    auto* cmd = add_confirmed(
        app,
        {"slow",
         "Fault drill: a rank's compute takes FACTOR times as long (1: normal again; its collectives are not "
         "slowed), as on a throttled or slower device",
         "slow holds back every rank of the job", "rank"},
        exit_code,
        [rank, factor] { return actors::admin_drill{0, rank_id{*rank}, actors::drill_kind::slow, *factor}; });
    add_rank(cmd, *rank);
    add_number(cmd, "factor", *factor, 1.0, 100.0, "a factor from 1 (back to normal) to 100",
               "How many times as long, from 1 to 100");
  }
  {
    auto o = std::make_shared<connection_options>();
    auto width = std::make_shared<int>(0);
    auto height = std::make_shared<int>(12);
    auto* cmd = app.add_subcommand("loss", "The loss curve as a terminal chart, failures marked 'v' above it (--json: "
                                           "the points, each a bucket of steps with mean, min and max)");
    add_connection_options(cmd, *o);
    cmd->add_option("--width", *width, "Columns of the plot (default: the terminal's width)")->check(CLI::Range(10, 1000));
    cmd->add_option("--height", *height, "Rows of the plot (default 12)")->check(CLI::Range(3, 200));
    cmd->callback([o, width, height, &exit_code] { exit_code = show_loss(*o, *width, *height); });
  }
  {
    auto node = std::make_shared<std::string>();
    auto* cmd = add_confirmed(app,
                              {"fail", "Fault drill: a node's daemon dies at once, as a lost node does",
                               "fail node is destructive", "node"},
                              exit_code, [node] { return actors::admin_fail_node{0, *node}; });
    cmd->add_option("name", *node, "The node")->required();
  }
  {
    auto node1 = std::make_shared<std::string>();
    auto node2 = std::make_shared<std::string>();
    auto duration = std::make_shared<std::chrono::nanoseconds>(std::chrono::seconds{10});
    auto* cmd = add_confirmed(app,
                              {"partition",
                               "Fault drill: drop the traffic between two nodes' daemons for a while (heartbeats, "
                               "replication, state transfers), as a cut network does",
                               "a partition can take a node out of the job", nullptr},
                              exit_code, [node1, node2, duration] {
                                return actors::admin_partition{0, *node1, *node2, duration->count()};
                              });
    cmd->add_option("node1", *node1, "One end")->required();
    cmd->add_option("node2", *node2, "The other end")->required();
    add_drill_duration(cmd, duration, "How long, e.g. 5s, 500ms, 2m (default 10s)");
  }
  {
    auto node1 = std::make_shared<std::string>();
    auto node2 = std::make_shared<std::string>();
    auto rate = std::make_shared<double>(10.0);
    auto duration = std::make_shared<std::chrono::nanoseconds>(std::chrono::seconds{60});
    auto* cmd = add_confirmed(app,
                              {"throttle",
                               "Fault drill: the traffic between two nodes' daemons (replication, state transfers, "
                               "link probes) carries at most RATE MB/s each way for a while, as over a degraded "
                               "link; the link check names it (rekindle check)",
                               "a slow link delays replication between the two nodes", nullptr},
                              exit_code, [node1, node2, rate, duration] {
                                return actors::admin_partition{0, *node1, *node2, duration->count(), *rate};
                              });
    cmd->add_option("node1", *node1, "One end")->required();
    cmd->add_option("node2", *node2, "The other end")->required();
    cmd->add_option("--rate", *rate, "MB/s each way, from 0.01 to 100000 (default 10)")->check(CLI::Range(0.01, 100000.0));
    add_drill_duration(cmd, duration, "How long, e.g. 30s, 2m (default 60s)");
  }
  for (const bool pause : {true, false}) {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand(pause ? "pause" : "resume",
                                   pause ? "Pause training: the ranks stop at their step and wait, processes stay"
                                         : "Resume a paused job in a new epoch");
    add_connection_options(cmd, *o);
    cmd->callback([o, pause, &exit_code] { exit_code = run(*o, actors::admin_pause{0, pause}); });
  }
  {
    auto node = std::make_shared<std::string>();
    auto* cmd = add_confirmed(app,
                              {"drain", "Move a node's ranks to a spare (or shrink the world) and stop using it",
                               "drain changes the world", "node"},
                              exit_code, [node] { return actors::admin_drain{0, *node}; });
    cmd->add_option("name", *node, "The node")->required();
  }
  {
    auto ranks = std::make_shared<std::uint32_t>(0);
    auto* cmd = add_confirmed(app,
                              {"scale", "Resize the data-parallel world to RANKS ranks (the global batch stays)",
                               "scale restarts every rank in a new world", nullptr},
                              exit_code, [ranks] { return actors::admin_scale{0, *ranks}; });
    add_number<std::uint32_t>(cmd, "ranks", *ranks, 1, 1000000, "a whole number of ranks from 1 to 1000000",
                              "The new number of ranks");
  }
  {
    auto how = std::make_shared<std::string>("measured");
    auto* cmd = add_confirmed(
        app,
        {"rebalance",
         "Share each step's micro-batches among the ranks anew: by their measured compute speeds (default), "
         "by the nodes' configured speeds, or equally; applied through a new epoch, every rank restoring its "
         "newest snapshot from memory. Kept until the world changes size",
         "rebalance restarts the epoch (the steps since the newest snapshot are trained again)", nullptr},
        exit_code, [how] { return actors::admin_rebalance{0, *how}; });
    cmd->add_option("how", *how, "measured (default), speeds or equal")
        ->check(CLI::IsMember({"measured", "speeds", "equal"}));
  }
  {
    auto o = std::make_shared<connection_options>();
    auto nodes = std::make_shared<std::vector<std::string>>();
    auto factor = std::make_shared<double>(1.0);
    auto only = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "check",
        "Run the pre-flight node check again and print each node's figures against the fleet's medians: GEMM "
        "GFLOP/s, memory GB/s, checkpoint disk write + fsync, GPUs; then the link check, the nodes probing each "
        "other in pairs (docs/RUNTIME.md). A node that fails is quarantined (its ranks move to a spare or the "
        "world shrinks; never a spare); a quarantined node that passes is released; a slow link is reported. "
        "Exit status 1 when a node or a link failed");
    add_connection_options(cmd, *o);
    cmd->add_option("--nodes", *nodes, "Only these nodes, comma-separated (default: every connected node)")
        ->delimiter(',');
    cmd->add_option("--drill-slow", *factor,
                    "Fault drill: the named nodes' measurements do FACTOR times their work, as on hardware that much "
                    "slower (1 to 100; needs --nodes)")
        ->check(CLI::Range(1.0, 100.0));
    cmd->add_option("--drill-only", *only, "The drill slows only this measurement: compute, memory or disk")
        ->check(CLI::IsMember({"compute", "memory", "disk"}));
    cmd->callback([o, nodes, factor, only, &exit_code] {
      if (*factor > 1.0 && nodes->empty()) {
        std::cerr << "rekindle: check: --drill-slow needs --nodes (the nodes to slow)\n";
        exit_code = 2;
        return;
      }
      if (!only->empty() && *factor == 1.0) {
        std::cerr << "rekindle: check: --drill-only needs --drill-slow (how much slower)\n";
        exit_code = 2;
        return;
      }
      const actors::admin_check request{0, *nodes, *factor, *only};
      // Each node measures for about a second; the supervisor answers within 60 s.
      const auto r = call_with(
          *o, [&](actors::admin_client& client) { return client.call(request, std::chrono::seconds{90}); }, nullptr);
      if (r.code != 0) {
        exit_code = r.code;
        return;
      }
      std::cout << (o->json ? r.json : r.text) << (o->json ? "\n" : "");
      const auto j = nlohmann::json::parse(r.json, nullptr, false);
      const bool links_ok = !j.is_object() || !j.contains("links") || !j["links"].is_object() ||
                            j["links"].value("verdicts", nlohmann::json::array()).empty();
      exit_code = j.is_object() && j.value("quarantined", 0) == 0 && !j.contains("missing") && links_ok ? 0 : 1;
    });
  }
  add_confirmed(app, {"stop", "Stop the job: every rank ends, state is kept", "stop is destructive", nullptr}, exit_code,
                [] { return actors::admin_stop{0, ""}; });
}

void add_checkpoint_now_command(CLI::App* checkpoint, int& exit_code) {
  auto o = std::make_shared<connection_options>();
  auto* cmd = checkpoint->add_subcommand("now", "Ask the running job for a checkpoint on disk at the next anchor");
  add_connection_options(cmd, *o);
  cmd->callback([o, &exit_code] { exit_code = run(*o, actors::admin_checkpoint_now{}); });
}

}  // namespace rekindle::apps
