// Progress of a long run: a bar with rate and ETA on a terminal, plain lines
// (one per loop) otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace garden {

class Progress {
 public:
  // `interactive` draws a bar on stderr; otherwise update() draws nothing.
  Progress(int64_t start_step, int64_t total_steps, bool interactive);
  ~Progress();
  // Redraws the bar (at most ten times a second).
  void update(int64_t step, const std::string& status = "");
  // Clears the bar (before a log line, and at the end).
  void clear();
  // "0:01:23" from seconds; "?" when unknown.
  static std::string format_duration(double seconds);
  // Seconds left at the average rate since the start.
  double eta_seconds(int64_t step) const;

 private:
  int64_t start_step_;
  int64_t total_steps_;
  bool interactive_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace garden
