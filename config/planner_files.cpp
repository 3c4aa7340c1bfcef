#include "config/planner_files.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/files.hpp"
#include "common/text.hpp"
#include "config/device_presets.hpp"
#include "config/toml_reader.hpp"

namespace rekindle::config {

namespace fs = std::filesystem;
using detail::diagnostics;
using detail::table_reader;

diagnostic source_place::at(std::string field, std::string message) const {
  return diagnostic{file, line, column, std::move(field), std::move(message)};
}

int plan_cluster_spec::find_type(std::string_view n) const {
  for (std::size_t i = 0; i < types.size(); ++i)
    if (types[i].name == n)
      return static_cast<int>(i);
  return -1;
}

int plan_cluster_spec::find_node(std::string_view n) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == n)
      return static_cast<int>(i);
  return -1;
}

std::string_view to_string(plan_precision p) noexcept { return p == plan_precision::bf16 ? "bf16" : "fp16"; }

std::string_view to_string(recompute_policy p) noexcept {
  switch (p) {
    case recompute_policy::auto_select: return "auto";
    case recompute_policy::never: return "never";
    case recompute_policy::always: return "always";
  }
  return "auto";
}

namespace {

constexpr double tera = 1e12;
constexpr double max_bytes = 1e18;
constexpr double max_bandwidth = 1e15;

source_place place_of(const diagnostics& diag, const toml::source_region& r) {
  return source_place{diag.file(), static_cast<std::uint32_t>(r.begin.line), static_cast<std::uint32_t>(r.begin.column)};
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::string stem_of(const std::string& source_name) {
  auto stem = fs::path{source_name}.stem().string();
  return valid_name(stem) ? stem : "unnamed";
}

// Parses TOML text, reporting a syntax error as the only diagnostic.
std::optional<toml::table> parse_toml(std::string_view text, diagnostics& diag) {
  try {
    return toml::parse(text, diag.file());
  } catch (const toml::parse_error& e) {
    auto d = detail::syntax_error(text, diag.file(), e);
    diag.error(e.source(), std::move(d.field), std::move(d.message));
    return std::nullopt;
  }
}

template <class T>
file_result<T> read_file(const fs::path& path, file_result<T> (*parse)(std::string_view, std::string)) {
  auto text = read_file_bounded(path, file_limits::config, "file");
  if (!text) {
    file_result<T> r;
    r.errors.push_back(diagnostic{path.string(), 0, 0, "", text.error().message()});
    return r;
  }
  return parse(*text, path.string());
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : device_presets())
    names.emplace_back(p.name);
  return names;
}

// ---- cluster file ----

void read_type(diagnostics& diag, const std::string& key, const toml::node& value, plan_cluster_spec& out) {
  const std::string path = "types." + key;
  if (!value.is_table()) {
    diag.error(value.source(), path, "expected a table ([" + path + "]), got " + std::string{detail::type_name(value.type())});
    return;
  }
  table_reader r{diag, value.as_table(), path, value.source()};
  plan_device_type t;
  t.name = key;
  t.place = place_of(diag, value.source());
  if (!valid_name(key))
    diag.error(value.source(), path, "'" + key + "' is not a valid type name: use 1-64 letters, digits, '-', '_' or '.'");
  bool from_preset = false;
  if (auto p = r.string("preset")) {
    t.preset = *p;
    if (const auto* preset = find_device_preset(*p)) {
      from_preset = true;
      t.bf16_flops = preset->bf16_flops;
      t.fp16_flops = preset->fp16_flops;
      t.memory = preset->memory;
      t.memory_bandwidth = preset->memory_bandwidth;
      t.link_bandwidth = preset->link_bandwidth;
    } else {
      const auto names = preset_names();
      r.error("preset", "unknown preset '" + *p + "'" + did_you_mean(*p, names) +
                            "; presets: " + [&] {
                              std::string s;
                              for (const auto& n : names)
                                s += (s.empty() ? "" : ", ") + n;
                              return s;
                            }());
      from_preset = true;  // do not also report the figures a preset would have given as missing
    }
  }
  if (auto v = r.number("bf16_tflops", 0, 1e6))
    t.bf16_flops = *v * tera;
  if (auto v = r.number("fp16_tflops", 0, 1e6))
    t.fp16_flops = *v * tera;
  if (auto v = r.size("memory", 1 << 20, max_bytes))
    t.memory = *v;
  if (auto v = r.bandwidth("memory_bandwidth", 1e6, max_bandwidth))
    t.memory_bandwidth = *v;
  if (auto v = r.bandwidth("link_bandwidth", 1e6, max_bandwidth))
    t.link_bandwidth = *v;
  if (auto v = r.duration("link_latency", 0, 1))
    t.link_latency = *v;
  if (auto v = r.number("efficiency", 0.01, 1.0))
    t.efficiency = *v;
  if (auto v = r.size("reserved_memory", 0, max_bytes))
    t.reserved_memory = *v;
  if (auto v = r.duration("layer_overhead", 0, 1))
    t.layer_overhead = *v;
  r.finish();
  if (!from_preset) {
    const std::string hint = "give it or start from a preset (preset = \"a100-80gb\", ...)";
    if (!r.has("memory"))
      r.missing("memory", hint);
    if (!r.has("memory_bandwidth"))
      r.missing("memory_bandwidth", hint);
    if (!r.has("link_bandwidth"))
      r.missing("link_bandwidth", hint);
    if (!r.has("bf16_tflops") && !r.has("fp16_tflops"))
      r.missing("bf16_tflops", "give bf16_tflops and/or fp16_tflops (dense rates) or start from a preset");
  }
  if (t.memory > 0 && t.reserved_memory >= t.memory && r.has("reserved_memory"))
    r.error("reserved_memory", "reserved_memory (" + format_bytes(t.reserved_memory) +
                                   ") must be less than memory (" + format_bytes(t.memory) + ")");
  out.types.push_back(std::move(t));
}

// The most devices a planner cluster holds, all entries together.
constexpr std::uint64_t max_cluster_devices = 131072;

struct node_entry_info {
  std::string name;
  std::uint32_t count = 1;
  std::uint32_t line = 0;
};

void read_nodes(diagnostics& diag, const toml::table& root, plan_cluster_spec& out,
                std::vector<node_entry_info>& entries) {
  const auto* arr = detail::table_array(diag, root, "nodes", "nodes");
  if (arr == nullptr) {
    if (root.get("nodes") == nullptr)
      diag.error(detail::file_start(), "nodes", "no nodes: add at least one [[nodes]] table with a name and a type");
    return;
  }
  std::vector<std::string> type_names;
  for (const auto& t : out.types)
    type_names.push_back(t.name);
  std::map<std::string, std::uint32_t> first_line;
  std::uint64_t total_devices = 0;
  std::size_t index = 0;
  for (const auto& n : *arr) {
    const auto* tbl = n.as_table();
    table_reader r{diag, tbl, "nodes[" + std::to_string(index++) + "]", n.source()};
    plan_node node;
    node.place = place_of(diag, n.source());
    auto name = r.string("name");
    if (!name)
      if (!r.has("name"))
        r.missing("name", "every [[nodes]] entry needs a name");
    if (name && !valid_name(*name)) {
      r.error("name", "'" + *name + "' is not a valid name: use 1-64 letters, digits, '-', '_' or '.'");
      name.reset();
    }
    auto type = r.string("type");
    if (!type && !r.has("type"))
      r.missing("type", "name one of the [types] tables");
    if (type && out.find_type(*type) < 0 && !out.types.empty()) {
      r.error("type", "unknown device type '" + *type + "'" + did_you_mean(*type, type_names));
      type.reset();
    }
    if (auto v = r.integer("devices", 1, 1024))
      node.devices = static_cast<std::uint32_t>(*v);
    if (auto v = r.bandwidth("nic_bandwidth", 1e6, max_bandwidth))
      node.nic_bandwidth = *v;
    std::uint32_t count = 1;
    if (auto v = r.integer("count", 1, 100000))
      count = static_cast<std::uint32_t>(*v);
    r.finish();
    if (!name)
      continue;
    const auto line = static_cast<std::uint32_t>(r.where("name").begin.line);
    // The whole cluster is bounded, not only each entry: 100,000 nodes of 1,024 devices each
    // are within both per-entry limits but far past what a plan can be searched for.
    const std::uint64_t after = total_devices + std::uint64_t{count} * node.devices;
    if (after > max_cluster_devices) {
      r.error("count", std::to_string(count) + " nodes of " + std::to_string(node.devices) + " devices bring the cluster to " +
                           std::to_string(after) + " devices; a cluster has at most " +
                           std::to_string(max_cluster_devices));
      break;
    }
    total_devices = after;
    entries.push_back({*name, count, line});
    node.type = type.value_or("");
    node.entry_name = *name;
    for (std::uint32_t i = 0; i < count; ++i) {
      node.name = count == 1 ? *name : *name + std::to_string(i);
      if (auto it = first_line.find(node.name); it != first_line.end()) {
        r.error("name", "duplicate node '" + node.name + "' (first defined at line " + std::to_string(it->second) + ")");
        break;
      }
      first_line.emplace(node.name, line);
      out.nodes.push_back(node);
    }
  }
}

// Resolves names of nodes or [[nodes]] entries into node indices.
std::vector<int> resolve_nodes(table_reader& r, std::string_view key, const std::vector<std::string>& names,
                               const plan_cluster_spec& c, const std::vector<node_entry_info>& entries,
                               bool allow_entries) {
  std::vector<int> out;
  std::vector<std::string> candidates;
  for (const auto& n : c.nodes)
    candidates.push_back(n.name);
  if (allow_entries)
    for (const auto& e : entries)
      if (e.count > 1)
        candidates.push_back(e.name);
  for (const auto& name : names) {
    if (int i = c.find_node(name); i >= 0) {
      out.push_back(i);
      continue;
    }
    bool found = false;
    if (allow_entries)
      for (std::size_t i = 0; i < c.nodes.size(); ++i)
        if (c.nodes[i].entry_name == name) {
          out.push_back(static_cast<int>(i));
          found = true;
        }
    if (!found)
      r.error(key, "unknown node '" + name + "'" + did_you_mean(name, candidates));
  }
  return out;
}

void read_network(diagnostics& diag, const toml::table& root, plan_cluster_spec& out,
                  const std::vector<node_entry_info>& entries) {
  const auto* tbl = detail::sub_table(diag, root, "network", "network");
  table_reader r{diag, tbl, "network", tbl != nullptr ? tbl->source() : detail::file_start()};
  auto& net = out.network;
  if (auto v = r.bandwidth("bandwidth", 1e6, max_bandwidth))
    net.bandwidth = *v;
  if (auto v = r.duration("latency", 0, 1))
    net.latency = *v;
  r.allow("groups");
  r.allow("links");
  r.finish();
  if (tbl == nullptr)
    return;
  std::vector<int> group_of(out.nodes.size(), -1);
  if (const auto* groups = detail::table_array(diag, *tbl, "groups", "network.groups")) {
    std::size_t gi = 0;
    for (const auto& g : *groups) {
      const std::string path = "network.groups[" + std::to_string(gi) + "]";
      table_reader gr{diag, g.as_table(), path, g.source()};
      plan_network_group group;
      group.place = place_of(diag, g.source());
      group.name = gr.string("name").value_or("group" + std::to_string(gi));
      auto names = gr.string_array("nodes");
      if (!names && !gr.has("nodes"))
        gr.missing("nodes", "list the nodes of the group");
      auto bw = gr.bandwidth("bandwidth", 1e6, max_bandwidth);
      if (!bw && !gr.has("bandwidth"))
        gr.missing("bandwidth", "the per-device bandwidth between two nodes of the group, e.g. \"50GB/s\"");
      gr.finish();
      if (names) {
        for (int i : resolve_nodes(gr, "nodes", *names, out, entries, true)) {
          if (group_of[static_cast<std::size_t>(i)] >= 0 &&
              group_of[static_cast<std::size_t>(i)] != static_cast<int>(gi)) {
            gr.error("nodes", "node '" + out.nodes[static_cast<std::size_t>(i)].name + "' is already in group '" +
                                  net.groups[static_cast<std::size_t>(group_of[static_cast<std::size_t>(i)])].name +
                                  "'; a node belongs to at most one group");
            continue;
          }
          if (group_of[static_cast<std::size_t>(i)] < 0)
            group.nodes.push_back(out.nodes[static_cast<std::size_t>(i)].name);
          group_of[static_cast<std::size_t>(i)] = static_cast<int>(gi);
        }
      }
      group.bandwidth = bw.value_or(0);
      net.groups.push_back(std::move(group));
      ++gi;
    }
  }
  if (const auto* links = detail::table_array(diag, *tbl, "links", "network.links")) {
    std::size_t li = 0;
    for (const auto& l : *links) {
      const std::string path = "network.links[" + std::to_string(li++) + "]";
      table_reader lr{diag, l.as_table(), path, l.source()};
      plan_network_link link;
      link.place = place_of(diag, l.source());
      auto names = lr.string_array("nodes");
      if (!names && !lr.has("nodes"))
        lr.missing("nodes", "name the two nodes of the link, e.g. nodes = [\"a0\", \"h0\"]");
      auto bw = lr.bandwidth("bandwidth", 1e6, max_bandwidth);
      if (!bw && !lr.has("bandwidth"))
        lr.missing("bandwidth", "the per-device bandwidth between the two nodes, e.g. \"12.5GB/s\"");
      lr.finish();
      if (names) {
        if (names->size() != 2) {
          lr.error("nodes", "a link joins exactly two nodes, got " + std::to_string(names->size()));
        } else if ((*names)[0] == (*names)[1]) {
          lr.error("nodes", "a link joins two different nodes, got '" + (*names)[0] + "' twice");
        } else {
          auto idx = resolve_nodes(lr, "nodes", *names, out, entries, false);
          if (idx.size() == 2) {
            link.a = (*names)[0];
            link.b = (*names)[1];
          }
        }
      }
      link.bandwidth = bw.value_or(0);
      if (!link.a.empty())
        net.links.push_back(std::move(link));
    }
  }
}

// ---- model file ----

std::uint32_t required_integer(table_reader& r, std::string_view key, std::int64_t min, std::int64_t max,
                               const std::string& hint) {
  auto v = r.integer(key, min, max);
  if (!v) {
    if (!r.has(key))
      r.missing(key, hint);
    return 0;
  }
  return static_cast<std::uint32_t>(*v);
}

// More [[measured]] entries than this are an error: a profile writes a few dozen.
constexpr std::size_t max_measured_entries = 4096;

void read_measured(diagnostics& diag, const toml::table& root, plan_model_spec& m) {
  const auto* arr = detail::table_array(diag, root, "measured", "measured");
  if (arr == nullptr)
    return;
  if (arr->size() > max_measured_entries) {
    diag.error(arr->source(), "measured",
               std::to_string(arr->size()) + " [[measured]] entries; at most " + std::to_string(max_measured_entries));
    return;
  }
  // Per (type, kind, micro-batch, tensor degree): which entry (1-based) gave each layer.
  struct covered {
    std::vector<std::uint32_t> layers;
  };
  std::map<std::string, covered> points;
  std::size_t index = 0;
  for (const auto& e : *arr) {
    const std::string path = "measured[" + std::to_string(index++) + "]";
    table_reader r{diag, e.as_table(), path, e.source()};
    plan_measurement x;
    x.place = place_of(diag, e.source());
    if (auto t = r.string("type")) {
      x.type = *t;
      x.type_place = place_of(diag, r.where("type"));
    } else if (!r.has("type")) {
      r.missing("type", "name the device type (a [types] table of the cluster file) the figures were measured on");
    }
    bool kind_known = true;
    if (auto k = r.string("kind")) {
      if (*k == "block")
        x.kind = plan_layer_kind::block;
      else if (*k == "head")
        x.kind = plan_layer_kind::head;
      else {
        kind_known = false;
        r.error("kind", "must be \"block\" (a transformer block) or \"head\" (the output projection with the loss), "
                        "got \"" + *k + "\"");
      }
    }
    if (x.kind == plan_layer_kind::head && r.has("layers"))
      r.error("layers", "a measurement of the output projection (kind = \"head\") names no layers");
    if (auto layers = r.integer_array("layers", 0, 1 << 20)) {
      for (auto l : *layers) {
        if (m.layers > 0 && l >= m.layers) {
          r.error("layers", "layer " + std::to_string(l) + " does not exist: the model has layers 0-" +
                                std::to_string(m.layers - 1));
          continue;
        }
        x.layers.push_back(static_cast<std::uint32_t>(l));
      }
    }
    if (auto v = r.integer("micro_batch", 1, 1 << 20))
      x.micro_batch = static_cast<std::uint32_t>(*v);
    if (auto v = r.integer("tensor", 1, 1024))
      x.tensor = static_cast<std::uint32_t>(*v);
    if (auto v = r.duration("forward", 1e-9, 3600))
      x.forward = *v;
    else if (!r.has("forward"))
      r.missing("forward", "the forward time of one micro-batch through one layer, e.g. \"3.1ms\"");
    if (auto v = r.duration("backward", 1e-9, 3600))
      x.backward = *v;
    else if (!r.has("backward"))
      r.missing("backward", "the backward time of one micro-batch through one layer, e.g. \"6.2ms\"");
    if (auto v = r.size("activation_memory", 0, max_bytes))
      x.activation_memory = *v;
    // Each point once: a second figure for the same layer, micro-batch size and tensor degree
    // would silently override the first.
    const std::string key = x.type + "/" + std::to_string(static_cast<int>(x.kind)) + "/" +
                            std::to_string(x.micro_batch) + "/" + std::to_string(x.tensor);
    auto& seen = points[key];
    const std::uint32_t layer_count = x.kind == plan_layer_kind::head ? 1 : std::max<std::uint32_t>(m.layers, 1);
    if (seen.layers.empty())
      seen.layers.assign(layer_count, 0);
    std::optional<std::uint32_t> repeated;  // the first layer given before
    std::uint32_t first_entry = 0;          // by which entry, 1-based
    const auto mark = [&](std::uint32_t l) {
      if (l >= seen.layers.size())
        return;
      if (seen.layers[l] != 0 && !repeated) {
        repeated = l;
        first_entry = seen.layers[l];
      }
      seen.layers[l] = static_cast<std::uint32_t>(index);
    };
    if (x.layers.empty() || x.kind == plan_layer_kind::head)
      for (std::uint32_t l = 0; l < seen.layers.size(); ++l)
        mark(l);
    else
      for (auto l : x.layers)
        mark(l);
    if (repeated && !x.type.empty() && kind_known)
      r.error(x.kind == plan_layer_kind::head ? "kind" : (x.layers.empty() ? "micro_batch" : "layers"),
              "measured[" + std::to_string(first_entry - 1) + "] already gives " +
                  (x.kind == plan_layer_kind::head ? std::string{"the output projection"}
                                                   : "layer " + std::to_string(*repeated)) +
                  " on '" + x.type + "' at micro-batch " + std::to_string(x.micro_batch) + " and tensor degree " +
                  std::to_string(x.tensor) + "; give each point once");
    r.finish();
    m.measured.push_back(std::move(x));
  }
}

}  // namespace

file_result<plan_cluster_spec> parse_plan_cluster(std::string_view text, std::string source_name) {
  diagnostics diag{source_name};
  file_result<plan_cluster_spec> result;
  auto root = parse_toml(text, diag);
  if (!root) {
    result.errors = diag.take_sorted();
    return result;
  }
  plan_cluster_spec c;
  c.source = source_name;
  detail::check_top_level(diag, *root, {"cluster", "types", "nodes", "network"});
  {
    const auto* tbl = detail::sub_table(diag, *root, "cluster", "cluster");
    table_reader r{diag, tbl, "cluster", tbl != nullptr ? tbl->source() : detail::file_start()};
    c.name = r.string("name").value_or(stem_of(source_name));
    if (!valid_name(c.name))
      r.error("name", "'" + c.name + "' is not a valid name: use 1-64 letters, digits, '-', '_' or '.'");
    r.finish();
  }
  if (const auto* types = detail::sub_table(diag, *root, "types", "types")) {
    for (auto&& [k, v] : *types)
      read_type(diag, std::string{k.str()}, v, c);
    if (types->empty())
      diag.error(types->source(), "types", "no device types: add a [types.NAME] table, e.g. [types.a100] with preset = \"a100-80gb\"");
  } else if (root->get("types") == nullptr) {
    diag.error(detail::file_start(), "types",
               "no device types: add a [types.NAME] table, e.g. [types.a100] with preset = \"a100-80gb\"");
  }
  std::vector<node_entry_info> entries;
  read_nodes(diag, *root, c, entries);
  read_network(diag, *root, c, entries);
  result.errors = diag.take_sorted();
  if (result.errors.empty())
    result.value = std::move(c);
  return result;
}

file_result<plan_cluster_spec> load_plan_cluster(const fs::path& path) { return read_file(path, &parse_plan_cluster); }

file_result<plan_model_spec> parse_plan_model(std::string_view text, std::string source_name) {
  diagnostics diag{source_name};
  file_result<plan_model_spec> result;
  auto root = parse_toml(text, diag);
  if (!root) {
    result.errors = diag.take_sorted();
    return result;
  }
  plan_model_spec m;
  m.source = source_name;
  detail::check_top_level(diag, *root, {"model", "training", "measured"});
  {
    const auto* tbl = detail::sub_table(diag, *root, "model", "model");
    table_reader r{diag, tbl, "model", tbl != nullptr ? tbl->source() : detail::file_start()};
    m.place = place_of(diag, r.region());
    m.name = r.string("name").value_or(stem_of(source_name));
    if (!valid_name(m.name))
      r.error("name", "'" + m.name + "' is not a valid name: use 1-64 letters, digits, '-', '_' or '.'");
    m.layers = required_integer(r, "layers", 1, 100000, "the number of transformer blocks");
    m.hidden = required_integer(r, "hidden", 1, 1 << 20, "the model width (hidden size)");
    m.heads = required_integer(r, "heads", 1, 1 << 14, "the number of attention heads");
    m.seq_len = required_integer(r, "seq_len", 1, 1 << 24, "the tokens per sequence");
    m.vocab = required_integer(r, "vocab", 1, 1 << 24, "the vocabulary size");
    if (auto v = r.integer("ffn_hidden", 1, 1 << 22))
      m.ffn_hidden = static_cast<std::uint32_t>(*v);
    if (auto v = r.boolean("tied_embeddings"))
      m.tied_embeddings = *v;
    if (auto v = r.choice("precision", {"bf16", "fp16"}))
      m.precision = *v == "bf16" ? plan_precision::bf16 : plan_precision::fp16;
    r.finish();
    if (m.ffn_hidden == 0)
      m.ffn_hidden = 4 * m.hidden;
    if (m.hidden > 0 && m.heads > 0 && m.hidden % m.heads != 0)
      r.error(r.has("heads") ? "heads" : "hidden", "hidden (" + std::to_string(m.hidden) +
                                                       ") must be a multiple of heads (" + std::to_string(m.heads) + ")");
  }
  {
    const auto* tbl = detail::sub_table(diag, *root, "training", "training");
    table_reader r{diag, tbl, "training", tbl != nullptr ? tbl->source() : detail::file_start()};
    m.global_batch = required_integer(r, "global_batch", 1, 1 << 24, "the sequences per optimizer step");
    if (auto sizes = r.integer_array("micro_batch_sizes", 1, 1 << 24)) {
      std::size_t i = 0;
      for (auto b : *sizes) {
        const auto field = r.field("micro_batch_sizes") + "[" + std::to_string(i) + "]";
        if (m.global_batch > 0 && m.global_batch % b != 0) {
          const auto* arr = tbl->get("micro_batch_sizes")->as_array();
          diag.error((*arr)[i].source(), field,
                     std::to_string(b) + " does not divide global_batch (" + std::to_string(m.global_batch) + ")");
        } else if (std::find(m.micro_batch_sizes.begin(), m.micro_batch_sizes.end(), b) == m.micro_batch_sizes.end()) {
          m.micro_batch_sizes.push_back(static_cast<std::uint32_t>(b));
        }
        ++i;
      }
      if (sizes->empty())
        r.error("micro_batch_sizes", "must list at least one micro-batch size");
      std::sort(m.micro_batch_sizes.begin(), m.micro_batch_sizes.end());
    } else if (!r.has("micro_batch_sizes")) {
      for (std::uint32_t b = 1; b <= 16 && b <= m.global_batch; ++b)
        if (m.global_batch % b == 0)
          m.micro_batch_sizes.push_back(b);
    }
    if (auto v = r.choice("recompute", {"auto", "never", "always"}))
      m.recompute = *v == "auto" ? recompute_policy::auto_select
                                 : *v == "never" ? recompute_policy::never : recompute_policy::always;
    if (auto v = r.integer("zero", 0, 1))
      m.zero = static_cast<std::uint32_t>(*v);
    if (auto v = r.choice("gradients", {"fp32", "model"}))
      m.fp32_gradients = *v == "fp32";
    if (auto v = r.number("memory_margin", 0.0, 1.0))
      m.memory_margin = *v;
    r.finish();
  }
  read_measured(diag, *root, m);
  result.errors = diag.take_sorted();
  if (result.errors.empty())
    result.value = std::move(m);
  return result;
}

file_result<plan_model_spec> load_plan_model(const fs::path& path) { return read_file(path, &parse_plan_model); }

std::vector<diagnostic> check_plan_files(const plan_cluster_spec& cluster, const plan_model_spec& model) {
  std::vector<diagnostic> errors;
  std::vector<std::string> type_names;
  for (const auto& t : cluster.types)
    type_names.push_back(t.name);
  for (std::size_t i = 0; i < model.measured.size(); ++i) {
    const auto& x = model.measured[i];
    if (cluster.find_type(x.type) < 0)
      errors.push_back(x.type_place.at("measured[" + std::to_string(i) + "].type",
                                       "device type '" + x.type + "' is not in the cluster file " + cluster.source +
                                           did_you_mean(x.type, type_names)));
  }
  for (const auto& t : cluster.types) {
    const bool used = std::any_of(cluster.nodes.begin(), cluster.nodes.end(), [&](const plan_node& n) { return n.type == t.name; });
    const double rate = model.precision == plan_precision::bf16 ? t.bf16_flops : t.fp16_flops;
    if (used && rate <= 0)
      errors.push_back(t.place.at("types." + t.name, "has no " + std::string{to_string(model.precision)} +
                                                         " rate, which the model " + model.name + " (" + model.source +
                                                         ") trains in" +
                                                         (t.preset.empty() ? "" : " (the " + t.preset + " has no " +
                                                                                      std::string{to_string(model.precision)} +
                                                                                      " matrix units)") +
                                                         "; set " + std::string{to_string(model.precision)} +
                                                         "_tflops, use other devices, or train in " +
                                                         (model.precision == plan_precision::bf16 ? "fp16" : "bf16")));
  }
  std::stable_sort(errors.begin(), errors.end(), [](const diagnostic& a, const diagnostic& b) {
    return std::tie(a.file, a.line, a.column) < std::tie(b.file, b.line, b.column);
  });
  return errors;
}

}  // namespace rekindle::config
