#include "trace/trace.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/files.hpp"
#include "common/text.hpp"
#include "trace/cluster.hpp"

namespace rekindle::trace {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr std::array<std::string_view, 9> kind_names{
    "kill", "crash", "hang", "slow", "node_down", "partition", "disk_full", "corrupt_checkpoint", "collective_error"};

// Which targets and arguments each kind takes (docs/TRACES.md, "Kinds").
struct kind_rules {
  bool rank = false;
  bool node = false;
  bool link = false;
  bool signal = false;
  bool exit_code = false;
  bool factor = false;
  bool duration = false;
  bool repair = false;
};

kind_rules rules_of(fault_kind k) {
  switch (k) {
    case fault_kind::kill: return {.rank = true, .node = true, .signal = true};
    case fault_kind::crash: return {.rank = true, .exit_code = true};
    case fault_kind::hang: return {.rank = true, .duration = true};
    case fault_kind::slow: return {.rank = true, .node = true, .factor = true, .duration = true};
    case fault_kind::node_down: return {.node = true, .repair = true};
    case fault_kind::partition: return {.node = true, .link = true, .duration = true};
    case fault_kind::disk_full: return {.node = true, .duration = true};
    case fault_kind::corrupt_checkpoint: return {.rank = true, .node = true};
    case fault_kind::collective_error: return {.rank = true};
  }
  return {};
}

constexpr std::array<std::string_view, 11> event_keys{"at",        "at_step", "kind",   "rank",     "node",  "link",
                                                   "signal",    "exit_code", "factor", "duration", "repair"};
constexpr std::array<std::string_view, 8> header_keys{"rekindle_trace", "source",   "description", "nodes",
                                                    "world",          "duration", "time_scale",  "time_unit"};

template <std::size_t N>
std::string suggestion(std::string_view word, const std::array<std::string_view, N>& candidates) {
  const std::vector<std::string> names(candidates.begin(), candidates.end());
  return did_you_mean(word, names);
}

struct time_unit {
  std::string_view name;
  double seconds;
};
constexpr std::array<time_unit, 5> time_units{{{"s", 1.0}, {"ms", 1e-3}, {"min", 60.0}, {"h", 3600.0}, {"d", 86400.0}}};

std::string json_type(const ordered_json& j) {
  switch (j.type()) {
    case ordered_json::value_t::null: return "null";
    case ordered_json::value_t::object: return "an object";
    case ordered_json::value_t::array: return "an array";
    case ordered_json::value_t::string: return "a string";
    case ordered_json::value_t::boolean: return "a boolean";
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned: return "an integer";
    case ordered_json::value_t::number_float: return "a number";
    default: return "something else";
  }
}

std::string number_text(double v) {
  std::ostringstream os;
  os.precision(15);
  os << v;
  return os.str();
}

// Reads one trace; every problem becomes a diagnostic.
class reader {
 public:
  reader(std::string source, const cluster_shape* cluster) : source_(std::move(source)), cluster_(cluster) {}

  void header(std::string_view text, std::uint32_t line) {
    line_ = line;
    auto j = parse_json(text);
    if (!j)
      return;
    if (!j->contains("rekindle_trace")) {
      if (j->contains("kind"))
        error("", "the first line must be the header, e.g. {\"rekindle_trace\": 1}; this line is an event");
      else
        error("", "not a rekindle trace: the first line must be a header such as {\"rekindle_trace\": 1}");
      return;
    }
    for (auto it = j->begin(); it != j->end(); ++it) {
      const std::string& key = it.key();
      const auto& v = it.value();
      if (key == "rekindle_trace") {
        if (!v.is_number_integer()) {
          error(key, "expected an integer (the format version, 1), got " + json_type(v));
        } else if (v.get<std::int64_t>() != format_version) {
          error(key, "format version " + std::to_string(v.get<std::int64_t>()) +
                         " is not supported; this build reads version " + std::to_string(format_version));
        }
      } else if (key == "source" || key == "description") {
        if (!v.is_string())
          error(key, "expected a string, got " + json_type(v));
        else
          (key == "source" ? out_.header.source : out_.header.description) = v.get<std::string>();
      } else if (key == "nodes" || key == "world") {
        if (auto n = count(key, v))
          (key == "nodes" ? out_.header.nodes : out_.header.world) = *n;
      } else if (key == "time_unit") {
        if (!v.is_string()) {
          error(key, "expected a string (s, ms, min, h or d), got " + json_type(v));
          continue;
        }
        const auto name = v.get<std::string>();
        bool found = false;
        for (const auto& u : time_units)
          if (u.name == name) {
            unit_ = u.seconds;
            found = true;
          }
        if (!found) {
          std::vector<std::string> names;
          for (const auto& u : time_units)
            names.emplace_back(u.name);
          error(key, "'" + name + "' is not a time unit; use s, ms, min, h or d" + did_you_mean(name, names));
        }
      } else if (key == "duration" || key == "time_scale") {
        if (auto d = positive(key, v))
          (key == "duration" ? out_.header.duration : out_.header.time_scale) = *d;
      } else if (key.starts_with("x-")) {
        out_.header.extensions.emplace_back(key, v.dump());
      } else {
        error(key, "unknown header field" + suggestion(key, header_keys) +
                       "; extensions must start with 'x-'");
      }
    }
    // The unit applies to the header's own duration too.
    if (out_.header.duration) {
      *out_.header.duration *= unit_;
      if (*out_.header.duration > max_trace_seconds) {
        error("duration", "is " + number_text(*out_.header.duration) + " s; a trace covers at most " +
                              number_text(max_trace_seconds) + " s (about 31 years)");
        out_.header.duration.reset();
      }
    }
  }

  void event(std::string_view text, std::uint32_t line) {
    line_ = line;
    auto j = parse_json(text);
    if (!j)
      return;
    fault_event ev;
    ev.line = line;
    bool ok = true;
    // The kind decides what else is allowed.
    std::optional<fault_kind> kind;
    if (auto it = j->find("kind"); it == j->end()) {
      error("kind", "missing: every event needs a kind (" + kinds_list() + ")");
      ok = false;
    } else if (!it->is_string()) {
      error("kind", "expected a string (" + kinds_list() + "), got " + json_type(*it));
      ok = false;
    } else {
      const auto name = it->get<std::string>();
      kind = fault_kind_from(name);
      if (!kind) {
        error("kind", "'" + name + "' is not a fault kind" + suggestion(name, kind_names) + "; kinds: " + kinds_list());
        ok = false;
      } else {
        ev.kind = *kind;
      }
    }
    const auto rules = kind ? rules_of(*kind) : kind_rules{true, true, true, true, true, true, true, true};
    const std::string kind_name = kind ? std::string{to_string(*kind)} : std::string{};

    // When.
    const bool has_at = j->contains("at");
    const bool has_step = j->contains("at_step");
    if (has_at && has_step) {
      error("at_step", "give either 'at' (seconds) or 'at_step' (a step), not both");
      ok = false;
    } else if (!has_at && !has_step) {
      error("at", "missing: every event needs a time, 'at' (seconds from the start) or 'at_step' (a step)");
      ok = false;
    } else if (has_at) {
      if (auto t = non_negative("at", (*j)["at"]); t && !within_trace_time("at", *t)) {
        ok = false;
      } else if (t) {
        ev.at = *t * unit_;
        if (last_at_ && *ev.at < last_at_->first) {
          error("at", number_text(*t) + " is earlier than the event on line " + std::to_string(last_at_->second) +
                          ": events must be in time order");
          ok = false;
        } else {
          last_at_ = std::pair{*ev.at, line};
        }
      } else {
        ok = false;
      }
    } else {
      const auto& v = (*j)["at_step"];
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
        error("at_step", "expected a step (an integer of at least 0), got " +
                             (v.is_number() ? v.dump() : json_type(v)));
        ok = false;
      } else {
        ev.at_step = v.get<std::uint64_t>();
        if (last_step_ && *ev.at_step < last_step_->first) {
          error("at_step", "step " + std::to_string(*ev.at_step) + " is earlier than the event on line " +
                               std::to_string(last_step_->second) + ": events must be in step order");
          ok = false;
        } else {
          last_step_ = std::pair{*ev.at_step, line};
        }
      }
    }

    // Where.
    const int targets = int{j->contains("rank")} + int{j->contains("node")} + int{j->contains("link")};
    if (targets == 0) {
      error(rules.rank ? "rank" : "node",
            "missing target: give " + targets_of(rules) + (kind ? " for " + kind_name : std::string{}));
      ok = false;
    } else if (targets > 1) {
      error(j->contains("link") ? "link" : "node", "give one target ('rank', 'node' or 'link'), not several");
      ok = false;
    } else if (auto r = j->find("rank"); r != j->end()) {
      ok &= target_allowed("rank", rules.rank, kind_name, rules);
      if (auto v = index("rank", *r)) {
        ev.target = fault_target::of_rank(*v);
        if (cluster_ != nullptr && *v >= cluster_->world()) {
          error("rank", "rank " + std::to_string(*v) + " is outside the cluster's world of " +
                            with_commas(cluster_->world()) + " ranks" +
                            (cluster_->world() > 0 ? " (0-" + std::to_string(cluster_->world() - 1) + ")" : ""));
          ok = false;
        }
      } else {
        ok = false;
      }
    } else if (auto n = j->find("node"); n != j->end()) {
      ok &= target_allowed("node", rules.node, kind_name, rules);
      if (auto name = node_name("node", *n))
        ev.target = fault_target::of_node(*name);
      else
        ok = false;
    } else {
      const auto& l = (*j)["link"];
      ok &= target_allowed("link", rules.link, kind_name, rules);
      if (!l.is_array() || l.size() != 2) {
        error("link", "expected the names of two nodes, e.g. [\"n1\", \"n2\"], got " +
                          (l.is_array() ? "an array of " + std::to_string(l.size()) : json_type(l)));
        ok = false;
      } else {
        auto a = node_name("link[0]", l[0]);
        auto b = node_name("link[1]", l[1]);
        if (a && b && *a == *b) {
          error("link", "a link joins two different nodes, got '" + *a + "' twice");
          ok = false;
        } else if (a && b) {
          ev.target = fault_target::of_link(*a, *b);
        } else {
          ok = false;
        }
      }
    }

    // Arguments.
    if (auto it = j->find("signal"); it != j->end()) {
      ok &= argument_allowed("signal", rules.signal, kind_name);
      if (auto v = bounded_int("signal", *it, 1, 64))
        ev.signal = *v;
      else
        ok = false;
    }
    if (auto it = j->find("exit_code"); it != j->end()) {
      ok &= argument_allowed("exit_code", rules.exit_code, kind_name);
      if (auto v = bounded_int("exit_code", *it, 0, 255))
        ev.exit_code = *v;
      else
        ok = false;
    }
    if (auto it = j->find("factor"); it != j->end()) {
      ok &= argument_allowed("factor", rules.factor, kind_name);
      if (!it->is_number()) {
        error("factor", "expected a number greater than 1 (how many times slower), got " + json_type(*it));
        ok = false;
      } else if (const double f = it->get<double>(); !(f > 1.0 && f <= 1000.0)) {
        error("factor", "must be greater than 1 and at most 1000 (how many times slower), got " + number_text(f));
        ok = false;
      } else {
        ev.factor = f;
      }
    } else if (kind == fault_kind::slow) {
      error("factor", "missing: a slow event says how many times slower, e.g. \"factor\": 2");
      ok = false;
    }
    if (auto it = j->find("duration"); it != j->end()) {
      ok &= argument_allowed("duration", rules.duration, kind_name);
      if (auto d = positive("duration", *it); d && within_trace_time("duration", *d))
        ev.duration = *d * unit_;
      else
        ok = false;
    }
    if (auto it = j->find("repair"); it != j->end()) {
      ok &= argument_allowed("repair", rules.repair, kind_name);
      if (auto d = non_negative("repair", *it); d && within_trace_time("repair", *d))
        ev.repair = *d * unit_;
      else
        ok = false;
    }

    // Anything else is an extension or a mistake.
    for (auto it = j->begin(); it != j->end(); ++it) {
      const std::string& key = it.key();
      if (key.starts_with("x-")) {
        ev.extensions.emplace_back(key, it.value().dump());
        continue;
      }
      if (std::find(event_keys.begin(), event_keys.end(), key) == event_keys.end()) {
        error(key, "unknown field" + suggestion(key, event_keys) + "; extensions must start with 'x-'");
        ok = false;
      }
    }
    if (ok)
      out_.events.push_back(std::move(ev));
  }

  parse_result finish(bool saw_header) {
    if (!saw_header) {
      line_ = 1;
      error("", "empty trace: the first line must be a header such as {\"rekindle_trace\": 1}");
    }
    parse_result r;
    if (errors_.empty())
      r.value = std::move(out_);
    r.errors = std::move(errors_);
    return r;
  }

 private:
  std::optional<ordered_json> parse_json(std::string_view text) {
    if (const auto depth = json_nesting_depth(text); depth > max_json_depth) {
      error("", "nested " + std::to_string(depth) + " levels deep; a trace line nests at most " +
                    std::to_string(max_json_depth));
      return std::nullopt;
    }
    try {
      auto j = ordered_json::parse(text.begin(), text.end());
      if (!j.is_object()) {
        error("", "expected a JSON object {...}, got " + json_type(j));
        return std::nullopt;
      }
      return j;
    } catch (const ordered_json::parse_error& e) {
      // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..." ->
      // the part after the position; the column comes from the byte offset.
      std::string what = e.what();
      if (auto colon = what.find(": ", what.find("column")); colon != std::string::npos)
        what = what.substr(colon + 2);
      errors_.push_back(diagnostic{source_, line_, static_cast<std::uint32_t>(e.byte), "", "malformed JSON: " + what});
      return std::nullopt;
    } catch (const ordered_json::exception& e) {
      // A number too large for a double, and the like: "[json.exception.out_of_range.406] ...".
      std::string what = e.what();
      if (auto bracket = what.find("] "); bracket != std::string::npos)
        what = what.substr(bracket + 2);
      if (auto where = json_number_out_of_range(text)) {
        errors_.push_back(diagnostic{source_, line_, 0, where->key,
                                     where->number + " is out of the range of a number (at most about 1.8e308)"});
        return std::nullopt;
      }
      errors_.push_back(diagnostic{source_, line_, 0, "", "malformed JSON: " + what});
      return std::nullopt;
    }
  }

  void error(const std::string& field, std::string message) {
    errors_.push_back(diagnostic{source_, line_, 0, field, std::move(message)});
  }

  std::optional<std::uint32_t> count(const std::string& key, const ordered_json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 0xffffffffLL) {
      error(key, "expected a positive integer, got " + (v.is_number() ? v.dump() : json_type(v)));
      return std::nullopt;
    }
    return static_cast<std::uint32_t>(v.get<std::int64_t>());
  }

  std::optional<std::uint32_t> index(const std::string& key, const ordered_json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0xffffffffLL) {
      error(key, "expected a rank (an integer of at least 0), got " + (v.is_number() ? v.dump() : json_type(v)));
      return std::nullopt;
    }
    return static_cast<std::uint32_t>(v.get<std::int64_t>());
  }

  std::optional<int> bounded_int(const std::string& key, const ordered_json& v, int min, int max) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max) {
      error(key, "expected an integer between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
                     (v.is_number() ? v.dump() : json_type(v)));
      return std::nullopt;
    }
    return static_cast<int>(v.get<std::int64_t>());
  }

  // A time of the trace, in its unit, against the longest a trace covers.
  bool within_trace_time(const std::string& key, double t) {
    if (t * unit_ <= max_trace_seconds)
      return true;
    error(key, number_text(t) + " " + unit_name() + " is past the longest a trace covers (" +
                   number_text(max_trace_seconds) + " s, about 31 years)");
    return false;
  }

  std::optional<double> non_negative(const std::string& key, const ordered_json& v) {
    if (!v.is_number()) {
      error(key, "expected a number of " + unit_name() + " (at least 0), got " + json_type(v));
      return std::nullopt;
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0) {
      error(key, "must be at least 0, got " + number_text(d));
      return std::nullopt;
    }
    return d;
  }

  std::optional<double> positive(const std::string& key, const ordered_json& v) {
    if (!v.is_number()) {
      error(key, "expected a number greater than 0, got " + json_type(v));
      return std::nullopt;
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || d <= 0) {
      error(key, "must be greater than 0, got " + number_text(d));
      return std::nullopt;
    }
    return d;
  }

  std::optional<std::string> node_name(const std::string& key, const ordered_json& v) {
    if (!v.is_string() || v.get<std::string>().empty()) {
      error(key, "expected a node name, got " + (v.is_string() ? std::string{"an empty string"} : json_type(v)));
      return std::nullopt;
    }
    auto name = v.get<std::string>();
    if (cluster_ != nullptr && !cluster_->find(name)) {
      if (names_.empty())
        names_ = cluster_->names();
      error(key, "'" + name + "' is not a node of the cluster (" + cluster_->describe() + ")" + did_you_mean(name, names_));
      return std::nullopt;
    }
    return name;
  }

  bool target_allowed(const std::string& key, bool allowed, const std::string& kind, const kind_rules& rules) {
    if (allowed || kind.empty())
      return true;
    error(key, kind + " takes " + targets_of(rules) + ", not '" + key + "'");
    return false;
  }

  bool argument_allowed(const std::string& key, bool allowed, const std::string& kind) {
    if (allowed || kind.empty())
      return true;
    error(key, "'" + key + "' does not apply to " + kind);
    return false;
  }

  static std::string targets_of(const kind_rules& r) {
    std::vector<std::string> t;
    if (r.rank)
      t.emplace_back("'rank'");
    if (r.node)
      t.emplace_back("'node'");
    if (r.link)
      t.emplace_back("'link'");
    std::string out;
    for (std::size_t i = 0; i < t.size(); ++i)
      out += (i == 0 ? "" : i + 1 == t.size() ? " or " : ", ") + t[i];
    return out;
  }

  static std::string kinds_list() {
    std::string out;
    for (auto k : kind_names)
      out += (out.empty() ? "" : ", ") + std::string{k};
    return out;
  }

  [[nodiscard]] std::string unit_name() const {
    for (const auto& u : time_units)
      if (u.seconds == unit_)
        return u.name == "s" ? "seconds" : std::string{"'"} + std::string{u.name} + "'";
    return "seconds";
  }

  std::string source_;
  const cluster_shape* cluster_;
  std::vector<std::string> names_;
  fault_trace out_;
  std::vector<diagnostic> errors_;
  std::uint32_t line_ = 0;
  double unit_ = 1.0;
  std::optional<std::pair<double, std::uint32_t>> last_at_;
  std::optional<std::pair<std::uint64_t, std::uint32_t>> last_step_;
};

void put_extensions(ordered_json& j, const std::vector<std::pair<std::string, std::string>>& ext) {
  // Values are JSON text; text that is not (made in memory by mistake) is written as a string.
  for (const auto& [key, text] : ext) {
    auto value = ordered_json::parse(text, nullptr, false);
    j[key] = value.is_discarded() ? ordered_json(text) : std::move(value);
  }
}

}  // namespace

std::string_view to_string(fault_kind k) noexcept {
  const auto i = static_cast<std::size_t>(k);
  return i < kind_names.size() ? kind_names[i] : "unknown";
}

std::optional<fault_kind> fault_kind_from(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kind_names.size(); ++i)
    if (kind_names[i] == name)
      return static_cast<fault_kind>(i);
  return std::nullopt;
}

std::span<const std::string_view> fault_kind_names() noexcept { return kind_names; }

std::string fault_target::to_string() const {
  switch (kind) {
    case type::rank: return "rank " + std::to_string(rank);
    case type::node: return "node " + node;
    case type::link: return "link " + node + "-" + peer;
  }
  return "?";
}

const std::string* fault_event::extension(std::string_view key) const {
  for (const auto& [k, v] : extensions)
    if (k == key)
      return &v;
  return nullptr;
}

bool fault_event::operator==(const fault_event& o) const {
  return at == o.at && at_step == o.at_step && kind == o.kind && target == o.target && signal == o.signal &&
         exit_code == o.exit_code && factor == o.factor && duration == o.duration && repair == o.repair &&
         extensions == o.extensions;
}

std::string parse_result::error_text() const { return join_lines(errors); }

parse_result parse(std::string_view text, std::string source_name, const cluster_shape* cluster) {
  reader r{std::move(source_name), cluster};
  bool saw_header = false;
  std::uint32_t line = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos)
      end = text.size();
    auto content = text.substr(pos, end - pos);
    ++line;
    pos = end + 1;
    if (!content.empty() && content.back() == '\r')
      content.remove_suffix(1);
    if (trim(content).empty())
      continue;
    if (!saw_header) {
      r.header(content, line);
      saw_header = true;
    } else {
      r.event(content, line);
    }
  }
  return r.finish(saw_header);
}

parse_result load_file(const std::filesystem::path& path, const cluster_shape* cluster) {
  auto text = read_file_bounded(path, file_limits::trace, "trace file");
  if (!text) {
    parse_result r;
    r.errors.push_back(diagnostic{path.string(), 0, 0, "", text.error().message()});
    return r;
  }
  return parse(*text, path.string(), cluster);
}

std::vector<diagnostic> check_targets(const fault_trace& t, const cluster_shape& cluster, const std::string& source_name) {
  // The same checks as parse() with a cluster: write the trace out and read it back.
  auto r = parse(to_jsonl(t), source_name, &cluster);
  // Lines of the written text are 1 + event index + 1; name events made in memory by index.
  for (auto& e : r.errors) {
    if (e.line >= 2) {
      const auto index = e.line - 2;
      if (index < t.events.size() && t.events[index].line != 0) {
        e.line = t.events[index].line;
      } else {
        e.field = "events[" + std::to_string(index) + "]" + (e.field.empty() ? "" : "." + e.field);
        e.line = 0;
      }
    }
    e.column = 0;
  }
  return r.errors;
}

std::string to_jsonl(const fault_trace& t) {
  std::string out;
  ordered_json h;
  h["rekindle_trace"] = format_version;
  if (!t.header.source.empty())
    h["source"] = t.header.source;
  if (!t.header.description.empty())
    h["description"] = t.header.description;
  if (t.header.nodes)
    h["nodes"] = *t.header.nodes;
  if (t.header.world)
    h["world"] = *t.header.world;
  if (t.header.duration)
    h["duration"] = *t.header.duration;
  if (t.header.time_scale)
    h["time_scale"] = *t.header.time_scale;
  put_extensions(h, t.header.extensions);
  out += h.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  out += '\n';
  for (const auto& e : t.events) {
    ordered_json j;
    if (e.at)
      j["at"] = *e.at;
    else
      j["at_step"] = e.at_step.value_or(0);
    j["kind"] = std::string{to_string(e.kind)};
    switch (e.target.kind) {
      case fault_target::type::rank: j["rank"] = e.target.rank; break;
      case fault_target::type::node: j["node"] = e.target.node; break;
      case fault_target::type::link: j["link"] = {e.target.node, e.target.peer}; break;
    }
    if (e.kind == fault_kind::kill)
      j["signal"] = e.signal;
    if (e.kind == fault_kind::crash)
      j["exit_code"] = e.exit_code;
    if (e.kind == fault_kind::slow)
      j["factor"] = e.factor;
    if (e.duration)
      j["duration"] = *e.duration;
    if (e.repair)
      j["repair"] = *e.repair;
    put_extensions(j, e.extensions);
    out += j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    out += '\n';
  }
  return out;
}

status write_file(const fault_trace& t, const std::filesystem::path& path) {
  const auto text = to_jsonl(t);
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return status{errc::io_error, tmp.string() + ": cannot create: " + std::strerror(errno)};
    out << text;
    out.flush();
    if (!out)
      return status{errc::io_error, tmp.string() + ": write failed: " + std::strerror(errno)};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return status{errc::io_error, path.string() + ": cannot rename the written trace into place: " + ec.message()};
  }
  return {};
}

}  // namespace rekindle::trace
