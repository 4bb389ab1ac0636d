// Model Garden's ImageClassificationTask (official/vision/tasks/
// image_classification.py): image records decoded and augmented in C++
// (garden/vision/data), a ResNet ClassificationModel, softmax cross-entropy
// with label smoothing and L2, accuracy and top-k accuracy.
#pragma once

#include <memory>
#include <string>

#include "garden/core/task.h"
#include "garden/vision/data/image_codec.h"
#include "garden/vision/tasks/image_classification_config.h"

namespace garden::vision {

// One record of image records into an example {"image": [3, H, W] float,
// normalized; "label": int64 scalar}: decoded, cropped (training: the
// Inception crop by crop_sampler's rule when aug_crop; evaluation: the
// center crop), resized to input_size, flipped at random when training with
// aug_rand_hflip. The random draws come from (seed, the file's name, the
// record's index, the epoch), so the same record is augmented anew each
// epoch and the same way in every run. A label outside [0, num_classes) is
// an error naming the record.
Batch image_example(const std::string& record, const std::string& file, int64_t index,
                    int64_t epoch, const ImageClassificationDataConfig& data,
                    int64_t height, int64_t width, bool training, uint64_t seed,
                    int64_t num_classes);

// A decoded image as evaluation and serving give it to the model: the center
// crop of data.center_crop_fraction, resized to height x width, normalized,
// [3, H, W] float.
at::Tensor evaluation_image(const Image& image, const ImageClassificationDataConfig& data,
                            int64_t height, int64_t width);

class ImageClassificationTask : public Task {
 public:
  ImageClassificationTask(std::shared_ptr<const ImageClassificationTaskConfig> params,
                          std::string logging_dir = "");

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // {"logits"}; with l2_weight_decay, also "l2_loss".
  Batch call_model(Model& model, const Batch& features, bool training) override;
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // accuracy and top_{k}_accuracy (Model Garden's names).
  MetricList build_metrics(bool training = true) override;
  // Adds "probabilities" and "classes".
  Batch inference_step(const Batch& inputs, Model& model) override;
  std::vector<std::string> loss_part_names() const override;
  std::vector<std::string> keys_fixed_by_training() const override;

  const ImageClassificationTaskConfig& config() const { return config_; }

 private:
  const ImageClassificationTaskConfig& config_;
};

}  // namespace garden::vision
