// Model Garden's image classification config (official/vision/configs/
// image_classification.py, backbones.py, common.py): the same keys and
// defaults. Keys Garden does not implement yet are refused when set, each
// in one line naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/vision/modeling/resnet.h"

namespace garden::vision {

struct ResNetConfig : config::Config {
  int64_t model_id = 50;
  double depth_multiplier = 1.0;
  std::string stem_type = "v0";
  double se_ratio = 0.0;
  double stochastic_depth_drop_rate = 0.0;
  bool scale_stem = true;
  bool resnetd_shortcut = false;
  bool replace_stem_max_pool = false;
  bool bn_trainable = true;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct BackboneConfig : config::OneOfConfig {
  BackboneConfig() { type = "resnet"; }
  ResNetConfig resnet;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct NormActivationConfig : config::Config {
  std::string activation = "relu";
  bool use_sync_bn = false;
  double norm_momentum = 0.99;
  double norm_epsilon = 0.001;
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct ImageClassificationModelConfig : config::Config {
  int64_t num_classes = 0;
  std::vector<int64_t> input_size = {224, 224, 3};
  BackboneConfig backbone;
  double dropout_rate = 0.0;
  NormActivationConfig norm_activation;
  bool add_head_batch_norm = false;
  std::string kernel_initializer = "random_uniform";
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct ImageClassificationDataConfig : config::DataConfig {
  ImageClassificationDataConfig() {
    shuffle_buffer_size = 10000;  // Model Garden's
    own_shuffle_buffer_size_ = 10000;
  }
  std::string image_field_key = "image/encoded";
  std::string label_field_key = "image/class/label";
  bool decode_jpeg_only = true;
  bool aug_rand_hflip = true;
  bool aug_crop = true;
  std::vector<double> crop_area_range = {0.08, 1.0};  // smallest, largest share of the area
  // Whose rule draws the training crop: "tensorflow" (Model Garden's
  // sample_distorted_bounding_box) or "torchvision" (RandomResizedCrop).
  std::string crop_sampler = "tensorflow";
  double center_crop_fraction = 0.875;
  double color_jitter = 0.0;   // not implemented: 0 only
  std::string aug_type;        // randaug / autoaug: not implemented, empty only
  bool is_multilabel = false;  // not implemented
  std::string tfds_name;       // not implemented
  void visit(config::Visitor& v) override;
  void validate() const override;
  std::vector<config::IgnoredKey> ignored_keys() const override;
};

struct ClassificationLossesConfig : config::Config {
  double loss_weight = 1.0;
  bool one_hot = true;
  double label_smoothing = 0.0;
  double l2_weight_decay = 0.0;
  bool soft_labels = false;  // not implemented
  void visit(config::Visitor& v) override;
  void validate() const override;
  std::vector<config::IgnoredKey> ignored_keys() const override;
};

struct ClassificationEvaluationConfig : config::Config {
  int64_t top_k = 5;
  bool report_per_class_precision_and_recall = false;  // not implemented
  void visit(config::Visitor& v) override;
  void validate() const override;
};

struct ImageClassificationTaskConfig
    : config::TaskConfigWith<ImageClassificationModelConfig, ImageClassificationDataConfig> {
  ImageClassificationTaskConfig() {
    train_data.is_training = true;
    validation_data.is_training = false;
    validation_data.drop_remainder = false;
  }
  ClassificationLossesConfig losses;
  ClassificationEvaluationConfig evaluation;
  bool freeze_backbone = false;  // not implemented
  void validate() const override;
  // The model's options from model.*.
  ClassificationModelOptions model_options() const;
  std::string synchronous_setting() const override {
    return model.norm_activation.use_sync_bn ? "task.model.norm_activation.use_sync_bn=true" : "";
  }

 protected:
  void visit_task_fields(config::Visitor& v) override;
};

}  // namespace garden::vision
