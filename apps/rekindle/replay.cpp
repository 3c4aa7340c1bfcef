// rekindle replay FILE: a failure trace injected into the running job through the supervisor's
// fault drills, event by event at its time (or step), then a report of what each cost.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <variant>

#include <signal.h>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/rekindle/admin_call.hpp"
#include "policy/checkpoint_coordinator.hpp"
#include "trace/cluster.hpp"
#include "trace/model.hpp"
#include "trace/simulator.hpp"
#include "trace/trace.hpp"

namespace rekindle::apps {

namespace {

using clock_type = std::chrono::steady_clock;
using nlohmann::json;

// The admin request that injects `e` live (at `speed`), or why it cannot be.
using drill = std::variant<actors::admin_kill, actors::admin_drill, actors::admin_fail_node, actors::admin_partition>;
expected<drill> drill_of(const trace::fault_event& e, double speed) {
  using trace::fault_kind;
  const bool rank = e.target.kind == trace::fault_target::type::rank;
  const rank_id r{e.target.rank};
  switch (e.kind) {
    case fault_kind::kill:
      if (rank)
        return drill{actors::admin_kill{0, r, e.signal}};
      return drill{actors::admin_fail_node{0, e.target.node}};
    case fault_kind::crash:
      // A process cannot be made to exit with a given code from outside: SIGABRT, as an abort.
      if (rank)
        return drill{actors::admin_kill{0, r, SIGABRT}};
      break;
    case fault_kind::hang:
      if (rank)
        return drill{actors::admin_drill{0, r, actors::drill_kind::hang, 1.0}};
      break;
    case fault_kind::slow:
      if (rank)
        return drill{actors::admin_drill{0, r, actors::drill_kind::slow, std::clamp(e.factor, 1.0, 100.0)}};
      break;
    case fault_kind::node_down:
      if (!rank && e.target.kind == trace::fault_target::type::node)
        return drill{actors::admin_fail_node{0, e.target.node}};
      break;
    case fault_kind::partition:
      if (e.target.kind == trace::fault_target::type::link) {
        // Without a duration it lasts 10 s of the trace, at most an hour of wall time.
        const double seconds = std::clamp(e.duration.value_or(10.0) / speed, 0.1, 3600.0);
        return drill{actors::admin_partition{0, e.target.node, e.target.peer, std::llround(seconds * 1000.0) * 1000000}};
      }
      break;
    default: break;
  }
  return status{errc::invalid_argument, "'" + std::string{to_string(e.kind)} + "' on " + e.target.to_string() +
                                         " cannot be injected into a live job (rekindle simulate models it)"};
}

std::string describe(const trace::fault_event& e) {
  std::string s = std::string{to_string(e.kind)} + " " + e.target.to_string();
  if (e.kind == trace::fault_kind::slow) {
    char f[32];
    std::snprintf(f, sizeof f, " x%g", e.factor);
    s += f;
  }
  return s;
}

std::string when_of(const trace::fault_event& e) {
  char buf[64];
  if (e.at_step)
    std::snprintf(buf, sizeof buf, "step %llu", static_cast<unsigned long long>(*e.at_step));
  else
    std::snprintf(buf, sizeof buf, "%.1f s", e.at.value_or(0));
  return buf;
}


// Every recovery done and the job training (or ended).
bool settled(const actors::job_status& s) {
  if (s.ended())
    return true;
  for (const auto& r : s.recoveries)
    if (!r.done)
      return false;
  return s.state == "running";
}

struct injected {
  const trace::fault_event* event = nullptr;
  double at_s = 0;             // since the replay began
  std::size_t recoveries_before = 0;
  std::string reply;
};

int replay(const connection_options& o, const std::string& file, double speed, double baseline_s, double settle_s,
           bool yes) {
  const auto where = resolve(o);
  if (!where) {
    std::cerr << "rekindle: " << where.error().message() << "\n";
    return 2;
  }
  const auto cluster = trace::cluster_shape::from_spec(where->spec);
  const auto parsed = trace::load_file(file, &cluster);
  if (!parsed.ok()) {
    std::cerr << parsed.error_text();
    return 2;
  }
  const auto& events = parsed.value->events;
  // Everything is checked before anything is injected.
  std::string refused;
  for (std::size_t i = 0; i < events.size(); ++i)
    if (auto d = drill_of(events[i], speed); !d)
      refused += file + ":" + std::to_string(events[i].line) + ": " + d.error().message() + "\n";
  if (!refused.empty()) {
    std::cerr << refused << "rekindle: nothing was injected\n";
    return 2;
  }
  if (!yes) {
    std::cerr << "rekindle: replay injects " << events.size() << " fault(s) into the running job; add --yes to confirm\n";
    return 2;
  }
  admin_session session;
  int ignored = 0;  // a look that fails is taken again; the reason is on stderr
  auto first = status_of(o, &session, ignored);
  if (!first)
    return 1;
  if (first->state != "running") {
    std::cerr << "rekindle: the job is " << first->state << ", not training\n";
    return 3;
  }
  // The failure-free step rate of this run, measured before the replay and again after it, while
  // watching the job as the replay does (each look costs the machine a little): what the wall
  // time would have bought. Two spells, one on each side, so that a machine whose speed drifts
  // during the replay is measured at its mean.
  const auto poll = std::chrono::milliseconds{250};
  auto s = first;
  struct spell {
    std::uint64_t steps = 0;
    double seconds = 0;
  };
  // And the part of a step that is compute (what a slow rank stretches), from the same looks.
  double compute_share_sum = 0;
  std::size_t compute_share_n = 0;
  const auto measure = [&]() -> std::optional<spell> {
    const auto t0 = clock_type::now();
    // The slowest rank's step: what the job actually trains, steps trained again after a
    // rollback included (the job's step, the highest reached, stands still while they are).
    const auto trained = [&] {
      std::uint64_t low = ~std::uint64_t{0};
      for (const auto& r : s->ranks)
        low = std::min(low, r.step);
      return low == ~std::uint64_t{0} ? s->step : low;
    };
    const auto step0 = trained();
    while (clock_type::now() - t0 < std::chrono::duration<double>(baseline_s)) {
      std::this_thread::sleep_for(poll);
      auto next = status_of(o, &session, ignored);
      if (!next)
        return std::nullopt;
      s = std::move(next);
      if (s->ended())
        break;
      for (const auto& r : s->ranks)
        if (const double step = r.step_time_s; step > 0) {
          compute_share_sum += std::min(1.0, r.compute_time_s / step);
          ++compute_share_n;
        }
    }
    const auto step1 = trained();
    return spell{step1 > step0 ? step1 - step0 : 0, std::chrono::duration<double>(clock_type::now() - t0).count()};
  };
  // A warm standby starting up (at the job's start, and after each failure that used one) takes
  // the machine's cores from training: the baseline is measured once every node has one ready
  // (10 s at most), as the job would train all along. The restart-all policy keeps none; its
  // steady state writes checkpoints (their copies and writer threads take cores too): the baseline
  // waits for the first one committed after the job's start.
  const bool restart_all = where->spec.recovery.restart_all();
  const auto wait_for_standbys = [&] {
    const auto until = clock_type::now() + std::chrono::seconds{10};
    while (clock_type::now() < until) {
      if (restart_all ? s->checkpoint.last_step.has_value()
                      : std::all_of(s->nodes.begin(), s->nodes.end(),
                                    [](const actors::node_status& n) { return !n.up || n.standby_ready; }))
        return;
      std::this_thread::sleep_for(poll);
      if (auto next = status_of(o, &session, ignored))
        s = std::move(next);
    }
  };
  wait_for_standbys();
  const auto before = measure();
  if (!before)
    return 1;
  const double rate_before = before->seconds > 0 ? static_cast<double>(before->steps) / before->seconds : 0;
  const auto start = clock_type::now();
  const auto start_step = s->step;
  const auto since = [&] { return std::chrono::duration<double>(clock_type::now() - start).count(); };
  if (!o.json)
    std::cout << "replaying " << events.size() << " event(s) from " << file << " at speed " << speed << "; baseline "
              << std::lround(rate_before) << " steps/s\n";
  std::vector<injected> done;
  // Slow drills with a duration end by themselves: (time, rank).
  std::vector<std::pair<double, std::uint32_t>> ends;
  const auto end_slow_drills = [&](double until) {
    for (auto it = ends.begin(); it != ends.end();) {
      if (it->first <= until) {
        (void)call(o, actors::admin_drill{0, rank_id{it->second}, actors::drill_kind::slow, 1.0}, &session);
        it = ends.erase(it);
      } else {
        ++it;
      }
    }
  };
  for (const auto& e : events) {
    // Wait for its time or its step, watching the job.
    for (;;) {
      end_slow_drills(since());
      if (s->ended()) {
        std::cerr << "rekindle: the job ended (" << s->state << ") before " << describe(e) << " at "
                  << when_of(e) << "\n";
        break;
      }
      if (e.at_step ? s->step >= *e.at_step : since() >= *e.at / speed)
        break;
      std::this_thread::sleep_for(poll);
      if (auto next = status_of(o, &session, ignored))
        s = std::move(next);
    }
    if (s->ended())
      break;
    const auto d = drill_of(e, speed);
    injected in{&e, since(), s->recoveries.size(), ""};
    const auto r = std::visit([&](const auto& request) { return call(o, request, &session); }, *d);
    in.reply = r.code == 0 ? r.text : "not injected (exit " + std::to_string(r.code) + ")";
    if (!o.json) {
      char t[32];
      std::snprintf(t, sizeof t, "[%7.1f s]", in.at_s);
      std::cout << t << " line " << e.line << ": " << describe(e) << " → " << in.reply << std::endl;
    }
    if (e.kind == trace::fault_kind::slow && e.duration && r.code == 0)
      ends.emplace_back(in.at_s + *e.duration / speed, e.target.rank);
    done.push_back(std::move(in));
    // Let the job notice before the next event: a failure during a recovery folds into it.
    if (auto next = status_of(o, &session, ignored))
      s = std::move(next);
  }
  // Until the last failure injected has been found and every recovery is done (slow drills still
  // running end here first).
  std::size_t awaited = 0;
  for (const auto& in : done)
    if (in.event->kind != trace::fault_kind::slow && in.reply.find("not injected") == std::string::npos)
      awaited = in.recoveries_before + 1;
  // A trace with a duration is replayed for all of it: the window the ratio covers.
  const double window = parsed.value->header.duration ? *parsed.value->header.duration / speed : 0.0;
  const auto settle_until = std::max(window, since()) + settle_s;
  for (;;) {
    if (auto next = status_of(o, &session, ignored))
      s = std::move(next);
    if (!ends.empty())
      end_slow_drills(ends.front().first);
    const bool found = s->ended() || s->recoveries.size() >= awaited;
    if ((found && settled(*s) && ends.empty() && since() >= window) || since() > settle_until)
      break;
    std::this_thread::sleep_for(poll);
  }
  const double wall = since();
  const auto end_step = s->step;
  const bool was_settled = settled(*s);
  const auto recs = s->recoveries;
  // The second baseline spell, once every recovery is over (a job that ended has none).
  std::optional<spell> after;
  if (!s->ended() && was_settled && baseline_s > 0) {
    if (!o.json)
      std::cout << "measuring the step rate again for " << baseline_s << " s" << std::endl;
    wait_for_standbys();
    after = measure();
    if (after && s->ended())
      after.reset();
  }
  const double base_rate = after && after->seconds > 0
                               ? static_cast<double>(before->steps + after->steps) / (before->seconds + after->seconds)
                               : rate_before;
  const double ratio = base_rate > 0 && wall > 0 ? static_cast<double>(end_step - start_step) / (base_rate * wall) : 0;
  // Each event's recovery: the first that began after it and before the next event.
  json out{{"file", file},
           {"events", json::array()},
           {"wall_s", wall},
           {"baseline_steps_per_s", base_rate},
           {"baseline_before_steps_per_s", rate_before},
           {"baseline_after_steps_per_s",
            after && after->seconds > 0 ? json(static_cast<double>(after->steps) / after->seconds) : json(nullptr)},
           {"steps", end_step - start_step},
           // How far the two baseline spells disagree, relative to their mean: the uncertainty of the
           // ratio that comes from the machine's own drift.
           {"baseline_drift",
            after && after->seconds > 0 && base_rate > 0
                ? json(std::abs(static_cast<double>(after->steps) / after->seconds - rate_before) / base_rate)
                : json(nullptr)},
           {"effective_ratio", ratio},
           {"settled", was_settled}};
  std::uint64_t lost = 0;
  for (std::size_t i = 0; i < done.size(); ++i) {
    const auto& in = done[i];
    json ej{{"line", in.event->line}, {"event", describe(*in.event)}, {"when", when_of(*in.event)},
            {"injected_at_s", in.at_s}, {"reply", in.reply}};
    const std::size_t until = i + 1 < done.size() ? done[i + 1].recoveries_before : recs.size();
    if (in.recoveries_before < until && in.recoveries_before < recs.size()) {
      ej["recovery"] = recs[in.recoveries_before];
      lost += recs[in.recoveries_before].steps_lost;
    }
    out["events"].push_back(std::move(ej));
  }
  out["steps_lost"] = lost;
  // The same trace in the simulator, with the durations measured here: how far the model is from
  // this cluster (docs/TRACES.md, "Calibration").
  std::optional<double> simulated;
  if (window > 0 && speed == 1.0 && base_rate > 0) {
    const auto& spec = where->spec;
    trace::model m;
    m.step_time = std::chrono::nanoseconds{static_cast<std::int64_t>(1e9 / base_rate)};
    if (compute_share_n > 0)
      m.compute_share = compute_share_sum / static_cast<double>(compute_share_n);
    m.snapshot_every = spec.checkpoint.snapshot_every;
    m.snapshot_stall = std::chrono::nanoseconds::zero();  // in the baseline rate already
    m.persist_every = spec.checkpoint.persist_every;
    m.persist_stall = std::chrono::nanoseconds::zero();
    m.node_timeout = spec.timeouts.node;
    m.hang_timeout = spec.timeouts.hang;
    m.collective_timeout = spec.timeouts.collective;
    m.rendezvous_timeout = spec.timeouts.rendezvous;
    m.tick = spec.timeouts.heartbeat;
    m.backoff = spec.recovery.backoff;
    m.backoff_max = spec.recovery.backoff_max;
    // Means of the recoveries measured here (none: the model's defaults are not this cluster's,
    // so nothing to compare).
    double respawn = 0, rendezvous = 0, restore = 0;
    std::size_t n = 0;
    for (const auto& ej : out["events"])
      if (ej.contains("recovery")) {
        respawn += ej["recovery"].value("respawn_s", 0.0);
        rendezvous += ej["recovery"].value("rendezvous_s", 0.0);
        restore += ej["recovery"].value("restore_s", 0.0);
        ++n;
      }
    if (n > 0) {
      const auto ns = [&](double sum) { return std::chrono::nanoseconds{static_cast<std::int64_t>(sum / n * 1e9)}; };
      m.process_start = ns(respawn);
      m.rendezvous = ns(rendezvous);
      m.state_size = std::uint64_t{1} << 20;
      m.memory_bandwidth = m.buddy_bandwidth =
          static_cast<double>(m.state_size) / std::max(restore / static_cast<double>(n), 1e-4);
      m.horizon = std::chrono::nanoseconds{static_cast<std::int64_t>(window * 1e9)};
      // The restart-all policy (recovery.policy) with this cluster's costs, not the model's
      // defaults for a launcher that restarts the job: the daemon finds an exit at once
      // (waitpid) and a hang by the hang timeout; every process starts in the measured respawn
      // time, the rendezvous takes the measured time whatever the world, the restore reads the
      // checkpoint at the measured speed, and checkpoints are written off the training path (the
      // baseline rate pays for them) at the anchor persist_every snapshots after the last.
      const auto policy = spec.recovery.restart_all() ? trace::policy_kind::restart_all : trace::policy_kind::in_place;
      if (policy == trace::policy_kind::restart_all) {
        m.restart_all_exit_detection = std::chrono::nanoseconds::zero();
        m.restart_all_hang_detection = spec.timeouts.hang;
        m.restart_all_process_start = m.process_start;
        m.restart_all_rendezvous = m.rendezvous;
        m.restart_all_rendezvous_per_rank = std::chrono::nanoseconds::zero();
        m.disk_bandwidth = m.memory_bandwidth;
        m.storage_bandwidth = 1e18;  // the measured restores already include the storage's share
        m.checkpoint_every = std::max<std::uint64_t>(
            policy::checkpoint_coordinator::interval_steps(spec.checkpoint.persist_every, spec.checkpoint.snapshot_every), 1);
        m.persist_bandwidth = 1e18;
      }
      auto sim = trace::simulate(*parsed.value, cluster, m, policy);
      if (sim) {
        simulated = sim->ratio();
        out["simulated"] = {{"policy", policy == trace::policy_kind::restart_all ? "restart-all" : "in-place"},
                            {"effective_ratio", sim->ratio()},
                            {"recoveries", sim->recoveries},
                            {"step_time_s", 1.0 / base_rate},
                            {"compute_share", m.compute_share},
                            {"process_start_s", respawn / n},
                            {"rendezvous_s", rendezvous / n},
                            {"restore_s", restore / n}};
      } else {
        out["simulated"] = {{"error", sim.error().message()}};
      }
    }
  }
  if (o.json) {
    std::cout << out.dump(2) << "\n";
    return was_settled ? 0 : 1;
  }
  std::cout << "\nline  event                     detect   respawn  rendezvous  restore  total      lost  restored-from\n";
  for (const auto& ej : out["events"]) {
    char row[256];
    if (!ej.contains("recovery")) {
      std::snprintf(row, sizeof row, "%-5u %-25s %s\n", ej["line"].get<unsigned>(), ej["event"].get<std::string>().c_str(),
                    "no recovery (the job went on)");
    } else {
      const auto& r = ej["recovery"];
      const auto ms = [&](const char* k) { return r.value(k, 0.0) * 1000.0; };
      std::snprintf(row, sizeof row, "%-5u %-25s %6.0f ms %5.0f ms %8.0f ms %5.1f ms %7.0f ms %5llu  %s @%llu\n",
                    ej["line"].get<unsigned>(), ej["event"].get<std::string>().c_str(), ms("detect_s"), ms("respawn_s"),
                    ms("rendezvous_s"), ms("restore_s"), ms("total_s"),
                    static_cast<unsigned long long>(r.value("steps_lost", 0ull)), r.value("source", "").c_str(),
                    static_cast<unsigned long long>(r.value("restored_step", 0ull)));
    }
    std::cout << row;
  }
  char summary[256];
  std::snprintf(summary, sizeof summary,
                "\n%zu event(s) in %.1f s: %llu steps trained, %llu lost; effective training time %.1f%% of the wall "
                "time (baseline %.0f steps/s",
                done.size(), wall, static_cast<unsigned long long>(end_step - start_step),
                static_cast<unsigned long long>(lost), ratio * 100.0, base_rate);
  std::cout << summary;
  if (after && after->seconds > 0)
    std::cout << ": " << std::lround(rate_before) << " before, "
              << std::lround(static_cast<double>(after->steps) / after->seconds) << " after";
  std::cout << ")\n";
  if (after && after->seconds > 0 && base_rate > 0) {
    const double drift = std::abs(static_cast<double>(after->steps) / after->seconds - rate_before) / base_rate;
    if (drift > 0.15)
      std::cout << "the machine's step rate moved by " << std::lround(drift * 100)
                << "% between the baseline before and after: the ratio is uncertain by about as much\n";
  }
  if (simulated) {
    std::snprintf(summary, sizeof summary,
                  "simulated with the durations measured here: %.1f%% (live %.1f%%, %+.1f percentage points)\n",
                  *simulated * 100.0, ratio * 100.0, (*simulated - ratio) * 100.0);
    std::cout << summary;
  }
  if (!was_settled)
    std::cout << "not settled: a recovery was still running after " << settle_s << " s\n";
  return was_settled ? 0 : 1;
}

}  // namespace

void add_replay_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<connection_options>();
  auto file = std::make_shared<std::string>();
  auto speed = std::make_shared<double>(1.0);
  auto baseline = std::make_shared<double>(3.0);
  auto settle = std::make_shared<double>(120.0);
  auto yes = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("replay", "Inject a failure trace into the running job, each event at its time or step, "
                                           "then report each recovery and the effective training time");
  add_connection_options(cmd, *o);
  cmd->add_option("file", *file, "The trace (JSON Lines, docs/TRACES.md)")->required();
  cmd->add_option("--speed", *speed, "Trace seconds per wall second (default 1)")->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--baseline", *baseline, "Seconds of failure-free training measured before the replay, and again after it (default 3)")
      ->check(CLI::Range(0.5, 600.0));
  cmd->add_option("--settle", *settle, "Seconds to wait for the last recovery to finish (default 120)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_flag("--yes", *yes, "Do it without asking (required when not interactive)");
  cmd->callback([o, file, speed, baseline, settle, yes, &exit_code] {
    exit_code = replay(*o, *file, *speed, *baseline, *settle, *yes);
  });
}

}  // namespace rekindle::apps
