#include "config/load.hpp"

#include <sys/stat.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include "common/files.hpp"
#include "common/process.hpp"
#include "common/text.hpp"
#include "config/plan_file.hpp"
#include "config/planner_files.hpp"
#include "config/toml_reader.hpp"

namespace rekindle::config {

namespace fs = std::filesystem;

std::string diagnostic::to_string() const {
  std::string out = file;
  if (line > 0) {
    out += ':' + std::to_string(line);
    if (column > 0)
      out += ':' + std::to_string(column);
  }
  out += ": ";
  if (!field.empty())
    out += field + ": ";
  out += message;
  return out;
}

std::string load_result::error_text() const { return join_lines(errors); }

namespace {

// Collects diagnostics for one source and, when asked, the names of every field read.
struct context {
  std::string file;
  fs::path base_dir;
  std::vector<diagnostic> errors;
  std::vector<diagnostic> warnings;
  std::vector<std::string>* known = nullptr;

  diagnostic make(const toml::source_region& where, std::string field, std::string message) const {
    return diagnostic{file, static_cast<std::uint32_t>(where.begin.line),
                      static_cast<std::uint32_t>(where.begin.column), std::move(field), std::move(message)};
  }
  void error(const toml::source_region& where, std::string field, std::string message) {
    errors.push_back(make(where, std::move(field), std::move(message)));
  }
  void warning(const toml::source_region& where, std::string field, std::string message) {
    warnings.push_back(make(where, std::move(field), std::move(message)));
  }
};

using detail::number_text;
using detail::type_name;

// Reads the keys of one table, remembers which it asked for, and reports the rest as unknown.
class table_reader {
 public:
  /// `path` is the field prefix in messages ("job", "nodes[2]"); `schema` the prefix of known
  /// fields ("job", "nodes"); `region` where the table starts (or the file start when absent).
  table_reader(context& ctx, const toml::table* tbl, std::string path, std::string schema,
               toml::source_region region)
      : ctx_(ctx), tbl_(tbl), path_(std::move(path)), schema_(std::move(schema)), region_(region) {}

  [[nodiscard]] std::string field(std::string_view key) const { return path_ + "." + std::string{key}; }

  const toml::node* get(std::string_view key) {
    keys_.emplace_back(key);
    if (ctx_.known != nullptr) {
      auto name = schema_ + "." + std::string{key};
      if (std::find(ctx_.known->begin(), ctx_.known->end(), name) == ctx_.known->end())
        ctx_.known->push_back(std::move(name));
    }
    return tbl_ != nullptr ? tbl_->get(key) : nullptr;
  }

  /// Where `key`'s value is, or the table when the key is absent.
  [[nodiscard]] toml::source_region where(std::string_view key) const {
    if (tbl_ != nullptr)
      if (const auto* n = tbl_->get(key))
        return n->source();
    return region_;
  }
  [[nodiscard]] bool has(std::string_view key) const { return tbl_ != nullptr && tbl_->contains(key); }

  void error(std::string_view key, std::string message) { ctx_.error(where(key), field(key), std::move(message)); }

  template <class T>
  T integer(std::string_view key, T fallback, std::int64_t min, std::int64_t max) {
    const auto* n = get(key);
    if (n == nullptr)
      return fallback;
    if (!n->is_integer()) {
      type_error(key, *n, "an integer");
      return fallback;
    }
    const std::int64_t v = n->as_integer()->get();
    if (v < min || v > max) {
      range_error(key, std::to_string(v), std::to_string(min), max >= (std::int64_t{1} << 31) ? "" : std::to_string(max));
      return fallback;
    }
    return static_cast<T>(v);
  }

  double number(std::string_view key, double fallback, double min, double max) {
    const auto* n = get(key);
    if (n == nullptr)
      return fallback;
    double v = 0;
    if (n->is_floating_point())
      v = n->as_floating_point()->get();
    else if (n->is_integer())
      v = static_cast<double>(n->as_integer()->get());
    else {
      type_error(key, *n, "a number");
      return fallback;
    }
    if (!(v >= min && v <= max)) {
      range_error(key, number_text(v), number_text(min), number_text(max));
      return fallback;
    }
    return v;
  }

  bool boolean(std::string_view key, bool fallback) {
    const auto* n = get(key);
    if (n == nullptr)
      return fallback;
    if (!n->is_boolean()) {
      type_error(key, *n, "a boolean (true or false)");
      return fallback;
    }
    return n->as_boolean()->get();
  }

  std::string string(std::string_view key, std::string fallback) {
    const auto* n = get(key);
    if (n == nullptr)
      return fallback;
    if (!n->is_string()) {
      type_error(key, *n, "a string");
      return fallback;
    }
    return n->as_string()->get();
  }

  /// The array at `key` when it is one of at most `max_count` elements; else reports what it is
  /// (`what`: "an array of strings") and returns null, as when the key is absent.
  const toml::array* array(std::string_view key, std::size_t max_count, const char* what) {
    const auto* n = get(key);
    if (n == nullptr)
      return nullptr;
    const auto* list = n->as_array();
    if (list == nullptr) {
      type_error(key, *n, what);
      return nullptr;
    }
    if (list->size() > max_count) {
      error(key, "holds " + std::to_string(list->size()) + " elements, at most " + std::to_string(max_count) +
                     " are allowed");
      return nullptr;
    }
    return list;
  }

  /// An array of at most `max_count` strings of 1 to `max_length` bytes; each bad element is
  /// reported at its own place ("job.command[2]").
  std::vector<std::string> strings(std::string_view key, std::size_t max_count, std::size_t max_length) {
    std::vector<std::string> out;
    const auto* list = array(key, max_count, "an array of strings");
    if (list == nullptr)
      return out;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const auto* e = list->get(i);
      const std::string efield = field(key) + "[" + std::to_string(i) + "]";
      if (!e->is_string()) {
        ctx_.error(e->source(), efield, "expected a string, got " + std::string{type_name(e->type())});
        continue;
      }
      const auto& text = e->as_string()->get();
      if (text.empty() || text.size() > max_length || text.find('\0') != std::string::npos) {
        ctx_.error(e->source(), efield,
                   "must be 1 to " + std::to_string(max_length) + " bytes without a NUL byte, got " +
                       std::to_string(text.size()) + " bytes");
        continue;
      }
      out.push_back(text);
    }
    return out;
  }

  /// An array of at most `max_count` integers in [min, max]; each bad element is reported at its
  /// own place ("job.stages[1]").
  std::vector<std::uint32_t> integers(std::string_view key, std::size_t max_count, std::uint32_t min, std::uint32_t max) {
    std::vector<std::uint32_t> out;
    const auto* list = array(key, max_count, "an array of integers");
    if (list == nullptr)
      return out;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const auto* e = list->get(i);
      const std::string efield = field(key) + "[" + std::to_string(i) + "]";
      if (!e->is_integer()) {
        ctx_.error(e->source(), efield, "expected an integer, got " + std::string{type_name(e->type())});
        continue;
      }
      const auto v = e->as_integer()->get();
      if (v < min || v > max) {
        ctx_.error(e->source(), efield,
                   "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + std::to_string(v));
        continue;
      }
      out.push_back(static_cast<std::uint32_t>(v));
    }
    return out;
  }

  nanoseconds duration(std::string_view key, nanoseconds fallback, nanoseconds min, nanoseconds max) {
    const auto* n = get(key);
    if (n == nullptr)
      return fallback;
    if (!n->is_string()) {
      type_error(key, *n, "a duration string such as \"500ms\"");
      return fallback;
    }
    auto d = parse_duration(n->as_string()->get());
    if (!d) {
      error(key, d.error().message());
      return fallback;
    }
    if (*d < min || *d > max) {
      range_error(key, n->as_string()->get(), duration_to_string(min), duration_to_string(max));
      return fallback;
    }
    return *d;
  }

  std::uint64_t size(std::string_view key, std::uint64_t fallback, std::uint64_t min, std::uint64_t max) {
    const auto* n = get(key);
    if (n == nullptr)
      return fallback;
    std::uint64_t v = 0;
    std::string shown;
    if (n->is_integer() && n->as_integer()->get() >= 0) {
      v = static_cast<std::uint64_t>(n->as_integer()->get());
      shown = std::to_string(v);
    } else if (n->is_string()) {
      auto s = parse_size(n->as_string()->get());
      if (!s) {
        error(key, s.error().message());
        return fallback;
      }
      v = *s;
      shown = n->as_string()->get();
    } else {
      type_error(key, *n, "a size such as \"16MiB\" or a byte count");
      return fallback;
    }
    if (v < min || v > max) {
      range_error(key, shown, size_to_string(min), size_to_string(max));
      return fallback;
    }
    return v;
  }

  /// Reports every key of the table that nobody asked for.
  void finish() {
    if (tbl_ == nullptr)
      return;
    for (auto&& [k, v] : *tbl_) {
      const std::string name{k.str()};
      if (std::find(keys_.begin(), keys_.end(), name) != keys_.end())
        continue;
      auto where = k.source().begin.line > 0 ? k.source() : v.source();
      ctx_.error(where, field(name), "unknown key" + did_you_mean(name, keys_));
    }
  }

 private:
  void type_error(std::string_view key, const toml::node& n, std::string_view wanted) {
    error(key, "expected " + std::string{wanted} + ", got " + std::string{type_name(n.type())});
  }
  void range_error(std::string_view key, const std::string& got, const std::string& min, const std::string& max) {
    if (max.empty())
      error(key, "must be at least " + min + ", got " + got);
    else
      error(key, "must be between " + min + " and " + max + ", got " + got);
  }

  context& ctx_;
  const toml::table* tbl_;
  std::string path_;
  std::string schema_;
  toml::source_region region_;
  std::vector<std::string> keys_;
};

table_reader reader_for(context& ctx, const toml::table& root, std::string_view key) {
  const auto* t = detail::sub_table(ctx, root, key, key);
  return table_reader{ctx, t, std::string{key}, std::string{key}, t != nullptr ? t->source() : detail::file_start()};
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || name.size() > 256 || std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool is_loopback(std::string_view host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

fs::path resolve(const context& ctx, const std::string& p) {
  fs::path path{p};
  if (path.is_relative())
    path = ctx.base_dir / path;
  return path.lexically_normal();
}

expected<device_spec> parse_device(std::string_view text) {
  device_spec d;
  if (text == "auto")
    return d;
  if (text == "cpu") {
    d.type = device_spec::kind::cpu;
    return d;
  }
  if (text == "cuda") {
    d.type = device_spec::kind::cuda;
    return d;
  }
  if (text.starts_with("cuda:")) {
    const auto digits = text.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc{} && ptr == digits.data() + digits.size() && index >= 0 && index < 1024) {
      d.type = device_spec::kind::cuda;
      d.index = index;
      return d;
    }
  }
  return status{errc::parse_error,
                "'" + std::string{text} + "' is not a device; use \"auto\", \"cpu\", \"cuda\" or \"cuda:N\""};
}

// Reads a token file: it must exist, be readable and hold at least 16 bytes of secret.
std::string read_token(context& ctx, table_reader& r, std::string_view key, const fs::path& path) {
  auto text = read_file_bounded(path, file_limits::token, "token file");
  if (!text) {
    r.error(key, "'" + path.string() + "': " + text.error().message());
    return {};
  }
  // A secret others can read is no secret: say so loudly (a refusal would break a cluster whose
  // files were made by hand, and the fix is one chmod).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    ctx.warning(r.where(key), r.field(key),
                "token file '" + path.string() + "' can be read by other users (mode " + mode +
                    "): anyone on this machine could control the job; chmod 600 it");
  }
  std::string token{trim(*text)};
  if (token.empty())
    r.error(key, "token file '" + path.string() + "' is empty");
  else if (token.size() < 16)
    r.error(key, "token in '" + path.string() + "' is " + std::to_string(token.size()) +
                     " bytes; use at least 16 (e.g. `head -c 32 /dev/urandom | base64 > FILE`)");
  return token;
}

void read_cluster(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "cluster");
  s.cluster.name = r.string("name", s.cluster.name);
  if (!valid_name(s.cluster.name))
    r.error("name", "'" + s.cluster.name + "' is not a valid name: use 1-64 letters, digits, '-', '_' or '.'");
  s.cluster.supervisor = r.string("supervisor", "");
  s.cluster.ranks_per_node = r.integer<std::uint32_t>("ranks_per_node", s.cluster.ranks_per_node, 1, 1024);
  s.cluster.standby = r.string("standby", "");
  s.cluster.etcd = r.string("etcd", "");
  if (!s.cluster.etcd.empty())
    if (auto hp = parse_host_port(s.cluster.etcd); !hp)
      r.error("etcd", "'" + s.cluster.etcd + "' is not host:port: " + hp.error().message());
  s.cluster.lease = r.duration("lease", s.cluster.lease, std::chrono::seconds{2}, std::chrono::seconds{60});
  if (s.cluster.lease % std::chrono::seconds{1} != std::chrono::nanoseconds{0})
    r.error("lease", "'" + duration_to_string(s.cluster.lease) + "' is not whole seconds (etcd leases count seconds)");
  r.finish();
}

void read_nodes(context& ctx, const toml::table& root, spec& s) {
  const auto* n = root.get("nodes");
  if (ctx.known != nullptr && n == nullptr) {
    // known_fields() walks a config without nodes; list a node's fields anyway.
    table_reader r{ctx, nullptr, "nodes", "nodes", detail::file_start()};
    for (auto key : {"name", "host", "port", "devices", "spare", "speed", "domain"})
      (void)r.get(key);
    return;
  }
  if (n == nullptr) {
    ctx.error(detail::file_start(), "nodes", "no nodes: add at least one [[nodes]] table with a name");
    return;
  }
  const auto* arr = n->as_array();
  if (arr == nullptr || !arr->is_array_of_tables()) {
    ctx.error(n->source(), "nodes", "expected an array of tables ([[nodes]]), got " + std::string{type_name(n->type())});
    return;
  }
  if (arr->empty()) {
    ctx.error(n->source(), "nodes", "no nodes: add at least one [[nodes]] table with a name");
    return;
  }
  struct seen_node {
    std::string name;
    std::uint32_t line;
  };
  std::vector<seen_node> seen;
  std::vector<std::pair<std::string, std::uint32_t>> seen_endpoints;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const auto* t = arr->get(i)->as_table();
    const std::string path = "nodes[" + std::to_string(i) + "]";
    table_reader r{ctx, t, path, "nodes", t->source()};
    node_spec node;
    if (!r.has("name")) {
      r.error("name", "missing: every node needs a name");
      (void)r.get("name");
    } else {
      node.name = r.string("name", "");
      if (!valid_name(node.name))
        r.error("name", "'" + node.name + "' is not a valid node name: use 1-64 letters, digits, '-', '_' or '.'");
    }
    node.host = r.string("host", node.host);
    if (auto h = check_host(node.host); !h.ok())
      r.error("host", h.message());
    node.bind = r.string("bind", node.bind);
    if (!node.bind.empty())
      if (auto h = check_host(node.bind); !h.ok())
        r.error("bind", h.message());
    node.port = r.integer<std::uint16_t>("port", node.port, 0, 65535);
    if (const auto* d = r.get("devices")) {
      const auto* list = d->as_array();
      if (list == nullptr) {
        r.error("devices", "expected an array of device names such as [\"cpu\", \"cpu\"], got " +
                               std::string{type_name(d->type())});
      } else if (list->empty()) {
        r.error("devices", "lists no devices; leave it out to use cluster.ranks_per_node");
      } else {
        for (std::size_t j = 0; j < list->size(); ++j) {
          const auto* e = list->get(j);
          const std::string efield = r.field("devices") + "[" + std::to_string(j) + "]";
          if (!e->is_string()) {
            ctx.error(e->source(), efield, "expected a string, got " + std::string{type_name(e->type())});
            continue;
          }
          auto dev = parse_device(e->as_string()->get());
          if (!dev)
            ctx.error(e->source(), efield, dev.error().message());
          else
            node.devices.push_back(*dev);
        }
      }
    }
    node.spare = r.boolean("spare", node.spare);
    node.speed = r.number("speed", node.speed, 0.01, 100.0);
    node.domain = r.string("domain", node.domain);
    if (!node.domain.empty() && !valid_name(node.domain))
      r.error("domain", "'" + node.domain + "' is not a valid domain name: use 1-64 letters, digits, '-', '_' or '.'");
    r.finish();

    const auto line = static_cast<std::uint32_t>(r.where("name").begin.line);
    if (!node.name.empty()) {
      auto it = std::find_if(seen.begin(), seen.end(), [&](const seen_node& x) { return x.name == node.name; });
      if (it != seen.end())
        r.error("name", "duplicate node '" + node.name + "' (first defined at line " + std::to_string(it->line) + ")");
      else
        seen.push_back({node.name, line});
    }
    if (node.port != 0) {
      const auto endpoint = node.host + ":" + std::to_string(node.port);
      auto it = std::find_if(seen_endpoints.begin(), seen_endpoints.end(),
                             [&](const auto& x) { return x.first == endpoint; });
      if (it != seen_endpoints.end())
        r.error("port", "another node already listens on " + endpoint + " (line " + std::to_string(it->second) + ")");
      else
        seen_endpoints.emplace_back(endpoint, static_cast<std::uint32_t>(r.where("port").begin.line));
    }
    s.nodes.push_back(std::move(node));
  }
}

void read_job(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "job");
  auto& j = s.job;
  j.name = r.string("name", j.name);
  if (!valid_name(j.name))
    r.error("name", "'" + j.name + "' is not a valid name: use 1-64 letters, digits, '-', '_' or '.'");
  j.steps = r.integer<std::uint64_t>("steps", j.steps, 1, std::int64_t{1} << 40);
  j.global_batch = r.integer<std::uint32_t>("global_batch", j.global_batch, 1, 1 << 20);
  j.micro_batch = r.integer<std::uint32_t>("micro_batch", j.micro_batch, 1, 1 << 20);
  j.seed = r.integer<std::uint64_t>("seed", j.seed, 0, std::numeric_limits<std::int64_t>::max());
  j.data = r.string("data", j.data);
  j.balance = r.string("balance", j.balance);
  j.command = r.strings("command", 1024, 4096);
  const auto workdir = r.string("workdir", "");
  const auto env = r.strings("env", 1024, 4096);
  j.master_port = r.integer<std::uint16_t>("master_port", j.master_port, 1024, 65535 - job_spec::master_port_span);
  j.state_bytes = r.size("state_bytes", j.state_bytes, 4096, 1ull << 40);
  j.stages = r.integers("stages", 256, 1, 256);
  const auto plan = r.string("plan", "");
  const auto plan_cluster = r.string("plan_cluster", "");
  const auto plan_model = r.string("plan_model", "");
  j.replan_budget = r.duration("replan_budget", j.replan_budget, std::chrono::nanoseconds::zero(), std::chrono::seconds{10});
  r.finish();
  if (plan_cluster.empty() != plan_model.empty())
    r.error(plan_cluster.empty() ? "plan_model" : "plan_cluster",
            "needs plan_cluster and plan_model both: the planner's cluster and model files that job.plan was made for");
  else if (!plan_cluster.empty() && plan.empty())
    r.error("plan_cluster", "re-plans a job.plan: give job.plan too");
  else if (plan_cluster.empty() && r.has("replan_budget"))
    r.error("replan_budget", "applies only to a re-plan: give job.plan_cluster and job.plan_model too");
  else if (!plan_cluster.empty()) {
    j.plan_cluster = resolve(ctx, plan_cluster);
    j.plan_model = resolve(ctx, plan_model);
  }
  if (r.has("plan") && plan.empty())
    r.error("plan", "is empty: leave it out, or give the path of a plan file (rekindle plan --json > plan.json)");
  else if (!plan.empty() && r.has("command"))
    r.error("plan", "applies only to the built-in model; a job.command's program places its own model");
  else if (!plan.empty())
    j.plan = resolve(ctx, plan);
  if (r.has("stages") && j.stages.empty() && r.get("stages")->as_array() != nullptr && r.get("stages")->as_array()->empty())
    r.error("stages", "is empty: leave it out for no pipeline, or give each stage's blocks, e.g. [2, 2]");
  if (!j.stages.empty() && r.has("command"))
    r.error("stages", "applies only to the built-in model; a job.command's program splits its own model");
  const auto* command_node = r.has("command") ? r.get("command") : nullptr;
  if (command_node != nullptr && command_node->as_array() != nullptr && command_node->as_array()->empty())
    r.error("command", "is empty: give the program and its arguments, e.g. [\"python3\", \"train.py\"]");
  if (!j.command.empty()) {
    j.workdir = workdir.empty() ? ctx.base_dir : resolve(ctx, workdir);
    if (auto program = find_program(j.command[0], j.workdir); !program)
      r.error("command", program.error().message());
  } else if (!workdir.empty() || !env.empty() || r.has("state_bytes")) {
    r.error(!workdir.empty() ? "workdir" : !env.empty() ? "env" : "state_bytes", "applies only to a job.command");
  }
  for (const auto& entry : env) {
    const auto eq = entry.find('=');
    const auto name = entry.substr(0, eq);
    if (eq == std::string::npos || !valid_env_name(name))
      r.error("env", "'" + entry + "' is not NAME=value with a NAME of letters, digits and '_' (not starting with a "
                                   "digit)");
    else
      j.env.emplace_back(name, entry.substr(eq + 1));
  }
  if (j.balance != "equal" && j.balance != "speeds" && j.balance != "measured")
    r.error("balance", "'" + j.balance + "' is not a way to share micro-batches: use \"equal\", \"speeds\" or \"measured\"");

  if (j.micro_batch > j.global_batch || j.global_batch % j.micro_batch != 0) {
    const auto key = r.has("micro_batch") ? "micro_batch" : "global_batch";
    r.error(key, "global_batch (" + std::to_string(j.global_batch) + ") must be a multiple of micro_batch (" +
                     std::to_string(j.micro_batch) + ")");
  }
  if (j.data.empty())
    r.error("data", "must be \"synthetic\" or the path of a text file");
  else if (j.data != "synthetic")
    j.data_file = resolve(ctx, j.data);
}

void check_data_file(context& ctx, const toml::table& root, spec& s) {
  if (!s.job.data_file)
    return;
  table_reader r{ctx, detail::sub_table(ctx, root, "job", "job"), "job", "job", detail::file_start()};
  const auto& path = *s.job.data_file;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    r.error("data", "data file '" + path.string() + "' does not exist (use \"synthetic\" for the built-in corpus)");
    return;
  }
  if (!fs::is_regular_file(path, ec)) {
    r.error("data", "data file '" + path.string() + "' is not a regular file");
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    r.error("data", "cannot read data file '" + path.string() + "': " + std::strerror(errno));
    return;
  }
  const auto size = fs::file_size(path, ec);
  const std::uint64_t need = std::uint64_t{s.model.seq_len} + 1;
  if (ec || size == 0)
    r.error("data", "data file '" + path.string() + "' is empty");
  else if (size < need)
    r.error("data", "data file '" + path.string() + "' holds " + std::to_string(size) +
                        " bytes, fewer than one training sequence needs (model.seq_len + 1 = " + std::to_string(need) + ")");
}

// job.plan_cluster and job.plan_model: readable planner files of this job's nodes and model, so
// that a re-plan after a node loss cannot fail on them. Returns false after an error.
bool check_replan_files(table_reader& job, const spec& s, std::uint32_t micro_batch_size) {
  auto cluster = load_plan_cluster(s.job.plan_cluster);
  auto model = load_plan_model(s.job.plan_model);
  if (!cluster.ok() || !model.ok()) {
    for (const auto& e : cluster.errors)
      job.error("plan_cluster", e.to_string());
    for (const auto& e : model.errors)
      job.error("plan_model", e.to_string());
    return false;
  }
  bool ok = true;
  for (const auto& e : check_plan_files(*cluster.value, *model.value)) {
    job.error("plan_model", e.to_string());
    ok = false;
  }
  const auto cluster_file = s.job.plan_cluster.string();
  for (const auto& n : cluster.value->nodes) {
    const auto found = s.find_node(n.name);
    const auto where = cluster_file + ": node " + n.name + ": ";
    if (!found) {
      std::vector<std::string> names;
      for (const auto& x : s.nodes)
        names.push_back(x.name);
      job.error("plan_cluster", where + "not a node of this configuration" + did_you_mean(n.name, names));
      ok = false;
      continue;
    }
    const auto& node = s.nodes[found->value()];
    const auto capacity = node.devices.empty() ? s.cluster.ranks_per_node : static_cast<std::uint32_t>(node.devices.size());
    if (n.devices > capacity) {
      job.error("plan_cluster", where + std::to_string(n.devices) + " devices, but the node runs at most " +
                                    std::to_string(capacity) + " ranks here");
      ok = false;
    }
  }
  const auto model_file = s.job.plan_model.string();
  const auto& m = *model.value;
  if (m.layers != s.model.layers || m.global_batch != s.job.global_batch) {
    job.error("plan_model", model_file + ": layers " + std::to_string(m.layers) + " and global_batch " +
                                std::to_string(m.global_batch) + ", but this job trains model.layers " +
                                std::to_string(s.model.layers) + " with job.global_batch " +
                                std::to_string(s.job.global_batch) + ": the files must describe this job");
    ok = false;
  }
  if (m.recompute != recompute_policy::never) {
    job.error("plan_model", model_file + ": recompute must be \"never\" (the built-in model keeps its activations), not \"" +
                                std::string{to_string(m.recompute)} + "\"");
    ok = false;
  }
  if (!m.micro_batch_sizes.empty() && m.micro_batch_sizes != std::vector<std::uint32_t>{micro_batch_size}) {
    job.error("plan_model", model_file + ": micro_batch_sizes must be [" + std::to_string(micro_batch_size) +
                                "], the plan's: a job keeps its micro-batch size through a re-plan");
    ok = false;
  }
  return ok;
}

// job.plan: the file's first plan sets the stages, the micro-batch size, each rank's node and
// device, and the replicas' shares. Returns false after an error.
bool read_job_plan(table_reader& job, spec& s) {
  const auto source = s.job.plan.string();
  auto text = read_file_bounded(s.job.plan, file_limits::config, "plan file");
  if (!text) {
    job.error("plan", source + ": " + text.error().message());
    return false;
  }
  plan_bounds bounds;
  bounds.layers = s.model.layers;
  bounds.global_batch = s.job.global_batch;
  for (const auto& n : s.nodes) {
    const auto capacity = n.devices.empty() ? s.cluster.ranks_per_node : static_cast<std::uint32_t>(n.devices.size());
    plan_file_node node{n.name, {}};
    for (std::uint32_t d = 0; d < capacity; ++d)
      node.devices.push_back(d);
    bounds.nodes.push_back(std::move(node));
  }
  auto plans = read_plan_file(*text, source, bounds);
  if (!plans) {
    job.error("plan", plans.error().message());
    return false;
  }
  const auto& pl = plans->front();
  bool ok = true;
  const auto bad = [&](std::string_view key, const std::string& message) {
    job.error("plan", plan_file_error(source, plan_field(pl.field, key), message).message());
    ok = false;
  };
  std::vector<std::uint32_t> stages;
  std::uint32_t next = 0;
  for (std::size_t i = 0; i < pl.stages.size(); ++i) {
    const auto& st = pl.stages[i];
    const auto at = "stages[" + std::to_string(i) + "]";
    if (st.tensor != 1)
      bad(at + ".tensor", "tensor degree " + std::to_string(st.tensor) +
                              ": the built-in model runs each stage of a replica on one device (tensor 1)");
    if (st.first_layer != next)
      bad(at + ".first_layer", "the stage starts at block " + std::to_string(st.first_layer) +
                                   "; stages follow each other from block 0, so this one starts at " + std::to_string(next));
    next = st.first_layer + st.layers;
    stages.push_back(st.layers);
  }
  if (ok && next != s.model.layers)
    bad("stages", "the stages hold " + std::to_string(next) + " blocks, model.layers is " + std::to_string(s.model.layers));
  if (pl.recompute)
    bad("recompute", "the built-in model keeps its activations for the backward pass; a plan for it has \"recompute\": false");
  if (job.has("micro_batch") && s.job.micro_batch != pl.micro_batch_size)
    bad("micro_batch_size", std::to_string(pl.micro_batch_size) + " sequences, but job.micro_batch is " +
                                std::to_string(s.job.micro_batch) + ": leave job.micro_batch out, or make them equal");
  else if (s.job.global_batch % pl.micro_batch_size != 0)
    bad("micro_batch_size", std::to_string(pl.micro_batch_size) + " sequences do not divide job.global_batch (" +
                                std::to_string(s.job.global_batch) + ")");
  if (job.has("stages") && s.job.stages != stages) {
    std::string given;
    for (const auto n : stages)
      given += (given.empty() ? "" : ", ") + std::to_string(n);
    job.error("stages", "differs from job.plan's stages [" + given + "]: leave job.stages out, or make them equal");
    ok = false;
  }
  std::vector<planned_rank> ranks;
  std::vector<std::uint32_t> shares;
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < pl.replicas.size(); ++r) {
    const auto& replica = pl.replicas[r];
    for (std::size_t st = 0; st < replica.stages.size(); ++st) {
      const auto& at = replica.stages[st];
      if (s.nodes[at.node].spare)
        bad("replicas[" + std::to_string(r) + "].stages[" + std::to_string(st) + "].node",
            "node " + s.nodes[at.node].name + " is a spare; a plan places its ranks on worker nodes");
      ranks.push_back({node_id{at.node}, at.devices.front()});
    }
    shares.push_back(replica.micro_batches);
    total += replica.micro_batches;
  }
  const auto micro_batches = s.job.global_batch / pl.micro_batch_size;
  if (total > 0 && total != micro_batches)
    bad("replicas", "the replicas' micro_batches add up to " + std::to_string(total) + "; a step has " +
                        std::to_string(micro_batches) + " (job.global_batch / micro_batch_size)");
  if (total == 0 && micro_batches < pl.replicas.size())
    bad("replicas", std::to_string(pl.replicas.size()) + " replicas, but a step has only " + std::to_string(micro_batches) +
                        " micro-batches (job.global_batch / micro_batch_size)");
  if (ok && !s.job.plan_cluster.empty())
    ok = check_replan_files(job, s, pl.micro_batch_size);
  if (!ok)
    return false;
  s.job.stages = std::move(stages);
  s.job.micro_batch = pl.micro_batch_size;
  s.job.plan_ranks = std::move(ranks);
  if (total > 0)
    s.job.plan_shares = std::move(shares);
  return true;
}

void read_model(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "model");
  auto& m = s.model;
  m.layers = r.integer<std::uint32_t>("layers", m.layers, 1, 256);
  m.heads = r.integer<std::uint32_t>("heads", m.heads, 1, 256);
  m.width = r.integer<std::uint32_t>("width", m.width, 8, 16384);
  m.seq_len = r.integer<std::uint32_t>("seq_len", m.seq_len, 2, 65536);
  r.finish();
  if (m.width % m.heads != 0)
    r.error(r.has("heads") ? "heads" : "width",
            "width (" + std::to_string(m.width) + ") must be a multiple of heads (" + std::to_string(m.heads) + ")");
}

void read_optimizer(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "optimizer");
  auto& o = s.optimizer;
  o.learning_rate = r.number("learning_rate", o.learning_rate, 1e-9, 10.0);
  o.min_learning_rate = r.number("min_learning_rate", o.min_learning_rate, 0.0, 10.0);
  o.warmup_steps = r.integer<std::uint64_t>("warmup_steps", o.warmup_steps, 0, std::int64_t{1} << 40);
  o.weight_decay = r.number("weight_decay", o.weight_decay, 0.0, 1.0);
  o.beta1 = r.number("beta1", o.beta1, 0.0, 0.999999);
  o.beta2 = r.number("beta2", o.beta2, 0.0, 0.999999);
  o.epsilon = r.number("epsilon", o.epsilon, 1e-20, 1.0);
  o.grad_clip = r.number("grad_clip", o.grad_clip, 0.0, 1e6);
  r.finish();
  if (o.min_learning_rate > o.learning_rate)
    r.error(r.has("min_learning_rate") ? "min_learning_rate" : "learning_rate",
            "min_learning_rate (" + number_text(o.min_learning_rate) + ") must not exceed learning_rate (" +
                number_text(o.learning_rate) + ")");
}

void read_checkpoint(context& ctx, const toml::table& root, spec& s, std::string& directory) {
  auto r = reader_for(ctx, root, "checkpoint");
  auto& c = s.checkpoint;
  c.snapshot_every = r.integer<std::uint64_t>("snapshot_every", c.snapshot_every, 1, 1'000'000);
  c.persist_every = r.integer<std::uint64_t>("persist_every", c.persist_every, 0, 1'000'000);
  c.keep = r.integer<std::uint32_t>("keep", c.keep, 1, 1000);
  c.overlap = r.boolean("overlap", c.overlap);
  directory = r.string("directory", "");
  r.finish();
}

void read_timeouts(context& ctx, const toml::table& root, spec& s) {
  using namespace std::chrono_literals;
  auto r = reader_for(ctx, root, "timeouts");
  auto& t = s.timeouts;
  const nanoseconds day = 24h;
  t.node = r.duration("node", t.node, 2ms, day);
  t.hang = r.duration("hang", t.hang, 10ms, day);
  t.heartbeat = r.duration("heartbeat", timeouts_spec::heartbeat_for(t.node, t.hang), 1ms, 1min);
  t.rendezvous = r.duration("rendezvous", t.rendezvous, 10ms, day);
  t.collective = r.duration("collective", t.collective, 1ms, day);
  r.finish();
  if (t.node < 2 * t.heartbeat)
    r.error(r.has("node") ? "node" : "heartbeat",
            "node (" + duration_to_string(t.node) + ") must be at least twice heartbeat (" +
                duration_to_string(t.heartbeat) + ") so one late heartbeat is not a lost node");
  if (t.hang <= t.heartbeat)
    r.error(r.has("hang") ? "hang" : "heartbeat",
            "hang (" + duration_to_string(t.hang) + ") must be longer than heartbeat (" +
                duration_to_string(t.heartbeat) + ")");
  if (t.rendezvous <= t.node)
    r.error(r.has("rendezvous") ? "rendezvous" : "node",
            "rendezvous (" + duration_to_string(t.rendezvous) + ") must be longer than node (" +
                duration_to_string(t.node) + ") so a node lost during a rendezvous is found lost, and its ranks "
                "moved, before the rendezvous gives up on them");
}

void read_recovery(context& ctx, const toml::table& root, spec& s) {
  using namespace std::chrono_literals;
  auto r = reader_for(ctx, root, "recovery");
  auto& v = s.recovery;
  v.max_restarts_per_rank = r.integer<std::uint32_t>("max_restarts_per_rank", v.max_restarts_per_rank, 0, 1'000'000);
  v.max_restarts = r.integer<std::uint32_t>("max_restarts", v.max_restarts, 0, 1'000'000);
  v.backoff = r.duration("backoff", v.backoff, 0ns, 1h);
  v.backoff_max = r.duration("backoff_max", v.backoff_max, 0ns, 24h);
  v.policy = r.string("policy", v.policy);
  r.finish();
  if (v.backoff > v.backoff_max)
    r.error(r.has("backoff") ? "backoff" : "backoff_max",
            "backoff (" + duration_to_string(v.backoff) + ") must not exceed backoff_max (" +
                duration_to_string(v.backoff_max) + ")");
  if (v.policy != "in-place" && v.policy != "restart-all") {
    r.error("policy", "'" + v.policy + "' is not a recovery policy: use \"in-place\" or \"restart-all\"");
  } else if (v.restart_all() && s.job.external()) {
    r.error("policy", "\"restart-all\" applies to the built-in worker: a job.command program that does not use "
                      "the worker API already starts again on every failure, and one that does keeps its process");
  } else if (v.restart_all() && s.checkpoint.persist_every == 0) {
    r.error("policy", "\"restart-all\" restores only from checkpoints on disk, and checkpoint.persist_every = 0 "
                      "writes none: every failure would restart from step 0 (set persist_every to 1 or more)");
  }
}

void read_checks(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "checks");
  auto& c = s.checks;
  c.preflight = r.boolean("preflight", c.preflight);
  c.min_compute = r.number("min_compute", c.min_compute, 0.0, 1.0);
  c.min_memory = r.number("min_memory", c.min_memory, 0.0, 1.0);
  c.min_disk = r.number("min_disk", c.min_disk, 0.0, 1.0);
  c.disk_bytes = r.size("disk_bytes", c.disk_bytes, 4096, 1ull << 30);
  c.min_gpu = r.number("min_gpu", c.min_gpu, 0.0, 1.0);
  c.gpu_gflops = r.number("gpu_gflops", c.gpu_gflops, 0.0, 1e7);
  c.min_link = r.number("min_link", c.min_link, 0.0, 1.0);
  c.link_bytes = r.size("link_bytes", c.link_bytes, 4096, 256ull << 20);
  c.every = r.duration("every", c.every, std::chrono::nanoseconds{0}, std::chrono::hours{24 * 7});
  r.finish();
  if (c.every != std::chrono::nanoseconds{0} && c.every < std::chrono::seconds{5})
    r.error("every", "a check every " + duration_to_string(c.every) +
                         " would measure little else than itself: 0 (off) or from 5s up");
}

void read_stragglers(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "stragglers");
  auto& g = s.stragglers;
  g.action = r.string("action", g.action);
  g.threshold = r.number("threshold", g.threshold, 1.05, 10.0);
  g.window = r.integer<std::uint32_t>("window", g.window, 5, 1000);
  g.span = r.duration("span", g.span, std::chrono::nanoseconds{0}, std::chrono::minutes{10});
  g.confirm = r.duration("confirm", g.confirm, std::chrono::nanoseconds{0}, std::chrono::minutes{10});
  r.finish();
  if (g.action != "report" && g.action != "rebalance" && g.action != "replace")
    r.error("action", "'" + g.action + "' is not an action: report, rebalance or replace");
}

void read_security(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "security");
  auto& sec = s.security;
  const auto token_file = r.string("token_file", "");
  const auto readonly_file = r.string("readonly_token_file", "");
  r.finish();
  if (!token_file.empty()) {
    sec.token_file = resolve(ctx, token_file);
    sec.token = read_token(ctx, r, "token_file", sec.token_file);
  }
  if (!readonly_file.empty()) {
    sec.readonly_token_file = resolve(ctx, readonly_file);
    if (token_file.empty())
      r.error("readonly_token_file", "a read-only token needs an admin token: set security.token_file too");
    sec.readonly_token = read_token(ctx, r, "readonly_token_file", sec.readonly_token_file);
    if (!sec.readonly_token.empty() && sec.readonly_token == sec.token)
      r.error("readonly_token_file", "the read-only token equals the admin token; it would grant admin rights");
  }
  if (token_file.empty() && ctx.known == nullptr) {
    const bool all_loopback =
        std::all_of(s.nodes.begin(), s.nodes.end(), [](const node_spec& n) { return is_loopback(n.host); });
    if (!all_loopback)
      ctx.warning(r.where("token_file"), "security.token_file",
                  "authentication is off: any process that reaches the daemons' ports can control the job");
  }
}

void read_transport(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "transport");
  auto& t = s.transport;
  t.max_frame_size = r.size("max_frame_size", t.max_frame_size, 4096, 1ull << 30);
  t.chunk_size = r.size("chunk_size", t.chunk_size, 4096, 256ull << 20);
  t.net_devices = r.string("net_devices", t.net_devices);
  t.tls = r.string("tls", t.tls);
  t.spin = r.duration("spin", t.spin, std::chrono::nanoseconds::zero(), std::chrono::milliseconds{10});
  r.finish();
}

void read_daemon(context& ctx, const toml::table& root, spec& s) {
  auto r = reader_for(ctx, root, "daemon");
  auto& d = s.daemon;
  d.data_dir = resolve(ctx, r.string("data_dir", "rekindle-data"));
  d.actor_threads = r.integer<std::uint32_t>("actor_threads", d.actor_threads, 1, 256);
  const auto level = r.string("log", std::string{to_string(d.log)});
  if (auto l = parse_log_level(level))
    d.log = *l;
  else
    r.error("log", l.error().message());
  const auto format = r.string("log_format", std::string{to_string(d.log_format)});
  if (auto f = parse_log_format(format))
    d.log_format = *f;
  else
    r.error("log_format", f.error().message());
  d.http = r.boolean("http", d.http);
  d.http_host = r.string("http_host", d.http_host);
  d.http_port = r.integer<std::uint16_t>("http_port", d.http_port, 0, 65535);
  r.finish();
}

constexpr std::string_view top_tables[] = {"cluster", "nodes", "job", "model", "optimizer", "checkpoint",
                                           "timeouts", "recovery", "checks", "stragglers", "security", "transport", "daemon"};

void check_cluster(context& ctx, const toml::table& root, spec& s) {
  table_reader r{ctx, detail::sub_table(ctx, root, "cluster", "cluster"), "cluster", "cluster", detail::file_start()};
  if (s.nodes.empty())
    return;
  if (s.cluster.supervisor.empty()) {
    s.cluster.supervisor = s.nodes.front().name;
  } else if (!s.find_node(s.cluster.supervisor)) {
    std::vector<std::string> names;
    std::string listed;
    for (const auto& n : s.nodes) {
      if (std::find(names.begin(), names.end(), n.name) != names.end())
        continue;
      names.push_back(n.name);
      listed += (listed.empty() ? "" : ", ") + n.name;
    }
    r.error("supervisor", "'" + s.cluster.supervisor + "' is not among the nodes (" + listed + ")" +
                              did_you_mean(s.cluster.supervisor, names));
  }
  if (!s.cluster.standby.empty()) {
    if (!s.find_node(s.cluster.standby))
      r.error("standby", "'" + s.cluster.standby + "' is not among the nodes");
    else if (s.cluster.standby == s.cluster.supervisor)
      r.error("standby", "'" + s.cluster.standby + "' is the supervisor's node; a standby must be another node");
    else if (s.cluster.etcd.empty())
      r.error("standby", "a standby needs `etcd = \"host:port\"`, where the supervisor's lease lives");
  }
  if (s.world_size() == 0)
    ctx.error(detail::file_start(), "nodes", "no ranks: every node is a spare; make at least one node a worker node");
  table_reader job{ctx, detail::sub_table(ctx, root, "job", "job"), "job", "job", detail::file_start()};
  // A plan is read against a configuration without errors: its checks rely on the rest.
  if (!s.job.plan.empty() && (!ctx.errors.empty() || !read_job_plan(job, s)))
    return;
  const std::uint32_t micro_batches = s.job.global_batch / s.job.micro_batch;
  const auto stages = static_cast<std::uint32_t>(std::max<std::size_t>(s.job.stages.size(), 1));
  if (s.job.stages.size() > 1 || (s.job.stages.size() == 1 && s.job.stages[0] != s.model.layers)) {
    const auto blocks = std::accumulate(s.job.stages.begin(), s.job.stages.end(), std::uint64_t{0});
    if (blocks != s.model.layers)
      job.error("stages", "the stages hold " + std::to_string(blocks) + " blocks, model.layers is " +
                              std::to_string(s.model.layers) + "; each block belongs to exactly one stage");
    else if (s.world_size() > 0 && s.world_size() % stages != 0)
      job.error("stages", std::to_string(stages) + " stages need a world that is a multiple of " +
                              std::to_string(stages) + " (each data-parallel replica is one rank per stage), the "
                              "nodes run " + std::to_string(s.world_size()) + " ranks");
  }
  const std::uint32_t replicas = s.world_size() / stages;
  if (s.world_size() > 0 && replicas > 0 && micro_batches < replicas && s.job.plan_shares.empty()) {
    job.error("global_batch", "global_batch " + std::to_string(s.job.global_batch) + " in micro-batches of " +
                                  std::to_string(s.job.micro_batch) + " gives " + std::to_string(micro_batches) +
                                  " micro-batches per step, fewer than the " + std::to_string(replicas) +
                                  (stages > 1 ? " data-parallel replicas" : " ranks") +
                                  "; raise job.global_batch or lower job.micro_batch");
  }
}

load_result parse_impl(std::string_view text, context& ctx) {
  load_result result;
  toml::table root;
  try {
    root = toml::parse(text, ctx.file);
  } catch (const toml::parse_error& e) {
    result.errors.push_back(detail::syntax_error(text, ctx.file, e));
    return result;
  }
  spec s;
  s.source = ctx.file;
  for (auto&& [k, v] : root) {
    const std::string name{k.str()};
    if (std::find(std::begin(top_tables), std::end(top_tables), name) == std::end(top_tables)) {
      std::vector<std::string> names(std::begin(top_tables), std::end(top_tables));
      ctx.error(k.source(), name, "unknown table or key" + did_you_mean(name, names));
    }
  }
  read_cluster(ctx, root, s);
  read_nodes(ctx, root, s);
  read_job(ctx, root, s);
  read_model(ctx, root, s);
  read_optimizer(ctx, root, s);
  std::string ckpt_dir;
  read_checkpoint(ctx, root, s, ckpt_dir);
  read_timeouts(ctx, root, s);
  read_recovery(ctx, root, s);
  read_checks(ctx, root, s);
  read_stragglers(ctx, root, s);
  read_security(ctx, root, s);
  read_transport(ctx, root, s);
  read_daemon(ctx, root, s);
  s.checkpoint.directory = ckpt_dir.empty() ? s.daemon.data_dir / "checkpoints" : resolve(ctx, ckpt_dir);
  if (ctx.known == nullptr) {
    check_cluster(ctx, root, s);
    if (ctx.errors.empty())
      check_data_file(ctx, root, s);
  }
  std::stable_sort(ctx.errors.begin(), ctx.errors.end(), [](const diagnostic& a, const diagnostic& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  result.errors = std::move(ctx.errors);
  result.warnings = std::move(ctx.warnings);
  if (result.errors.empty())
    result.value = std::move(s);
  return result;
}

// TOML output helpers.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double v) {
  auto text = number_text(v);
  if (text.find_first_of(".eE") == std::string::npos && text.find("inf") == std::string::npos &&
      text.find("nan") == std::string::npos)
    text += ".0";
  return text;
}

}  // namespace

load_result parse(std::string_view text, std::string source_name, const fs::path& base_dir) {
  context ctx;
  ctx.file = std::move(source_name);
  ctx.base_dir = base_dir.empty() ? fs::current_path() : fs::absolute(base_dir);
  return parse_impl(text, ctx);
}

load_result load_file(const fs::path& path) {
  auto text = read_file_bounded(path, file_limits::config, "configuration file");
  if (!text) {
    load_result r;
    r.errors.push_back(diagnostic{path.string(), 0, 0, "", text.error().message()});
    return r;
  }
  return parse(*text, path.string(), fs::absolute(path).parent_path());
}

expected<spec> load(const fs::path& path) {
  auto r = load_file(path);
  if (!r.ok())
    return status{errc::invalid_config, r.error_text()};
  return std::move(*r.value);
}

std::vector<std::string> known_fields() {
  std::vector<std::string> known;
  context ctx;
  ctx.file = "<known fields>";
  ctx.base_dir = "/";
  ctx.known = &known;
  (void)parse_impl("", ctx);
  return known;
}

std::string to_toml(const spec& s) {
  std::ostringstream o;
  o << "# effective configuration of " << s.source << "\n\n";
  o << "[cluster]\n"
    << "name = " << quote(s.cluster.name) << "\n"
    << "supervisor = " << quote(s.cluster.supervisor) << "\n"
    << "ranks_per_node = " << s.cluster.ranks_per_node << "\n"
    << "standby = " << quote(s.cluster.standby) << "\n"
    << "etcd = " << quote(s.cluster.etcd) << "\n"
    << "lease = " << quote(duration_to_string(s.cluster.lease)) << "\n";
  for (const auto& n : s.nodes) {
    o << "\n[[nodes]]\n"
      << "name = " << quote(n.name) << "\n"
      << "host = " << quote(n.host) << "\n"
      << "bind = " << quote(n.bind) << "\n"
      << "port = " << n.port << "\n";
    if (!n.devices.empty()) {
      o << "devices = [";
      for (std::size_t i = 0; i < n.devices.size(); ++i)
        o << (i ? ", " : "") << quote(n.devices[i].to_string());
      o << "]\n";
    }
    o << "spare = " << (n.spare ? "true" : "false") << "\n"
      << "speed = " << toml_float(n.speed) << "\n";
    if (!n.domain.empty())
      o << "domain = " << quote(n.domain) << "\n";
  }
  o << "\n[job]\n"
    << "name = " << quote(s.job.name) << "\n"
    << "steps = " << s.job.steps << "\n"
    << "global_batch = " << s.job.global_batch << "\n"
    << "micro_batch = " << s.job.micro_batch << "\n"
    << "seed = " << s.job.seed << "\n"
    << "data = " << quote(s.job.data_file ? s.job.data_file->string() : s.job.data) << "\n"
    << "balance = " << quote(s.job.balance) << "\n"
    << "master_port = " << s.job.master_port << "\n";
  if (!s.job.plan.empty())
    o << "plan = " << quote(s.job.plan.string()) << "\n";
  if (!s.job.plan_cluster.empty())
    o << "plan_cluster = " << quote(s.job.plan_cluster.string()) << "\n"
      << "plan_model = " << quote(s.job.plan_model.string()) << "\n"
      << "replan_budget = " << quote(duration_to_string(s.job.replan_budget)) << "\n";
  if (!s.job.stages.empty()) {
    o << "stages = [";
    for (std::size_t i = 0; i < s.job.stages.size(); ++i)
      o << (i ? ", " : "") << s.job.stages[i];
    o << "]\n";
  }
  if (s.job.external()) {
    const auto list = [&](const std::vector<std::string>& items) {
      std::string out = "[";
      for (std::size_t i = 0; i < items.size(); ++i)
        out += (i ? ", " : "") + quote(items[i]);
      return out + "]";
    };
    std::vector<std::string> env;
    for (const auto& [name, value] : s.job.env)
      env.push_back(name + "=" + value);
    o << "command = " << list(s.job.command) << "\n"
      << "workdir = " << quote(s.job.workdir.string()) << "\n"
      << "env = " << list(env) << "\n"
      << "state_bytes = " << quote(size_to_string(s.job.state_bytes)) << "\n";
  }
  o << "\n[model]\n"
    << "layers = " << s.model.layers << "\n"
    << "heads = " << s.model.heads << "\n"
    << "width = " << s.model.width << "\n"
    << "seq_len = " << s.model.seq_len << "\n";
  const auto& op = s.optimizer;
  o << "\n[optimizer]\n"
    << "learning_rate = " << toml_float(op.learning_rate) << "\n"
    << "min_learning_rate = " << toml_float(op.min_learning_rate) << "\n"
    << "warmup_steps = " << op.warmup_steps << "\n"
    << "weight_decay = " << toml_float(op.weight_decay) << "\n"
    << "beta1 = " << toml_float(op.beta1) << "\n"
    << "beta2 = " << toml_float(op.beta2) << "\n"
    << "epsilon = " << toml_float(op.epsilon) << "\n"
    << "grad_clip = " << toml_float(op.grad_clip) << "\n";
  o << "\n[checkpoint]\n"
    << "snapshot_every = " << s.checkpoint.snapshot_every << "\n"
    << "persist_every = " << s.checkpoint.persist_every << "\n"
    << "keep = " << s.checkpoint.keep << "\n"
    << "directory = " << quote(s.checkpoint.directory.string()) << "\n"
    << "overlap = " << (s.checkpoint.overlap ? "true" : "false") << "\n";
  const auto& t = s.timeouts;
  o << "\n[timeouts]\n"
    << "heartbeat = " << quote(duration_to_string(t.heartbeat)) << "\n"
    << "node = " << quote(duration_to_string(t.node)) << "\n"
    << "hang = " << quote(duration_to_string(t.hang)) << "\n"
    << "rendezvous = " << quote(duration_to_string(t.rendezvous)) << "\n"
    << "collective = " << quote(duration_to_string(t.collective)) << "\n";
  const auto& rc = s.recovery;
  o << "\n[recovery]\n"
    << "max_restarts_per_rank = " << rc.max_restarts_per_rank << "\n"
    << "max_restarts = " << rc.max_restarts << "\n"
    << "backoff = " << quote(duration_to_string(rc.backoff)) << "\n"
    << "backoff_max = " << quote(duration_to_string(rc.backoff_max)) << "\n"
    << "policy = " << quote(rc.policy) << "\n";
  const auto& ck = s.checks;
  o << "\n[checks]\n"
    << "preflight = " << (ck.preflight ? "true" : "false") << "\n"
    << "min_compute = " << toml_float(ck.min_compute) << "\n"
    << "min_memory = " << toml_float(ck.min_memory) << "\n"
    << "min_disk = " << toml_float(ck.min_disk) << "\n"
    << "disk_bytes = " << quote(size_to_string(ck.disk_bytes)) << "\n"
    << "min_gpu = " << toml_float(ck.min_gpu) << "\n"
    << "gpu_gflops = " << toml_float(ck.gpu_gflops) << "\n"
    << "min_link = " << toml_float(ck.min_link) << "\n"
    << "link_bytes = " << quote(size_to_string(ck.link_bytes)) << "\n"
    << "every = " << quote(duration_to_string(ck.every)) << "\n";
  o << "\n[stragglers]\n"
    << "action = " << quote(s.stragglers.action) << "\n"
    << "threshold = " << toml_float(s.stragglers.threshold) << "\n"
    << "window = " << s.stragglers.window << "\n"
    << "span = " << quote(duration_to_string(s.stragglers.span)) << "\n"
    << "confirm = " << quote(duration_to_string(s.stragglers.confirm)) << "\n";
  o << "\n[security]\n"
    << "token_file = " << quote(s.security.token_file.string()) << "\n"
    << "readonly_token_file = " << quote(s.security.readonly_token_file.string()) << "\n";
  o << "\n[transport]\n"
    << "max_frame_size = " << quote(size_to_string(s.transport.max_frame_size)) << "\n"
    << "chunk_size = " << quote(size_to_string(s.transport.chunk_size)) << "\n"
    << "net_devices = " << quote(s.transport.net_devices) << "\n"
    << "tls = " << quote(s.transport.tls) << "\n"
    << "spin = " << quote(duration_to_string(s.transport.spin)) << "\n";
  o << "\n[daemon]\n"
    << "data_dir = " << quote(s.daemon.data_dir.string()) << "\n"
    << "actor_threads = " << s.daemon.actor_threads << "\n"
    << "log = " << quote(to_string(s.daemon.log)) << "\n"
    << "log_format = " << quote(to_string(s.daemon.log_format)) << "\n"
    << "http = " << (s.daemon.http ? "true" : "false") << "\n"
    << "http_host = " << quote(s.daemon.http_host) << "\n"
    << "http_port = " << s.daemon.http_port << "\n";
  return o.str();
}

}  // namespace rekindle::config
