// The InfiniteHBD fault record -> a rekindle trace. docs/TRACES.md ("InfiniteHBD") gives the
// mapping and the reasons for each row.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>

#include "common/files.hpp"
#include "common/text.hpp"
#include "trace/cluster.hpp"
#include "trace/convert.hpp"

namespace rekindle::trace {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Trace times are rounded to milliseconds: the record's own resolution is 8.64 s.
double milliseconds(double seconds) { return std::round(seconds * 1000.0) / 1000.0; }

constexpr std::array<std::string_view, 3> levels{"Hardware Failure", "Software Failure", "Other Failure"};

struct row {
  std::string_view level;
  std::string_view cls;
  fault_kind kind;
  std::string_view category;
};

// The table of docs/TRACES.md, "InfiniteHBD".
constexpr std::array<row, 23> table{{
    {"Hardware Failure", "GPU", fault_kind::node_down, "gpu"},
    {"Hardware Failure", "Parameter Plane Cable", fault_kind::partition, "network"},
    {"Hardware Failure", "NIC", fault_kind::partition, "network"},
    {"Hardware Failure", "Power Supply", fault_kind::node_down, "power"},
    {"Hardware Failure", "Fan", fault_kind::node_down, "cooling"},
    {"Hardware Failure", "Motherboard", fault_kind::node_down, "host"},
    {"Hardware Failure", "Motherboard Battery", fault_kind::node_down, "host"},
    {"Hardware Failure", "CPU", fault_kind::node_down, "host"},
    {"Hardware Failure", "RAID Card", fault_kind::node_down, "host"},
    {"Hardware Failure", "Riser Card", fault_kind::node_down, "host"},
    {"Hardware Failure", "Other Failures", fault_kind::node_down, "host"},
    {"Software Failure", "Operating System", fault_kind::node_down, "os"},
    {"Software Failure", "Firmware", fault_kind::node_down, "os"},
    {"Software Failure", "Software Tool", fault_kind::node_down, "node-agent"},
    {"Software Failure", "File System", fault_kind::disk_full, "filesystem"},
    {"Software Failure", "Other Failures", fault_kind::crash, "software"},
    {"Other Failure", "Unknown Error", fault_kind::node_down, "unknown"},
    {"Other Failure", "System Crash", fault_kind::node_down, "host"},
    {"Other Failure", "Stress Test Failure", fault_kind::node_down, "stress-test"},
    {"Other Failure", "Training Task Troubleshooting", fault_kind::node_down, "suspect"},
    {"Other Failure", "Test", fault_kind::node_down, "maintenance"},
    {"Other Failure", "Change", fault_kind::partition, "network"},
    {"Other Failure", "Other Failures", fault_kind::node_down, "unknown"},
}};

// What a class the table lacks becomes, by level.
infinitehbd_mapping level_default(std::string_view level) {
  if (level == "Hardware Failure")
    return {fault_kind::node_down, "hardware", false};
  if (level == "Software Failure")
    return {fault_kind::crash, "software", false};
  return {fault_kind::node_down, "other", false};
}

// The record stores times in days with four decimals: a window of 0 lasted less than 8.64 s.
constexpr double resolution_days = 1e-4;
constexpr double seconds_per_day = 86400.0;

// Line numbers of the top-level array's elements: the line of each element's first character.
std::vector<std::uint32_t> element_lines(std::string_view text) {
  std::vector<std::uint32_t> lines;
  std::uint32_t line = 1;
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  bool expect_element = false;
  for (char c : text) {
    if (c == '\n')
      ++line;
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (depth == 1 && expect_element && !std::isspace(static_cast<unsigned char>(c)) && c != ']') {
      lines.push_back(line);
      expect_element = false;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth == 1)
          expect_element = true;
        break;
      case ']':
      case '}': --depth; break;
      case ',':
        if (depth == 1)
          expect_element = true;
        break;
      default: break;
    }
  }
  return lines;
}

struct fault_key {
  std::string node;
  std::string level;
  std::string cls;
  std::string desc;
  auto operator<=>(const fault_key&) const = default;
};

struct open_fault {
  double start = 0;
  std::size_t entry = 0;
};

struct paired_fault {
  fault_key key;
  double start = 0;
  std::optional<double> end;
  std::size_t entry = 0;
};

}  // namespace

std::span<const std::string_view> infinitehbd_levels() noexcept { return levels; }

std::optional<infinitehbd_mapping> map_infinitehbd(std::string_view level, std::string_view cls) {
  if (std::find(levels.begin(), levels.end(), level) == levels.end())
    return std::nullopt;
  for (const auto& r : table)
    if (r.level == level && r.cls == cls)
      return infinitehbd_mapping{r.kind, r.category, true};
  return level_default(level);
}

std::string convert_result::error_text() const { return join_lines(errors); }

convert_result convert_infinitehbd(std::string_view json_text, std::string source_name, const cluster_shape& cluster,
                                   const infinitehbd_options& options) {
  convert_result result;
  auto error = [&](std::uint32_t line, std::string field, std::string message) {
    result.errors.push_back(diagnostic{source_name, line, 0, std::move(field), std::move(message)});
  };
  if (!(options.time_scale > 0) || !std::isfinite(options.time_scale)) {
    error(0, "--time-scale", "must be a number greater than 0");
    return result;
  }
  std::vector<std::uint32_t> workers;
  for (std::uint32_t n = 0; n < cluster.nodes().size(); ++n)
    if (!cluster.nodes()[n].spare && cluster.nodes()[n].ranks > 0)
      workers.push_back(n);
  if (workers.empty()) {
    error(0, "--cluster", "the cluster has no worker nodes to map the record's servers onto");
    return result;
  }

  if (const auto depth = json_nesting_depth(json_text); depth > max_json_depth) {
    error(0, "", "nested " + std::to_string(depth) + " levels deep; a record nests at most " +
                     std::to_string(max_json_depth));
    return result;
  }
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    // Turn the byte offset into line:column.
    const auto upto = json_text.substr(0, std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, json_text.size()));
    const auto line = static_cast<std::uint32_t>(std::count(upto.begin(), upto.end(), '\n') + 1);
    const auto last_nl = upto.rfind('\n');
    const auto column = static_cast<std::uint32_t>(upto.size() - (last_nl == std::string_view::npos ? 0 : last_nl + 1) + 1);
    std::string what = e.what();
    if (auto colon = what.find(": ", what.find("column")); colon != std::string::npos)
      what = what.substr(colon + 2);
    result.errors.push_back(diagnostic{source_name, line, column, "", "malformed JSON: " + what});
    return result;
  } catch (const json::exception& e) {
    std::string what = e.what();
    if (auto bracket = what.find("] "); bracket != std::string::npos)
      what = what.substr(bracket + 2);
    result.errors.push_back(diagnostic{source_name, 0, 0, "", "malformed JSON: " + what});
    return result;
  }
  if (!doc.is_array()) {
    error(1, "", "expected the InfiniteHBD fault record: a JSON array of {node_id, event_time, event_type, fault_type}");
    return result;
  }
  const auto lines = element_lines(json_text);
  auto line_of = [&](std::size_t i) { return i < lines.size() ? lines[i] : 0u; };

  // 1. Read and check every entry; pair each fault_end with the oldest open fault_start of the
  //    same server and fault type.
  std::map<fault_key, std::deque<open_fault>> open;
  std::vector<paired_fault> faults;
  std::vector<std::string> server_ids;
  double last_time = 0;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& e = doc[i];
    const auto line = line_of(i);
    const std::string at = "[" + std::to_string(i) + "]";
    if (!e.is_object()) {
      error(line, at, "expected an object {node_id, event_time, event_type, fault_type}");
      continue;
    }
    bool ok = true;
    auto string_field = [&](const json& obj, const char* key, const std::string& path) -> std::string {
      auto it = obj.find(key);
      if (it == obj.end()) {
        error(line, path, "missing");
        ok = false;
        return {};
      }
      if (!it->is_string() || it->get<std::string>().empty()) {
        error(line, path, "expected a non-empty string");
        ok = false;
        return {};
      }
      return it->get<std::string>();
    };
    fault_key key;
    key.node = string_field(e, "node_id", at + ".node_id");
    double time = 0;
    if (auto it = e.find("event_time"); it == e.end()) {
      error(line, at + ".event_time", "missing");
      ok = false;
    } else if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      error(line, at + ".event_time", "expected a number of days of at least 0");
      ok = false;
    } else {
      time = it->get<double>();
    }
    const auto type = string_field(e, "event_type", at + ".event_type");
    if (!type.empty() && type != "fault_start" && type != "fault_end") {
      const std::vector<std::string> types{"fault_start", "fault_end"};
      error(line, at + ".event_type", "'" + type + "' is neither fault_start nor fault_end" + did_you_mean(type, types));
      ok = false;
    }
    if (auto it = e.find("fault_type"); it == e.end() || !it->is_object()) {
      error(line, at + ".fault_type", it == e.end() ? "missing" : "expected an object {Level, Class, Desc}");
      ok = false;
    } else {
      key.level = string_field(*it, "Level", at + ".fault_type.Level");
      key.cls = string_field(*it, "Class", at + ".fault_type.Class");
      key.desc = string_field(*it, "Desc", at + ".fault_type.Desc");
      if (!key.level.empty() && !map_infinitehbd(key.level, key.cls)) {
        const std::vector<std::string> names(levels.begin(), levels.end());
        error(line, at + ".fault_type.Level",
              "'" + key.level + "' is not a level of the record (Hardware Failure, Software Failure, Other Failure)" +
                  did_you_mean(key.level, names));
        ok = false;
      }
    }
    if (!ok)
      continue;
    if (time < last_time) {
      error(line, at + ".event_time", "day " + std::to_string(time) + " is earlier than the entry before: the record is in time order");
      continue;
    }
    last_time = time;
    server_ids.push_back(key.node);
    if (type == "fault_start") {
      open[key].push_back({time, i});
    } else {
      auto it = open.find(key);
      if (it == open.end() || it->second.empty()) {
        error(line, at, "fault_end of server " + key.node + " (" + key.cls + ": " + key.desc +
                            ") without a fault_start of the same server and fault type before it");
        continue;
      }
      const auto start = it->second.front();
      it->second.pop_front();
      faults.push_back({key, start.start, time, start.entry});
    }
  }
  for (auto& [key, starts] : open)
    for (const auto& s : starts) {
      faults.push_back({key, s.start, std::nullopt, s.entry});
      ++result.open_at_end;
    }
  if (!result.errors.empty())
    return result;

  // 2. Servers in sorted id order, folded onto the worker nodes.
  std::sort(server_ids.begin(), server_ids.end());
  server_ids.erase(std::unique(server_ids.begin(), server_ids.end()), server_ids.end());
  result.servers = static_cast<std::uint32_t>(server_ids.size());
  std::vector<std::uint32_t> first_rank(cluster.nodes().size(), 0);
  {
    std::uint32_t next = 0;
    for (std::uint32_t n = 0; n < cluster.nodes().size(); ++n) {
      first_rank[n] = next;
      if (!cluster.nodes()[n].spare)
        next += cluster.nodes()[n].ranks;
    }
  }
  // Spread over the workers when there are enough (server i -> worker floor(i·W/S)), so servers
  // that fail together do not land on neighbours, which are each other's buddies; fold otherwise.
  auto node_of = [&](const std::string& id) {
    const auto index = static_cast<std::size_t>(std::lower_bound(server_ids.begin(), server_ids.end(), id) - server_ids.begin());
    if (workers.size() >= server_ids.size())
      return workers[index * workers.size() / server_ids.size()];
    return workers[index % workers.size()];
  };

  // 3. One event per fault, in start order (the record's order among equal starts).
  std::stable_sort(faults.begin(), faults.end(), [](const paired_fault& a, const paired_fault& b) {
    return a.start != b.start ? a.start < b.start : a.entry < b.entry;
  });
  fault_trace out;
  const double scale = seconds_per_day * options.time_scale;
  for (const auto& f : faults) {
    const auto mapping = *map_infinitehbd(f.key.level, f.key.cls);
    if (!mapping.known)
      ++result.by_level_default;
    const auto node = node_of(f.key.node);
    const auto& name = cluster.nodes()[node].name;
    fault_event ev;
    ev.at = milliseconds(f.start * scale);
    ev.kind = mapping.kind;
    std::optional<double> length;
    if (f.end)
      length = std::max(0.001, milliseconds(std::max(*f.end - f.start, resolution_days) * scale));
    switch (mapping.kind) {
      case fault_kind::node_down:
        ev.target = fault_target::of_node(name);
        ev.repair = length;
        break;
      case fault_kind::partition:
      case fault_kind::disk_full:
        ev.target = fault_target::of_node(name);
        ev.duration = length;
        break;
      default:
        ev.target = fault_target::of_rank(first_rank[node]);
        break;
    }
    ordered_json original{{"node", f.key.node}, {"level", f.key.level}, {"class", f.key.cls}, {"desc", f.key.desc}, {"start", f.start}};
    if (f.end)
      original["end"] = *f.end;
    ev.extensions = {{"x-category", json(std::string{mapping.category}).dump()}, {"x-infinitehbd", original.dump()}};
    out.events.push_back(std::move(ev));
  }
  result.faults = static_cast<std::uint32_t>(faults.size());
  out.header.source = "infinitehbd " + std::filesystem::path{source_name}.filename().string();
  out.header.description = "InfiniteHBD fault record: " + std::to_string(result.servers) + " servers folded onto " +
                           std::to_string(workers.size()) + " nodes";
  out.header.nodes = static_cast<std::uint32_t>(cluster.nodes().size());
  out.header.world = cluster.world();
  out.header.duration = milliseconds(std::max(1.0, std::ceil(last_time)) * scale);
  out.header.time_scale = options.time_scale;
  out.header.extensions = {{"x-infinitehbd", ordered_json{{"servers", result.servers}, {"faults", result.faults}}.dump()}};
  result.value = std::move(out);
  return result;
}

convert_result convert_infinitehbd_file(const std::filesystem::path& path, const cluster_shape& cluster,
                                        const infinitehbd_options& options) {
  auto text = read_file_bounded(path, file_limits::trace, "record");
  if (!text) {
    convert_result r;
    r.errors.push_back(diagnostic{path.string(), 0, 0, "", text.error().message()});
    return r;
  }
  return convert_infinitehbd(*text, path.string(), cluster, options);
}

}  // namespace rekindle::trace
