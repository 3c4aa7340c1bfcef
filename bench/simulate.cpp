// Simulator benchmark: how long a 16,384-accelerator, 54-day replay takes, per policy, on the
// InfiniteHBD record and on a synthetic trace with as many faults.
//
// usage: simulate [--record FILE] [--nodes N] [--ranks-per-node K] [--days D] [--runs N] [--warmup N] [--json]
//
// - the InfiniteHBD record (default ../shared/data/infinitehbd/fault_trace.json from the source
//   tree, the shared data folder beside the repository; give --record when it lives elsewhere),
//   converted onto N nodes of
//   K ranks (default 2,048 × 8) with its 349 days scaled into D days (default 54);
// - a synthetic trace over the same days with the same number of faults (the default mix, seed 1);
// each simulated with both policies and the default model.
//
// Baselines from the same run: the same replay of a trace without faults (the cost of simulated
// training alone: hundreds of thousands of steps), and one recovery round of the supervisor policy
// at this size (a rank fails; every rank registers again; the epoch starts), the work the
// simulator cannot avoid per recovery.
//
// Every figure is the median of --runs timed runs (default 3) after --warmup untimed ones (default
// 1). Results are verified before timing: every fault of the trace is counted, the ratio lies in
// (0, 1], every simulated second is accounted for, and in-place restart beats restarting
// everything on both traces.

#include <malloc.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "policy/supervisor_policy.hpp"
#include "common/clock.hpp"
#include "common/memory.hpp"
#include "trace/cluster.hpp"
#include "trace/convert.hpp"
#include "trace/simulator.hpp"

using namespace rekindle;
using namespace rekindle::trace;

namespace {

struct options {
  std::string record =
      (std::filesystem::path{REKINDLE_SOURCE_DIR} / ".." / "shared" / "data" / "infinitehbd" / "fault_trace.json")
          .lexically_normal()
          .string();
  std::uint32_t nodes = 2048;
  std::uint32_t ranks_per_node = 8;
  double days = 54;
  int runs = 3;
  int warmup = 1;
  bool json = false;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "simulate: %s\n", what.c_str());
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double thread_cpu_seconds() { return to_seconds(thread_cpu_time()); }

// Median wall and CPU seconds of fn. The CPU time of the (single) thread is the figure that does
// not move when the machine is shared.
struct timing {
  double wall = 0;
  double cpu = 0;
};

timing time_median(const options& o, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i)
    fn();
  std::vector<double> wall, cpu;
  for (int i = 0; i < o.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto c0 = thread_cpu_seconds();
    fn();
    cpu.push_back(thread_cpu_seconds() - c0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return {median(wall), median(cpu)};
}

double number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v >= 0))
    die(flag + ": '" + text + "' is not a number of at least 0");
  return v;
}

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--record")
      o.record = value();
    else if (a == "--nodes")
      o.nodes = static_cast<std::uint32_t>(number(a, value()));
    else if (a == "--ranks-per-node")
      o.ranks_per_node = static_cast<std::uint32_t>(number(a, value()));
    else if (a == "--days")
      o.days = number(a, value());
    else if (a == "--runs")
      o.runs = std::max(1, static_cast<int>(number(a, value())));
    else if (a == "--warmup")
      o.warmup = static_cast<int>(number(a, value()));
    else if (a == "--json")
      o.json = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: simulate [--record FILE] [--nodes N] [--ranks-per-node K] [--days D] [--runs N] [--warmup N] [--json]\n");
      std::exit(0);
    } else {
      die("unknown argument '" + a + "' (see --help)");
    }
  }
  return o;
}

sim_result run_once(const fault_trace& t, const cluster_shape& c, policy_kind p) {
  auto r = simulate(t, c, model{}, p);
  if (!r)
    die("simulation failed: " + r.error().to_string());
  return *r;
}

void verify(const std::string& name, const fault_trace& t, const sim_result& in_place, const sim_result& restart_all) {
  for (const auto* r : {&in_place, &restart_all}) {
    const double accounted = std::accumulate(r->lost_time.begin(), r->lost_time.end(), r->useful);
    if (r->faults != t.events.size())
      die(name + ": " + std::to_string(r->faults) + " faults counted, the trace has " + std::to_string(t.events.size()));
    if (!(r->ratio() > 0 && r->ratio() <= 1))
      die(name + ": ratio " + std::to_string(r->ratio()) + " is outside (0, 1]");
    if (std::fabs(accounted - r->wall) > 1e-6 * r->wall)
      die(name + ": " + std::to_string(accounted) + " s accounted of " + std::to_string(r->wall));
  }
  if (!(in_place.ratio() > restart_all.ratio()))
    die(name + ": in-place restart does not beat restarting everything");
}

// One recovery round of the policy at this size: a rank fails, every rank registers again.
timing recovery_round(const options& o) {
  fake_clock clock;
  policy::policy_config c;
  for (std::uint32_t n = 0; n < o.nodes; ++n)
    c.nodes.push_back({"n" + std::to_string(n), o.ranks_per_node, false});
  c.total_steps = 1u << 30;
  c.max_restarts = c.max_restarts_per_rank = ~0u;
  policy::supervisor_policy p{c, clock};
  std::vector<node_id> all;
  for (std::uint32_t n = 0; n < o.nodes; ++n)
    all.push_back(node_id{n});
  (void)p.on_nodes_up(all);
  std::vector<rank_id> ranks;
  for (const auto& s : p.placement())
    ranks.push_back(s.rank);
  (void)p.on_ranks_ready(ranks, p.epoch());
  {
    // Step 10 in every rank's slot.
    const std::vector<std::vector<policy::copy_change>> sets{{{p.epoch(), step_t{10}, copy_kind::local_slot, true}}};
    const std::vector<std::uint32_t> set_of_node(o.nodes, 0);
    (void)p.on_copies_changed_all({sets, set_of_node, {}});
  }
  std::uint32_t next = 0;
  return time_median(o, [&] {
    (void)p.on_rank_failed(rank_id{next++ % static_cast<std::uint32_t>(ranks.size())}, p.epoch(), "bench");
    auto a = p.on_ranks_ready(ranks, p.epoch());
    if (p.state() != policy::job_state::running)
      die("the recovery round did not start the epoch");
  });
}

}  // namespace

int main(int argc, char** argv) {
  // As in the rekindle program: keep large buffers in the heap between recoveries, and no fast
  // bins to consolidate before each of them.
  rekindle::keep_large_frees_in_process();
  mallopt(M_MXFAST, 0);
  const auto o = parse_args(argc, argv);
  auto cluster = cluster_shape::compact(o.nodes, o.ranks_per_node);
  if (!cluster)
    die(cluster.error().message());

  // The traces.
  auto converted = convert_infinitehbd_file(o.record, *cluster, {.time_scale = o.days / 349.0});
  if (!converted.ok())
    die(converted.error_text() + "\n(give the record's path with --record)");
  const auto& hbd = *converted.value;
  generate_options g;
  g.days = o.days;
  g.rate = static_cast<double>(hbd.events.size()) / (o.days * cluster->world());
  g.seed = 1;
  auto synthetic = generate(*cluster, g);
  if (!synthetic)
    die(synthetic.error().message());
  fault_trace quiet;
  quiet.header.duration = o.days * 86400;

  struct row {
    std::string trace;
    std::size_t faults;
    policy_kind policy;
    sim_result result;
    timing seconds;
  };
  std::vector<row> rows;
  for (const auto& [name, t] : {std::pair<std::string, const fault_trace*>{"InfiniteHBD (349 days into " + std::to_string(int(o.days)) + ")", &hbd},
                                std::pair<std::string, const fault_trace*>{"synthetic, same fault count", &*synthetic}}) {
    auto a = run_once(*t, *cluster, policy_kind::in_place);
    auto b = run_once(*t, *cluster, policy_kind::restart_all);
    verify(name, *t, a, b);
    for (auto& [p, r] : {std::pair{policy_kind::in_place, a}, std::pair{policy_kind::restart_all, b}})
      rows.push_back({name, t->events.size(), p, r, time_median(o, [&, pp = p] { (void)run_once(*t, *cluster, pp); })});
  }
  const auto quiet_s = time_median(o, [&] { (void)run_once(quiet, *cluster, policy_kind::in_place); });
  const auto round_s = recovery_round(o);

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&now));
  if (o.json) {
    nlohmann::ordered_json doc;
    doc["date"] = date;
    doc["accelerators"] = cluster->world();
    doc["days"] = o.days;
    doc["runs"] = o.runs;
    for (const auto& r : rows)
      doc["results"].push_back({{"trace", r.trace},
                                {"faults", r.faults},
                                {"policy", std::string{to_string(r.policy)}},
                                {"recoveries", r.result.recoveries},
                                {"ratio", r.result.ratio()},
                                {"wall_s", r.seconds.wall},
                                {"cpu_s", r.seconds.cpu}});
    doc["baselines"] = {{"no_faults_wall_s", quiet_s.wall}, {"no_faults_cpu_s", quiet_s.cpu},
                        {"recovery_round_wall_s", round_s.wall}, {"recovery_round_cpu_s", round_s.cpu}};
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  std::printf("simulate: %s accelerators (%u nodes x %u), %.0f days, median of %d runs, %s\n", with_commas(cluster->world()).c_str(),
              o.nodes, o.ranks_per_node, o.days, o.runs, date);
  std::printf("| trace | faults | policy | recoveries | effective time | wall (s) | CPU (s) | CPU per recovery (ms) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    std::printf("| %s | %zu | %s | %u | %.2f %% | %.2f | %.2f | %.1f |\n", r.trace.c_str(), r.faults,
                std::string{describe(r.policy)}.c_str(), r.result.recoveries, 100 * r.result.ratio(), r.seconds.wall,
                r.seconds.cpu, r.result.recoveries > 0 ? 1e3 * (r.seconds.cpu - quiet_s.cpu) / r.result.recoveries : 0.0);
  std::printf("| no faults (baseline: simulated training alone) | 0 | %s | 0 | | %.2f | %.2f | |\n",
              std::string{describe(policy_kind::in_place)}.c_str(), quiet_s.wall, quiet_s.cpu);
  std::printf("| one recovery round of the policy alone (baseline) | | | 1 | | | | %.1f |\n", 1e3 * round_s.cpu);
  return 0;
}
