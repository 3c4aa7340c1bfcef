#include "common/logging.hpp"

#include "common/utc.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace rekindle {

namespace {
constexpr std::array<std::string_view, 6> level_names{"trace", "debug", "info", "warn", "error", "off"};
constexpr std::array<std::string_view, 2> format_names{"text", "json"};

// What every line names. The node and rank change rarely (under the mutex); the epoch often.
std::mutex context_mutex;
std::string context_node;
std::optional<std::uint32_t> context_rank;
std::atomic<std::uint64_t> context_epoch{0};

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;  // UTF-8 passes through; JSON allows it unescaped
        }
    }
  }
  out += '"';
}

constexpr std::array<char, 6> level_letters{'T', 'D', 'I', 'W', 'E', 'O'};

log_level from_spdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return log_level::trace;
    case spdlog::level::debug: return log_level::debug;
    case spdlog::level::info: return log_level::info;
    case spdlog::level::warn: return log_level::warn;
    case spdlog::level::err:
    case spdlog::level::critical: return log_level::error;
    default: return log_level::off;
  }
}

/// Writes each line whole to stderr, formatted by format_log_line.
class line_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  line_sink(std::string process, log_format format) : process_(std::move(process)), format_(format) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    auto line = format_log_line(format_, ms, from_spdlog(msg.level), process_,
                                std::string_view{msg.payload.data(), msg.payload.size()});
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  std::string process_;
  log_format format_;
};

}  // namespace

expected<log_level> parse_log_level(std::string_view text) {
  for (std::size_t i = 0; i < level_names.size(); ++i)
    if (text == level_names[i])
      return static_cast<log_level>(i);
  return status{errc::parse_error, "unknown log level '" + std::string{text} +
                                       "'; use one of trace, debug, info, warn, error, off"};
}

std::string_view to_string(log_level level) noexcept {
  return level_names[static_cast<std::size_t>(level)];
}

expected<log_format> parse_log_format(std::string_view text) {
  for (std::size_t i = 0; i < format_names.size(); ++i)
    if (text == format_names[i])
      return static_cast<log_format>(i);
  return status{errc::parse_error, "unknown log format '" + std::string{text} + "'; use text or json"};
}

std::string_view to_string(log_format format) noexcept {
  return format_names[static_cast<std::size_t>(format)];
}

void set_log_node(std::string_view node) {
  std::lock_guard lock{context_mutex};
  context_node = node;
}

void set_log_rank(std::optional<std::uint32_t> rank) {
  std::lock_guard lock{context_mutex};
  context_rank = rank;
}

void set_log_epoch(std::uint64_t epoch) noexcept {
  std::uint64_t seen = context_epoch.load();
  while (seen < epoch && !context_epoch.compare_exchange_weak(seen, epoch)) {
  }
}

std::string format_log_line(log_format format, std::int64_t time_ms, log_level level, std::string_view process,
                            std::string_view message) {
  std::string node;
  std::optional<std::uint32_t> rank;
  {
    std::lock_guard lock{context_mutex};
    node = context_node;
    rank = context_rank;
  }
  const auto epoch = context_epoch.load();
  std::string out;
  out.reserve(message.size() + 96);
  if (format == log_format::json) {
    out += "{\"time\":";
    append_json_string(out, utc_text(time_ms));
    out += ",\"level\":";
    append_json_string(out, to_string(level));
    out += ",\"process\":";
    append_json_string(out, process);
    out += ",\"node\":";
    if (node.empty())
      out += "null";
    else
      append_json_string(out, node);
    out += ",\"rank\":";
    out += rank ? std::to_string(*rank) : std::string{"null"};
    out += ",\"epoch\":" + std::to_string(epoch) + ",\"message\":";
    append_json_string(out, message);
    out += '}';
    return out;
  }
  out += utc_text(time_ms);
  out += ' ';
  out += level_letters[static_cast<std::size_t>(level)];
  out += ' ';
  out += process;
  if (!node.empty())
    out += " node=" + node;
  if (rank)
    out += " rank=" + std::to_string(*rank);
  out += " epoch=" + std::to_string(epoch) + " ";
  out += message;
  return out;
}

void init_logging(std::string_view process_name, log_level level, log_format format) {
  auto logger = std::make_shared<spdlog::logger>(std::string{process_name},
                                                 std::make_shared<line_sink>(std::string{process_name}, format));
  static constexpr spdlog::level::level_enum map[] = {spdlog::level::trace, spdlog::level::debug,
                                                      spdlog::level::info,  spdlog::level::warn,
                                                      spdlog::level::err,   spdlog::level::off};
  logger->set_level(map[static_cast<int>(level)]);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace rekindle
