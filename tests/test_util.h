// What tests of every layer share.
#pragma once

#include <functional>
#include <string>

#include "garden/base/error.h"

namespace garden_test {

// The message of the garden::Error (ConfigError, DataError, ...) that `f`
// throws, or "(no error)" when it throws none; any other exception reaches
// the test and fails it.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const garden::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace garden_test
