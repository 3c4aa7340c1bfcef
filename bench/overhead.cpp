// bench/overhead: what the service costs a job when nothing fails, measured so that the figure
// can be trusted on a noisy machine.
//
// For each world size, rounds of three runs of the same job on this host over loopback:
//   bare     the ranks as plain processes (the ring communicator and the training task, nothing
//            else: no daemon, no snapshots), the gradients in the ring's shared buffers as the
//            worker places them;
//   private  (only when --kinds names it) bare with the gradients in each rank's own memory:
//            the ring carries them instead of the ranks reading them in place;
//   service  the job under one rekindled: heartbeats, progress reports, a snapshot every
//            --snapshot-every steps into the node's memory, no checkpoint on disk;
//   persist  the same with a checkpoint on disk every --persist-every snapshots;
//   sync     (only when --kinds names it) service with checkpoint.overlap off: each snapshot
//            stops the step for its copy instead of running beside the next step's passes.
// The order alternates from round to round (bare, service, persist; then persist, service,
// bare), so a drift of the machine hits every kind alike. Each run reports, over its steps after
// --warmup: the mean period of rank 0's training loop (wall time from the end of one step to the
// end of the next: the snapshot and everything else in it), and the CPU time per step of every
// process of the job (the ranks, and the daemon with its standbys under the service): their CPU
// seconds per second between --warmup and the run's last fifth, times the mean step. Each kind's
// overhead is the median over the rounds of its ratio to the bare run of the same round, with
// the middle half and the range of those ratios. Each run also counts its processes' wake-ups per
// step (the times their threads blocked and were woken: messages, timers, locks), a figure that
// the machine's noise hardly moves, to show what the control plane's traffic costs. When the middle half straddles the goal the
// machine was too noisy to judge it, and the benchmark says so.
//
// usage: overhead [--ranks 2,4] [--rounds 10] [--steps 150] [--warmup 20] [--snapshot-every 5]
//                 [--persist-every 10] [--state-mb 100] [--goal 0.02] [--kinds bare,service,persist]
//                 [--json FILE]

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

#include "bench/local_job.hpp"
#include "common/logging.hpp"
#include "common/memory.hpp"
#include "kernels/blas_core.hpp"

namespace rekindle::bench {
namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct options {
  std::vector<int> ranks{2, 4};
  int rounds = 10;
  std::uint64_t steps = 150;
  std::uint64_t warmup = 20;
  std::uint64_t snapshot_every = 5;
  std::uint64_t persist_every = 10;
  double state_mb = 100;
  double goal = 0.02;
  std::vector<std::string> kinds{"bare", "service", "persist"};
  std::string json_out;
  std::string work_dir;
};

enum class kind { bare, service, persist, sync, private_buffers };
const char* name_of(kind k) {
  return k == kind::bare      ? "bare"
         : k == kind::service ? "service"
         : k == kind::persist ? "persist"
         : k == kind::sync    ? "sync"
                              : "private";
}
std::vector<kind> kinds_of(const options& o) {
  std::vector<kind> out{kind::bare};  // always: the others are measured against it
  for (const kind k : {kind::service, kind::persist, kind::sync, kind::private_buffers})
    if (std::find(o.kinds.begin(), o.kinds.end(), name_of(k)) != o.kinds.end())
      out.push_back(k);
  return out;
}

// One run's figures: seconds per step, wall (rank 0's loop period) and CPU (every process of the
// job, at its rate while the sampler watched), and the job's wake-ups per step.
struct run_figures {
  double wall = 0;
  double cpu = 0;
  double wakeups = 0;
  bool ok = false;
  /// Steps after the warm-up that took more than twice the median step: (step, seconds). A
  /// one-off cost inside a step (the first snapshot into each half of a slot once took 160 ms
  /// against 38) shows here before it shows in the mean.
  std::vector<std::pair<std::uint64_t, double>> slow_steps;
};

// The steps of `seconds` (step i + 1 at index i) after the first `skip` that took more than twice
// the median of those steps.
std::vector<std::pair<std::uint64_t, double>> slow_steps_of(const std::vector<double>& seconds, std::uint64_t skip) {
  std::vector<std::pair<std::uint64_t, double>> out;
  if (seconds.size() <= skip)
    return out;
  std::vector<double> kept(seconds.begin() + static_cast<std::ptrdiff_t>(skip), seconds.end());
  std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(kept.size() / 2), kept.end());
  const double limit = 2 * kept[kept.size() / 2];
  for (std::size_t i = skip; i < seconds.size(); ++i)
    if (seconds[i] > limit)
      out.emplace_back(i + 1, seconds[i]);
  return out;
}

// Samples what the job's processes used (CPU seconds, wake-ups), polled every 100 ms, each time the
// step seen (rank 0's) changes between `from` and `to`.
class usage_sampler {
 public:
  usage_sampler(std::function<tree_usage()> usage, std::function<std::uint64_t()> step, std::uint64_t from,
                std::uint64_t to)
      : usage_(std::move(usage)), step_(std::move(step)), from_(from), to_(to) {}

  // A sample is taken when the step seen changes, inside [from, to).
  void sample() {
    const auto s = step_();
    if (s < from_ || s >= to_ || (last_ && s == last_->step) || (first_ && s == first_->step))
      return;
    const sample_at at{s, clock_type::now(), usage_()};
    if (!first_)
      first_ = at;
    else
      last_ = at;
  }

  // The job's use while it trained (per second between the first and last sample) times a step's
  // wall time: where the step seen lags the step trained (a service's reports wait for the
  // worker's heartbeat, then the agent's, then status.json's next write), a figure per step counted
  // would be off by the lag at either end; the rate over a window inside the training is not.
  [[nodiscard]] double cpu_per_step(double step_seconds) const {
    return seconds() <= 0 ? 0 : (last_->usage.cpu_seconds - first_->usage.cpu_seconds) / seconds() * step_seconds;
  }
  [[nodiscard]] double wakeups_per_step(double step_seconds) const {
    return seconds() <= 0
               ? 0
               : static_cast<double>(last_->usage.wakeups - first_->usage.wakeups) / seconds() * step_seconds;
  }

 private:
  struct sample_at {
    std::uint64_t step;
    clock_type::time_point at;
    tree_usage usage;
  };
  [[nodiscard]] double seconds() const {
    return first_ && last_ ? std::chrono::duration<double>(last_->at - first_->at).count() : 0;
  }

  std::function<tree_usage()> usage_;
  std::function<std::uint64_t()> step_;
  std::uint64_t from_, to_;
  std::optional<sample_at> first_, last_;
};

// The last step a sample may see: a fifth of the run before its end, so that the window ends
// while the job still trains even where the step seen lags the step trained (by up to a second in
// a service: a worker's heartbeat every 750 ms in the benchmark's configuration, then the agent's
// tick, then status.json's next write).
std::uint64_t sample_until(const options& o) { return o.steps - std::max<std::uint64_t>(o.steps / 5, 1); }

// Whether child `pid` has ended, leaving it to be reaped.
bool ended(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

double mean_after(const std::vector<double>& v, std::uint64_t skip) {
  if (v.size() <= skip)
    return 0;
  return mean({v.begin() + static_cast<std::ptrdiff_t>(skip), v.end()});
}

run_figures run_bare_kind(const options& o, const model_choice& m, int world, const fs::path& dir, bool shared_buffers) {
  fs::create_directories(dir);
  const fs::path cfg = dir / "job.toml";
  std::ofstream(cfg) << config_text(m, world, o.steps, o.snapshot_every, dir / "unused");
  bare_step_watch watch{dir};
  std::vector<pid_t> ranks;
  usage_sampler sampler{[&] {
                          tree_usage sum;
                          for (pid_t p : ranks) {
                            const auto u = usage_of_tree(p);
                            sum.cpu_seconds += u.cpu_seconds;
                            sum.wakeups += u.wakeups;
                          }
                          return sum;
                        },
                        [&] { return watch.step(); }, o.warmup, sample_until(o)};
  const auto steps = run_bare(cfg, world, dir, [&](const std::vector<pid_t>& pids) {
    ranks = pids;
    // Until rank 0 is done: the ranks are waited for once this returns.
    while (watch.step() < o.steps - 1) {
      sampler.sample();
      if (ended(pids[0]))
        break;
      std::this_thread::sleep_for(100ms);
    }
  }, shared_buffers);
  run_figures f;
  f.wall = mean_after(steps.seconds, o.warmup);
  f.slow_steps = slow_steps_of(steps.seconds, o.warmup);
  f.cpu = sampler.cpu_per_step(f.wall);
  f.wakeups = sampler.wakeups_per_step(f.wall);
  f.ok = f.wall > 0 && f.cpu > 0;
  return f;
}

run_figures run_service_kind(const options& o, const model_choice& m, int world, kind k, const fs::path& dir) {
  auto text = config_text(m, world, o.steps, o.snapshot_every, dir / "data", {}, k == kind::persist ? o.persist_every : 0);
  if (k == kind::sync)
    text.replace(text.find("[checkpoint]\n"), 13, "[checkpoint]\noverlap = false\n");
  cluster c(dir, text);
  usage_sampler sampler{[&] { return usage_of_tree(c.pid()); }, [&] { return c.file_step(); }, o.warmup,
                        sample_until(o)};
  const auto until = clock_type::now() + 600s;
  // Watch status.json only (the supervisor writes it anyway): no admin request while it trains.
  while (clock_type::now() < until && c.file_step() < o.steps) {
    sampler.sample();
    if (ended(c.pid()))
      break;
    std::this_thread::sleep_for(100ms);
  }
  run_figures f;
  const json report =
      c.wait([](const json& s) { return s.value("state", "") == "completed"; }, 120s).is_null() ? json{} : c.status(true);
  c.stop();
  if (report.is_null()) {
    std::cerr << "overhead: the job did not complete; see " << (dir / "n0.log").string() << "\n";
    return f;
  }
  const auto step_seconds = report.value("step_seconds", std::vector<double>{});
  f.wall = mean_after(step_seconds, o.warmup);
  f.slow_steps = slow_steps_of(step_seconds, o.warmup);
  f.cpu = sampler.cpu_per_step(f.wall);
  f.wakeups = sampler.wakeups_per_step(f.wall);
  f.ok = f.wall > 0 && f.cpu > 0;
  return f;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// The ratios' summary and the verdict against the goal.
json ratio_summary(const std::vector<double>& r, double goal) {
  json j{{"rounds", r.size()},
         {"median", quantile(r, 0.5)},
         {"p25", quantile(r, 0.25)},
         {"p75", quantile(r, 0.75)},
         {"min", r.empty() ? 0 : *std::min_element(r.begin(), r.end())},
         {"max", r.empty() ? 0 : *std::max_element(r.begin(), r.end())},
         {"ratios", r}};
  const double lo = j["p25"].get<double>() - 1, hi = j["p75"].get<double>() - 1;
  j["verdict"] = r.size() < 3 ? "too few rounds"
                 : hi < goal  ? "under the goal"
                 : lo > goal  ? "over the goal"
                              : "too noisy to judge";
  return j;
}

std::string pct(double ratio) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * (ratio - 1));
  return b;
}

int run(const options& o) {
  init_logging("overhead", log_level::error);
  const fs::path work = make_work_dir(o.work_dir, "overhead");
  if (work.empty())
    return 1;
  const model_choice m = choose_model(o.state_mb * 1e6);
  std::printf("overhead: transformer %u layers × width %u (%.1f M params, %.0f MB of state), %u tokens per rank and "
              "step, %llu steps a run (the first %llu left out), snapshot every %llu steps, persist every %llu "
              "snapshots; %d rounds\n",
              m.layers, m.width, static_cast<double>(m.params) / 1e6, m.state_bytes() / 1e6, m.seq_len,
              static_cast<unsigned long long>(o.steps), static_cast<unsigned long long>(o.warmup),
              static_cast<unsigned long long>(o.snapshot_every), static_cast<unsigned long long>(o.persist_every),
              o.rounds);
  std::fflush(stdout);
  json results = json::object();
  bool failed = false;
  for (int world : o.ranks) {
    std::map<kind, std::vector<run_figures>> runs;
    for (int round = 0; round < o.rounds && !failed; ++round) {
      std::vector<kind> order = kinds_of(o);
      if (round % 2 == 1)
        std::reverse(order.begin(), order.end());
      std::printf("  %d ranks, round %2d/%d:", world, round + 1, o.rounds);
      for (const kind k : order) {
        const auto dir = work / (std::to_string(world) + "-" + std::to_string(round) + "-" + name_of(k));
        const auto f = k == kind::bare              ? run_bare_kind(o, m, world, dir, true)
                     : k == kind::private_buffers ? run_bare_kind(o, m, world, dir, false)
                                                  : run_service_kind(o, m, world, k, dir);
        if (!f.ok) {
          std::printf(" %s failed\n", name_of(k));
          failed = true;
          break;
        }
        runs[k].push_back(f);
        std::printf("  %s %.1f ms (CPU %.1f ms, %.0f wake-ups)", name_of(k), f.wall * 1e3, f.cpu * 1e3, f.wakeups);
        if (!f.slow_steps.empty()) {
          std::printf(" [%zu step%s over 2x the median:", f.slow_steps.size(), f.slow_steps.size() == 1 ? "" : "s");
          for (std::size_t i = 0; i < std::min<std::size_t>(f.slow_steps.size(), 4); ++i)
            std::printf(" %llu (%.0f ms)", static_cast<unsigned long long>(f.slow_steps[i].first),
                        f.slow_steps[i].second * 1e3);
          std::printf("%s]", f.slow_steps.size() > 4 ? " ..." : "");
        }
        std::fflush(stdout);
      }
      std::printf("\n");
    }
    if (failed)
      break;
    json jw;
    for (const kind k : kinds_of(o)) {
      std::vector<double> wall, cpu, wakeups;
      json slow = json::array();
      for (const auto& f : runs[k]) {
        wall.push_back(f.wall);
        cpu.push_back(f.cpu);
        wakeups.push_back(f.wakeups);
        json round = json::array();
        for (const auto& [step, seconds] : f.slow_steps)
          round.push_back({{"step", step}, {"s", seconds}});
        slow.push_back(std::move(round));
      }
      jw[name_of(k)] = {{"step_s", wall},
                        {"cpu_s_per_step", cpu},
                        {"wakeups_per_step", wakeups},
                        {"step_s_median", median(wall)},
                        {"cpu_s_median", median(cpu)},
                        {"wakeups_median", median(wakeups)},
                        {"slow_steps", std::move(slow)}};
      if (k == kind::bare)
        continue;
      std::vector<double> wall_ratio, cpu_ratio;
      for (std::size_t i = 0; i < runs[k].size(); ++i) {
        wall_ratio.push_back(runs[k][i].wall / runs[kind::bare][i].wall);
        cpu_ratio.push_back(runs[k][i].cpu / runs[kind::bare][i].cpu);
      }
      jw[name_of(k)]["wall_ratio"] = ratio_summary(wall_ratio, o.goal);
      jw[name_of(k)]["cpu_ratio"] = ratio_summary(cpu_ratio, o.goal);
    }
    // How much the bare loop itself moves from round to round: the noise floor.
    std::vector<double> bare_wall = jw["bare"]["step_s"];
    jw["bare"]["spread"] = bare_wall.empty() ? 0.0 : quantile(bare_wall, 0.75) / quantile(bare_wall, 0.25) - 1;
    results[std::to_string(world)] = jw;
  }

  std::printf("\nOverhead against the bare loop, median over the rounds of each round's ratio [middle half] (range); "
              "goal %s\n",
              pct(1 + o.goal).c_str());
  std::printf("%-6s %-8s %-10s %-40s %-40s %-12s %s\n", "ranks", "kind", "bare ms", "wall time per step",
              "CPU time per step", "wake-ups", "verdict (wall / CPU)");
  for (const auto& [w, jw] : results.items()) {
    for (const kind kk : kinds_of(o)) {
      if (kk == kind::bare)
        continue;
      const char* k = name_of(kk);
      const auto cell = [&](const json& r) {
        char b[96];
        std::snprintf(b, sizeof b, "%s [%s, %s] (%s, %s)", pct(r.value("median", 1.0)).c_str(),
                      pct(r.value("p25", 1.0)).c_str(), pct(r.value("p75", 1.0)).c_str(),
                      pct(r.value("min", 1.0)).c_str(), pct(r.value("max", 1.0)).c_str());
        return std::string{b};
      };
      const json& r = jw[k];
      char wakeups[32];
      std::snprintf(wakeups, sizeof wakeups, "%.0f (%.0f)", r.value("wakeups_median", 0.0),
                    jw["bare"].value("wakeups_median", 0.0));
      std::printf("%-6s %-8s %-10.1f %-40s %-40s %-12s %s / %s\n", w.c_str(), k,
                  1e3 * jw["bare"].value("step_s_median", 0.0), cell(r["wall_ratio"]).c_str(),
                  cell(r["cpu_ratio"]).c_str(), wakeups, r["wall_ratio"].value("verdict", "").c_str(),
                  r["cpu_ratio"].value("verdict", "").c_str());
    }
    std::printf("%-6s bare loop from round to round: middle half %.1f%% apart; wake-ups: the median per step of "
                "every thread of the kind's processes (the bare loop's in brackets)\n",
                w.c_str(), 100 * jw["bare"].value("spread", 0.0));
  }
  if (!o.json_out.empty())
    std::ofstream(o.json_out) << results.dump(2) << "\n";
  if (o.work_dir.empty())
    fs::remove_all(work);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace rekindle::bench

int main(int argc, char** argv) {
  (void)rekindle::kernels::ensure_blas_core(argv);  // the bare ranks run this program: as the service's kernels
  rekindle::keep_large_frees_in_process();          // as the service's processes
  rekindle::bench::options o;
  int bare_rank = -1, world = 0;
  std::string config, dir;
  CLI::App app{"The service's failure-free overhead against the bare training loop, interleaved rounds"};
  app.add_option("--ranks", o.ranks, "World sizes to measure")->delimiter(',');
  app.add_option("--rounds", o.rounds, "Rounds of the three kinds of run")->check(CLI::Range(1, 1000));
  app.add_option("--steps", o.steps, "Steps of each run")->check(CLI::Range(20, 1000000));
  app.add_option("--warmup", o.warmup, "Steps of each run left out of its figures")->check(CLI::Range(1, 100000));
  app.add_option("--snapshot-every", o.snapshot_every, "Steps between snapshots")->check(CLI::Range(1, 1000));
  app.add_option("--persist-every", o.persist_every, "Snapshots between checkpoints on disk (the persist runs)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--state-mb", o.state_mb, "Training state (parameters and AdamW moments) in MB")->check(CLI::PositiveNumber);
  app.add_option("--goal", o.goal, "The overhead to judge against (0.02: 2%)")->check(CLI::Range(0.0, 10.0));
  app.add_option("--kinds", o.kinds,
                 "Kinds of run besides bare: service, persist, sync (overlap off), private (bare with the gradients in "
                 "private memory)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bare", "service", "persist", "sync", "private"}));
  app.add_option("--json", o.json_out, "Also write the results as JSON to this file");
  app.add_option("--work-dir", o.work_dir, "Keep every run's files here (default: a temporary directory, removed)");
  app.add_option("--bare-rank", bare_rank)->group("");
  app.add_option("--world", world)->group("");
  app.add_option("--config", config)->group("");
  app.add_option("--dir", dir)->group("");
  bool private_buffers = false;
  app.add_flag("--private-buffers", private_buffers)->group("");
  CLI11_PARSE(app, argc, argv);
  if (bare_rank >= 0)
    return rekindle::bench::run_bare_rank(config, bare_rank, world, dir, !private_buffers);
  if (o.warmup + 10 > rekindle::bench::sample_until(o)) {
    std::cerr << "overhead: --steps (" << o.steps << ") must leave 10 steps between --warmup (" << o.warmup
              << ") and the run's last fifth, where its CPU time is not sampled\n";
    return 2;
  }
  return rekindle::bench::run(o);
}
