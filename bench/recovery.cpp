// bench/recovery: how long a job stands still when one rank is SIGKILLed, and what the service
// costs when nothing fails.
//
// For each world size it runs, on this host over loopback:
//   1. the bare training loop: the ranks as plain processes (ring communicator, the same
//      training task), nothing else;
//   2. the same job under rekindle (one rekindled, its worker processes), failure-free; the
//      difference in mean step time is the service's overhead (heartbeats, progress reports,
//      snapshots);
//   3. the job under rekindle again, SIGKILLing one rank's worker process at a time: the time
//      from the kill to the first training step every rank finished afterwards, and the steps
//      of work lost;
//   4. TorchElastic (torchrun, gloo, torch.save checkpoints, --max_restarts) training the same
//      transformer shape with the same state size, killed the same way, when Debian's
//      python3-torch is installed (scripts/setup-deps);
//   5. the same torch script run unchanged by rekindle (job.command, "level 0"), killed the same
//      way: every rank's program started again from its torch.save checkpoint;
//   6. the same torch script on rekindle's worker API ("level 1", --api): only the killed rank's
//      program starts again, the others roll back from their snapshots in memory.
//
// usage: recovery [--ranks 2,4] [--state-mb 100] [--kills 5] [--snapshot-every 5] [--json FILE]

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

namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct options {
  std::vector<int> ranks{2, 4};
  double state_mb = 100;
  int kills = 5;
  std::uint64_t snapshot_every = 5;
  std::uint64_t overhead_steps = 60;
  int overhead_runs = 2;
  std::string torch = "auto";
  std::string json_out;
  std::string work_dir;
};

// One node "n0" with every rank; each rank runs one micro-batch of one sequence a step. `job_keys`:
// more of [job] (a job.command).
std::string config_text(const model_choice& m, int world, std::uint64_t steps, std::uint64_t snapshot_every,
                        const fs::path& data, const std::string& job_keys = {}) {
  std::ostringstream t;
  t << "[cluster]\nname = \"bench\"\nsupervisor = \"n0\"\nranks_per_node = " << world << "\n"
    << "\n[[nodes]]\nname = \"n0\"\nhost = \"127.0.0.1\"\nport = 0\n"
    << "\n[job]\nname = \"recovery\"\nsteps = " << steps << "\nglobal_batch = " << world
    << "\nmicro_batch = 1\nseed = 1\n" << job_keys
    << "\n[model]\nlayers = " << m.layers << "\nheads = " << m.heads << "\nwidth = " << m.width
    << "\nseq_len = " << m.seq_len << "\n"
    << "\n[checkpoint]\nsnapshot_every = " << snapshot_every << "\n"
    << "\n[timeouts]\nheartbeat = \"100ms\"\nnode = \"3s\"\nhang = \"30s\"\ncollective = \"10s\"\n"
    << "\n[transport]\nnet_devices = \"lo\"\n"
    << "\n[daemon]\ndata_dir = \"" << data.string() << "\"\n";
  return t.str();
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}


std::int64_t now_ns() { return clock_type::now().time_since_epoch().count(); }

fs::path self_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

// Waits for a child to exit, at most `timeout`; its wait status, or nullopt.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = clock_type::now() + timeout;
  while (clock_type::now() < until) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return st;
    std::this_thread::sleep_for(20ms);
  }
  return std::nullopt;
}

// ---- 1. the bare loop -------------------------------------------------------------------------

// One rank of the bare loop; rank 0 writes {"step_seconds": [...]} (each step from the end of the
// one before, as the service's workers report them) to DIR/bare.json.
int run_bare_rank(const fs::path& config_path, int rank, int world, const fs::path& dir) {
  auto spec = config::load(config_path);
  if (!spec) {
    std::cerr << spec.error().message() << "\n";
    return 1;
  }
  transport::ring_options ro;
  ro.timeout = spec->timeouts.collective;
  ro.chunk_size = spec->transport.chunk_size;
  ro.net_devices = spec->transport.net_devices;
  auto comm = transport::ring_communicator::create(rank, world, ro);
  if (!comm) {
    std::cerr << "rank " << rank << ": " << comm.error().message() << "\n";
    return 1;
  }
  auto addresses = transport::file_rendezvous(dir, rank, world, (*comm)->address(), 120s);
  if (!addresses || !(*comm)->connect(*addresses).ok()) {
    std::cerr << "rank " << rank << ": rendezvous or connect failed\n";
    return 1;
  }
  auto task = training::make_training_task(*spec, rank, world, **comm);
  if (!task) {
    std::cerr << "rank " << rank << ": " << task.error().message() << "\n";
    return 1;
  }
  std::vector<double> seconds;
  auto previous = clock_type::now();
  while ((*task)->current_step().value() < (*task)->total_steps()) {
    auto r = (*task)->step();
    if (!r) {
      std::cerr << "rank " << rank << ": " << r.error().message() << "\n";
      return 1;
    }
    const auto end = clock_type::now();
    seconds.push_back(std::chrono::duration<double>(end - previous).count());
    previous = end;
  }
  if (rank == 0)
    std::ofstream(dir / "bare.json") << json{{"step_seconds", seconds}}.dump();
  return 0;
}

std::vector<double> run_bare(const fs::path& config_path, int world, const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    auto pid = spawn_child({(self_dir() / "recovery").string(), "--bare-rank", std::to_string(r), "--world",
                            std::to_string(world), "--config", config_path.string(), "--dir", dir.string()},
                           {.log = dir / ("rank-" + std::to_string(r) + ".log")});
    if (pid)
      pids.push_back(*pid);
  }
  bool ok = pids.size() == static_cast<std::size_t>(world);
  for (pid_t p : pids) {
    auto st = wait_child(p, 600s);
    ok = ok && st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
    kill_child_group(p);
  }
  if (!ok) {
    std::cerr << "recovery: the bare loop failed; see " << dir.string() << "/rank-*.log\n";
    return {};
  }
  std::ifstream in(dir / "bare.json");
  return json::parse(in).at("step_seconds").get<std::vector<double>>();
}

// ---- 2, 3. the service ------------------------------------------------------------------------

// A one-node rekindle cluster: the daemon (and with it its workers) dies with this object.
class cluster {
 public:
  cluster(const fs::path& dir, const std::string& config) : dir_(dir) {
    fs::create_directories(dir_ / "data");
    config_ = dir_ / "cluster.toml";
    std::ofstream(config_) << config;
    auto spec = config::load(config_);
    if (!spec) {
      std::cerr << spec.error().message() << "\n";
      std::exit(1);
    }
    spec_ = *spec;
    auto pid = spawn_child({(self_dir().parent_path() / "bin" / "rekindled").string(), "--config", config_.string(),
                            "--node", "n0", "--exit-when-done"},
                           {.log = dir_ / "n0.log"});
    if (!pid) {
      std::cerr << "recovery: " << pid.error().message() << "\n";
      std::exit(1);
    }
    pid_ = *pid;
  }
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;
  /// The daemon's pid (-1 once it was reaped).
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  ~cluster() {
    client_.reset();
    kill_child_group(pid_);
    (void)storage::snapshot_slot::remove_with_prefix(
        storage::snapshot_slot::name_prefix(dir_ / "data" / "n0", spec_.job.name));
  }

  // The supervisor's status, or null while it cannot be had.
  json status(bool full = false) {
    if (!client_) {
      auto c = actors::admin_client::connect(spec_, {}, 2s);
      if (!c)
        return nullptr;
      client_ = std::move(*c);
    }
    auto r = client_->call(actors::admin_status{0, full}, 10s);
    if (!r)
      return nullptr;
    return json::parse(r->json, nullptr, false);
  }

  // Polls the status until `pred` holds; the status then, or null after `timeout`.
  json wait(const std::function<bool(const json&)>& pred, std::chrono::seconds timeout) {
    const auto until = clock_type::now() + timeout;
    while (clock_type::now() < until) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return nullptr;
      }
      json s = status();
      if (!s.is_null() && !s.is_discarded() && pred(s))
        return s;
      std::this_thread::sleep_for(20ms);
    }
    return nullptr;
  }

  void stop() {
    if (client_)
      (void)client_->call(actors::admin_stop{}, 10s);
    client_.reset();
    if (pid_ > 0 && wait_child(pid_, 60s))
      pid_ = -1;
  }

  [[nodiscard]] const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  fs::path config_;
  config::spec spec_;
  pid_t pid_ = -1;
  std::unique_ptr<actors::admin_client> client_;
};

bool training(const json& s) { return s.value("state", "") == "running"; }

// Step times of a failure-free job under rekindle (rank 0's, from the report).
std::vector<double> run_service(const model_choice& m, int world, std::uint64_t steps, std::uint64_t snapshot_every,
                                const fs::path& dir) {
  cluster c(dir, config_text(m, world, steps, snapshot_every, dir / "data"));
  json report;
  if (c.wait([&](const json& s) { return s.value("state", "") == "completed"; }, 600s).is_null() ||
      (report = c.status(true)).is_null()) {
    std::cerr << "recovery: the failure-free job did not complete; see " << (dir / "n0.log").string() << "\n";
    return {};
  }
  c.stop();
  return report.value("step_seconds", std::vector<double>{});
}

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

std::vector<kill_result> kill_service(const model_choice& m, int world, const options& o, const fs::path& dir) {
  std::vector<kill_result> out;
  cluster c(dir, config_text(m, world, 1000000, o.snapshot_every, dir / "data"));
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
          // A failure hours apart finds the node's standby warm: so does each kill here.
          for (const auto& n : st.value("nodes", json::array()))
            if (n.value("name", "") == victim_node && !n.value("standby_ready", false))
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
    print_kill("rekindle", world, k, o.kills, r);
    // The next kill at another phase of the snapshot cycle.
    next_step = s.value("step", 0ull) + 2 * o.snapshot_every + static_cast<std::uint64_t>(k) % o.snapshot_every;
  }
  c.stop();
  return out;
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
  fs::path work;
  if (o.work_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "rekindle-bench-recovery-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "recovery: cannot create a temporary directory\n";
      return 1;
    }
    work = pattern;
  } else {
    work = fs::absolute(o.work_dir);
    fs::create_directories(work);
  }
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
    std::printf("  TorchElastic baseline skipped: python3-torch is not installed (scripts/setup-deps)\n");
  std::printf("  work directory: %s\n", work.c_str());
  std::fflush(stdout);

  json results = json::object();
  results["model"] = {{"layers", m.layers}, {"width", m.width}, {"params", m.params}, {"state_bytes", m.state_bytes()}};
  results["snapshot_every"] = o.snapshot_every;
  for (int world : o.ranks) {
    const std::string w = std::to_string(world);
    json jw;
    // Failure-free: bare loop and service, alternating; the best mean of each.
    const std::size_t skip = 2 * o.snapshot_every;  // warm-up steps, left out of the means
    std::vector<double> bare_means, service_means;
    for (int run = 0; run < o.overhead_runs; ++run) {
      const fs::path bdir = work / ("bare-" + w + "-" + std::to_string(run));
      fs::create_directories(bdir);
      const fs::path cfg = bdir / "job.toml";
      std::ofstream(cfg) << config_text(m, world, o.overhead_steps, o.snapshot_every, bdir / "unused");
      const auto bare = run_bare(cfg, world, bdir);
      const auto service =
          run_service(m, world, o.overhead_steps, o.snapshot_every, work / ("service-" + w + "-" + std::to_string(run)));
      if (bare.size() <= skip || service.size() <= skip)
        return 1;
      bare_means.push_back(mean({bare.begin() + static_cast<std::ptrdiff_t>(skip), bare.end()}));
      service_means.push_back(mean({service.begin() + static_cast<std::ptrdiff_t>(skip), service.end()}));
      std::printf("  failure-free %d ranks, run %d: bare loop %.1f ms/step, under rekindle %.1f ms/step\n", world,
                  run + 1, bare_means.back() * 1e3, service_means.back() * 1e3);
      std::fflush(stdout);
    }
    const double bare = *std::min_element(bare_means.begin(), bare_means.end());
    const double service = *std::min_element(service_means.begin(), service_means.end());
    jw["bare_step_s"] = bare;
    jw["service_step_s"] = service;
    jw["overhead"] = service / bare - 1;
    jw["rekindle"] = summary(kill_service(m, world, o, work / ("kill-" + w)));
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
  std::printf("%-6s %-26s %-26s %-9s %-12s %s\n", "ranks", "rekindle", "TorchElastic", "speedup", "lost (max)",
              "overhead");
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
    char overhead[64];
    std::snprintf(overhead, sizeof overhead, "%+.1f%% (%.1f vs %.1f ms/step)", 100 * jw.value("overhead", 0.0),
                  1e3 * jw.value("service_step_s", 0.0), 1e3 * jw.value("bare_step_s", 0.0));
    std::printf("%-6d %-26s %-26s %-9s %-12s %s\n", world, cell(rk).c_str(), cell(te).c_str(), speedup.c_str(), lost,
                overhead);
  }
  std::printf("(lost: steps of work redone, rekindle / TorchElastic; overhead: mean step time under rekindle against "
              "the bare loop)\n");
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
  rekindle::keep_large_frees_in_process();  // as the service's processes (the bare loop runs here)
  rekindle::bench::options o;
  int bare_rank = -1, world = 0;
  std::string config, dir;
  CLI::App app{"Recovery from a SIGKILLed rank under rekindle and TorchElastic; failure-free overhead"};
  app.add_option("--ranks", o.ranks, "World sizes to measure")->delimiter(',');
  app.add_option("--state-mb", o.state_mb, "Training state (parameters and AdamW moments) in MB")->check(CLI::PositiveNumber);
  app.add_option("--kills", o.kills, "Ranks killed per world size and system")->check(CLI::Range(1, 100));
  app.add_option("--snapshot-every", o.snapshot_every, "Steps between snapshots (and TorchElastic checkpoints)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--overhead-steps", o.overhead_steps, "Steps of each failure-free run")->check(CLI::Range(20, 100000));
  app.add_option("--overhead-runs", o.overhead_runs, "Failure-free runs of each kind (the best counts)")
      ->check(CLI::Range(1, 20));
  app.add_option("--torch", o.torch, "TorchElastic baseline: auto (when python3-torch is installed), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--json", o.json_out, "Also write the results as JSON to this file");
  app.add_option("--work-dir", o.work_dir, "Keep every run's files here (default: a temporary directory, removed)");
  app.add_option("--bare-rank", bare_rank)->group("");
  app.add_option("--world", world)->group("");
  app.add_option("--config", config)->group("");
  app.add_option("--dir", dir)->group("");
  CLI11_PARSE(app, argc, argv);
  if (bare_rank >= 0)
    return rekindle::bench::run_bare_rank(config, bare_rank, world, dir);
  return rekindle::bench::run(o);
}
