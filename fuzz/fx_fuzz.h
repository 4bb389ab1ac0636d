// The TensorFX iris sample (data/fx/iris) the fx targets combine a fuzzed
// file with, and the check they share: what the transformer makes has a row
// per instance.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "garden/fx/data.h"

namespace garden_fuzz {

inline std::string iris(const std::string& name) {
  return GARDEN_SOURCE_DIR "/data/fx/iris/" + name;
}

inline std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline const garden::fx::Instances& iris_eval() {
  static const garden::fx::Instances instances = [] {
    std::ifstream in(iris("eval.csv"));
    std::stringstream text;
    text << in.rdbuf();
    return garden::fx::parse_csv(garden::fx::Schema::load(iris("schema.yaml")),
                                 lines_of(text.str()), "eval.csv");
  }();
  return instances;
}

inline void check_transform(const garden::fx::Transformer& transformer,
                            const garden::fx::Instances& instances) {
  const garden::fx::Transformed out = transformer.transform(instances);
  GARDEN_FUZZ_CHECK(out.rows == instances.rows);
  for (const auto& [name, tensor] : out.tensors)
    GARDEN_FUZZ_CHECK(tensor.dim() >= 1 && tensor.size(0) == instances.rows);
  for (const auto& [name, strings] : out.strings)
    GARDEN_FUZZ_CHECK(static_cast<int64_t>(strings.size()) == instances.rows);
}

}  // namespace garden_fuzz
