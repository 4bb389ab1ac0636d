// The one exception type for errors a user can act on (a bad file, a bad
// value, a failed run). The CLI prints its message as one line.
#pragma once

#include <stdexcept>
#include <string>

namespace garden {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a caller sent is wrong (a serving request's instance, a predict
// input line): the caller's mistake, not the program's (HTTP 400).
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace garden
