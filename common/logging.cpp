#include "common/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <string>

namespace rekindle {

namespace {
constexpr std::array<std::string_view, 6> level_names{"trace", "debug", "info", "warn", "error", "off"};
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

void init_logging(std::string_view process_name, log_level level) {
  auto logger = std::make_shared<spdlog::logger>(std::string{process_name},
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L %n %v");
  static constexpr spdlog::level::level_enum map[] = {spdlog::level::trace, spdlog::level::debug,
                                                      spdlog::level::info,  spdlog::level::warn,
                                                      spdlog::level::err,   spdlog::level::off};
  logger->set_level(map[static_cast<int>(level)]);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace rekindle
