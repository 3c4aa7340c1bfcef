#include "trace/commands.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include "common/files.hpp"
#include "common/clock.hpp"
#include "common/text.hpp"
#include "config/load.hpp"
#include "trace/convert.hpp"
#include "trace/model.hpp"
#include "trace/simulator.hpp"
#include "trace/trace.hpp"

namespace rekindle::trace {

namespace {

using ordered_json = nlohmann::ordered_json;

// At most this many errors are listed; the count says how many more there are.
constexpr std::size_t errors_shown = 100;

template <class Diagnostics>
void print_errors(std::ostream& err, const std::string& what, const Diagnostics& errors) {
  err << "rekindle: " << errors.size() << (errors.size() == 1 ? " error" : " errors") << " in " << what << "\n";
  std::size_t shown = 0;
  for (const auto& e : errors) {
    if (shown++ == errors_shown) {
      err << "  ... and " << errors.size() - errors_shown << " more\n";
      break;
    }
    err << "  " << e.to_string() << "\n";
  }
}

// Prints a multi-line status message indented under a headline.
void print_status(std::ostream& err, const std::string& headline, const status& st) {
  err << "rekindle: " << headline << "\n";
  for (auto line : split(st.message(), '\n'))
    err << "  " << line << "\n";
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent(double share) { return fixed(100.0 * share, 2) + " %"; }

std::string days_text(double seconds) { return fixed(seconds / 86400.0, 1) + " days"; }

std::string category_of(const fault_event& e) {
  if (const auto* c = e.extension("x-category")) {
    auto j = ordered_json::parse(*c, nullptr, false);
    if (j.is_string())
      return j.get<std::string>();
  }
  return std::string{to_string(e.kind)};
}

// Categories by count, largest first: "158 gpu, 97 stress-test, ...".
std::vector<std::pair<std::string, std::uint32_t>> categories(const fault_trace& t) {
  std::map<std::string, std::uint32_t> count;
  for (const auto& e : t.events)
    ++count[category_of(e)];
  std::vector<std::pair<std::string, std::uint32_t>> out(count.begin(), count.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::string categories_text(const fault_trace& t, std::size_t most) {
  const auto cats = categories(t);
  std::string out;
  for (std::size_t i = 0; i < cats.size() && i < most; ++i)
    out += (i == 0 ? "" : ", ") + with_commas(cats[i].second) + " " + cats[i].first;
  if (cats.size() > most)
    out += ", …";
  return out;
}

std::string kinds_text(const fault_trace& t) {
  std::map<std::string, std::uint32_t> count;
  for (const auto& e : t.events)
    ++count[std::string{to_string(e.kind)}];
  std::string out;
  for (const auto& [k, n] : count)
    out += (out.empty() ? "" : ", ") + with_commas(n) + " " + k;
  return out;
}

// Writes `t` to `path` (or `out` for "" and "-").
int emit(const fault_trace& t, const std::string& path, std::ostream& out, std::ostream& err) {
  if (path.empty() || path == "-") {
    out << to_jsonl(t);
    return out ? exit_ok : exit_failure;
  }
  if (auto st = write_file(t, path); !st.ok()) {
    err << "rekindle: " << st.message() << "\n";
    return exit_failure;
  }
  return exit_ok;
}

double trace_duration(const fault_trace& t, const model& m) {
  if (m.horizon.count() > 0)
    return to_seconds(m.horizon);
  if (t.header.duration)
    return *t.header.duration;
  double last = 0;
  for (const auto& e : t.events)
    if (e.at)
      last = *e.at;
  return last + 3600.0;
}

ordered_json result_json(const sim_result& r, double elapsed) {
  ordered_json lost = ordered_json::object();
  for (std::size_t i = 0; i < lost_count; ++i)
    lost[std::string{to_string(static_cast<trace::lost>(i))}] = r.lost_time[i];
  ordered_json notes = ordered_json::object();
  for (const auto& [k, v] : r.notes)
    notes[k] = v;
  return ordered_json{
      {"policy", std::string{to_string(r.policy)}},
      {"description", std::string{describe(r.policy)}},
      {"ratio", r.ratio()},
      {"wall_s", r.wall},
      {"useful_s", r.useful},
      {"lost_s", lost},
      {"lost_to_recovery", r.wall > 0 ? r.lost_to_recovery() / r.wall : 0.0},
      {"lost_to_snapshots", r.wall > 0 ? r.lost_to_snapshots() / r.wall : 0.0},
      {"degraded", r.wall > 0 ? r.lost_in(lost::degraded) / r.wall : 0.0},
      {"steps", r.steps},
      {"faults", r.faults},
      {"hit", r.hit},
      {"not_reached", r.not_reached},
      {"recoveries", r.recoveries},
      {"rank_restarts", r.rank_restarts},
      {"restores", {{"memory", r.restores_memory}, {"buddy", r.restores_buddy}, {"disk", r.restores_disk}, {"scratch", r.restores_scratch}}},
      {"checkpoints", r.checkpoints},
      {"checkpoints_failed", r.checkpoints_failed},
      {"world", {{"start", r.world_start}, {"min", r.world_min}, {"end", r.world_end}}},
      {"end_state", r.end_state},
      {"reason", r.reason},
      {"notes", notes},
      {"elapsed_s", elapsed},
  };
}

void print_breakdown(std::ostream& out, const sim_result& r) {
  out << "policy: " << describe(r.policy) << "\n";
  out << "effective training time  " << percent(r.ratio()) << "  (useful " << days_text(r.useful) << " of "
      << days_text(r.wall) << ")\n";
  out << "where the rest went            time      share\n";
  for (std::size_t i = 0; i < lost_count; ++i) {
    const auto l = static_cast<lost>(i);
    char line[160];
    std::snprintf(line, sizeof line, "  %-14s %16s  %9s\n", std::string{to_string(l)}.c_str(),
                  format_duration(std::chrono::nanoseconds{std::llround(r.lost_in(l) * 1e9)}).c_str(),
                  percent(r.wall > 0 ? r.lost_in(l) / r.wall : 0).c_str());
    out << line;
  }
  out << "recoveries " << with_commas(r.recoveries) << " (rank restarts " << with_commas(r.rank_restarts) << "); restores: "
      << r.restores_memory << " from memory, " << r.restores_buddy << " from a buddy, " << r.restores_disk << " from disk, "
      << r.restores_scratch << " from step 0\n";
  out << "world: " << with_commas(r.world_start) << " ranks at the start, " << with_commas(r.world_end) << " at the end, "
      << with_commas(r.world_min) << " at the least\n";
  out << "faults: " << with_commas(r.faults) << ", " << with_commas(r.hit) << " hit the job";
  if (r.not_reached > 0)
    out << ", " << with_commas(r.not_reached) << " at a step never reached";
  out << "; checkpoints: " << with_commas(r.checkpoints) << " (" << with_commas(r.checkpoints_failed) << " failed)\n";
  out << "the job is " << r.end_state << (r.reason.empty() ? "" : ": " + r.reason) << "\n";
}

void print_comparison(std::ostream& out, const std::vector<sim_result>& results) {
  char line[200];
  std::snprintf(line, sizeof line, "%-40s %14s %17s %18s %9s %9s\n", "policy", "effective time", "lost to recovery",
                "lost to snapshots", "degraded", "restarts");
  out << line;
  for (const auto& r : results) {
    const double w = r.wall > 0 ? r.wall : 1;
    std::snprintf(line, sizeof line, "%-40s %12s %17s %18s %9s %9s\n", std::string{describe(r.policy)}.c_str(),
                  (fixed(100 * r.ratio(), 1) + " %").c_str(), (fixed(100 * r.lost_to_recovery() / w, 1) + " %").c_str(),
                  (fixed(100 * r.lost_to_snapshots() / w, 1) + " %").c_str(),
                  (fixed(100 * r.lost_in(lost::degraded) / w, 1) + " %").c_str(), with_commas(r.recoveries).c_str());
    out << line;
  }
}

// What a failure costs each policy in this world, side by side: the assumptions behind the
// figures above (docs/TRACES.md, "Policies").
void print_assumptions(std::ostream& out, const model& m, const std::vector<policy_kind>& policies, std::uint32_t world) {
  std::vector<std::vector<assumption>> rows;
  for (auto p : policies)
    rows.push_back(assumptions(m, p, world));
  out << "assumed, per failure at " << with_commas(world) << " ranks";
  for (auto p : policies)
    out << (p == policies.front() ? " (" : "; ") << to_string(p);
  out << "):\n";
  std::map<std::string, std::vector<std::string>> by_what;
  std::vector<std::string> order;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (const auto& a : rows[i]) {
      auto& v = by_what[a.what];
      if (v.empty())
        order.push_back(a.what);
      v.resize(rows.size(), "-");
      v[i] = a.value;
    }
  for (const auto& what : order) {
    char line[400];
    const auto& v = by_what[what];
    if (v.size() == 1)
      std::snprintf(line, sizeof line, "  %-34s %s\n", what.c_str(), v[0].c_str());
    else
      std::snprintf(line, sizeof line, "  %-34s %-32s %s\n", what.c_str(), v[0].c_str(), v[1].c_str());
    out << line;
  }
}

// The numeric value of a model key's text, for plotting: seconds, bytes, bytes per second, count.
double numeric(const model& m, const std::string& key) {
  const auto text = model_value(m, key);
  if (auto d = parse_duration(text))
    return to_seconds(*d);
  auto t = std::string_view{text};
  if (t.ends_with("/s"))
    t.remove_suffix(2);
  if (auto s = parse_size(t))
    return static_cast<double>(*s);
  return std::strtod(text.c_str(), nullptr);
}

}  // namespace

expected<cluster_shape> resolve_cluster(const cluster_options& o) {
  if (!o.file.empty()) {
    if (o.nodes > 0 || o.ranks_per_node > 0)
      return status{errc::invalid_argument, "give either --cluster FILE or --nodes N --ranks-per-node K, not both"};
    if (o.rack_size > 0)
      return status{errc::invalid_argument, "--rack-size goes with --nodes; a cluster file names each node's domain"};
    return load_cluster(o.file);
  }
  if (o.nodes == 0 && o.ranks_per_node == 0)
    return status{errc::invalid_argument, "no cluster: give --cluster FILE (a rekindle configuration) or --nodes N --ranks-per-node K"};
  if (o.nodes == 0 || o.ranks_per_node == 0)
    return status{errc::invalid_argument, "--nodes and --ranks-per-node go together (e.g. --nodes 2048 --ranks-per-node 8)"};
  return cluster_shape::compact(o.nodes, o.ranks_per_node, 0, o.rack_size);
}

int convert_command(const convert_options& o, std::ostream& out, std::ostream& err) {
  if (o.format != "infinitehbd") {
    const std::vector<std::string> formats{"infinitehbd"};
    err << "rekindle: '" << o.format << "' is not a format I can convert" << did_you_mean(o.format, formats)
        << "; formats: infinitehbd\n";
    return exit_bad_input;
  }
  auto cluster = resolve_cluster(o.cluster);
  if (!cluster) {
    print_status(err, "cannot use the cluster:", cluster.error());
    return exit_bad_input;
  }
  auto r = convert_infinitehbd_file(o.input, *cluster, {.time_scale = o.time_scale});
  if (!r.ok()) {
    print_errors(err, o.input + "; nothing was written", r.errors);
    return exit_bad_input;
  }
  const auto code = emit(*r.value, o.out, out, err);
  if (code != exit_ok)
    return code;
  err << "converted " << with_commas(r.faults) << " faults of " << with_commas(r.servers) << " servers onto "
      << cluster->describe() << ": " << kinds_text(*r.value) << "; " << days_text(r.value->header.duration.value_or(0))
      << " at time scale " << o.time_scale;
  if (r.by_level_default > 0)
    err << "; " << r.by_level_default << " of unknown classes mapped by their level";
  if (r.open_at_end > 0)
    err << "; " << r.open_at_end << " still open at the end (never repaired)";
  err << (o.out.empty() || o.out == "-" ? "\n" : " -> " + o.out + "\n");
  return exit_ok;
}

int generate_command(const generate_command_options& o, std::ostream& out, std::ostream& err) {
  auto cluster = resolve_cluster(o.cluster);
  if (!cluster) {
    print_status(err, "cannot use the cluster:", cluster.error());
    return exit_bad_input;
  }
  if (o.spares > 65536) {
    err << "rekindle: --spares: at most 65,536, got " << with_commas(o.spares) << "\n";
    return exit_bad_input;
  }
  cluster->add_spares(o.spares);
  generate_options g;
  g.domain_rate = o.domain_rate;
  g.rate = o.rate;
  g.days = o.days;
  g.seed = o.seed;
  auto mix = parse_mix(o.mix.empty() ? std::string{default_mix} : o.mix);
  if (!mix) {
    err << "rekindle: " << mix.error().message() << "\n";
    return exit_bad_input;
  }
  g.mix = *mix;
  for (const auto& [flag, text, target] : {std::tuple{"--repair", &o.repair, &g.repair_mean}, std::tuple{"--outage", &o.outage, &g.outage_mean}}) {
    auto d = parse_duration(*text);
    if (!d) {
      err << "rekindle: " << flag << ": " << d.error().message() << "\n";
      return exit_bad_input;
    }
    *target = to_seconds(*d);
  }
  auto t = generate(*cluster, g);
  if (!t) {
    err << "rekindle: " << t.error().message() << "\n";
    return exit_bad_input;
  }
  const auto code = emit(*t, o.out, out, err);
  if (code == exit_ok)
    err << "generated " << with_commas(t->events.size()) << " faults on " << cluster->describe() << " over "
        << days_text(*t->header.duration) << ": " << categories_text(*t, 20)
        << (o.out.empty() || o.out == "-" ? "\n" : " -> " + o.out + "\n");
  return code;
}

int check_command(const check_options& o, std::ostream& out, std::ostream& err) {
  std::optional<cluster_shape> cluster;
  if (!o.cluster.file.empty() || o.cluster.nodes > 0 || o.cluster.ranks_per_node > 0) {
    auto c = resolve_cluster(o.cluster);
    if (!c) {
      print_status(err, "cannot use the cluster:", c.error());
      return exit_bad_input;
    }
    cluster = std::move(*c);
  }
  auto r = load_file(o.input, cluster ? &*cluster : nullptr);
  if (!r.ok()) {
    print_errors(err, o.input + "; the trace was not used", r.errors);
    return exit_bad_input;
  }
  const auto& t = *r.value;
  out << o.input << ": a valid trace of " << with_commas(t.events.size()) << (t.events.size() == 1 ? " event" : " events");
  if (t.header.duration)
    out << " over " << days_text(*t.header.duration);
  out << (cluster ? " for " + cluster->describe() : std::string{}) << "\n";
  if (!t.header.source.empty())
    out << "source: " << t.header.source << "\n";
  if (!t.events.empty()) {
    out << "kinds: " << kinds_text(t) << "\n";
    out << "categories: " << categories_text(t, 30) << "\n";
  }
  return exit_ok;
}

int simulate_command(const simulate_options& o, std::ostream& out, std::ostream& err) {
  const auto began = std::chrono::steady_clock::now();
  // 1. The cluster and the model: defaults, the cluster file's settings, the job file, --set.
  model m;
  cluster_shape cluster;
  if (!o.cluster.file.empty()) {
    if (o.cluster.nodes > 0 || o.cluster.ranks_per_node > 0) {
      err << "rekindle: give either --cluster FILE or --nodes N --ranks-per-node K, not both\n";
      return exit_bad_input;
    }
    auto loaded = config::load_file(o.cluster.file);
    if (!loaded.ok()) {
      print_errors(err, "the cluster configuration; nothing was simulated", loaded.errors);
      return exit_bad_input;
    }
    cluster = cluster_shape::from_spec(*loaded.value);
    apply_config(m, *loaded.value);
  } else {
    auto c = resolve_cluster(o.cluster);
    if (!c) {
      print_status(err, "cannot use the cluster:", c.error());
      return exit_bad_input;
    }
    cluster = std::move(*c);
  }
  if (!o.job.empty()) {
    auto loaded = load_model(o.job, m);
    if (!loaded) {
      print_status(err, "errors in the model file; nothing was simulated:", loaded.error());
      return exit_bad_input;
    }
    m = *loaded;
  }
  for (const auto& kv : o.set) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      err << "rekindle: --set '" << kv << "' is not KEY=VALUE\n";
      return exit_bad_input;
    }
    if (auto st = set_model(m, trim(std::string_view{kv}.substr(0, eq)), std::string_view{kv}.substr(eq + 1)); !st.ok()) {
      err << "rekindle: --set: " << st.message() << "\n";
      return exit_bad_input;
    }
  }
  if (o.spares >= 0)
    m.spares = static_cast<std::uint32_t>(std::min<std::int64_t>(o.spares, 65536));
  if (auto st = validate(m); !st.ok()) {
    err << "rekindle: the model is not valid: " << st.message() << "\n";
    return exit_bad_input;
  }

  // 2. The policies.
  std::vector<policy_kind> policies;
  if (o.compare) {
    policies = {policy_kind::in_place, policy_kind::restart_all};
  } else if (o.policy == "in-place") {
    policies = {policy_kind::in_place};
  } else if (o.policy == "restart-all") {
    policies = {policy_kind::restart_all};
  } else {
    const std::vector<std::string> names{"in-place", "restart-all"};
    err << "rekindle: --policy: '" << o.policy << "' is not a policy" << did_you_mean(o.policy, names)
        << "; policies: in-place, restart-all\n";
    return exit_bad_input;
  }

  // 3. The sweep.
  std::string sweep_key;
  std::vector<std::string> sweep_values;
  if (!o.sweep.empty()) {
    const auto eq = o.sweep.find('=');
    sweep_key = std::string{trim(std::string_view{o.sweep}.substr(0, eq == std::string::npos ? o.sweep.size() : eq))};
    if (eq == std::string::npos || eq + 1 >= o.sweep.size()) {
      err << "rekindle: --sweep '" << o.sweep << "' is not KEY=V1,V2,... (e.g. snapshot_every=1,5,10,20)\n";
      return exit_bad_input;
    }
    if (!sweepable(sweep_key)) {
      const auto keys = model_keys();
      err << "rekindle: --sweep: '" << sweep_key << "' is not a model key that takes numbers" << did_you_mean(sweep_key, keys) << "\n";
      return exit_bad_input;
    }
    for (auto v : split(std::string_view{o.sweep}.substr(eq + 1), ',')) {
      model probe = m;
      if (auto st = set_model(probe, sweep_key, v); !st.ok()) {
        err << "rekindle: --sweep: " << st.message() << "\n";
        return exit_bad_input;
      }
      if (auto st = validate(probe); !st.ok()) {
        err << "rekindle: --sweep: " << sweep_key << "=" << trim(v) << ": " << st.message() << "\n";
        return exit_bad_input;
      }
      sweep_values.emplace_back(trim(v));
    }
  } else if (!o.data.empty()) {
    err << "rekindle: --data writes a sweep's points; give --sweep too\n";
    return exit_bad_input;
  }

  // 4. The trace, checked against the cluster with its spares.
  auto full = cluster;
  full.add_spares(m.spares);
  auto parsed = load_file(o.input, &full);
  if (!parsed.ok()) {
    print_errors(err, o.input + "; nothing was simulated", parsed.errors);
    // A trace written for another cluster is the usual cause of many target errors.
    const auto text = read_file_bounded(o.input, file_limits::trace, "trace file");
    if (text && !text->empty()) {
      const auto first = std::string_view{*text}.substr(0, text->find('\n'));
      auto h = parse(std::string{first} + "\n", o.input);
      if (h.ok() && (h.value->header.world.value_or(full.world()) != full.world() ||
                     h.value->header.nodes.value_or(static_cast<std::uint32_t>(full.nodes().size())) != full.nodes().size()))
        err << "  (the trace was written for " << with_commas(h.value->header.nodes.value_or(0)) << " nodes and "
            << with_commas(h.value->header.world.value_or(0)) << " ranks; the cluster is " << full.describe() << ")\n";
    }
    return exit_bad_input;
  }
  const auto& t = *parsed.value;

  // 5. Run.
  auto run_all = [&](const model& mm) -> expected<std::vector<std::pair<sim_result, double>>> {
    std::vector<std::pair<sim_result, double>> out_results;
    for (auto p : policies) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = simulate(t, cluster, mm, p);
      if (!r)
        return r.error();
      out_results.emplace_back(std::move(*r), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return out_results;
  };
  ordered_json doc;
  doc["trace"] = {{"file", o.input},
                  {"source", t.header.source},
                  {"events", t.events.size()},
                  {"duration_s", trace_duration(t, m)},
                  {"kinds", ordered_json::object()},
                  {"categories", ordered_json::object()}};
  for (const auto& [k, n] : categories(t))
    doc["trace"]["categories"][k] = n;
  {
    std::map<std::string, std::uint32_t> kinds;
    for (const auto& e : t.events)
      ++kinds[std::string{to_string(e.kind)}];
    for (const auto& [k, n] : kinds)
      doc["trace"]["kinds"][k] = n;
  }
  doc["cluster"] = {{"nodes", full.nodes().size()}, {"world", full.world()}, {"spares", full.spares()}, {"description", full.describe()}};
  doc["model"] = ordered_json::object();
  for (const auto& key : model_keys())
    doc["model"][key] = model_value(m, key);

  const std::string headline = with_commas(cluster.world()) + " accelerators · " + days_text(trace_duration(t, m)) + " · " +
                               with_commas(t.events.size()) + " faults" +
                               (t.events.empty() ? std::string{} : " (" + categories_text(t, 6) + ")");
  if (sweep_values.empty()) {
    auto results = run_all(m);
    if (!results) {
      err << "rekindle: the simulation failed: " << results.error().message() << "\n";
      return exit_failure;
    }
    doc["results"] = ordered_json::array();
    for (const auto& [r, elapsed] : *results) {
      auto j = result_json(r, elapsed);
      j["assumptions"] = ordered_json::object();
      for (const auto& a : assumptions(m, r.policy, cluster.world()))
        j["assumptions"][a.what] = a.value;
      doc["results"].push_back(std::move(j));
    }
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    doc["elapsed_s"] = total;
    if (o.json) {
      out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
      return exit_ok;
    }
    out << headline << "\n";
    if (full.spares() > 0)
      out << "cluster: " << full.describe() << "\n";
    if (results->size() == 1) {
      print_breakdown(out, results->front().first);
    } else {
      std::vector<sim_result> rs;
      for (const auto& [r, e] : *results)
        rs.push_back(r);
      print_comparison(out, rs);
    }
    print_assumptions(out, m, policies, cluster.world());
    out << "simulated in " << fixed(total, 2) << " s\n";
    return exit_ok;
  }

  // A sweep: one run per value.
  ordered_json points = ordered_json::array();
  std::vector<std::vector<double>> ratios(policies.size());
  std::vector<double> xs;
  for (const auto& v : sweep_values) {
    model mm = m;
    (void)set_model(mm, sweep_key, v);
    auto results = run_all(mm);
    if (!results) {
      err << "rekindle: the simulation with " << sweep_key << "=" << v << " failed: " << results.error().message() << "\n";
      return exit_failure;
    }
    ordered_json point{{"value", v}, {"x", numeric(mm, sweep_key)}, {"results", ordered_json::array()}};
    xs.push_back(numeric(mm, sweep_key));
    for (std::size_t i = 0; i < results->size(); ++i) {
      point["results"].push_back(result_json((*results)[i].first, (*results)[i].second));
      ratios[i].push_back((*results)[i].first.ratio());
    }
    points.push_back(point);
  }
  ordered_json peaks = ordered_json::array();
  std::vector<std::size_t> best(policies.size(), 0);
  for (std::size_t i = 0; i < policies.size(); ++i) {
    best[i] = static_cast<std::size_t>(std::max_element(ratios[i].begin(), ratios[i].end()) - ratios[i].begin());
    peaks.push_back({{"policy", std::string{to_string(policies[i])}}, {"value", sweep_values[best[i]]}, {"ratio", ratios[i][best[i]]}});
  }
  doc["sweep"] = {{"key", sweep_key}, {"points", points}, {"peaks", peaks}};
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  doc["elapsed_s"] = total;
  if (!o.data.empty()) {
    std::ofstream data(o.data, std::ios::trunc);
    data.precision(12);
    data << "# rekindle simulate " << o.input << " --sweep " << o.sweep << "\n";
    data << "# x: " << sweep_key << " (seconds, bytes or a count); then the effective-training-time ratio of";
    for (auto p : policies)
      data << " " << to_string(p);
    data << "; then the value as given\n";
    for (std::size_t j = 0; j < sweep_values.size(); ++j) {
      data << xs[j];
      for (std::size_t i = 0; i < policies.size(); ++i)
        data << " " << ratios[i][j];
      data << " \"" << sweep_values[j] << "\"\n";
    }
    if (!data) {
      err << "rekindle: " << o.data << ": cannot write the sweep data\n";
      return exit_failure;
    }
  }
  if (o.json) {
    out << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
    return exit_ok;
  }
  out << headline << "\n";
  char line[200];
  std::snprintf(line, sizeof line, "%-20s", sweep_key.c_str());
  out << line;
  for (auto p : policies) {
    std::snprintf(line, sizeof line, " %40s", std::string{describe(p)}.c_str());
    out << line;
  }
  out << "\n";
  for (std::size_t j = 0; j < sweep_values.size(); ++j) {
    std::snprintf(line, sizeof line, "%-20s", sweep_values[j].c_str());
    out << line;
    for (std::size_t i = 0; i < policies.size(); ++i) {
      const bool flat = *std::min_element(ratios[i].begin(), ratios[i].end()) == ratios[i][best[i]];
      std::snprintf(line, sizeof line, " %38s%s", percent(ratios[i][j]).c_str(), best[i] == j && !flat ? " ←" : "  ");
      out << line;
    }
    out << "\n";
  }
  for (std::size_t i = 0; i < policies.size(); ++i) {
    const auto [low, high] = std::minmax_element(ratios[i].begin(), ratios[i].end());
    if (*low == *high)
      out << "peak (" << to_string(policies[i]) << "): none; " << sweep_key << " does not change this policy\n";
    else
      out << "peak (" << to_string(policies[i]) << "): " << sweep_key << " = " << sweep_values[best[i]] << ", "
          << percent(ratios[i][best[i]]) << "\n";
  }
  if (!o.data.empty())
    out << "sweep data: " << o.data << " (scripts/plot-sweep " << o.data << " sweep.png)\n";
  out << "simulated in " << fixed(total, 2) << " s\n";
  return exit_ok;
}

}  // namespace rekindle::trace
