#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdlib>

#include "slipway/core.h"

namespace slipway {
namespace {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    // NO_COLOR (no-color.org): any non-empty value turns colours off.
    const char* no_color = std::getenv("NO_COLOR");
    bool plain = no_color != nullptr && *no_color != '\0';
    auto created =
        spdlog::stderr_color_mt("slipway", plain ? spdlog::color_mode::never : spdlog::color_mode::automatic);
    created->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    created->set_level(spdlog::level::info);
    return created;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void set_log_level(LogLevel level) { logger().set_level(to_spdlog(level)); }

void log(LogLevel level, std::string_view message) { logger().log(to_spdlog(level), message); }

void crash_point(std::string_view name) {
  static const std::string kCrashAt = [] {
    const char* value = std::getenv("SLIPWAY_CRASH_AT");
    return std::string(value == nullptr ? "" : value);
  }();
  if (!kCrashAt.empty() && kCrashAt == name) std::raise(SIGKILL);
}

}  // namespace slipway
