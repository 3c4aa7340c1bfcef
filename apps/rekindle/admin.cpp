#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "actors/admin_client.hpp"
#include "apps/rekindle/admin_call.hpp"
#include "common/chart.hpp"
#include "common/logging.hpp"
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
    std::ifstream in(o.token_file);
    if (!in)
      return status{errc::invalid_argument, "cannot read token file " + o.token_file};
    std::getline(in, out.target.token);
  }
  return out;
}

call_result call(const connection_options& o, const std::string& command, const std::vector<std::string>& args,
                 admin_session* session) {
  if (session != nullptr && session->client) {
    // One connection for many calls; a broken one is made again below.
    auto reply = session->client->call(command, args, std::chrono::seconds{30});
    if (reply) {
      if (reply->code != 0)
        std::cerr << "rekindle: " << reply->text << "\n";
      return reply->code != 0 ? call_result{reply->code} : call_result{0, reply->text, reply->json};
    }
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
    return {client.error().code() == errc::unauthenticated ? 3 : client.error().code() == errc::invalid_argument ? 2 : 1};
  }
  auto reply = (*client)->call(command, args, std::chrono::seconds{30});
  if (session != nullptr)
    session->client = std::move(*client);
  if (!reply) {
    std::cerr << "rekindle: " << reply.error().message() << "\n";
    return {1};
  }
  if (reply->code != 0) {
    std::cerr << "rekindle: " << reply->text << "\n";
    return {reply->code};
  }
  return {0, reply->text, reply->json};
}

namespace {

// Runs one admin command and prints its reply; returns the shell's exit status.
int run(const connection_options& o, const std::string& command, const std::vector<std::string>& args) {
  const auto r = call(o, command, args);
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
void print_status(const nlohmann::json& j) {
  std::string state = j.value("state", "");
  std::transform(state.begin(), state.end(), state.begin(), [](unsigned char c) { return std::toupper(c); });
  std::cout << "job " << j.value("job", "") << "  " << state << "  epoch " << j.value("epoch", 0) << "  step "
            << j.value("step", 0) << "/" << j.value("total_steps", 0);
  if (j.contains("loss") && j["loss"].is_number())
    std::cout << "  loss " << fixed(j["loss"].get<double>(), 3);
  if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number())
    std::cout << "  " << fixed(j["tokens_per_s"].get<double>() / 1000.0, 1) << "k tok/s";
  std::cout << "\n";
  if (j.contains("committed_step") && j["committed_step"].is_number())
    std::cout << "committed in memory: step " << j["committed_step"].get<std::uint64_t>();
  else
    std::cout << "committed in memory: none yet";
  if (j.contains("checkpoint")) {
    const auto& c = j["checkpoint"];
    std::cout << " · on disk: "
              << (c["last_step"].is_number() ? "step " + std::to_string(c["last_step"].get<std::uint64_t>()) : "none");
    if (c["writing_step"].is_number())
      std::cout << " (writing step " << c["writing_step"].get<std::uint64_t>() << ")";
    if (c["error"].is_string())
      std::cout << "\nCHECKPOINT FAILING: " << c["error"].get<std::string>();
  }
  std::cout << "\n";
  const auto& recs = j.value("recoveries", nlohmann::json::array());
  if (recs.empty()) {
    std::cout << "no failure so far\n";
  } else {
    const auto& r = recs.back();
    std::cout << recs.size() << " recover" << (recs.size() == 1 ? "y" : "ies") << "; last: " << r.value("cause", "")
              << (r.value("done", false) ? " · recovered in " + fixed(r.value("total_s", 0.0), 2) + " s" : " · recovering")
              << " · lost " << r.value("steps_lost", 0) << " step(s)\n";
  }
}

void print_ranks(const nlohmann::json& j) {
  // micro-batches: the rank's share of a step; speed: its measured micro-batches per second of compute.
  std::cout << "rank  node  state       step    step-time  micro-batches  speed    restarts  last-snapshot\n";
  for (const auto& r : j.value("ranks", nlohmann::json::array())) {
    const auto& mb = r.contains("micro_batches") ? r["micro_batches"] : nlohmann::json();
    const auto& speed = r.contains("speed") ? r["speed"] : nlohmann::json();
    std::cout << pad(std::to_string(r.value("rank", 0)), 6) << pad(r.value("node", ""), 6) << pad(r.value("state", ""), 12)
              << pad(std::to_string(r.value("step", 0)), 8) << pad(ms_text(r.value("step_time_s", 0.0)), 11)
              << pad(mb.is_number() ? std::to_string(mb.get<unsigned>()) : "-", 15)
              << pad(speed.is_number() ? fixed(speed.get<double>(), 0) + "/s" : "-", 9)
              << pad(std::to_string(r.value("restarts", 0)), 10) << r.value("last_snapshot", 0) << "\n";
  }
}

void print_nodes(const nlohmann::json& j) {
  std::cout << "node  up   standby  ranks\n";
  for (const auto& n : j.value("nodes", nlohmann::json::array())) {
    std::string ranks;
    for (const auto& r : j.value("ranks", nlohmann::json::array()))
      if (r.value("node", "") == n.value("name", ""))
        ranks += (ranks.empty() ? "" : ",") + std::to_string(r.value("rank", 0));
    std::cout << pad(n.value("name", ""), 6) << pad(n.value("up", false) ? "yes" : "NO", 5)
              << pad(n.value("standby_ready", false) ? "warm" : "-", 9) << (ranks.empty() ? "-" : ranks) << "\n";
  }
}

void print_recoveries(const nlohmann::json& j) {
  const auto& recs = j.value("recoveries", nlohmann::json::array());
  if (recs.empty()) {
    std::cout << "no failure so far\n";
    return;
  }
  std::cout << "epoch  cause                                     detect   respawn  rendezvous  restore  total    "
               "restored-from          lost\n";
  for (const auto& r : recs)
    std::cout << pad(std::to_string(r.value("epoch", 0)), 7) << pad(r.value("cause", "").substr(0, 40), 42)
              << pad(ms_text(r.value("detect_s", 0.0)), 9) << pad(ms_text(r.value("respawn_s", 0.0)), 9)
              << pad(ms_text(r.value("rendezvous_s", 0.0)), 12) << pad(ms_text(r.value("restore_s", 0.0)), 9)
              << pad(r.value("done", false) ? ms_text(r.value("total_s", 0.0)) : "…", 9)
              << pad(r.value("source", "") + " @" + std::to_string(r.value("restored_step", 0)), 23)
              << r.value("steps_lost", 0) << "\n";
}

// A view of the status: the whole JSON (or `key` of it) with --json, else `print`.
int show_status(const connection_options& o, const char* key, void (*print)(const nlohmann::json&)) {
  const auto r = call(o, "status", {});
  if (r.code != 0)
    return r.code;
  const auto j = nlohmann::json::parse(r.json);
  if (o.json)
    std::cout << (key ? j.value(key, nlohmann::json::array()) : j).dump(2) << "\n";
  else
    print(j);
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
    const auto r = call(o, "events", {std::to_string(since)});
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
  const auto r = call(o, "loss", {std::to_string(width)});
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

// events --export-trace FILE: what happened to the job, as a trace the simulator and replay read.
int export_trace(const connection_options& o, const std::string& file) {
  admin_session session;
  const auto st = call(o, "status", {}, &session);
  if (st.code != 0)
    return st.code;
  const auto job_status = nlohmann::json::parse(st.json);
  std::vector<trace::logged_event> log;
  for (std::uint64_t since = 0;;) {
    const auto r = call(o, "events", {std::to_string(since)}, &session);
    if (r.code != 0)
      return r.code;
    const auto page = nlohmann::json::parse(r.json);
    for (const auto& e : page) {
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
      since = std::max<std::uint64_t>(since, e.value("seq", 0));
      log.push_back(std::move(le));
    }
    if (page.size() < 1000)
      break;
  }
  trace::trace_header h;
  h.source = "rekindle event log of job " + job_status.value("job", std::string{});
  h.description = "exported by rekindle events --export-trace";
  h.nodes = static_cast<std::uint32_t>(job_status.value("nodes", nlohmann::json::array()).size());
  h.world = job_status.value("world", 0u);
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

// A command that changes the job, confirmed with --yes: `NAME [KEYWORD] POSITIONAL... --yes`.
// The supervisor's `command` gets the positionals' values, then what `extra` adds (options).
struct confirmed_command {
  const char* name;
  const char* help;
  const char* command;
  const char* why_confirm;
  /// A fixed word before the positionals ("rank", "node"), or nullptr.
  const char* keyword;
  std::vector<std::pair<const char*, const char*>> positionals;
};

CLI::App* add_confirmed(CLI::App& app, const confirmed_command& c, int& exit_code,
                        std::function<std::vector<std::string>()> extra = {}) {
  auto o = std::make_shared<connection_options>();
  auto keyword = std::make_shared<std::string>();
  auto values = std::make_shared<std::vector<std::string>>(c.positionals.size());
  auto yes = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(c.name, c.help);
  add_connection_options(cmd, *o);
  if (c.keyword != nullptr)
    cmd->add_option("what", *keyword, std::string{"'"} + c.keyword + "'")->required()->check(CLI::IsMember({c.keyword}));
  for (std::size_t i = 0; i < c.positionals.size(); ++i)
    cmd->add_option(c.positionals[i].first, (*values)[i], c.positionals[i].second)->required();
  cmd->add_flag("--yes", *yes, "Do it without asking (required when not interactive)");
  cmd->callback([o, keyword, values, yes, command = std::string{c.command}, why = std::string{c.why_confirm},
                 extra = std::move(extra), &exit_code] {
    if (!*yes) {
      std::cerr << "rekindle: " << why << "; add --yes to confirm\n";
      exit_code = 2;
      return;
    }
    auto args = *values;
    if (extra)
      for (auto& a : extra())
        args.push_back(std::move(a));
    exit_code = run(*o, command, args);
  });
  return cmd;
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
  auto reply = (*client)->call("status", {}, std::chrono::seconds{2});
  if (!reply || reply->code != 0)
    return std::nullopt;
  const auto j = nlohmann::json::parse(reply->json, nullptr, false);
  if (j.is_discarded())
    return std::nullopt;
  std::pair<std::vector<std::string>, std::vector<std::string>> out;
  for (const auto& r : j.value("ranks", nlohmann::json::array()))
    out.first.push_back(std::to_string(r.value("rank", 0)));
  for (const auto& n : j.value("nodes", nlohmann::json::array()))
    out.second.push_back(n.value("name", ""));
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
    auto* cmd = app.add_subcommand("recoveries", "Each failure: detection, respawn, rendezvous, restore and total time, "
                                                 "where the state came from, steps lost");
    add_connection_options(cmd, *o);
    cmd->callback([o, &exit_code] { exit_code = show_status(*o, "recoveries", print_recoveries); });
  }
  {
    auto o = std::make_shared<connection_options>();
    auto since = std::make_shared<std::uint64_t>(0);
    auto follow = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("events", "The job's event log, oldest first (--json: one JSON object per line)");
    add_connection_options(cmd, *o);
    cmd->add_option("--since", *since, "Only events after this sequence number");
    cmd->add_flag("--follow", *follow, "Keep printing new events as they come (until interrupted)");
    auto export_file = std::make_shared<std::string>();
    cmd->add_option("--export-trace", *export_file,
                    "Write what happened to the job as a failure trace (docs/TRACES.md) to this file instead");
    cmd->callback([o, since, follow, export_file, &exit_code] {
      exit_code = export_file->empty() ? show_events(*o, *since, *follow) : export_trace(*o, *export_file);
    });
  }
  {
    auto signal = std::make_shared<int>(9);
    add_confirmed(app,
                  {"kill", "Fault drill: kill a rank's process with a signal", "kill", "kill is destructive", "rank",
                   {{"id", "The rank"}}},
                  exit_code, [signal] { return std::vector<std::string>{std::to_string(*signal)}; })
        ->add_option("--signal", *signal, "Signal number (default 9, SIGKILL)")
        ->check(CLI::Range(1, 64));
  }
  add_confirmed(app,
                {"hang",
                 "Fault drill: a rank stops before its next step, alive, as behind a stuck kernel; its peers wait "
                 "until the supervisor finds and replaces it",
                 "hang", "hang stalls the whole job until the rank is replaced", "rank", {{"id", "The rank"}}},
                exit_code);
  add_confirmed(app,
                {"slow",
                 "Fault drill: a rank's compute takes FACTOR times as long (1: normal again; its collectives are not "
                 "slowed), as on a throttled or slower device",
                 "slow", "slow holds back every rank of the job", "rank",
                 {{"id", "The rank"}, {"factor", "How many times as long, from 1 to 100"}}},
                exit_code);
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
  add_confirmed(app,
                {"fail", "Fault drill: a node's daemon dies at once, as a lost node does", "fail-node",
                 "fail node is destructive", "node", {{"name", "The node"}}},
                exit_code);
  {
    auto duration = std::make_shared<std::string>("10s");
    add_confirmed(app,
                  {"partition",
                   "Fault drill: drop the traffic between two nodes' daemons for a while (heartbeats, replication, "
                   "state transfers), as a cut network does",
                   "partition", "a partition can take a node out of the job", nullptr,
                   {{"node1", "One end"}, {"node2", "The other end"}}},
                  exit_code, [duration] { return std::vector<std::string>{*duration}; })
        ->add_option("--for", *duration, "How long, e.g. 5s, 500ms, 2m (default 10s)");
  }
  for (const char* name : {"pause", "resume"}) {
    auto o = std::make_shared<connection_options>();
    auto* cmd = app.add_subcommand(name, std::string{name} == "pause"
                                             ? "Pause training: the ranks stop at their step and wait, processes stay"
                                             : "Resume a paused job in a new epoch");
    add_connection_options(cmd, *o);
    cmd->callback([o, name, &exit_code] { exit_code = run(*o, name, {}); });
  }
  add_confirmed(app,
                {"drain", "Move a node's ranks to a spare (or shrink the world) and stop using it", "drain",
                 "drain changes the world", "node", {{"name", "The node"}}},
                exit_code);
  add_confirmed(app,
                {"scale", "Resize the data-parallel world to RANKS ranks (the global batch stays)", "scale",
                 "scale restarts every rank in a new world", nullptr, {{"ranks", "The new number of ranks"}}},
                exit_code);
  {
    auto how = std::make_shared<std::string>("measured");
    add_confirmed(app,
                  {"rebalance",
                   "Share each step's micro-batches among the ranks anew: by their measured compute speeds (default), "
                   "by the nodes' configured speeds, or equally; applied through a new epoch, every rank restoring its "
                   "newest snapshot from memory. Kept until the world changes size",
                   "rebalance", "rebalance restarts the epoch (the steps since the newest snapshot are trained again)",
                   nullptr, {}},
                  exit_code, [how] { return std::vector<std::string>{*how}; })
        ->add_option("how", *how, "measured (default), speeds or equal")
        ->check(CLI::IsMember({"measured", "speeds", "equal"}));
  }
  add_confirmed(app,
                {"stop", "Stop the job: every rank ends, state is kept", "stop", "stop is destructive", nullptr, {}},
                exit_code);
}

void add_checkpoint_now_command(CLI::App* checkpoint, int& exit_code) {
  auto o = std::make_shared<connection_options>();
  auto* cmd = checkpoint->add_subcommand("now", "Ask the running job for a checkpoint on disk at the next anchor");
  add_connection_options(cmd, *o);
  cmd->callback([o, &exit_code] { exit_code = run(*o, "checkpoint-now", {}); });
}

}  // namespace rekindle::apps
