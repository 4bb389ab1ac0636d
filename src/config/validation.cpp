#include "garden/config/validation.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <sstream>

namespace garden::config {
namespace {
thread_local std::string current_prefix;
}  // namespace

namespace detail {
KeyPrefix::KeyPrefix(const std::string& path) : previous_(current_prefix) { current_prefix = path; }
KeyPrefix::~KeyPrefix() { current_prefix = previous_; }
}  // namespace detail

std::string key_path(const std::string& key) {
  return current_prefix.empty() ? key : current_prefix + "." + key;
}

void refuse(const std::string& key, const std::string& why) {
  throw ConfigError(key_path(key) + ": " + why);
}

std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Whole numbers as such (1000000, not 1e+06), while exact.
  if (std::floor(value) == value && std::fabs(value) < 1e15 && !(value == 0 && std::signbit(value)))
    return std::to_string(static_cast<int64_t>(value));
  for (int precision = 1; precision < 17; ++precision) {
    std::ostringstream trial;
    trial.precision(precision);
    trial << value;
    if (std::strtod(trial.str().c_str(), nullptr) == value) return trial.str();
  }
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

bool Range::contains(double value) const {
  if (std::isnan(value)) return false;
  if (std::isinf(value) && !infinity_) return false;
  const bool above_low = low_inclusive_ ? value >= low_ : value > low_;
  const bool below_high = high_inclusive_ ? value <= high_ : value < high_;
  // An infinite bound admits the infinity itself when infinity is allowed.
  return (above_low || (std::isinf(low_) && value == low_ && infinity_)) &&
         (below_high || (std::isinf(high_) && value == high_ && infinity_));
}

std::string Range::describe() const {
  const bool has_low = !std::isinf(low_);
  const bool has_high = !std::isinf(high_);
  std::string text;
  if (has_low && has_high)
    text = std::string("in ") + (low_inclusive_ ? "[" : "(") + number_text(low_) + ", " +
           number_text(high_) + (high_inclusive_ ? "]" : ")");
  else if (has_low)
    text = (low_inclusive_ ? ">= " : "> ") + number_text(low_);
  else if (has_high)
    text = (high_inclusive_ ? "<= " : "< ") + number_text(high_);
  else
    return infinity_ ? "a number" : "a finite number";
  if (infinity_) return text + " (inf allowed)";
  return text;
}

void check_range(const std::string& key, double value, const Range& range) {
  if (range.contains(value)) return;
  if (std::isnan(value)) refuse(key, "nan is not a number; must be " + range.describe());
  if (std::isinf(value))
    refuse(key, number_text(value) + " is not finite; must be " + range.describe());
  refuse(key, number_text(value) + " is out of range; must be " + range.describe());
}

void check_range(const std::string& key, int64_t value, const Range& range) {
  if (range.contains(static_cast<double>(value))) return;
  refuse(key, number_text(value) + " is out of range; must be " + range.describe());
}

void check_regexes(const std::string& key,
                   const std::optional<std::vector<std::string>>& patterns) {
  if (!patterns) return;
  for (std::size_t i = 0; i < patterns->size(); ++i) {
    const std::string& pattern = (*patterns)[i];
    try {
      std::regex compiled(pattern);
    } catch (const std::regex_error& e) {
      refuse(key + "[" + std::to_string(i) + "]",
             "'" + pattern + "' is not a regular expression (" + e.what() + ")");
    }
  }
}

}  // namespace garden::config
