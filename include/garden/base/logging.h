// Timestamped log lines on stderr, and in a file once a run has a model_dir.
#pragma once

#include <sstream>
#include <string>

namespace garden {

enum class LogLevel { kInfo, kWarning, kError };

void log_message(LogLevel level, const std::string& message);
// Also append every later line to `path` (model_dir/train.log); "" stops.
void set_log_file(const std::string& path);
// A line for the log file only (the run's final error, which the caller
// prints on stderr itself).
void log_to_file(LogLevel level, const std::string& message);
// Suppress info lines on stderr (tests); warnings and errors still show.
void set_quiet(bool quiet);
bool stderr_is_terminal();

namespace detail {
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine() { log_message(level_, stream_.str()); }
  template <class T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace detail

inline detail::LogLine log_info() { return detail::LogLine(LogLevel::kInfo); }
inline detail::LogLine log_warning() { return detail::LogLine(LogLevel::kWarning); }
inline detail::LogLine log_error() { return detail::LogLine(LogLevel::kError); }

}  // namespace garden
