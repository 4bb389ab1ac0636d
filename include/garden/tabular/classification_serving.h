// Serving tabular/classification (garden/core/serving_module.h): one
// DT_FLOAT input per feature column; outputs as a TensorFlow classifier's
// predictions (logits, probabilities, class_ids, classes). The columns and
// classes come from the checkpoint's metadata; the standardization is in the
// model's buffers.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "garden/core/serving_module.h"

namespace garden::tabular {

class TabularClassificationTask;

class TabularClassificationServing : public ServingModule {
 public:
  explicit TabularClassificationServing(TabularClassificationTask& task);

  ServingSignature signature() override;
  void prepare(const nlohmann::json& task_metadata,
               const std::map<std::string, std::string>& assets) override;
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;

 private:
  TabularClassificationTask& classification_;
};

}  // namespace garden::tabular
