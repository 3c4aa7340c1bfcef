// bench/detect: the seeded detection campaign (docs/PERFORMANCE.md, "Detection"). On a real local
// cluster (4 worker nodes of 1 rank, a spare; the whole check every 10 s), it injects faults one
// after the other, in an order and on targets drawn from the seed, and for each measures the time
// from the injection to the event that names it, and whether the right rank, node or link was
// named:
//   slow_1.3x  a rank's compute 1.3x as long (rekindle slow)        a `straggler` event naming the rank
//   slow_2x    the same, 2x                                          the same
//   hang       a rank stops before its next step (rekindle hang)     `rank_hung` naming the rank
//   slow_disk  a node's checkpoint disk 20x slower (the check's drill, `rekindle check --nodes X
//              --drill-slow 20 --drill-only disk`, as a disk that was slow before the check ran)
//                                                                    `node_quarantined` naming the node, check disk
//   slow_link  the link between two nodes at 10 MB/s (rekindle throttle), found by the periodic
//              check                                                 `link_slow` naming both nodes
// Then it trains without faults for --healthy on a cluster of its own (checks.every from
// --healthy-every, off by default as in the service) and counts the alarms (straggler, rank_hung,
// node_quarantined, link_slow, node_lost): each one is a false alarm. With --noise N, N more
// processes share the machine throughout, each busy for 0.2-3 s then idle for up to 2 s, at random
// (a noisy machine: the ranks get the cores unevenly).
//
// usage: detect [--seed 1] [--faults 25] [--healthy 30m] [--every 10s] [--healthy-every 0s]
//               [--noise 0] [--config-extra TOML] [--json FILE]
// Exit status: 0 when every fault was found and named and there was at most one false alarm,
// 1 otherwise, 2 for bad usage.

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/text.hpp"
#include "tests/support/cluster.hpp"

namespace rekindle::detect {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

std::atomic<bool> interrupted{false};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

enum class kind { slow13, slow2, hang, disk, link };
constexpr kind kinds[] = {kind::slow13, kind::slow2, kind::hang, kind::disk, kind::link};

const char* name(kind k) {
  switch (k) {
    case kind::slow13: return "slow_1.3x";
    case kind::slow2: return "slow_2x";
    case kind::hang: return "hang";
    case kind::disk: return "slow_disk";
    case kind::link: return "slow_link";
  }
  return "?";
}

// Processes that load the machine at random until destroyed (--noise).
class noise {
 public:
  noise(int processes, std::uint64_t seed) {
    for (int i = 0; i < processes; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        run(seed + static_cast<std::uint64_t>(i));
      }
      if (pid > 0)
        pids_.push_back(pid);
    }
  }
  ~noise() {
    for (const auto pid : pids_)
      ::kill(pid, SIGKILL);
    for (const auto pid : pids_)
      ::waitpid(pid, nullptr, 0);
  }
  noise(const noise&) = delete;
  noise& operator=(const noise&) = delete;

 private:
  [[noreturn]] static void run(std::uint64_t seed) {
    std::mt19937_64 rng{seed};
    std::uniform_real_distribution<double> busy{0.2, 3.0}, idle{0.0, 2.0};
    volatile double sink = 1.0;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(busy(rng));
      while (std::chrono::steady_clock::now() < until)
        for (int k = 0; k < 100000; ++k)
          sink = sink * 1.0000001 + 1e-9;
      std::this_thread::sleep_for(std::chrono::duration<double>(idle(rng)));
    }
  }
  std::vector<pid_t> pids_;
};

const std::set<std::string> alarm_kinds{"straggler", "rank_hung", "node_quarantined", "link_slow", "node_lost"};

struct outcome {
  kind what = kind::slow13;
  std::string target;
  bool found = false;
  bool named_right = false;
  double seconds = 0;
  std::string event;
  std::string note;
};

class campaign {
 public:
  campaign(std::uint64_t seed, std::string every, std::string extra)
      : rng_{seed}, every_{std::move(every)}, extra_{std::move(extra)} {}

  bool start() {
    testing::cluster_options o;
    o.nodes = 4;
    o.ranks_per_node = 1;
    o.spare = true;
    o.steps = 1'000'000'000;
    o.persist_every = 0;
    o.extra = "[checks]\nevery = \"" + every_ + "\"\n" + extra_;
    cluster_.emplace(o);
    cluster_->start_all();
    if (!cluster_->wait_step(5, 180s)) {
      std::cerr << "detect: the cluster did not start training\n" << cluster_->log("n0");
      return false;
    }
    seq_ = last_seq();
    return true;
  }

  outcome inject(kind k) {
    outcome o;
    o.what = k;
    if (!settle()) {
      o.note = "the job did not settle before the fault";
      return o;
    }
    switch (k) {
      case kind::slow13:
      case kind::slow2: return slow(o, k == kind::slow13 ? "1.3" : "2");
      case kind::hang: return hang(o);
      case kind::disk: return disk(o);
      case kind::link: return link(o);
    }
    return o;
  }

  /// Trains for `d` with no fault; the alarms it raised. Each second it also samples every rank's
  /// straggler score (`scores`: one [seconds, rank, ratio] per sample).
  std::vector<json> healthy(std::chrono::seconds d, json& scores) {
    (void)settle();
    seq_ = last_seq();
    std::vector<json> alarms;
    const auto begin = std::chrono::steady_clock::now();
    const auto end = begin + d;
    auto next_line = begin;
    while (std::chrono::steady_clock::now() < end && !interrupted) {
      for (const auto& e : new_events())
        if (alarm_kinds.contains(e.value("kind", ""))) {
          std::cerr << "  false alarm: " << e.dump() << "\n";
          alarms.push_back(e);
        }
      const auto st = cluster_->status();
      const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      for (const auto& r : st.value("ranks", json::array()))
        if (r.contains("straggler_ratio") && r["straggler_ratio"].is_number())
          scores.push_back({std::round(at * 10) / 10, r.value("rank", 0), r["straggler_ratio"].get<double>()});
      if (std::chrono::steady_clock::now() >= next_line) {
        const auto left = std::chrono::duration_cast<std::chrono::seconds>(end - std::chrono::steady_clock::now());
        std::cerr << "  healthy: " << left.count() << " s left, step " << st.value("step", 0) << ", " << alarms.size()
                  << " alarm(s)\n";
        next_line += 60s;
      }
      std::this_thread::sleep_for(1s);
    }
    return alarms;
  }

  std::uint64_t step() const { return cluster_->status().value("step", std::uint64_t{0}); }

 private:
  // The events since the last call, in order.
  std::vector<json> new_events() {
    std::vector<json> out;
    const auto r = cluster_->admin({"events", "--json", "--since", std::to_string(seq_)});
    std::istringstream lines{r.out};
    for (std::string line; std::getline(lines, line);) {
      auto e = json::parse(line, nullptr, false);
      if (!e.is_object())
        continue;
      seq_ = std::max(seq_, e.value("seq", std::uint64_t{0}));
      out.push_back(std::move(e));
    }
    return out;
  }
  std::uint64_t last_seq() {
    seq_ = 0;
    std::uint64_t last = 0;
    while (true) {
      const auto before = seq_;
      (void)new_events();
      last = seq_;
      if (seq_ == before)
        break;
    }
    return last;
  }

  // Runs an admin command, again while the job refuses it for its state (exit 3: an epoch starting).
  testing::process_result admin(std::vector<std::string> args) {
    testing::process_result r;
    for (int i = 0; i < 60 && !interrupted; ++i) {
      r = cluster_->admin(args);
      if (r.exit_code != 3)
        return r;
      std::this_thread::sleep_for(500ms);
    }
    return r;
  }

  // The job running with every rank placed and stepping; the events so far consumed. A node
  // released from quarantine is not placed again by itself: the world is scaled back to 4.
  bool settle() {
    (void)cluster_->wait_for([](const json& s) { return s.value("state", "") == "running"; }, 120s);
    if (cluster_->status().value("world", 0) < 4)
      (void)admin({"scale", "4", "--yes"});
    const bool ok = cluster_->wait_for(
        [](const json& s) { return s.value("state", "") == "running" && s.value("world", 0) == 4; }, 120s);
    if (ok)
      (void)cluster_->wait_step(step() + 10, 60s);
    (void)new_events();
    return ok;
  }

  // Waits for `match` among the alarms; the seconds from `t0` to its event, and the event.
  std::optional<std::pair<double, json>> await(double t0, std::chrono::seconds timeout,
                                              const std::function<bool(const json&)>& expected, outcome& o) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end && !interrupted) {
      for (const auto& e : new_events()) {
        if (!alarm_kinds.contains(e.value("kind", "")))
          continue;
        if (expected(e))
          return std::pair{std::max(0.0, e.value("unix_s", unix_now()) - t0), e};
        o.note += (o.note.empty() ? "" : "; ") + std::string{"other alarm: "} + e.value("kind", "") + " " +
                  e.value("detail", "");
      }
      std::this_thread::sleep_for(100ms);
    }
    return std::nullopt;
  }

  // Waits for an event of `kind` (not an alarm: those would be missed by await).
  bool wait_event(const std::string& kind, std::chrono::seconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end && !interrupted) {
      for (const auto& e : new_events())
        if (e.value("kind", "") == kind)
          return true;
      std::this_thread::sleep_for(200ms);
    }
    return false;
  }

  std::vector<std::uint32_t> ranks() {
    std::vector<std::uint32_t> out;
    for (const auto& r : cluster_->status().value("ranks", json::array()))
      out.push_back(r.value("rank", 0u));
    return out;
  }
  std::vector<std::string> nodes(bool placeable_only) {
    std::vector<std::string> out;
    for (const auto& n : cluster_->status().value("nodes", json::array()))
      if (n.value("up", false) && (!placeable_only || n.value("check", "") != "quarantined"))
        out.push_back(n.value("name", ""));
    return out;
  }
  template <class T>
  T pick(const std::vector<T>& from) {
    return from[std::uniform_int_distribution<std::size_t>{0, from.size() - 1}(rng_)];
  }

  outcome& slow(outcome& o, const std::string& factor) {
    const auto rank = pick(ranks());
    o.target = "rank " + std::to_string(rank);
    const double t0 = unix_now();
    const auto r = admin({"slow", "rank", std::to_string(rank), factor, "--yes"});
    if (r.exit_code != 0) {
      o.note = "slow refused: " + r.err;
      return o;
    }
    const auto got = await(t0, 120s, [&](const json& e) { return e.value("kind", "") == "straggler"; }, o);
    if (got) {
      o.found = true;
      o.seconds = got->first;
      o.event = got->second.value("detail", "");
      o.named_right = got->second.value("rank", -1) == static_cast<int>(rank);
    }
    (void)admin({"slow", "rank", std::to_string(rank), "1", "--yes"});
    if (got && !wait_event("straggler_cleared", 60s))
      o.note += (o.note.empty() ? "" : "; ") + std::string{"not cleared within 60 s"};
    return o;
  }

  outcome& hang(outcome& o) {
    const auto rank = pick(ranks());
    o.target = "rank " + std::to_string(rank);
    const double t0 = unix_now();
    const auto r = admin({"hang", "rank", std::to_string(rank), "--yes"});
    if (r.exit_code != 0) {
      o.note = "hang refused: " + r.err;
      return o;
    }
    const auto got = await(t0, 120s, [&](const json& e) { return e.value("kind", "") == "rank_hung"; }, o);
    if (got) {
      o.found = true;
      o.seconds = got->first;
      o.event = got->second.value("detail", "");
      o.named_right = got->second.value("rank", -1) == static_cast<int>(rank);
    }
    return o;
  }

  outcome& disk(outcome& o) {
    const auto node = pick(nodes(true));
    o.target = "node " + node;
    const double t0 = unix_now();
    const auto r = admin({"check", "--nodes", node, "--drill-slow", "20", "--drill-only", "disk"});
    if (r.exit_code == 2 || r.exit_code == 3) {
      o.note = "check refused: " + r.err;
      return o;
    }
    const auto got = await(t0, 120s, [&](const json& e) { return e.value("kind", "") == "node_quarantined"; }, o);
    if (got) {
      o.found = true;
      o.seconds = got->first;
      o.event = got->second.value("detail", "");
      o.named_right = got->second.value("node", "") == node && o.event.find("disk") != std::string::npos;
    }
    // A check without the drill releases it.
    (void)admin({"check", "--nodes", node});
    return o;
  }

  outcome& link(outcome& o) {
    auto all = nodes(false);
    std::shuffle(all.begin(), all.end(), rng_);
    const auto a = all[0];
    const auto b = all[1];
    o.target = "link " + a + "-" + b;
    const double t0 = unix_now();
    const auto r = admin({"throttle", a, b, "--rate", "10", "--for", "10m", "--yes"});
    if (r.exit_code != 0) {
      o.note = "throttle refused: " + r.err;
      return o;
    }
    const auto got = await(
        t0, 180s,
        [&](const json& e) {
          const auto n = e.value("node", "");
          return (e.value("kind", "") == "link_slow" || e.value("kind", "") == "node_quarantined") && (n == a || n == b);
        },
        o);
    if (got) {
      o.found = true;
      o.seconds = got->first;
      o.event = got->second.value("detail", "");
      const auto f = got->second.value("fields", json::object());
      const std::set<std::string> named{f.value("node", ""), f.value("peer", "")};
      o.named_right = got->second.value("kind", "") == "link_slow" && f.value("verdict", "") == "link" &&
                      named == std::set<std::string>{a, b};
    }
    (void)admin({"throttle", a, b, "--rate", "100000", "--for", "100ms", "--yes"});
    return o;
  }

  std::mt19937_64 rng_;
  std::string every_;
  std::string extra_;
  std::optional<testing::local_cluster> cluster_;
  std::uint64_t seq_ = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace
}  // namespace rekindle::detect

int main(int argc, char** argv) {
  using namespace rekindle::detect;
  CLI::App app{"The seeded detection campaign: faults injected into a real local cluster, the time to name each"};
  std::uint64_t seed = 1;
  int faults = 25;
  std::string healthy_text = "30m";
  std::string every = "10s";
  std::string json_path;
  std::string extra;
  std::string healthy_every = "0s";
  int noise_processes = 0;
  app.add_option("--seed", seed, "Draws the order of the faults and their targets");
  app.add_option("--faults", faults, "Faults to inject, the kinds in turn (default 25: 5 of each)")->check(CLI::Range(0, 1000));
  app.add_option("--healthy", healthy_text, "Training without faults afterwards, counting false alarms (default 30m; 0s: none)");
  app.add_option("--every", every, "checks.every of the cluster the faults go into (default 10s)");
  app.add_option("--healthy-every", healthy_every,
                 "checks.every of the healthy phase's cluster (default 0s, the service's default: off)");
  app.add_option("--noise", noise_processes, "Processes that load the machine at random throughout (default 0)")
      ->check(CLI::Range(0, 64));
  app.add_option("--config-extra", extra, "More TOML for the cluster's configuration (e.g. '[stragglers]\\nspan = \"5s\"')");
  app.add_option("--json", json_path, "Write every fault's outcome and the figures here");
  CLI11_PARSE(app, argc, argv);
  const auto healthy = rekindle::parse_duration(healthy_text);
  if (!healthy) {
    std::cerr << "detect: --healthy takes a duration (e.g. 30m, 90s), not '" << healthy_text << "'\n";
    return 2;
  }
  signal(SIGINT, [](int) { interrupted = true; });
  signal(SIGTERM, [](int) { interrupted = true; });

  std::optional<noise> load;
  if (noise_processes > 0)
    load.emplace(noise_processes, seed);
  std::optional<campaign> c{std::in_place, seed, every, extra};
  if (!c->start())
    return 1;
  std::vector<kind> order;
  for (int i = 0; i < faults; ++i)
    order.push_back(kinds[i % 5]);
  std::shuffle(order.begin(), order.end(), std::mt19937_64{seed});
  std::vector<outcome> outcomes;
  for (std::size_t i = 0; i < order.size() && !interrupted; ++i) {
    auto o = c->inject(order[i]);
    std::fprintf(stderr, "%2zu/%zu %-10s %-14s %s %6.2f s  %s%s\n", i + 1, order.size(), name(o.what), o.target.c_str(),
                 !o.found ? "NOT FOUND" : o.named_right ? "named    " : "MISNAMED ", o.seconds, o.event.c_str(),
                 o.note.empty() ? "" : ("  [" + o.note + "]").c_str());
    outcomes.push_back(std::move(o));
  }
  c.reset();  // the fault phase's cluster stops before the healthy one starts
  std::vector<nlohmann::json> alarms;
  json scores = json::array();
  if (healthy->count() > 0 && !interrupted) {
    // A cluster of its own, with the healthy phase's checks.every.
    std::cerr << "healthy training for " << healthy_text << " (checks.every = " << healthy_every << ")\n";
    campaign h{seed, healthy_every, extra};
    if (!h.start())
      return 1;
    alarms = h.healthy(std::chrono::duration_cast<std::chrono::seconds>(*healthy), scores);
  }

  load.reset();
  json report{{"seed", seed},     {"every", every},   {"healthy", healthy_text}, {"healthy_every", healthy_every},
              {"noise", noise_processes}, {"false_alarms", alarms}, {"healthy_scores", scores}};
  std::printf("%-10s %6s %6s %6s %10s %10s\n", "kind", "faults", "found", "named", "median s", "p90 s");
  bool all_named = true;
  for (const auto k : kinds) {
    std::vector<double> t;
    int n = 0;
    int found = 0;
    int named = 0;
    for (const auto& o : outcomes) {
      if (o.what != k)
        continue;
      ++n;
      found += o.found ? 1 : 0;
      named += o.found && o.named_right ? 1 : 0;
      if (o.found)
        t.push_back(o.seconds);
    }
    all_named = all_named && named == n;
    std::printf("%-10s %6d %6d %6d %10.2f %10.2f\n", name(k), n, found, named, percentile(t, 0.5), percentile(t, 0.9));
    report["kinds"][name(k)] = {{"faults", n}, {"found", found}, {"named", named}, {"median_s", percentile(t, 0.5)},
                                {"p90_s", percentile(t, 0.9)}};
  }
  std::printf("false alarms in %s of healthy training: %zu\n", healthy_text.c_str(), alarms.size());
  if (!scores.empty()) {
    std::vector<double> ratios;
    for (const auto& s : scores)
      ratios.push_back(s[2].get<double>());
    std::printf("healthy ranks' straggler scores (%zu samples): median %.3f, p99 %.3f, max %.3f\n", ratios.size(),
                percentile(ratios, 0.5), percentile(ratios, 0.99), percentile(ratios, 1.0));
  }
  for (const auto& o : outcomes)
    report["faults"].push_back({{"kind", name(o.what)},
                                {"target", o.target},
                                {"found", o.found},
                                {"named", o.named_right},
                                {"seconds", o.seconds},
                                {"event", o.event},
                                {"note", o.note}});
  if (!json_path.empty())
    std::ofstream{json_path} << report.dump(2) << "\n";
  const bool ok = all_named && alarms.size() <= 1 && static_cast<int>(outcomes.size()) == faults;
  return ok ? 0 : 1;
}
