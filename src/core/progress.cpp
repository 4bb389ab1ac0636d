#include "garden/core/progress.h"

#include <cmath>
#include <cstdio>
#include <iostream>

namespace garden {

Progress::Progress(int64_t start_step, int64_t total_steps, bool interactive)
    : start_step_(start_step),
      total_steps_(total_steps),
      interactive_(interactive),
      start_(std::chrono::steady_clock::now()),
      last_draw_() {}

Progress::~Progress() { clear(); }

std::string Progress::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return text;
}

double Progress::eta_seconds(int64_t step) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - start_step_;
  if (done <= 0) return -1;
  return elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - step);
}

void Progress::update(int64_t step, const std::string& status) {
  if (!interactive_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && step < total_steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double fraction =
      total_steps_ > 0 ? static_cast<double>(step) / static_cast<double>(total_steps_) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(fraction * width);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(step - start_step_) / elapsed : 0.0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  char line[256];
  std::snprintf(line, sizeof line, "\r[%s] %lld/%lld %3.0f%% %.1f steps/s ETA %s %s\033[K",
                bar.c_str(), static_cast<long long>(step), static_cast<long long>(total_steps_),
                fraction * 100.0, rate, format_duration(eta_seconds(step)).c_str(),
                status.c_str());
  std::cerr << line << std::flush;
  drawn_ = true;
}

void Progress::clear() {
  if (interactive_ && drawn_) std::cerr << "\r\033[K" << std::flush;
  drawn_ = false;
}

}  // namespace garden
