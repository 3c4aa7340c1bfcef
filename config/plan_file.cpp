#include "config/plan_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <set>
#include <unordered_map>

#include "common/text.hpp"

namespace rekindle::config {

namespace {

using nlohmann::json;

// An error at `field` of the file; the first one ends the read.
struct plan_error {
  std::string field;
  std::string message;
};

// What the planner writes beside a plan's shape: read back, and ignored.
constexpr std::array<std::string_view, 14> prediction_keys = {
    "breakdown", "critical_replica", "data",      "devices", "idle_devices",      "memory",     "micro_batches",
    "pipeline",  "rank",             "shape",     "step_time", "tensor", "tokens_per_second", "versus_next"};
constexpr std::array<std::string_view, 5> document_keys = {"cluster", "model", "plans", "search", "replan"};

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& keys, std::string_view k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

class reader {
 public:
  explicit reader(const plan_bounds& b) : b_(b) {
    for (std::size_t n = 0; n < b_.nodes.size(); ++n) {
      by_name_.emplace(b_.nodes[n].name, static_cast<std::uint32_t>(n));
      devices_ += b_.nodes[n].devices.size();
    }
  }

  plan_in_file read_plan(const json& j, const std::string& at) {
    if (!j.is_object())
      fail(at, "a plan is an object with \"stages\" and \"replicas\", not " + kind(j));
    std::vector<std::string> known = {"stages", "replicas", "micro_batch_size", "recompute"};
    for (const auto& [k, v] : j.items())
      if (std::find(known.begin(), known.end(), k) == known.end() && !listed(prediction_keys, k)) {
        auto all = known;
        all.insert(all.end(), prediction_keys.begin(), prediction_keys.end());
        fail(plan_field(at, k), "unknown key" + did_you_mean(k, all));
      }
    plan_in_file pl;
    pl.field = at;
    pl.micro_batch_size = j.contains("micro_batch_size")
                              ? whole(j["micro_batch_size"], plan_field(at, "micro_batch_size"), 1, b_.global_batch)
                              : 1;
    if (j.contains("recompute")) {
      if (!j["recompute"].is_boolean())
        fail(plan_field(at, "recompute"), "true or false, not " + kind(j["recompute"]));
      pl.recompute = j["recompute"].get<bool>();
    }
    const auto stages_at = plan_field(at, "stages");
    const auto& stages = member(j, "stages", stages_at);
    if (!stages.is_array() || stages.empty() || stages.size() > b_.layers)
      fail(stages_at, "an array of 1 to " + std::to_string(b_.layers) + " stages (the model's layers), not " +
                          kind(stages));
    std::uint32_t next_layer = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const auto sat = stages_at + "[" + std::to_string(s) + "]";
      const auto& st = stages[s];
      if (!st.is_object())
        fail(sat, "a stage is an object with \"layers\" and \"tensor\", not " + kind(st));
      only_keys(st, sat, {"first_layer", "layers", "tensor"});
      plan_in_file::stage x;
      x.layers = whole(member(st, "layers", plan_field(sat, "layers")), plan_field(sat, "layers"), 1, b_.layers);
      x.tensor = st.contains("tensor") ? whole(st["tensor"], plan_field(sat, "tensor"), 1, 1u << 16) : 1;
      x.first_layer = st.contains("first_layer")
                          ? whole(st["first_layer"], plan_field(sat, "first_layer"), 0, b_.layers - 1)
                          : next_layer;
      next_layer = x.first_layer + x.layers;
      pl.stages.push_back(x);
    }
    const auto replicas_at = plan_field(at, "replicas");
    const auto& replicas = member(j, "replicas", replicas_at);
    if (!replicas.is_array() || replicas.empty() || replicas.size() > devices_)
      fail(replicas_at, "an array of 1 to " + std::to_string(devices_) + " replicas (the cluster's devices), not " +
                            kind(replicas));
    taken_.assign(b_.nodes.size(), {});
    for (std::size_t r = 0; r < replicas.size(); ++r)
      pl.replicas.push_back(read_replica(replicas[r], replicas_at + "[" + std::to_string(r) + "]", pl.stages));
    return pl;
  }

  [[noreturn]] static void fail(std::string field, std::string message) {
    throw plan_error{std::move(field), std::move(message)};
  }

 private:
  plan_in_file::replica read_replica(const json& j, const std::string& at, const std::vector<plan_in_file::stage>& stages) {
    if (!j.is_object())
      fail(at, "a replica is an object with \"stages\", not " + kind(j));
    only_keys(j, at, {"stages", "micro_batches"});
    plan_in_file::replica r;
    r.micro_batches =
        j.contains("micro_batches") ? whole(j["micro_batches"], plan_field(at, "micro_batches"), 0, b_.global_batch) : 0;
    const auto sat = plan_field(at, "stages");
    const auto& placements = member(j, "stages", sat);
    if (!placements.is_array() || placements.size() != stages.size())
      fail(sat, "an array of " + std::to_string(stages.size()) + " placements, one per stage, not " + kind(placements));
    for (std::size_t s = 0; s < placements.size(); ++s) {
      const auto pat = sat + "[" + std::to_string(s) + "]";
      const auto& pj = placements[s];
      if (!pj.is_object())
        fail(pat, "a placement is an object with \"node\" and \"devices\", not " + kind(pj));
      only_keys(pj, pat, {"node", "devices", "type"});
      const auto& name = member(pj, "node", plan_field(pat, "node"));
      if (!name.is_string())
        fail(plan_field(pat, "node"), "a node's name, not " + kind(name));
      const auto node_name = name.get<std::string>();
      const auto found = by_name_.find(node_name);
      if (found == by_name_.end()) {
        std::vector<std::string> names;
        for (const auto& n : b_.nodes)
          names.push_back(n.name);
        fail(plan_field(pat, "node"), "unknown node '" + node_name + "'" + did_you_mean(node_name, names));
      }
      plan_in_file::placement pl;
      pl.node = found->second;
      const auto& ids = b_.nodes[pl.node].devices;
      auto& taken = taken_[pl.node];
      if (pj.contains("devices")) {
        const auto dat = plan_field(pat, "devices");
        const auto& d = pj["devices"];
        if (!d.is_array() || d.size() != stages[s].tensor)
          fail(dat, "an array of " + std::to_string(stages[s].tensor) + " device numbers (the stage's tensor degree), not " +
                        kind(d));
        for (std::size_t i = 0; i < d.size(); ++i) {
          const auto iat = dat + "[" + std::to_string(i) + "]";
          const auto id = whole(d[i], iat, 0, UINT32_MAX);
          if (std::find(ids.begin(), ids.end(), id) == ids.end())
            fail(iat, ids.empty() ? "node " + node_name + " has no devices a plan may use"
                                  : "node " + node_name + " has devices 0-" + std::to_string(ids.size() - 1));
          if (!taken.insert(id).second)
            fail(iat, "device " + std::to_string(id) + " of node " + node_name + " is in another stage already");
          pl.devices.push_back(id);
        }
      } else {
        for (auto id : ids)
          if (pl.devices.size() < stages[s].tensor && !taken.contains(id))
            pl.devices.push_back(id);
        if (pl.devices.size() < stages[s].tensor)
          fail(pat, "node " + node_name + " has no " + std::to_string(stages[s].tensor) +
                        " devices left for this stage (name them with \"devices\")");
        taken.insert(pl.devices.begin(), pl.devices.end());
      }
      r.stages.push_back(std::move(pl));
    }
    return r;
  }

  static std::string kind(const json& j) {
    switch (j.type()) {
      case json::value_t::object: return "an object";
      case json::value_t::array: return "an array of " + std::to_string(j.size());
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      case json::value_t::null: return "null";
      case json::value_t::number_float: return "a fractional number";
      default: return "a number";
    }
  }

  static const json& member(const json& j, const char* key, const std::string& at) {
    if (!j.contains(key))
      fail(at, "missing");
    return j[key];
  }

  static void only_keys(const json& j, const std::string& at, std::vector<std::string> known) {
    for (const auto& [k, v] : j.items())
      if (std::find(known.begin(), known.end(), k) == known.end())
        fail(plan_field(at, k), "unknown key" + did_you_mean(k, known));
  }

  static std::uint32_t whole(const json& j, const std::string& at, std::uint64_t min, std::uint64_t max) {
    if (!j.is_number_integer())
      fail(at, "a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ", not " + kind(j));
    if (j.is_number_unsigned() ? j.get<std::uint64_t>() < min || j.get<std::uint64_t>() > max
                               : j.get<std::int64_t>() < static_cast<std::int64_t>(min) ||
                                     j.get<std::int64_t>() > static_cast<std::int64_t>(max))
      fail(at, j.dump() + " is out of range: " + std::to_string(min) + " to " + std::to_string(max));
    return static_cast<std::uint32_t>(j.get<std::uint64_t>());
  }

  const plan_bounds& b_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
  std::uint64_t devices_ = 0;
  std::vector<std::set<std::uint32_t>> taken_;
};

// Line and column of byte `at` (1-based).
std::string place_of(std::string_view text, std::size_t at) {
  at = std::min(at, text.size());
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

std::string plan_field(const std::string& plan, std::string_view key) {
  return plan.empty() ? std::string{key} : plan + "." + std::string{key};
}

status plan_file_error(const std::string& source, const std::string& field, const std::string& message) {
  return status{errc::invalid_argument, source + (field.empty() ? "" : ": " + field) + ": " + message};
}

expected<std::vector<plan_in_file>> read_plan_file(std::string_view text, const std::string& source,
                                                   const plan_bounds& bounds) {
  if (const auto depth = json_nesting_depth(text); depth > max_plan_file_depth)
    return plan_file_error(source, "", "JSON nested " + std::to_string(depth) + " deep; a plan file nests at most " +
                                           std::to_string(max_plan_file_depth));
  if (auto n = json_number_out_of_range(text))
    return plan_file_error(source, n->key, "the number " + n->number + " is out of range");
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    if (const auto colon = why.find(": syntax error"); colon != std::string::npos)
      why = why.substr(colon + 2);
    return plan_file_error(source, place_of(text, e.byte > 0 ? e.byte - 1 : 0), why);
  }
  std::vector<plan_in_file> plans;
  try {
    reader r{bounds};
    if (doc.is_object() && doc.contains("plans")) {
      for (const auto& [k, v] : doc.items())
        if (!listed(document_keys, k))
          reader::fail(k, "unknown key in a plan document (its keys: cluster, model, plans, search, replan)");
      const auto& list = doc["plans"];
      if (!list.is_array() || list.empty() || list.size() > max_plan_file_plans)
        reader::fail("plans", "an array of 1 to " + std::to_string(max_plan_file_plans) + " plans");
      for (std::size_t i = 0; i < list.size(); ++i)
        plans.push_back(r.read_plan(list[i], "plans[" + std::to_string(i) + "]"));
    } else {
      plans.push_back(r.read_plan(doc, ""));
    }
  } catch (const plan_error& e) {
    return plan_file_error(source, e.field, e.message);
  }
  return plans;
}

}  // namespace rekindle::config
