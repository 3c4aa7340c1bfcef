#include "trace/model.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/files.hpp"
#include "common/text.hpp"
#include "config/spec.hpp"

namespace rekindle::trace {

namespace {

enum class value_type : unsigned char { duration, size, bandwidth, count, count32, share };

struct key_def {
  std::string_view name;
  value_type type;
  nanoseconds model::*duration = nullptr;
  std::uint64_t model::*count = nullptr;
  double model::*real = nullptr;
  std::uint32_t model::*count32 = nullptr;
  /// Smallest value accepted (durations in ns, counts, bandwidths in bytes/s).
  double min = 0;
};

constexpr key_def dur(std::string_view n, nanoseconds model::*m, double min) {
  return {n, value_type::duration, m, nullptr, nullptr, nullptr, min};
}
constexpr key_def cnt(std::string_view n, std::uint64_t model::*m, double min) {
  return {n, value_type::count, nullptr, m, nullptr, nullptr, min};
}
constexpr key_def siz(std::string_view n, std::uint64_t model::*m, double min) {
  return {n, value_type::size, nullptr, m, nullptr, nullptr, min};
}
constexpr key_def bw(std::string_view n, double model::*m) {
  return {n, value_type::bandwidth, nullptr, nullptr, m, nullptr, 1};
}
constexpr key_def c32(std::string_view n, std::uint32_t model::*m) {
  return {n, value_type::count32, nullptr, nullptr, nullptr, m, 0};
}

constexpr std::array<key_def, 35> keys{{
    dur("step_time", &model::step_time, 1),
    {"compute_share", value_type::share, nullptr, nullptr, &model::compute_share, nullptr, 0},
    siz("state_size", &model::state_size, 1),
    cnt("steps", &model::steps, 0),
    cnt("snapshot_every", &model::snapshot_every, 1),
    dur("snapshot_stall", &model::snapshot_stall, 0),
    cnt("persist_every", &model::persist_every, 0),
    dur("persist_stall", &model::persist_stall, 0),
    cnt("checkpoint_every", &model::checkpoint_every, 1),
    dur("restart_all_exit_detection", &model::restart_all_exit_detection, 0),
    dur("restart_all_hang_detection", &model::restart_all_hang_detection, 1),
    dur("restart_all_process_start", &model::restart_all_process_start, 0),
    dur("restart_all_rendezvous", &model::restart_all_rendezvous, 0),
    dur("restart_all_rendezvous_per_rank", &model::restart_all_rendezvous_per_rank, 0),
    bw("storage_bandwidth", &model::storage_bandwidth),
    dur("process_start", &model::process_start, 0),
    dur("rendezvous", &model::rendezvous, 0),
    bw("memory_bandwidth", &model::memory_bandwidth),
    bw("buddy_bandwidth", &model::buddy_bandwidth),
    bw("disk_bandwidth", &model::disk_bandwidth),
    bw("persist_bandwidth", &model::persist_bandwidth),
    dur("node_timeout", &model::node_timeout, 1),
    dur("hang_timeout", &model::hang_timeout, 1),
    dur("rendezvous_timeout", &model::rendezvous_timeout, 1),
    dur("collective_timeout", &model::collective_timeout, 1),
    dur("tick", &model::tick, 1),
    dur("backoff", &model::backoff, 0),
    dur("backoff_max", &model::backoff_max, 0),
    c32("max_restarts", &model::max_restarts),
    c32("max_restarts_per_rank", &model::max_restarts_per_rank),
    c32("spares", &model::spares),
    c32("buddy_across_domains", &model::buddy_across_domains),
    {"regrow_below", value_type::share, nullptr, nullptr, &model::regrow_below, nullptr, 0},
    dur("horizon", &model::horizon, 0),
    // Kept last: an alias people reach for.
    dur("heartbeat", &model::tick, 1),
}};

const key_def* find_key(std::string_view name) {
  for (const auto& k : keys)
    if (k.name == name)
      return &k;
  return nullptr;
}

bool parse_double(std::string_view text, double& out) {
  text = trim(text);
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size() && std::isfinite(out);
}

std::string number_text(double v) {
  std::ostringstream os;
  os.precision(15);
  os << v;
  return os.str();
}

}  // namespace

std::vector<std::string> model_keys() {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (k.name != "heartbeat")
      out.emplace_back(k.name);
  return out;
}

bool sweepable(std::string_view key) {
  const auto* k = find_key(key);
  return k != nullptr;
}

status set_model(model& m, std::string_view key, std::string_view value) {
  const auto* k = find_key(key);
  if (k == nullptr) {
    const auto names = model_keys();
    return status{errc::invalid_argument, "'" + std::string{key} + "' is not a model key" + did_you_mean(key, names)};
  }
  const std::string name{key};
  value = trim(value);
  switch (k->type) {
    case value_type::duration: {
      double seconds = 0;
      nanoseconds d{};
      if (parse_double(value, seconds)) {
        if (seconds < 0 || seconds > 9.0e9)
          return status{errc::out_of_range, name + ": " + std::string{value} + " seconds is out of range"};
        d = nanoseconds{std::llround(seconds * 1e9)};
      } else {
        auto parsed = parse_duration(value);
        if (!parsed)
          return status{errc::parse_error, name + ": " + parsed.error().message()};
        d = *parsed;
      }
      if (static_cast<double>(d.count()) < k->min || d.count() < 0)
        return status{errc::out_of_range, name + ": must be " + (k->min > 0 ? "longer than 0" : "at least 0") + ", got " +
                                              std::string{value}};
      m.*(k->duration) = d;
      return {};
    }
    case value_type::size:
    case value_type::count: {
      std::uint64_t v = 0;
      if (k->type == value_type::size) {
        auto parsed = parse_size(value);
        if (!parsed)
          return status{errc::parse_error, name + ": " + parsed.error().message()};
        v = *parsed;
      } else {
        auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc{} || ptr != value.data() + value.size())
          return status{errc::parse_error, name + ": expected a whole number of at least 0, got '" + std::string{value} + "'"};
      }
      if (static_cast<double>(v) < k->min)
        return status{errc::out_of_range, name + ": must be at least " + number_text(k->min) + ", got " + std::string{value}};
      m.*(k->count) = v;
      return {};
    }
    case value_type::count32: {
      std::uint32_t v = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc{} || ptr != value.data() + value.size())
        return status{errc::parse_error, name + ": expected a whole number of at least 0, got '" + std::string{value} + "'"};
      if (name == "spares" && v > 65536)
        return status{errc::out_of_range, name + ": at most 65536, got " + std::string{value}};
      m.*(k->count32) = v;
      return {};
    }
    case value_type::bandwidth: {
      double v = 0;
      if (!parse_double(value, v)) {
        auto text = value;
        if (!text.ends_with("/s"))
          return status{errc::parse_error, name + ": '" + std::string{value} +
                                               "' is not a bandwidth; write bytes per second, e.g. '10GiB/s' or 1e9"};
        text.remove_suffix(2);
        auto parsed = parse_size(text);
        if (!parsed)
          return status{errc::parse_error, name + ": " + parsed.error().message() + " per second"};
        v = static_cast<double>(*parsed);
      }
      if (!(v >= k->min))
        return status{errc::out_of_range, name + ": must be more than 0 bytes per second, got " + std::string{value}};
      m.*(k->real) = v;
      return {};
    }
    case value_type::share: {
      double v = 0;
      if (!parse_double(value, v) || v < 0 || v > 1)
        return status{errc::out_of_range, name + ": expected a share between 0 and 1, got '" + std::string{value} + "'"};
      m.*(k->real) = v;
      return {};
    }
  }
  return status{errc::internal, "unhandled model key type"};
}

std::string model_value(const model& m, std::string_view key) {
  const auto* k = find_key(key);
  if (k == nullptr)
    return {};
  switch (k->type) {
    case value_type::duration: return duration_to_string(m.*(k->duration));
    case value_type::size: return size_to_string(m.*(k->count));
    case value_type::count: return std::to_string(m.*(k->count));
    case value_type::count32: return std::to_string(m.*(k->count32));
    case value_type::share: return number_text(m.*(k->real));
    case value_type::bandwidth: {
      const double v = m.*(k->real);
      if (v == std::floor(v) && v < 1.8e19)
        return size_to_string(static_cast<std::uint64_t>(v)) + "/s";
      return number_text(v);
    }
  }
  return {};
}

status validate(const model& m) {
  if (m.hang_timeout <= m.step_time)
    return status{errc::invalid_argument, "hang_timeout (" + duration_to_string(m.hang_timeout) +
                                              ") must exceed step_time (" + duration_to_string(m.step_time) +
                                              "), or the supervisor takes every step for a hang"};
  if (m.restart_all_hang_detection <= m.step_time)
    return status{errc::invalid_argument, "restart_all_hang_detection (" + duration_to_string(m.restart_all_hang_detection) +
                                              ") must exceed step_time (" + duration_to_string(m.step_time) + ")"};
  if (m.buddy_across_domains > 1)
    return status{errc::invalid_argument, "buddy_across_domains is 0 or 1, got " + std::to_string(m.buddy_across_domains)};
  if (m.backoff_max < m.backoff)
    return status{errc::invalid_argument, "backoff_max (" + duration_to_string(m.backoff_max) + ") is shorter than backoff (" +
                                              duration_to_string(m.backoff) + ")"};
  return {};
}

void apply_config(model& m, const config::spec& s) {
  m.snapshot_every = std::max<std::uint64_t>(1, s.checkpoint.snapshot_every);
  m.persist_every = s.checkpoint.persist_every;
  if (m.persist_every > 0)
    m.checkpoint_every = m.snapshot_every * m.persist_every;
  m.node_timeout = s.timeouts.node;
  m.hang_timeout = s.timeouts.hang;
  m.rendezvous_timeout = s.timeouts.rendezvous;
  m.collective_timeout = s.timeouts.collective;
  m.tick = s.timeouts.heartbeat;
  m.backoff = s.recovery.backoff;
  m.backoff_max = s.recovery.backoff_max;
}

expected<model> parse_model(std::string_view text, const std::string& source_name, model base) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return status{errc::invalid_config, source_name + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                                            ": " + std::string{e.description()}};
  }
  std::vector<std::string> errors;
  for (auto&& [k, v] : root) {
    const std::string key{k.str()};
    const auto& where = v.source().begin;
    const std::string place = source_name + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) + ": ";
    std::string value;
    if (v.is_string())
      value = v.as_string()->get();
    else if (v.is_integer())
      value = std::to_string(v.as_integer()->get());
    else if (v.is_floating_point())
      value = number_text(v.as_floating_point()->get());
    else if (v.is_boolean())
      value = v.as_boolean()->get() ? "true" : "false";
    else {
      errors.push_back(place + key + ": expected a value such as \"5s\", \"8GiB\", 10 or true; the model file has no tables");
      continue;
    }
    if (auto st = set_model(base, key, value); !st.ok()) {
      auto message = st.message();
      // set_model names the key first; keep one copy.
      if (message.starts_with(key + ": "))
        message = message.substr(key.size() + 2);
      errors.push_back(place + key + ": " + message);
    }
  }
  if (errors.empty())
    if (auto st = validate(base); !st.ok())
      errors.push_back(source_name + ": " + st.message());
  if (!errors.empty()) {
    std::string all;
    for (const auto& e : errors)
      all += (all.empty() ? "" : "\n") + e;
    return status{errc::invalid_config, all};
  }
  return base;
}

expected<model> load_model(const std::filesystem::path& path, model base) {
  auto text = read_file_bounded(path, file_limits::config, "model file");
  if (!text)
    return status{text.error().code(), path.string() + ": " + text.error().message()};
  return parse_model(*text, path.string(), std::move(base));
}

std::string to_toml(const model& m) {
  std::string out;
  for (const auto& key : model_keys()) {
    const auto v = model_value(m, key);
    const auto* k = find_key(key);
    const bool quoted = k->type == value_type::duration || k->type == value_type::size || k->type == value_type::bandwidth;
    out += key + " = " + (quoted ? "\"" + v + "\"" : v) + "\n";
  }
  return out;
}

}  // namespace rekindle::trace
