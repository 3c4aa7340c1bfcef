// bench/recovery: how long a job stands still when one rank is SIGKILLed.
//
// For each world size it runs, on this host over loopback:
//   1. the job under rekindle (one rekindled, its worker processes), SIGKILLing one rank's worker
//      process at a time: the time from the kill to the first training step every rank finished
//      afterwards, and the steps of work lost;
//   2. TorchElastic (torchrun, gloo, torch.save checkpoints, --max_restarts) training the same
//      transformer shape with the same state size, killed the same way, when Debian's
//      python3-torch is installed (scripts/setup-deps);
//   3. the same torch script run unchanged by rekindle (job.command, "level 0"), killed the same
//      way: every rank's program started again from its torch.save checkpoint;
//   4. the same torch script on rekindle's worker API ("level 1", --api): only the killed rank's
//      program starts again, the others roll back from their snapshots in memory;
//   5. with --restart-all, the job of 1. under recovery.policy = "restart-all": every rank's
//      process started again, the newest checkpoint on disk restored (one at every anchor).
// What the service costs when nothing fails is bench/overhead's.
//
// usage: recovery [--ranks 2,4] [--state-mb 100] [--kills 5] [--snapshot-every 5] [--restart-all] [--json FILE]

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/admin_client.hpp"
#include "bench/local_job.hpp"
#include "bench/model_choice.hpp"
#include "common/logging.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "config/load.hpp"
#include "kernels/layout.hpp"
#include "storage/snapshot_slot.hpp"
#include "training/training_task.hpp"
#include "transport/rendezvous.hpp"
#include "transport/ring_communicator.hpp"

#ifndef REKINDLE_SOURCE_DIR
#define REKINDLE_SOURCE_DIR "."
#endif

namespace rekindle::bench {
namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct options {
  std::vector<int> ranks{2, 4};
  double state_mb = 100;
  int kills = 5;
  std::uint64_t snapshot_every = 5;
  std::string torch = "auto";
  bool restart_all = false;
  std::string json_out;
  std::string work_dir;
};

struct kill_result {
  double seconds = 0;  // kill → first step every rank finished afterwards
  double detect = 0;   // kill → the failure known to the supervisor (or agent)
  std::uint64_t lost = 0;
  json detail;
};

void print_kill(const char* system, int world, int k, int kills, const kill_result& r) {
  std::printf("  %-12s %d ranks  kill %d/%d: first step after %.3f s (detect %.3f s), %llu step%s lost\n", system,
              world, k + 1, kills, r.seconds, r.detect, static_cast<unsigned long long>(r.lost),
              r.lost == 1 ? "" : "s");
  std::fflush(stdout);
}

// `step_s`: the median period of the job's steps (rank 0's, all of them) once it is done.
std::vector<kill_result> kill_service(const model_choice& m, int world, const options& o, const fs::path& dir,
                                     double& step_s, bool restart_all = false) {
  std::vector<kill_result> out;
  // Restart-all restores from disk only: a checkpoint at every anchor (4 snapshots), the most
  // the checkpoint coordinator writes.
  cluster c(dir, restart_all ? config_text(m, world, 1000000, o.snapshot_every, dir / "data", {}, 1,
                                           "policy = \"restart-all\"\n")
                             : config_text(m, world, 1000000, o.snapshot_every, dir / "data"));
  std::uint64_t next_step = 3 * o.snapshot_every;
  for (int k = 0; k < o.kills; ++k) {
    const int victim = (k + 1) % world;
    json s = c.wait(
        [&](const json& st) {
          if (!training(st) || st.value("step", 0ull) < next_step)
            return false;
          for (const auto& r : st["recoveries"])
            if (!r.value("done", false))
              return false;
          std::string victim_node;
          for (const auto& r : st["ranks"]) {
            if (r.value("state", "") != "training")
              return false;
            if (r.value("rank", -1) == victim)
              victim_node = r.value("node", "");
          }
          // A failure hours apart finds the node's standby warm: so does each kill here (the
          // restart-all policy keeps none).
          for (const auto& n : st.value("nodes", json::array()))
            if (!restart_all && n.value("name", "") == victim_node && !n.value("standby_ready", false))
              return false;
          return true;
        },
        600s);
    if (s.is_null()) {
      std::cerr << "recovery: the job did not reach step " << next_step << "; see " << (dir / "n0.log").string()
                << "\n";
      break;
    }
    pid_t pid = 0;
    for (const auto& r : s["ranks"])
      if (r.value("rank", -1) == victim)
        pid = r.value("pid", 0);
    const std::size_t before = s["recoveries"].size();
    const std::int64_t killed_at = now_ns();
    if (pid <= 0 || ::kill(pid, SIGKILL) != 0) {
      std::cerr << "recovery: no process for rank " << victim << "\n";
      break;
    }
    s = c.wait([&](const json& st) { return st["recoveries"].size() > before && st["recoveries"].back().value("done", false); },
               600s);
    if (s.is_null()) {
      std::cerr << "recovery: the job did not recover; see " << (dir / "n0.log").string() << "\n";
      break;
    }
    const json rec = s["recoveries"].back();
    kill_result r;
    r.seconds = static_cast<double>(rec.value("first_step_at_ns", std::int64_t{0}) - killed_at) / 1e9;
    r.detect = static_cast<double>(rec.value("detected_at_ns", std::int64_t{0}) - killed_at) / 1e9;
    r.lost = rec.value("steps_lost", 0ull);
    r.detail = rec;
    out.push_back(r);
    print_kill(restart_all ? "restart-all" : "rekindle", world, k, o.kills, r);
    // The next kill at another phase of the snapshot cycle.
    next_step = s.value("step", 0ull) + 2 * o.snapshot_every + static_cast<std::uint64_t>(k) % o.snapshot_every;
  }
  if (const json report = c.status(true); !report.is_null() && !report.is_discarded()) {
    std::vector<double> steps;
    for (double v : report.value("step_seconds", std::vector<double>{}))
      if (v > 0)
        steps.push_back(v);
    step_s = median(steps);
  }
  c.stop();
  return out;
}

// The limit the phases are held against: one memcpy of a rank's state into touched memory, on
// this thread, the median of 5 (the restore is that copy, verified on the way).
double memcpy_seconds(std::size_t bytes) {
  std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2});
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = clock_type::now();
    std::memcpy(b.data(), a.data(), bytes);
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    a[static_cast<std::size_t>(i)] = b[bytes - 1 - static_cast<std::size_t>(i)];  // the copy is used
  }
  return median(t);
}

// Each phase of the service's recoveries (medians over the kills) against its limit.
json phases(const json& kills, double step_s, double memcpy_s, std::size_t state_bytes) {
  json j{{"state_bytes", state_bytes}, {"memcpy_s", memcpy_s}, {"step_s", step_s}};
  for (const char* phase : {"respawn_s", "rendezvous_s", "restore_s", "first_step_s", "between_s"}) {
    std::vector<double> v;
    for (const auto& d : kills.value("details", json::array()))
      v.push_back(d.value(phase, 0.0));
    j[phase] = median(v);
  }
  j["detect_s"] = kills.value("median_detect_s", 0.0);
  j["total_s"] = kills.value("median_s", 0.0);
  j["restore_limit_s"] = 3 * memcpy_s;
  j["first_step_limit_s"] = step_s;
  j["total_limit_s"] = 2 * step_s + 3 * memcpy_s;
  return j;
}

// ---- 4. TorchElastic --------------------------------------------------------------------------

const char* python = "/usr/bin/python3";

fs::path torch_script() { return fs::path{REKINDLE_SOURCE_DIR} / "bench" / "torch_elastic.py"; }

bool torch_available() {
  if (!fs::exists(torch_script()) || access(python, X_OK) != 0)
    return false;
  auto pid = spawn_child({python, "-c", "import torch.distributed.run"}, {.log = "/dev/null"});
  if (!pid)
    return false;
  auto st = wait_child(*pid, 120s);
  kill_child_group(*pid);
  return st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
}

// One line of a worker's log: restart count, step, time, and whether it marks a (re)start.
struct torch_line {
  int restart = 0;
  std::uint64_t step = 0;
  std::int64_t ns = 0;
  bool resumed = false;
};

std::vector<torch_line> torch_log(const fs::path& dir, int rank) {
  std::vector<torch_line> out;
  std::ifstream in(dir / ("rank-" + std::to_string(rank) + ".log"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    torch_line t;
    std::string word;
    if (!(l >> t.restart >> t.step >> t.ns))
      continue;  // a line being written
    t.resumed = static_cast<bool>(l >> word) && word == "resumed";
    out.push_back(t);
  }
  return out;
}

// Rank 0's steps before the first kill: the mean and median period of a step, and the median
// stall of a checkpoint (torch.save + fsync, or rk.snapshot), logged as "<kind> <step> <ns>".
json steady_state(const fs::path& dir) {
  std::ifstream in(dir / "rank-0.log");
  std::vector<double> periods, stalls;
  std::int64_t previous = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    if (line.starts_with("snapshot ") || line.starts_with("save ")) {
      std::string kind;
      std::uint64_t step = 0;
      std::int64_t ns = 0;
      if (l >> kind >> step >> ns)
        stalls.push_back(static_cast<double>(ns) / 1e9);
      continue;
    }
    torch_line t;
    if (!(l >> t.restart >> t.step >> t.ns))
      continue;
    std::string word;
    if (t.restart != 0)
      break;
    if (l >> word && word == "resumed") {
      previous = t.ns;
      continue;
    }
    if (previous != 0 && t.step > 1)  // the first step warms up
      periods.push_back(static_cast<double>(t.ns - previous) / 1e9);
    previous = t.ns;
  }
  return {{"steps", periods.size()},
          {"step_s_mean", mean(periods)},
          {"step_s_median", median(periods)},
          {"checkpoints", stalls.size()},
          {"checkpoint_stall_s_median", median(stalls)}};
}

// Who starts the torch script, and starts it again after a kill: torchrun (--max_restarts), or
// rekindle running it unchanged as job.command (every rank's program started again in a new
// epoch).
enum class torch_launcher { torchrun, rekindle, rekindle_api };

std::vector<kill_result> kill_torch(const model_choice& m, int world, const options& o, const fs::path& dir,
                                    torch_launcher launcher, json& steady) {
  fs::create_directories(dir);
  std::vector<kill_result> out;
  const std::string script = torch_script().string();
  const std::vector<std::string> script_args{script,
                                             "--dir",
                                             dir.string(),
                                             "--steps",
                                             "1000000",
                                             "--save-every",
                                             std::to_string(o.snapshot_every),
                                             "--width",
                                             std::to_string(m.width),
                                             "--layers",
                                             std::to_string(m.layers),
                                             "--heads",
                                             std::to_string(m.heads),
                                             "--seq-len",
                                             std::to_string(m.seq_len)};
  const char* name = launcher == torch_launcher::torchrun  ? "TorchElastic"
                     : launcher == torch_launcher::rekindle ? "rekindle L0"
                                                            : "rekindle L1";
  std::unique_ptr<cluster> service;
  expected<pid_t> pid = pid_t{-1};
  if (launcher == torch_launcher::torchrun) {
    std::vector<std::string> argv{python, script, "torchrun", "--standalone", "--nproc_per_node", std::to_string(world),
                                  "--max_restarts", std::to_string(o.kills + 1), "--monitor_interval", "0.1"};
    argv.insert(argv.end(), script_args.begin(), script_args.end());
    pid = spawn_child(argv, {.log = dir / "torchrun.log", .env = {{"OMP_NUM_THREADS", "1"}}});
  } else {
    std::string command = "command = [\"" + std::string{python} + "\"";
    for (const auto& a : script_args)
      command += ", \"" + a + "\"";
    if (launcher == torch_launcher::rekindle_api) {
      // The torch state (fp32 parameters and AdamW's two moments) is about the built-in model's.
      config::spec shape;
      shape.model.layers = m.layers;
      shape.model.heads = m.heads;
      shape.model.width = m.width;
      shape.model.seq_len = m.seq_len;
      command += ", \"--api\"]\nstate_bytes = " +
                 std::to_string(2 * training::state_bytes_for(shape, 1, 0) + (16u << 20)) + "\n";
    } else {
      command += "]\n";
    }
    command += "env = [\"OMP_NUM_THREADS=1\"]\n";
    service = std::make_unique<cluster>(dir, config_text(m, world, 1, o.snapshot_every, dir / "data", command));
    pid = service->pid();
  }
  if (!pid) {
    std::cerr << "recovery: cannot start torchrun: " << pid.error().message() << "\n";
    return out;
  }
  const auto stop = [&] {
    service.reset();
    if (launcher == torch_launcher::torchrun)
      kill_child_group(*pid);
    for (int r = 0; r < world; ++r) {  // workers are in torchrun's group; be sure
      std::ifstream in(dir / ("rank-" + std::to_string(r) + ".pid"));
      pid_t w = 0;
      if (in >> w && w > 0)
        ::kill(w, SIGKILL);
    }
  };
  // Until every rank logged a finished step of restart `restart` at `step` or beyond.
  const auto wait_for = [&](int restart, std::uint64_t step) {
    const auto until = clock_type::now() + 600s;
    while (clock_type::now() < until) {
      bool all = true;
      for (int r = 0; r < world && all; ++r) {
        const auto log = torch_log(dir, r);
        all = std::any_of(log.begin(), log.end(),
                          [&](const torch_line& t) { return t.restart == restart && !t.resumed && t.step >= step; });
      }
      if (all)
        return true;
      if (waitpid(*pid, nullptr, WNOHANG) == *pid)
        return false;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  };
  std::uint64_t next_step = 3 * o.snapshot_every;
  for (int k = 0; k < o.kills; ++k) {
    const int victim = (k + 1) % world;
    if (!wait_for(k, next_step)) {
      std::cerr << "recovery: " << name << " did not reach step " << next_step << "; see " << dir.string() << "\n";
      break;
    }
    // As for the built-in worker: a failure hours apart finds the node's standby of the program warm.
    if (launcher == torch_launcher::rekindle_api &&
        service
            ->wait(
                [](const json& st) {
                  const auto nodes = st.value("nodes", json::array());
                  return !nodes.empty() && std::all_of(nodes.begin(), nodes.end(), [](const json& n) {
                    return n.value("standby_ready", false);
                  });
                },
                600s)
            .is_null()) {
      std::cerr << "recovery: " << name << ": no standby of the program became ready; see " << dir.string() << "\n";
      break;
    }
    pid_t w = 0;
    std::ifstream(dir / ("rank-" + std::to_string(victim) + ".pid")) >> w;
    const std::int64_t killed_at = now_ns();
    if (w <= 0 || ::kill(w, SIGKILL) != 0) {
      std::cerr << "recovery: no " << name << " worker for rank " << victim << "\n";
      break;
    }
    if (!wait_for(k + 1, 0)) {
      std::cerr << "recovery: " << name << " did not restart; see " << dir.string() << "\n";
      break;
    }
    kill_result r;
    std::uint64_t reached = 0, resumed = 0;
    std::int64_t first = 0;
    for (int rank = 0; rank < world; ++rank) {
      std::int64_t rank_first = 0;
      for (const auto& t : torch_log(dir, rank)) {
        if (t.restart == k && !t.resumed)
          reached = std::max(reached, t.step);
        if (t.restart == k + 1 && t.resumed)
          resumed = t.step;
        if (t.restart == k + 1 && !t.resumed && rank_first == 0)
          rank_first = t.ns;
      }
      first = std::max(first, rank_first);
    }
    r.seconds = static_cast<double>(first - killed_at) / 1e9;
    r.lost = reached - std::min(reached, resumed);
    r.detail = {{"reached_step", reached}, {"resumed_step", resumed}};
    out.push_back(r);
    print_kill(name, world, k, o.kills, r);
    next_step = resumed + 2 * o.snapshot_every + static_cast<std::uint64_t>(k) % o.snapshot_every;
  }
  stop();
  steady = steady_state(dir);
  return out;
}

// ---- the report -------------------------------------------------------------------------------

json summary(const std::vector<kill_result>& v) {
  std::vector<double> s, d;
  std::uint64_t lost = 0;
  for (const auto& r : v) {
    s.push_back(r.seconds);
    d.push_back(r.detect);
    lost = std::max(lost, r.lost);
  }
  json j{{"kills", v.size()}, {"median_s", median(s)}, {"max_lost_steps", lost}, {"seconds", s}};
  if (!s.empty()) {
    j["min_s"] = *std::min_element(s.begin(), s.end());
    j["max_s"] = *std::max_element(s.begin(), s.end());
    j["median_detect_s"] = median(d);
  }
  json details = json::array();
  for (const auto& r : v)
    details.push_back(r.detail);
  j["details"] = details;
  return j;
}

// "0.512 s [0.488–0.601]": the median and range of a summary's kills, or "-".
std::string cell(const json& s) {
  if (s.is_null() || s.value("kills", 0) == 0)
    return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.3f s [%.3f–%.3f]", s.value("median_s", 0.0), s.value("min_s", 0.0),
                s.value("max_s", 0.0));
  return b;
}

int run(const options& o) {
  init_logging("recovery", log_level::error);
  const fs::path work = make_work_dir(o.work_dir, "recovery");
  if (work.empty())
    return 1;
  const model_choice m = choose_model(o.state_mb * 1e6);
  const bool torch = o.torch == "on" || (o.torch == "auto" && torch_available());
  if (o.torch == "on" && !torch_available()) {
    std::cerr << "recovery: --torch on, but python3 cannot import torch (scripts/setup-deps)\n";
    return 1;
  }
  std::printf("recovery: transformer %u layers × width %u (%.1f M params, %.0f MB of parameters and AdamW moments), "
              "%u tokens per rank and step, snapshot every %llu steps, CPU, loopback\n",
              m.layers, m.width, static_cast<double>(m.params) / 1e6, m.state_bytes() / 1e6, m.seq_len,
              static_cast<unsigned long long>(o.snapshot_every));
  if (!torch)
    std::printf("  TorchElastic baseline skipped: %s\n", o.torch == "off" ? "--torch off"
                                                                      : "python3-torch is not installed (scripts/setup-deps)");
  std::printf("  work directory: %s\n", work.c_str());
  std::fflush(stdout);

  json results = json::object();
  results["model"] = {{"layers", m.layers}, {"width", m.width}, {"params", m.params}, {"state_bytes", m.state_bytes()}};
  results["snapshot_every"] = o.snapshot_every;
  for (int world : o.ranks) {
    const std::string w = std::to_string(world);
    json jw;
    double step_s = 0;
    jw["rekindle"] = summary(kill_service(m, world, o, work / ("kill-" + w), step_s));
    {
      config::spec shape;
      shape.model.layers = m.layers;
      shape.model.heads = m.heads;
      shape.model.width = m.width;
      shape.model.seq_len = m.seq_len;
      const auto bytes = training::state_bytes_for(shape, world, 0);
      jw["phases"] = phases(jw["rekindle"], step_s, memcpy_seconds(bytes), bytes);
    }
    if (o.restart_all) {
      double ra_step_s = 0;
      jw["restart_all"] = summary(kill_service(m, world, o, work / ("restart-all-" + w), ra_step_s, true));
    }
    if (torch) {
      const auto measure = [&](const char* key, const char* folder, torch_launcher launcher) {
        json steady;
        jw[key] = summary(kill_torch(m, world, o, work / (folder + w), launcher, steady));
        jw[key]["steady"] = steady;
      };
      measure("torchelastic", "torch-", torch_launcher::torchrun);
      measure("rekindle_level0", "torch-l0-", torch_launcher::rekindle);
      measure("rekindle_level1", "torch-l1-", torch_launcher::rekindle_api);
    }
    results[w] = jw;
  }

  std::printf("\nSIGKILL of one rank → first step every rank finished afterwards (median [min–max] of %d kills)\n",
              o.kills);
  std::printf("%-6s %-26s %-26s %-9s %s\n", "ranks", "rekindle", "TorchElastic", "speedup", "lost (max)");
  for (int world : o.ranks) {
    const json& jw = results[std::to_string(world)];
    const json rk = jw.value("rekindle", json{}), te = jw.value("torchelastic", json{});
    std::string speedup = "-";
    if (!te.is_null() && rk.value("median_s", 0.0) > 0 && te.value("median_s", 0.0) > 0) {
      char b[32];
      std::snprintf(b, sizeof b, "%.1fx", te.value("median_s", 0.0) / rk.value("median_s", 0.0));
      speedup = b;
    }
    char lost[32];
    std::snprintf(lost, sizeof lost, "%llu / %s", static_cast<unsigned long long>(rk.value("max_lost_steps", 0ull)),
                  te.is_null() ? "-" : std::to_string(te.value("max_lost_steps", 0ull)).c_str());
    std::printf("%-6d %-26s %-26s %-9s %s\n", world, cell(rk).c_str(), cell(te).c_str(), speedup.c_str(), lost);
  }
  std::printf("(lost: steps of work redone, rekindle / TorchElastic)\n");
  if (o.restart_all) {
    std::printf("\nThe same job under recovery.policy = \"restart-all\" (every process started again, the newest "
                "checkpoint on disk restored)\n%-6s %-26s %-26s %-9s %s\n",
                "ranks", "in place", "restart-all", "ratio", "lost (max)");
    for (int world : o.ranks) {
      const json& jw = results[std::to_string(world)];
      const json rk = jw.value("rekindle", json{}), ra = jw.value("restart_all", json{});
      char ratio[32] = "-";
      if (rk.value("median_s", 0.0) > 0 && ra.value("median_s", 0.0) > 0)
        std::snprintf(ratio, sizeof ratio, "%.1fx", ra.value("median_s", 0.0) / rk.value("median_s", 0.0));
      std::printf("%-6d %-26s %-26s %-9s %llu / %llu\n", world, cell(rk).c_str(), cell(ra).c_str(), ratio,
                  static_cast<unsigned long long>(rk.value("max_lost_steps", 0ull)),
                  static_cast<unsigned long long>(ra.value("max_lost_steps", 0ull)));
    }
  }
  std::printf("\nrekindle's recoveries phase by phase (medians over the kills) against their limits: restore within 3x "
              "a memcpy of the rank's state, the first step within a normal step, kill to the first step within 2 "
              "steps + 3 memcpys\n");
  std::printf("%-6s %-9s %-9s %-8s %-8s %-8s %-10s %-18s %-18s %-8s %s\n", "ranks", "state MB", "memcpy", "step",
              "detect", "respawn", "rendezvous", "restore (limit)", "first step (limit)", "between",
              "kill → step (limit)");
  for (int world : o.ranks) {
    const json& p = results[std::to_string(world)]["phases"];
    const auto ms = [&](const char* key) { return 1e3 * p.value(key, 0.0); };
    char restore[40], first[40], total[40];
    std::snprintf(restore, sizeof restore, "%.1f (%.1f) %s", ms("restore_s"), ms("restore_limit_s"),
                  ms("restore_s") <= ms("restore_limit_s") ? "ok" : "over");
    std::snprintf(first, sizeof first, "%.1f (%.1f) %s", ms("first_step_s"), ms("first_step_limit_s"),
                  ms("first_step_s") <= ms("first_step_limit_s") ? "ok" : "over");
    std::snprintf(total, sizeof total, "%.1f (%.1f) %s", ms("total_s"), ms("total_limit_s"),
                  ms("total_s") <= ms("total_limit_s") ? "ok" : "over");
    std::printf("%-6d %-9.0f %-9.2f %-8.1f %-8.1f %-8.1f %-10.1f %-18s %-18s %-8.1f %s\n", world,
                p.value("state_bytes", 0.0) / 1e6, ms("memcpy_s"), ms("step_s"), ms("detect_s"), ms("respawn_s"),
                ms("rendezvous_s"), restore, first, ms("between_s"), total);
  }
  std::printf("(milliseconds; detect is from the kill to the supervisor's detection, as this benchmark sees it; "
              "between: the messages between the phases)\n");
  if (torch) {
    std::printf("\nThe same torch script, SIGKILL of one rank → first step every rank finished afterwards (median "
                "[min–max])\n%-6s %-26s %-26s %-26s %s\n",
                "ranks", "torchrun --max_restarts", "rekindle job.command (L0)", "rekindle worker API (L1)",
                "lost (max)");
    for (int world : o.ranks) {
      const json& jw = results[std::to_string(world)];
      const json te = jw.value("torchelastic", json{}), l0 = jw.value("rekindle_level0", json{}),
                 l1 = jw.value("rekindle_level1", json{});
      std::printf("%-6d %-26s %-26s %-26s %llu / %llu / %llu\n", world, cell(te).c_str(), cell(l0).c_str(),
                  cell(l1).c_str(), static_cast<unsigned long long>(te.value("max_lost_steps", 0ull)),
                  static_cast<unsigned long long>(l0.value("max_lost_steps", 0ull)),
                  static_cast<unsigned long long>(l1.value("max_lost_steps", 0ull)));
    }
    std::printf("\nThe same torch script without failures (rank 0's steps before the first kill; a checkpoint every "
                "%llu steps)\n%-6s %-34s %-34s %s\n",
                static_cast<unsigned long long>(o.snapshot_every), "ranks", "torch.save+fsync: stall, step mean",
                "worker API snapshot: stall, step mean", "step mean L1 vs torchrun");
    for (int world : o.ranks) {
      const json& jw = results[std::to_string(world)];
      const json te = jw.value("torchelastic", json{}).value("steady", json{}),
                 l1 = jw.value("rekindle_level1", json{}).value("steady", json{});
      const auto pair = [](const json& s) {
        char b[64];
        std::snprintf(b, sizeof b, "%.1f ms, %.1f ms", 1e3 * s.value("checkpoint_stall_s_median", 0.0),
                      1e3 * s.value("step_s_mean", 0.0));
        return std::string{b};
      };
      const double te_step = te.value("step_s_mean", 0.0), l1_step = l1.value("step_s_mean", 0.0);
      std::printf("%-6d %-34s %-34s %+.1f%%\n", world, pair(te).c_str(), pair(l1).c_str(),
                  te_step > 0 ? 100 * (l1_step - te_step) / te_step : 0.0);
    }
  }
  if (!o.json_out.empty())
    std::ofstream(o.json_out) << results.dump(2) << "\n";
  if (o.work_dir.empty())
    fs::remove_all(work);
  return 0;
}

}  // namespace
}  // namespace rekindle::bench

int main(int argc, char** argv) {
  rekindle::keep_large_frees_in_process();  // as the service's processes
  rekindle::bench::options o;
  CLI::App app{"Recovery from a SIGKILLed rank under rekindle and TorchElastic"};
  app.add_option("--ranks", o.ranks, "World sizes to measure")->delimiter(',');
  app.add_option("--state-mb", o.state_mb, "Training state (parameters and AdamW moments) in MB")->check(CLI::PositiveNumber);
  app.add_option("--kills", o.kills, "Ranks killed per world size and system")->check(CLI::Range(1, 100));
  app.add_option("--snapshot-every", o.snapshot_every, "Steps between snapshots (and TorchElastic checkpoints)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--torch", o.torch, "TorchElastic baseline: auto (when python3-torch is installed), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--restart-all", o.restart_all,
               "Also kill ranks of the same job under recovery.policy = \"restart-all\" (every process started "
               "again, restored from disk)");
  app.add_option("--json", o.json_out, "Also write the results as JSON to this file");
  app.add_option("--work-dir", o.work_dir, "Keep every run's files here (default: a temporary directory, removed)");
  CLI11_PARSE(app, argc, argv);
  return rekindle::bench::run(o);
}
