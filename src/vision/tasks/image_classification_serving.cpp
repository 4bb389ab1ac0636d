#include "garden/vision/tasks/image_classification_serving.h"

#include <torch/torch.h>

#include <algorithm>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/vision/data/image_codec.h"
#include "garden/vision/tasks/image_classification.h"

namespace garden::vision {

namespace {

int64_t top_k(const ImageClassificationTaskConfig& config) {
  return std::min<int64_t>(config.evaluation.top_k, config.model.num_classes);
}

}  // namespace

ImageClassificationServing::ImageClassificationServing(ImageClassificationTask& task)
    : ServingModule(task), classification_(task) {}

ServingSignature ImageClassificationServing::signature() {
  const auto& config = classification_.config();
  const int64_t classes = config.model.num_classes, k = top_k(config);
  ServingSignature signature;
  signature.inputs = {{"inputs", {"DT_STRING", {}}}};
  signature.outputs = {{"logits", {"DT_FLOAT", {classes}}},
                       {"probabilities", {"DT_FLOAT", {classes}}},
                       {"classes", {"DT_INT64", {}}},
                       {"top_k_classes", {"DT_INT64", {k}}},
                       {"top_k_probabilities", {"DT_FLOAT", {k}}}};
  return signature;
}

Batch ImageClassificationServing::inputs(const std::vector<nlohmann::json>& instances) {
  const auto& config = classification_.config();
  const int64_t height = config.model.input_size[0], width = config.model.input_size[1];
  std::vector<at::Tensor> images;
  images.reserve(instances.size());
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const std::string where = "instance " + std::to_string(i);
    const auto it = instances[i].find("inputs");
    if (it == instances[i].end()) throw InputError(where + " has no input 'inputs'");
    std::string bytes;
    if (it->is_object() && it->size() == 1 && it->contains("b64") && it->at("b64").is_string()) {
      if (!base64_decode(it->at("b64").get<std::string>(), bytes))
        throw InputError(where + ": 'b64' is not base64");
    } else if (it->is_string()) {
      bytes = it->get<std::string>();
    } else {
      throw InputError(where + ": input 'inputs' must be an encoded image ({\"b64\": ...}), not " +
                       std::string(it->type_name()));
    }
    Image image;
    try {
      image = decode_image(bytes, 3, where);
    } catch (const ImageError& e) {
      throw InputError(e.what());
    }
    images.push_back(evaluation_image(image, config.validation_data, height, width));
  }
  return {{"image", torch::stack(images)}};
}

std::vector<nlohmann::json> ImageClassificationServing::outputs(const Batch& outputs,
                                                                std::size_t count) {
  const at::Tensor logits = outputs.at("logits").to(torch::kCPU, torch::kDouble).contiguous();
  const at::Tensor probabilities =
      outputs.at("probabilities").to(torch::kCPU, torch::kDouble).contiguous();
  const int64_t k = top_k(classification_.config());
  const auto [top_probabilities, top_classes] = probabilities.topk(k, -1);
  const int64_t width = logits.size(1);
  std::vector<nlohmann::json> rows;
  rows.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const int64_t row = static_cast<int64_t>(i);
    const double* l = logits.data_ptr<double>() + row * width;
    const double* p = probabilities.data_ptr<double>() + row * width;
    const at::Tensor tc = top_classes[row].contiguous();
    const at::Tensor tp = top_probabilities[row].contiguous();
    rows.push_back({{"logits", std::vector<double>(l, l + width)},
                    {"probabilities", std::vector<double>(p, p + width)},
                    {"classes", tc.data_ptr<int64_t>()[0]},
                    {"top_k_classes",
                     std::vector<int64_t>(tc.data_ptr<int64_t>(), tc.data_ptr<int64_t>() + k)},
                    {"top_k_probabilities",
                     std::vector<double>(tp.data_ptr<double>(), tp.data_ptr<double>() + k)}});
  }
  return rows;
}

}  // namespace garden::vision
