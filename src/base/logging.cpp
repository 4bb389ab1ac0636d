#include "garden/base/logging.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <mutex>

namespace garden {
namespace {
std::mutex& log_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::ofstream& log_file() {
  static std::ofstream file;
  return file;
}
bool& quiet_flag() {
  static bool quiet = false;
  return quiet;
}
}  // namespace

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void set_log_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(log_mutex());
  if (log_file().is_open()) log_file().close();
  if (!path.empty()) log_file().open(path, std::ios::app);
}

void set_quiet(bool quiet) { quiet_flag() = quiet; }

namespace {
std::string format_line(LogLevel level, const std::string& message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  return std::string(stamp) + " " + tag + " " + message + "\n";
}
}  // namespace

void log_message(LogLevel level, const std::string& message) {
  const std::string line = format_line(level, message);
  std::lock_guard<std::mutex> lock(log_mutex());
  if (level != LogLevel::kInfo || !quiet_flag()) std::cerr << line << std::flush;
  if (log_file().is_open()) log_file() << line << std::flush;
}

void log_to_file(LogLevel level, const std::string& message) {
  const std::string line = format_line(level, message);
  std::lock_guard<std::mutex> lock(log_mutex());
  if (log_file().is_open()) log_file() << line << std::flush;
}

}  // namespace garden
