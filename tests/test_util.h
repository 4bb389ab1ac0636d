// What tests of every layer share.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
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

// The largest absolute difference of two tensors of the same shape, in double.
inline double max_abs_difference(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Writes `text` to `path` as it is; returns the path.
inline std::string write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

}  // namespace garden_test
