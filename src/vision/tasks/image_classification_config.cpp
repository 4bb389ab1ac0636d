#include "garden/vision/tasks/image_classification_config.h"

#include "garden/config/validation.h"

namespace garden::vision {

using config::check_range;
using config::Range;

void ResNetConfig::visit(config::Visitor& v) {
  v("model_id", model_id, "Depth: 10, 18, 34 (basic blocks), 50, 101, 152, 200 (bottlenecks).");
  v("depth_multiplier", depth_multiplier, "Scales every layer's channels.");
  v("stem_type", stem_type, "v0: one 7x7 stride-2 convolution; v1: ResNet-D's three 3x3.");
  v("se_ratio", se_ratio, "Squeeze-and-excitation ratio; 0: none.");
  v("stochastic_depth_drop_rate", stochastic_depth_drop_rate,
    "Initial stochastic depth rate (group i drops rate x (i + 2) / 5).");
  v("scale_stem", scale_stem, "Scale the stem's channels by depth_multiplier too.");
  v("resnetd_shortcut", resnetd_shortcut, "ResNet-D's average-pooled shortcut.");
  v("replace_stem_max_pool", replace_stem_max_pool,
    "A stride-2 3x3 convolution instead of the stem's max pool.");
  v("bn_trainable", bn_trainable, "Train the batch norms (false: not implemented).");
}

void ResNetConfig::validate() const {
  if (model_id != 10 && model_id != 18 && model_id != 34 && model_id != 50 && model_id != 101 &&
      model_id != 152 && model_id != 200)
    config::refuse("model_id",
                   std::to_string(model_id) + " is not one of 10, 18, 34, 50, 101, 152, 200");
  check_range("depth_multiplier", depth_multiplier, Range::above(0));
  if (stem_type != "v0" && stem_type != "v1")
    config::refuse("stem_type", "'" + stem_type + "' is not one of v0, v1");
  check_range("se_ratio", se_ratio, Range::at_least(0).at_most(1));
  check_range("stochastic_depth_drop_rate", stochastic_depth_drop_rate,
              Range::at_least(0).below(1));
  if (!bn_trainable) config::refuse("bn_trainable", "false is not implemented");
}

void BackboneConfig::visit(config::Visitor& v) {
  v("type", type, "The backbone: resnet.");
  v("resnet", resnet, "Model Garden's ResNet.");
}

void BackboneConfig::validate() const {
  OneOfConfig::validate();
  if (type != "resnet") config::refuse("type", "'" + type + "' is not one of: resnet");
}

void NormActivationConfig::visit(config::Visitor& v) {
  v("activation", activation, "relu or swish.");
  v("use_sync_bn", use_sync_bn,
    "Training batch norms use the statistics of every worker's batch together.");
  v("norm_momentum", norm_momentum, "Keras' batch-norm momentum of the moving averages.");
  v("norm_epsilon", norm_epsilon, "Batch-norm epsilon.");
}

void NormActivationConfig::validate() const {
  if (activation != "relu" && activation != "swish")
    config::refuse("activation", "'" + activation + "' is not one of relu, swish");
  check_range("norm_momentum", norm_momentum, Range::at_least(0).below(1));
  check_range("norm_epsilon", norm_epsilon, Range::above(0));
}

void ImageClassificationModelConfig::visit(config::Visitor& v) {
  v("num_classes", num_classes, "Classes of the dense head.");
  v("input_size", input_size, "[height, width, channels] the images are resized to.");
  v("backbone", backbone, "The backbone.");
  v("dropout_rate", dropout_rate, "Dropout before the dense head.");
  v("norm_activation", norm_activation, "Batch norms and activations.");
  v("add_head_batch_norm", add_head_batch_norm, "A batch norm after the pooling.");
  v("kernel_initializer", kernel_initializer,
    "The dense head's kernel initializer: random_uniform or VarianceScaling.");
}

void ImageClassificationModelConfig::validate() const {
  check_range("num_classes", num_classes, Range::at_least(1));
  config::check_each("input_size", input_size, Range::at_least(1));
  if (input_size.size() != 3 || input_size[2] != 3)
    config::refuse("input_size", "must be [height, width, 3]");
  check_range("dropout_rate", dropout_rate, Range::at_least(0).below(1));
  if (kernel_initializer != "random_uniform" && kernel_initializer != "VarianceScaling")
    config::refuse("kernel_initializer",
                   "'" + kernel_initializer + "' is not one of random_uniform, VarianceScaling");
}

void ImageClassificationDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("image_field_key", image_field_key, "The feature holding the encoded image.");
  v("label_field_key", label_field_key, "The feature holding the int64 label.");
  v("decode_jpeg_only", decode_jpeg_only,
    "Model Garden decodes JPEG only when true; Garden decodes JPEG and PNG either way.");
  v("aug_rand_hflip", aug_rand_hflip, "Training: flip left-right with probability 0.5.");
  v("aug_crop", aug_crop, "Training: the Inception crop (else the whole image is resized).");
  v("crop_area_range", crop_area_range,
    "Training crop: the smallest and largest share of the image's area.");
  v("crop_sampler", crop_sampler,
    "Training crop's rule: tensorflow (Model Garden's) or torchvision (RandomResizedCrop).");
  v("center_crop_fraction", center_crop_fraction,
    "Evaluation: the centered square's side over the short side (1: the whole short side).");
  v("color_jitter", color_jitter, "Not implemented: 0 only.");
  v("aug_type", aug_type, "RandAugment / AutoAugment: not implemented, empty only.");
  v("is_multilabel", is_multilabel, "Not implemented: false only.");
  v("tfds_name", tfds_name, "TensorFlow Datasets: not available, empty only.");
}

void ImageClassificationDataConfig::validate() const {
  validate_reading();
  if (file_type != "tfrecord" && file_type != "tfrecord_compressed")
    config::refuse("file_type", "'" + file_type + "' is not one of tfrecord, tfrecord_compressed");
  if (image_field_key.empty()) config::refuse("image_field_key", "is empty");
  if (label_field_key.empty()) config::refuse("label_field_key", "is empty");
  config::check_each("crop_area_range", crop_area_range, Range::above(0).at_most(1));
  if (crop_area_range.size() != 2)
    config::refuse("crop_area_range", "has " + std::to_string(crop_area_range.size()) +
                                          " values; give two, the smallest and largest share");
  if (crop_area_range[0] > crop_area_range[1])
    config::refuse("crop_area_range", "[" + config::number_text(crop_area_range[0]) + ", " +
                                          config::number_text(crop_area_range[1]) +
                                          "]: the smallest share is above the largest");
  if (crop_sampler != "tensorflow" && crop_sampler != "torchvision")
    config::refuse("crop_sampler", "'" + crop_sampler + "' is not one of tensorflow, torchvision");
  check_range("center_crop_fraction", center_crop_fraction, Range::above(0).at_most(1));
  check_range("color_jitter", color_jitter, Range::at_least(0));
  if (color_jitter != 0) config::refuse("color_jitter", "is not implemented yet; leave it 0");
  if (!aug_type.empty())
    config::refuse("aug_type", "'" + aug_type +
                                   "' is not implemented yet (RandAugment, "
                                   "AutoAugment); leave it empty");
  if (is_multilabel) config::refuse("is_multilabel", "true is not implemented yet");
  if (!tfds_name.empty())
    config::refuse("tfds_name",
                   "TensorFlow Datasets are not available in Garden: make records "
                   "with garden create_image_records and set input_path");
}

std::vector<config::IgnoredKey> ImageClassificationDataConfig::ignored_keys() const {
  auto out = config::DataConfig::ignored_keys();
  config::note_ignored(out, "decode_jpeg_only", decode_jpeg_only, true,
                       "Garden decodes JPEG and PNG either way");
  return out;
}

std::vector<config::IgnoredKey> ClassificationLossesConfig::ignored_keys() const {
  std::vector<config::IgnoredKey> out;
  config::note_ignored(out, "one_hot", one_hot, true,
                       "the labels are class ids and the loss is the same either way");
  return out;
}

void ClassificationLossesConfig::visit(config::Visitor& v) {
  v("loss_weight", loss_weight, "Factor of the total loss.");
  v("one_hot", one_hot, "Labels are class ids, compared as one-hot vectors.");
  v("label_smoothing", label_smoothing, "Label smoothing of the cross-entropy.");
  v("l2_weight_decay", l2_weight_decay,
    "L2 regularization: adds l2_weight_decay / 2 x the squared kernels to the loss.");
  v("soft_labels", soft_labels, "Not implemented: false only.");
}

void ClassificationLossesConfig::validate() const {
  check_range("loss_weight", loss_weight, Range::above(0));
  check_range("label_smoothing", label_smoothing, Range::at_least(0).below(1));
  check_range("l2_weight_decay", l2_weight_decay, Range::at_least(0));
  if (soft_labels) config::refuse("soft_labels", "true is not implemented yet");
}

void ClassificationEvaluationConfig::visit(config::Visitor& v) {
  v("top_k", top_k, "k of the top_{k}_accuracy metric.");
  v("report_per_class_precision_and_recall", report_per_class_precision_and_recall,
    "Not implemented: false only.");
}

void ClassificationEvaluationConfig::validate() const {
  check_range("top_k", top_k, Range::at_least(1));
  if (report_per_class_precision_and_recall)
    config::refuse("report_per_class_precision_and_recall", "true is not implemented yet");
}

void ImageClassificationTaskConfig::visit_task_fields(config::Visitor& v) {
  v("losses", losses, "The loss.");
  v("evaluation", evaluation, "What evaluations report.");
  v("freeze_backbone", freeze_backbone, "Not implemented: false only.");
}

void ImageClassificationTaskConfig::validate() const {
  if (freeze_backbone) config::refuse("freeze_backbone", "true is not implemented yet");
  // An empty input_path is refused when the records are read (build_inputs),
  // not here: `garden config` shows an experiment before its paths are set.
}

ClassificationModelOptions ImageClassificationTaskConfig::model_options() const {
  ClassificationModelOptions o;
  const ResNetConfig& r = model.backbone.resnet;
  o.backbone.model_id = r.model_id;
  o.backbone.depth_multiplier = r.depth_multiplier;
  o.backbone.stem_type = r.stem_type;
  o.backbone.resnetd_shortcut = r.resnetd_shortcut;
  o.backbone.replace_stem_max_pool = r.replace_stem_max_pool;
  o.backbone.se_ratio = r.se_ratio;
  o.backbone.stochastic_depth_drop_rate = r.stochastic_depth_drop_rate;
  o.backbone.scale_stem = r.scale_stem;
  o.backbone.activation = model.norm_activation.activation;
  o.backbone.norm_momentum = model.norm_activation.norm_momentum;
  o.backbone.norm_epsilon = model.norm_activation.norm_epsilon;
  o.num_classes = model.num_classes;
  o.dropout_rate = model.dropout_rate;
  o.add_head_batch_norm = model.add_head_batch_norm;
  o.kernel_initializer = model.kernel_initializer;
  return o;
}

}  // namespace garden::vision
