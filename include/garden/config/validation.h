// What a config's validate() uses to refuse a value: every error names the
// full dotted key, the value and what is allowed, in one form:
//
//   task.train_data.global_batch_size: -3 is out of range; must be >= 1
//
// Keys passed to these helpers are relative to the config being validated
// ("global_batch_size", or "train_data.seed" from a task config);
// validate_config() supplies the prefix.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "garden/config/config.h"

namespace garden::config {

// The full dotted path of `key`, a key of the config validate_config() is
// validating now ("" prefix outside validate_config).
std::string key_path(const std::string& key);

// Throws ConfigError "<full key>: <why>".
[[noreturn]] void refuse(const std::string& key, const std::string& why);

// The text of a number as a config error shows it: shortest round-trip
// form, nan, inf, -inf.
std::string number_text(double value);
inline std::string number_text(int64_t value) { return std::to_string(value); }

// An interval of accepted numbers. NaN is never in it; +-infinity only when
// allow_infinity() says so (a float key is finite unless its meaning needs
// infinity).
class Range {
 public:
  static Range at_least(double low) { return Range(low, true); }
  static Range above(double low) { return Range(low, false); }
  // Any finite number.
  static Range any() { return Range(-std::numeric_limits<double>::infinity(), false); }
  Range& at_most(double high) {
    high_ = high;
    high_inclusive_ = true;
    return *this;
  }
  Range& below(double high) {
    high_ = high;
    high_inclusive_ = false;
    return *this;
  }
  Range& allow_infinity() {
    infinity_ = true;
    return *this;
  }
  bool contains(double value) const;
  // ">= 1", "> 0", "in [0, 1)", "a finite number".
  std::string describe() const;

 private:
  Range(double low, bool inclusive) : low_(low), low_inclusive_(inclusive) {}
  double low_;
  bool low_inclusive_;
  double high_ = std::numeric_limits<double>::infinity();
  bool high_inclusive_ = false;
  bool infinity_ = false;
};

// Throws "<full key>: <value> is out of range; must be <range>" (or "nan is
// not a number", "inf is not finite") unless `range` holds `value`.
void check_range(const std::string& key, double value, const Range& range);
void check_range(const std::string& key, int64_t value, const Range& range);
// A null optional is accepted; a set one must be in range.
template <class T>
void check_range(const std::string& key, const std::optional<T>& value, const Range& range) {
  if (value) check_range(key, *value, range);
}
// Each element: errors name "key[i]".
template <class T>
void check_each(const std::string& key, const std::vector<T>& values, const Range& range) {
  for (std::size_t i = 0; i < values.size(); ++i)
    check_range(key + "[" + std::to_string(i) + "]", values[i], range);
}

// Compiles each pattern as a regular expression (ECMAScript, std::regex's
// grammar); a bad one is refused naming "key[i]" and the pattern.
void check_regexes(const std::string& key, const std::optional<std::vector<std::string>>& patterns);

namespace detail {
// Sets the prefix key_path() adds while one config is validated (used by
// validate_config; restores the previous prefix on exit).
class KeyPrefix {
 public:
  explicit KeyPrefix(const std::string& path);
  ~KeyPrefix();
  KeyPrefix(const KeyPrefix&) = delete;
  KeyPrefix& operator=(const KeyPrefix&) = delete;

 private:
  std::string previous_;
};
}  // namespace detail

}  // namespace garden::config
