// Serving the tagging task (garden/core/serving_module.h; needs
// train_data.vocab_file): `sentence`, raw text split on whitespace into
// words -> `labels`, one class name per word.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "garden/core/serving_module.h"

namespace garden::nlp {

class TaggingTask;
struct TaggingConfig;

class TaggingServing : public ServingModule {
 public:
  explicit TaggingServing(TaggingTask& task);

  ServingSignature signature() override;
  std::map<std::string, std::string> assets() override;
  void prepare(const nlohmann::json& task_metadata,
               const std::map<std::string, std::string>& assets) override;
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;

 private:
  TaggingTask& tagging_;
  const TaggingConfig& config_;
};

}  // namespace garden::nlp
