#include "garden/vision/tasks/image_classification.h"

#include <torch/torch.h>

#include <filesystem>
#include <random>

#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/core/strategy.h"
#include "garden/data/example.h"
#include "garden/data/pipeline.h"
#include "garden/vision/data/image_codec.h"
#include "garden/vision/data/preprocess.h"
#include "garden/vision/modeling/resnet.h"

namespace garden::vision {

namespace {

constexpr const char* kTask = "image_classification";

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t seed_for(uint64_t seed, const std::string& file, int64_t index, int64_t epoch) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : std::filesystem::path(file).filename().string()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return mix(mix(mix(seed ^ h) + static_cast<uint64_t>(index)) + static_cast<uint64_t>(epoch));
}

// Normalized [3, H, W] from resized [H, W, 3] pixels.
at::Tensor model_input(const at::Tensor& pixels) {
  return normalize_image(pixels).permute({2, 0, 1}).contiguous();
}

}  // namespace

at::Tensor evaluation_image(const Image& image, const ImageClassificationDataConfig& data,
                            int64_t height, int64_t width) {
  const CropWindow window =
      center_crop_window(image.height, image.width, data.center_crop_fraction);
  return model_input(crop_and_resize(image, window, height, width));
}

Batch image_example(const std::string& record, const std::string& file, int64_t index,
                    int64_t epoch, const ImageClassificationDataConfig& data, int64_t height,
                    int64_t width, bool training, uint64_t seed, int64_t num_classes) {
  const std::string where = "'" + file + "', record " + std::to_string(index);
  data::Example example;
  try {
    example = data::parse_example(record);
  } catch (const Error& e) {
    throw data::DataError(where + ": " + e.what());
  }
  const auto image_it = example.find(data.image_field_key);
  if (image_it == example.end() || image_it->second.kind != data::FeatureValue::Kind::kBytes ||
      image_it->second.bytes.size() != 1)
    throw data::DataError(where + ": no single bytes feature '" + data.image_field_key +
                          "' (image_field_key)");
  const auto label_it = example.find(data.label_field_key);
  if (label_it == example.end() || label_it->second.kind != data::FeatureValue::Kind::kInt64 ||
      label_it->second.ints.size() != 1)
    throw data::DataError(where + ": no single int64 feature '" + data.label_field_key +
                          "' (label_field_key)");
  // Not a corrupt record (skip_corrupt_records does not skip it): the
  // records and task.model.num_classes disagree.
  const int64_t label = label_it->second.ints[0];
  if (label < 0 || label >= num_classes)
    throw Error(where + ": label " + std::to_string(label) + " is not a class of the model (" +
                data.label_field_key + " must be in [0, " + std::to_string(num_classes) +
                "), task.model.num_classes " + std::to_string(num_classes) + ")");
  const Image image = decode_image(image_it->second.bytes[0], 3, where);
  Batch out;
  if (!training) {
    out["image"] = evaluation_image(image, data, height, width);
  } else {
    std::mt19937_64 rng(seed_for(seed, file, index, epoch));
    CropWindow window{0, 0, image.height, image.width};
    if (data.aug_crop) {
      DistortedCropOptions crop;
      crop.min_area = data.crop_area_range[0];
      crop.max_area = data.crop_area_range[1];
      window = data.crop_sampler == "torchvision"
                   ? sample_resized_crop(image.height, image.width, crop, rng)
                   : sample_distorted_crop(image.height, image.width, crop, rng);
    }
    at::Tensor pixels = crop_and_resize(image, window, height, width);
    if (data.aug_rand_hflip && uniform01(rng) < 0.5) pixels = flip_left_right(pixels);
    out["image"] = model_input(pixels);
  }
  out["label"] = torch::tensor(label, torch::kLong);
  return out;
}

ImageClassificationTask::ImageClassificationTask(
    std::shared_ptr<const ImageClassificationTaskConfig> params, std::string logging_dir)
    : Task(params, std::move(logging_dir)), config_(*params) {}

DatasetPtr ImageClassificationTask::build_inputs(const config::DataConfig& params,
                                                 const InputContext& input_context) {
  const auto* data = dynamic_cast<const ImageClassificationDataConfig*>(&params);
  if (!data)
    throw Error("image_classification: its data configs are ImageClassificationDataConfig");
  if (params.input_path.empty())
    config::refuse("input_path",
                   "is empty: name the records (garden create_image_records makes them)");
  const bool training = params.is_training.value_or(false);
  const int64_t height = config_.model.input_size[0], width = config_.model.input_size[1];
  const uint64_t seed = static_cast<uint64_t>(params.seed.value_or(0));
  const ImageClassificationDataConfig copy = *data;
  const int64_t num_classes = config_.model.num_classes;
  data::LocatedMapFn map_fn = [copy, height, width, training, seed, num_classes](
                                  const std::string& record, const data::RecordLocation& where) {
    return image_example(record, where.file, where.index, where.epoch, copy, height, width,
                         training, seed, num_classes);
  };
  return std::make_shared<data::InputPipeline>(params, std::move(map_fn), data::BatchingOptions{},
                                               input_context);
}

namespace {

// The workers of the mirrored strategy this process trains in, found at
// each batch norm (the model is built before the strategy).
class WorkerReplicas final : public Replicas {
 public:
  int64_t count() const override {
    const auto group = replica_group();
    return group ? group->size() : 1;
  }
  void sum(std::vector<at::Tensor>& tensors) const override {
    const auto group = replica_group();
    if (!group) throw Error("use_sync_bn: the workers' group is gone");
    std::vector<at::Tensor> on_device;
    for (const auto& tensor : tensors) on_device.push_back(tensor.to(group->device()));
    group->all_reduce(on_device, distribute::ReduceOp::kSum,
                      "the batch norm statistics (use_sync_bn)");
    for (std::size_t i = 0; i < tensors.size(); ++i)
      tensors[i] = on_device[i].to(tensors[i].device());
  }
};

}  // namespace

ModelPtr ImageClassificationTask::build_model() {
  ClassificationModelOptions options = config_.model_options();
  if (config_.model.norm_activation.use_sync_bn)
    options.backbone.replicas = std::make_shared<WorkerReplicas>();
  ClassificationModel model(options);
  // Channels last (NHWC in memory), weights and images (call_model): oneDNN's
  // convolutions skip their reorders (ResNet-18 at 112, batch 64, 2 cores:
  // 0.90 steps/s against 0.77 in NCHW, one pair of runs).
  model->to_channels_last();
  return model.ptr();
}

Batch ImageClassificationTask::call_model(Model& model, const Batch& features, bool) {
  auto& network = model_as<ClassificationModelImpl>(model, kTask, "ClassificationModel");
  Batch out;
  const at::Tensor images = batch_tensor(features, "image", kTask);
  out["logits"] = network.forward(images.contiguous(at::MemoryFormat::ChannelsLast));
  // In evaluations too: Model Garden's validation loss includes model.losses.
  if (config_.losses.l2_weight_decay > 0)
    out["l2_loss"] = network.l2_loss(config_.losses.l2_weight_decay);
  return out;
}

Losses ImageClassificationTask::build_losses(const Batch& labels, const Batch& outputs,
                                             const at::Tensor& aux_losses) {
  const at::Tensor logits = batch_tensor(outputs, "logits", kTask);
  const at::Tensor label = batch_tensor(labels, "label", kTask).reshape(-1);
  // Keras' categorical cross-entropy of one-hot labels smoothed to
  // y (1 - s) + s / classes: PyTorch's label_smoothing is the same.
  const at::Tensor cross_entropy = at::cross_entropy_loss(
      logits.to(at::kFloat), label, {}, at::Reduction::Mean, -100, config_.losses.label_smoothing);
  const at::Tensor count = torch::full({}, static_cast<double>(label.size(0)));
  const double weight = config_.losses.loss_weight;
  const auto l2 = outputs.find("l2_loss");
  Losses losses;
  if (l2 == outputs.end() && !aux_losses.defined()) {
    losses = Losses(cross_entropy * weight, count);
  } else {
    losses.add("cross_entropy_loss", cross_entropy, count, weight);
    if (l2 != outputs.end())
      losses.add("l2_regularization_loss", l2->second, torch::full({}, 1.0), weight);
    losses.add_aux(aux_losses);
  }
  return losses;
}

MetricList ImageClassificationTask::build_metrics(bool) {
  const int64_t k = config_.evaluation.top_k;
  return {
      std::make_shared<SparseCategoricalAccuracy>("accuracy"),
      std::make_shared<SparseTopKCategoricalAccuracy>("top_" + std::to_string(k) + "_accuracy", k)};
}

Batch ImageClassificationTask::inference_step(const Batch& inputs, Model& model) {
  Batch outputs = Task::inference_step(inputs, model);
  const at::Tensor logits = outputs.at("logits");
  outputs["probabilities"] = torch::softmax(logits.to(at::kFloat), -1);
  outputs["classes"] = logits.argmax(-1);
  return outputs;
}

std::vector<std::string> ImageClassificationTask::loss_part_names() const {
  if (config_.losses.l2_weight_decay > 0) return {"cross_entropy_loss", "l2_regularization_loss"};
  return {};
}

std::vector<std::string> ImageClassificationTask::keys_fixed_by_training() const {
  return {"task.model.num_classes"};
}

}  // namespace garden::vision
