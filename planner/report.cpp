#include "planner/report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "common/text.hpp"
#include "planner/cost.hpp"

namespace rekindle::planner {

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string seconds(double s) { return fixed(s, 3) + " s"; }

// "1.42 B", "350 M", "12.3 k".
std::string count_text(double n) {
  if (n >= 1e9)
    return fixed(n / 1e9, 2) + " B";
  if (n >= 1e6)
    return fixed(n / 1e6, n >= 1e8 ? 0 : 1) + " M";
  if (n >= 1e3)
    return fixed(n / 1e3, 1) + " k";
  return fixed(n, 0);
}

std::string with_commas(std::uint64_t n) {
  auto digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

// "0-3", "0,2,5", "4".
std::string id_ranges(std::vector<std::uint32_t> ids) {
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1)
      ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ids[i]);
    if (j > i)
      out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

std::string tensor_text(const plan& pl) {
  std::string out;
  for (const auto& s : pl.stages)
    out += (out.empty() ? "" : ",") + std::to_string(s.tensor);
  return out;
}

std::string layers_text(const plan& pl) {
  std::string out;
  for (const auto& s : pl.stages)
    out += (out.empty() ? "" : ",") + std::to_string(s.layers);
  return out;
}

// "32 (16 a100, 16 h100)".
std::string devices_text(const problem& p, const plan& pl) {
  std::map<std::uint32_t, std::uint32_t> per_type;
  for (const auto& rep : pl.replicas)
    for (const auto& st : rep.stages)
      per_type[p.hardware.nodes[st.node].type] += static_cast<std::uint32_t>(st.devices.size());
  std::string inner;
  for (const auto& [t, n] : per_type)
    inner += (inner.empty() ? "" : ", ") + std::to_string(n) + " " + p.hardware.types[t].name;
  return std::to_string(pl.devices()) + (per_type.size() > 1 ? " (" + inner + ")" : " " + p.hardware.types[per_type.begin()->first].name);
}

const memory_use& fullest(const plan& pl) {
  return *std::max_element(pl.memory.begin(), pl.memory.end(), [](const memory_use& a, const memory_use& b) {
    return a.total() / a.capacity < b.total() / b.capacity;
  });
}

double tokens_per_second(const problem& p, const plan& pl) {
  return static_cast<double>(p.workload.global_batch) * p.workload.seq_len / pl.step_time;
}

// Pads or cuts `s` to `width` display columns (the text is ASCII apart from "×").
std::string pad(const std::string& s, std::size_t width) {
  std::size_t shown = 0;
  for (unsigned char c : s)
    shown += (c & 0xC0) != 0x80 ? 1 : 0;
  return shown >= width ? s + " " : s + std::string(width - shown, ' ');
}

struct term {
  const char* name;
  double step_breakdown::*field;
};
constexpr term terms[] = {
    {"compute", &step_breakdown::compute},
    {"tensor-parallel all-reduces", &step_breakdown::tensor_parallel},
    {"pipeline sends", &step_breakdown::pipeline_p2p},
    {"pipeline bubble", &step_breakdown::bubble},
    {"data-parallel reduction", &step_breakdown::data_parallel},
    {"optimizer step", &step_breakdown::optimizer},
};

nlohmann::json plan_json(const problem& p, const plan& pl, std::size_t rank, const plan* next) {
  using nlohmann::json;
  json j;
  j["rank"] = rank;
  j["shape"] = pl.shape();
  j["step_time"] = pl.step_time;
  j["tokens_per_second"] = tokens_per_second(p, pl);
  j["data"] = pl.data();
  j["pipeline"] = pl.pipeline();
  j["tensor"] = json::array();
  for (const auto& s : pl.stages)
    j["tensor"].push_back(s.tensor);
  j["micro_batch_size"] = pl.micro_batch_size;
  j["micro_batches"] = pl.micro_batches;
  j["recompute"] = pl.recompute;
  j["devices"] = pl.devices();
  j["idle_devices"] = pl.idle_devices;
  j["critical_replica"] = pl.critical_replica;
  const auto& b = pl.breakdown;
  j["breakdown"] = {{"compute", b.compute},           {"tensor_parallel", b.tensor_parallel},
                    {"pipeline_p2p", b.pipeline_p2p}, {"bubble", b.bubble},
                    {"data_parallel", b.data_parallel}, {"optimizer", b.optimizer}};
  j["stages"] = json::array();
  for (const auto& s : pl.stages)
    j["stages"].push_back({{"first_layer", s.first_layer}, {"layers", s.layers}, {"tensor", s.tensor}});
  j["replicas"] = json::array();
  for (const auto& rep : pl.replicas) {
    json r;
    r["micro_batches"] = rep.micro_batches;
    r["stages"] = json::array();
    for (const auto& st : rep.stages) {
      const auto& node = p.hardware.nodes[st.node];
      r["stages"].push_back({{"node", node.name}, {"type", p.hardware.types[node.type].name}, {"devices", st.devices}});
    }
    j["replicas"].push_back(std::move(r));
  }
  j["memory"] = json::array();
  for (const auto& u : pl.memory)
    j["memory"].push_back({{"stage", u.stage},
                           {"type", p.hardware.types[u.type].name},
                           {"weights", u.weights},
                           {"gradients", u.gradients},
                           {"optimizer", u.optimizer},
                           {"activations", u.activations},
                           {"buffers", u.buffers},
                           {"margin", u.margin},
                           {"total", u.total()},
                           {"usable", u.capacity}});
  if (next != nullptr) {
    json diff;
    for (const auto& t : terms)
      diff[t.name] = next->breakdown.*(t.field) - b.*(t.field);
    j["versus_next"] = {{"rank", rank + 1},
                        {"shape", next->shape()},
                        {"slower_by", next->step_time - pl.step_time},
                        {"term_differences", diff},
                        {"why", compare(pl, *next, rank + 1)}};
  }
  return j;
}

}  // namespace

std::string describe_problem(const problem& p) {
  const auto& hw = p.hardware;
  const auto& m = p.workload;
  std::string types;
  for (std::uint32_t t = 0; t < hw.types.size(); ++t)
    if (hw.device_count(t) > 0)
      types += (types.empty() ? "" : ", ") + std::to_string(hw.device_count(t)) + " × " + hw.types[t].name;
  return "cluster " + hw.name + " (" + std::to_string(hw.device_count()) + " devices: " + types + "), model " +
         m.name + " (" + count_text(model_parameters(m)) + " parameters, " + std::to_string(m.layers) +
         " layers), global batch " + std::to_string(m.global_batch) + " × " + std::to_string(m.seq_len) + " tokens";
}

std::string format_stats(const search_stats& stats) {
  return std::string{to_string(stats.mode)} + " search: " + with_commas(stats.layouts) + " layouts, " +
         with_commas(stats.evaluations) + " plans evaluated in " + fixed(stats.seconds, 2) + " s" +
         (stats.stopped ? " (stopped early)" : "");
}

std::string format_table(const problem& p, const std::vector<plan>& plans) {
  std::ostringstream out;
  const std::size_t w[] = {3, 10, 10, 5, 4, 12, 13, 10, 18, 24};
  out << pad("#", w[0]) << pad("step", w[1]) << pad("tokens/s", w[2]) << pad("d", w[3]) << pad("p", w[4])
      << pad("tensor", w[5]) << pad("micro-batch", w[6]) << pad("recompute", w[7]) << pad("layers/stage", w[8])
      << pad("devices", w[9]) << "memory (fullest device)\n";
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const auto& pl = plans[i];
    const auto& u = fullest(pl);
    out << pad(std::to_string(i + 1), w[0]) << pad(seconds(pl.step_time), w[1])
        << pad(count_text(tokens_per_second(p, pl)), w[2]) << pad(std::to_string(pl.data()), w[3])
        << pad(std::to_string(pl.pipeline()), w[4]) << pad(tensor_text(pl), w[5])
        << pad(std::to_string(pl.micro_batch_size) + " × " + std::to_string(pl.micro_batches), w[6])
        << pad(pl.recompute ? "yes" : "no", w[7]) << pad(layers_text(pl), w[8]) << pad(devices_text(p, pl), w[9])
        << format_bytes(u.total()) << " / " << format_bytes(u.capacity) << " (" << p.hardware.types[u.type].name
        << ", stage " << u.stage << ")\n";
  }
  return out.str();
}

std::string format_placement(const problem& p, const plan& pl, std::size_t limit) {
  std::ostringstream out;
  for (std::size_t r = 0; r < pl.replicas.size() && r < limit; ++r) {
    const auto& rep = pl.replicas[r];
    out << "  replica " << r << " (" << rep.micro_batches << " micro-batch" << (rep.micro_batches == 1 ? "" : "es")
        << (r == pl.critical_replica ? ", finishes last" : "") << "):";
    for (std::size_t s = 0; s < rep.stages.size(); ++s) {
      const auto& st = rep.stages[s];
      const auto& node = p.hardware.nodes[st.node];
      out << (s == 0 ? " " : ", ") << "stage " << s << " on " << p.hardware.types[node.type].name << " " << node.name
          << "[" << id_ranges(st.devices) << "]";
    }
    out << "\n";
  }
  if (pl.replicas.size() > limit)
    out << "  ... " << pl.replicas.size() - limit << " more replicas (--json lists every one)\n";
  return out.str();
}

std::string compare(const plan& a, const plan& b, std::size_t b_rank) {
  const double diff = b.step_time - a.step_time;
  std::string out = fixed(100 * diff / b.step_time, 1) + "% faster than plan " + std::to_string(b_rank) + " (" +
                    b.shape() + ", " + seconds(b.step_time) + ")";
  std::vector<std::pair<double, const char*>> deltas;
  for (const auto& t : terms)
    deltas.emplace_back(b.breakdown.*(t.field) - a.breakdown.*(t.field), t.name);
  std::stable_sort(deltas.begin(), deltas.end(),
                   [](const auto& x, const auto& y) { return std::abs(x.first) > std::abs(y.first); });
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < deltas.size() && i < 3; ++i) {
    const auto& [d, name] = deltas[i];
    if (std::abs(d) < 5e-4 * std::max(a.step_time, 1e-9))
      continue;
    parts.push_back(fixed(std::abs(d), 3) + " s " + (d > 0 ? "more " : "less ") + name);
  }
  if (parts.empty()) {
    out += ": the same terms, within rounding";
  } else {
    out += ": plan " + std::to_string(b_rank) + " has ";
    for (std::size_t i = 0; i < parts.size(); ++i)
      out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  }
  if (a.data() != b.data() || a.pipeline() != b.pipeline())
    out += " (it runs " + std::to_string(b.data()) + " replica" + (b.data() == 1 ? "" : "s") + " of " +
           std::to_string(b.pipeline()) + " stage" + (b.pipeline() == 1 ? "" : "s") + " instead of " +
           std::to_string(a.data()) + " of " + std::to_string(a.pipeline()) + ")";
  return out;
}

std::string format_explanation(const problem& p, const plan& pl, std::size_t rank, const plan* next) {
  std::ostringstream out;
  out << "plan " << rank << ": " << pl.shape() << ", " << seconds(pl.step_time) << " per step, "
      << count_text(tokens_per_second(p, pl)) << " tokens/s, " << pl.devices() << " devices"
      << (pl.idle_devices > 0 ? " (" + std::to_string(pl.idle_devices) + " idle)" : "") << "\n";
  out << "  stages:";
  for (std::size_t s = 0; s < pl.stages.size(); ++s) {
    const auto& st = pl.stages[s];
    out << (s == 0 ? " " : "; ") << s << ": layers " << st.first_layer << "-" << st.first_layer + st.layers - 1 << " ("
        << st.layers << "), tensor " << st.tensor;
  }
  out << "\n" << format_placement(p, pl, 16);
  const auto& b = pl.breakdown;
  out << "  step time of replica " << pl.critical_replica << " (the last to finish): compute " << fixed(b.compute, 3)
      << " + tensor-parallel " << fixed(b.tensor_parallel, 3) << " + pipeline sends " << fixed(b.pipeline_p2p, 3)
      << " + bubble " << fixed(b.bubble, 3) << " + data-parallel " << fixed(b.data_parallel, 3) << " + optimizer "
      << fixed(b.optimizer, 3) << " = " << seconds(pl.step_time) << "\n";
  out << "  memory per device (the most loaded replica at each stage):\n";
  const std::size_t w[] = {9, 10, 12, 12, 12, 13, 12, 12, 12};
  out << "    " << pad("stage", w[0]) << pad("type", w[1]) << pad("weights", w[2]) << pad("gradients", w[3])
      << pad("optimizer", w[4]) << pad("activations", w[5]) << pad("buffers", w[6]) << pad("margin", w[7])
      << pad("total", w[8]) << "usable\n";
  for (const auto& u : pl.memory)
    out << "    " << pad(std::to_string(u.stage), w[0]) << pad(p.hardware.types[u.type].name, w[1])
        << pad(format_bytes(u.weights), w[2]) << pad(format_bytes(u.gradients), w[3])
        << pad(format_bytes(u.optimizer), w[4]) << pad(format_bytes(u.activations), w[5])
        << pad(format_bytes(u.buffers), w[6]) << pad(format_bytes(u.margin), w[7]) << pad(format_bytes(u.total()), w[8])
        << format_bytes(u.capacity) << "\n";
  if (next != nullptr)
    out << "  why: " << compare(pl, *next, rank + 1) << "\n";
  return out.str();
}

std::string format_json(const problem& p, const std::vector<plan>& plans, const search_stats& stats,
                        const replan_report* replan, int indent) {
  using nlohmann::json;
  json j;
  const auto& hw = p.hardware;
  json types = json::array();
  for (std::uint32_t t = 0; t < hw.types.size(); ++t) {
    const auto& dt = hw.types[t];
    types.push_back({{"name", dt.name},
                     {"devices", hw.device_count(t)},
                     {"flops", dt.flops},
                     {"efficiency", dt.efficiency},
                     {"memory", dt.memory},
                     {"usable_memory", dt.usable_memory()}});
  }
  j["cluster"] = {{"name", hw.name}, {"devices", hw.device_count()}, {"nodes", hw.nodes.size()}, {"types", types}};
  const auto& m = p.workload;
  j["model"] = {{"name", m.name},
                {"parameters", model_parameters(m)},
                {"layers", m.layers},
                {"hidden", m.hidden},
                {"seq_len", m.seq_len},
                {"global_batch", m.global_batch}};
  j["search"] = {{"mode", std::string{to_string(stats.mode)}},
                 {"layouts", stats.layouts},
                 {"evaluations", stats.evaluations},
                 {"seconds", stats.seconds},
                 {"stopped", stats.stopped}};
  j["plans"] = json::array();
  for (std::size_t i = 0; i < plans.size(); ++i)
    j["plans"].push_back(plan_json(p, plans[i], i + 1, i + 1 < plans.size() ? &plans[i + 1] : nullptr));
  if (replan != nullptr) {
    json r;
    r["lost"] = replan->lost;
    r["how"] = replan->how;
    r["seconds"] = replan->stats.seconds;
    r["evaluations"] = replan->stats.evaluations;
    r["plans"] = json::array();
    for (std::size_t i = 0; i < replan->plans.size(); ++i)
      r["plans"].push_back(plan_json(p, replan->plans[i], i + 1,
                                     i + 1 < replan->plans.size() ? &replan->plans[i + 1] : nullptr));
    j["replan"] = std::move(r);
  }
  return j.dump(indent) + "\n";
}

}  // namespace rekindle::planner
