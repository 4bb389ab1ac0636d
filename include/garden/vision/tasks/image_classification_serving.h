// Serving image_classification (garden/core/serving_module.h), as Model
// Garden's image_bytes export: one DT_STRING input "inputs" holding an
// encoded image (REST: TF Serving's {"b64": ...}; gRPC: the bytes), decoded
// and center-cropped as evaluation does; outputs the logits, the
// probabilities, the class and the top-k classes with their probabilities.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "garden/core/serving_module.h"

namespace garden::vision {

class ImageClassificationTask;

class ImageClassificationServing : public ServingModule {
 public:
  explicit ImageClassificationServing(ImageClassificationTask& task);

  ServingSignature signature() override;
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;

 private:
  ImageClassificationTask& classification_;
};

}  // namespace garden::vision
