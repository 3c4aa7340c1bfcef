// rekindle demo: a local cluster on loopback, a training job, injected failures, and the
// recovery report.

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "actors/admin_client.hpp"
#include "actors/job_status.hpp"
#include "apps/common/cli.hpp"
#include "apps/rekindle/commands.hpp"
#include "common/logging.hpp"
#include "common/process.hpp"
#include "common/text.hpp"
#include "config/embedded.hpp"
#include "config/load.hpp"
#include "kernels/layout.hpp"
#include "storage/snapshot_slot.hpp"

namespace rekindle::apps {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct demo_options {
  std::string data_dir;
  std::uint64_t steps = 0;
  bool faults = true;
};

// A daemon the demo started: its own process group, dying with the demo.
struct daemon_process {
  std::string node;
  pid_t pid = -1;
};

std::string seconds_text(double s) {
  return format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(s * 1e9)});
}

std::string recovery_line(const actors::recovery_status& r) {
  std::string line = "      ";
  if (r.detect_s > 0)
    line += "detect " + seconds_text(r.detect_s) + " · ";
  line += "respawn " + seconds_text(r.respawn_s) + " · rendezvous " + seconds_text(r.rendezvous_s) + " · restore " +
          seconds_text(r.restore_s) + " (" + r.source + ", step " + std::to_string(r.restored_step) + ") · first step " +
          seconds_text(r.first_step_s) + " · total " +
          seconds_text(r.total_s) + " · lost " + std::to_string(r.steps_lost) + " step" + (r.steps_lost == 1 ? "" : "s");
  return line;
}

// The loss curve in one line of block characters, mean per column.
std::string chart(const std::vector<double>& losses, std::size_t columns) {
  static const char* blocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  if (losses.empty())
    return "";
  columns = std::min(columns, losses.size());
  std::vector<double> col(columns, 0.0);
  for (std::size_t c = 0; c < columns; ++c) {
    const std::size_t a = c * losses.size() / columns, b = (c + 1) * losses.size() / columns;
    for (std::size_t i = a; i < b; ++i)
      col[c] += losses[i];
    col[c] /= static_cast<double>(b - a);
  }
  const auto [lo, hi] = std::minmax_element(col.begin(), col.end());
  std::string out;
  for (double v : col) {
    const double t = *hi > *lo ? (v - *lo) / (*hi - *lo) : 0.0;
    out += blocks[std::min(7, static_cast<int>(t * 7.999))];
  }
  return out;
}

int run_demo(const demo_options& o) {
  init_logging("rekindle", log_level::error);
  const auto started = clock_type::now();
  const fs::path self_dir = fs::read_symlink("/proc/self/exe").parent_path();
  const fs::path rekindled = self_dir / "rekindled";
  fs::path data;
  if (o.data_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "rekindle-demo-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "rekindle demo: cannot create a temporary directory\n";
      return 1;
    }
    data = pattern;
  } else {
    data = fs::absolute(o.data_dir);
    fs::create_directories(data);
  }
  // The embedded default configuration, with this run's data directory (and step count).
  auto parsed = config::parse(config::embedded_default_text(), std::string{config::embedded_default_name}, {});
  if (!parsed.ok()) {
    std::cerr << "rekindle demo: " << parsed.error_text() << "\n";
    return 1;
  }
  auto spec = *parsed.value;
  spec.daemon.data_dir = data;
  spec.checkpoint.directory = data / "checkpoints";
  if (o.steps > 0)
    spec.job.steps = o.steps;
  const fs::path config_path = data / "demo.toml";
  std::ofstream(config_path) << config::to_toml(spec);
  spec.source = config_path.string();

  const auto params = kernels::parameter_count(kernels::model_shape{.layers = spec.model.layers,
                                                                    .heads = spec.model.heads,
                                                                    .width = spec.model.width,
                                                                    .seq_len = spec.model.seq_len});
  std::printf("rekindle demo: %zu nodes (%s, %s) on 127.0.0.1, %u ranks, transformer %ux%u (%.1f M params), %llu steps\n",
              spec.nodes.size(), spec.nodes[0].name.c_str(), spec.nodes[1].name.c_str(), spec.world_size(),
              spec.model.layers, spec.model.width, static_cast<double>(params) / 1e6,
              static_cast<unsigned long long>(spec.job.steps));
  std::printf("  config: embedded default (config/examples/local.toml) · state in %s\n", data.c_str());
  std::fflush(stdout);

  std::vector<daemon_process> daemons;
  const auto stop_all = [&] {
    for (auto& d : daemons) {
      kill_child_group(d.pid);
      d.pid = -1;
    }
    // A daemon that was killed (the node-loss drill) could not remove its snapshot slots.
    for (const auto& n : spec.nodes)
      (void)storage::snapshot_slot::remove_with_prefix(storage::snapshot_slot::name_prefix(data / n.name, spec.job.name));
  };
  for (const auto& n : spec.nodes) {
    auto pid = spawn_child({rekindled.string(), "--config", config_path.string(), "--node", n.name, "--exit-when-done"},
                           {.log = data / (n.name + ".log")});
    if (!pid) {
      std::cerr << "rekindle demo: cannot start the daemon of " << n.name << ": " << pid.error().message() << "\n";
      stop_all();
      return 1;
    }
    daemons.push_back({n.name, *pid});
  }

  // Wait for the supervisor, then for training.
  std::unique_ptr<actors::admin_client> client;
  const auto deadline = clock_type::now() + 120s;
  while (!client && clock_type::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    auto c = actors::admin_client::connect(spec, {}, 2s);
    if (c)
      client = std::move(*c);
  }
  if (!client) {
    std::cerr << "rekindle demo: the supervisor did not come up; see " << (data / "n0.log") << "\n";
    stop_all();
    return 1;
  }
  const auto status = [&](bool full) -> std::optional<actors::job_status> {
    auto r = client->call(actors::admin_status{0, full}, 10s);
    if (!r)
      return std::nullopt;
    auto st = actors::parse_job_status(r->json);
    return st ? std::optional{std::move(*st)} : std::nullopt;
  };

  bool up_printed = false, killed_rank = false, failed_node = false;
  std::size_t recoveries_shown = 0;
  std::uint64_t next_line = 0;
  const std::uint64_t total = spec.job.steps;
  const std::uint64_t kill_at = total / 5, fail_at = total / 2;
  for (;;) {
    std::this_thread::sleep_for(150ms);
    const auto s = status(false);
    if (!s) {
      if (clock_type::now() - started > 600s)
        break;
      continue;
    }
    if (!up_printed && s->state == "running") {
      up_printed = true;
      std::printf("  %s up (supervisor, agent, checkpoint) · %s up (agent, checkpoint) · %u ranks in epoch %llu\n",
                  spec.nodes[0].name.c_str(), spec.nodes[1].name.c_str(), s->world,
                  static_cast<unsigned long long>(s->epoch));
    }
    const std::uint64_t step = s->step;
    if (step >= next_line && step > 0 && s->state == "running") {
      double stall = 0;
      for (const auto& r : s->ranks)
        stall = std::max(stall, r.snapshot_stall_s);
      std::printf("step %4llu/%llu  loss %.3f  %s tok/s  snapshot every %llu steps (stall %s)\n",
                  static_cast<unsigned long long>(step), static_cast<unsigned long long>(total), s->loss.value_or(0.0),
                  [&] {
                    char b[32];
                    const double t = s->tokens_per_s.value_or(0.0);
                    std::snprintf(b, sizeof b, t >= 1000 ? "%.1fk" : "%.0f", t >= 1000 ? t / 1000 : t);
                    return std::string{b};
                  }()
                      .c_str(),
                  static_cast<unsigned long long>(spec.checkpoint.snapshot_every), seconds_text(stall).c_str());
      next_line = step + std::max<std::uint64_t>(total / 6, 1);
    }
    // Recoveries as they finish.
    const auto& recs = s->recoveries;
    while (recoveries_shown < recs.size() && recs[recoveries_shown].done) {
      std::printf("%s\n", recovery_line(recs[recoveries_shown]).c_str());
      ++recoveries_shown;
    }
    const bool quiet = recoveries_shown == recs.size() && s->state == "running";
    if (o.faults && !killed_rank && quiet && step >= kill_at) {
      killed_rank = true;
      auto r = client->call(actors::admin_kill{0, rank_id{2}, SIGKILL}, 10s);
      std::printf("  ✗ step %llu: rank 2 killed (SIGKILL)        → rank 2 restarts in place on %s\n",
                  static_cast<unsigned long long>(step), spec.nodes[1].name.c_str());
      if (!r)
        std::printf("      (the kill was refused: %s)\n", r.error().message().c_str());
    } else if (o.faults && killed_rank && !failed_node && quiet && step >= fail_at) {
      failed_node = true;
      const auto world = s->world;
      auto r = client->call(actors::admin_fail_node{0, spec.nodes[1].name}, 10s);
      std::printf("  ✗ step %llu: node %s lost (daemon killed)  → ranks 2,3 go; world %u → %u, global batch kept\n",
                  static_cast<unsigned long long>(step), spec.nodes[1].name.c_str(), world,
                  world - spec.ranks_on(node_id{1}));
      if (!r)
        std::printf("      (the failure was refused: %s)\n", r.error().message().c_str());
    }
    if (s->ended())
      break;
  }
  const auto report = status(true);
  const double wall = std::chrono::duration<double>(clock_type::now() - started).count();
  int code = 0;
  if (!report) {
    std::printf("the job did not report its end; see %s\n", (data / "n0.log").c_str());
    code = 1;
  } else {
    const auto& recs = report->recoveries;
    while (recoveries_shown < recs.size()) {
      std::printf("%s\n", recovery_line(recs[recoveries_shown]).c_str());
      ++recoveries_shown;
    }
    const auto& losses = report->losses;
    const auto& step_s = report->step_seconds;
    double useful = 0;
    for (double t : step_s)
      useful += t;
    double lost = 0;
    for (const auto& r : recs)
      lost += r.total_s + static_cast<double>(r.steps_lost) *
                              (step_s.empty() ? 0.0 : useful / static_cast<double>(step_s.size()));
    const double training_wall = useful + lost;
    std::printf("step %llu/%llu  loss %.3f   %s in %s   effective training time %.1f%%\n",
                static_cast<unsigned long long>(report->step), static_cast<unsigned long long>(total),
                losses.empty() ? 0.0 : losses.back(), report->state.c_str(), seconds_text(wall).c_str(),
                training_wall > 0 ? 100.0 * useful / training_wall : 100.0);
    std::printf("\nloss ┤%s\n     └ 0%*llu\n", chart(losses, 40).c_str(), 38, static_cast<unsigned long long>(total));
    if (report->state != "completed") {
      std::printf("the job ended %s: %s\n", report->state.c_str(), report->reason.c_str());
      code = 1;
    } else if (report->world != spec.world_size()) {
      std::printf("final loss against a failure-free run: n/a (the world changed from %u to %u ranks)\n",
                  spec.world_size(), report->world);
    }
  }
  // Every process this demo started ends here.
  client.reset();
  const auto wait_until = clock_type::now() + 30s;
  for (auto& d : daemons) {
    while (d.pid > 0 && clock_type::now() < wait_until) {
      if (waitpid(d.pid, nullptr, WNOHANG) == d.pid) {
        d.pid = -1;
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
  }
  stop_all();
  std::printf("all processes stopped · state kept in %s (rekindle status --config %s while a job runs)\n", data.c_str(),
              config_path.c_str());
  return code;
}

}  // namespace

void add_demo_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<demo_options>();
  auto* cmd = app.add_subcommand("demo", "Run a local 4-rank job on loopback, inject failures, show the recoveries");
  cmd->add_option("--data-dir", o->data_dir, "Where the cluster keeps its state (default: a new temporary directory)");
  cmd->add_option("--steps", o->steps, "Steps to train (default: the embedded configuration's 300)")
      ->check(apps::whole_number(1, 1'000'000'000'000));
  cmd->add_flag("--no-faults", [o](std::int64_t) { o->faults = false; }, "Train without injecting failures");
  cmd->callback([o, &exit_code] { exit_code = run_demo(*o); });
}

}  // namespace rekindle::apps
