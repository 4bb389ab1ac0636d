#include "garden/vision/tasks/image_classification_experiments.h"

#include <memory>

#include "garden/config/registry.h"
#include "garden/core/serving_module.h"
#include "garden/vision/tasks/image_classification.h"
#include "garden/vision/tasks/image_classification_serving.h"

namespace garden::vision {

namespace {

std::shared_ptr<ImageClassificationTaskConfig> task_config(int64_t image_size, int64_t batch) {
  auto task = std::make_shared<ImageClassificationTaskConfig>();
  task->model.input_size = {image_size, image_size, 3};
  task->train_data.global_batch_size = batch;
  task->validation_data.global_batch_size = batch;
  return task;
}

// Model Garden's resnet_imagenet: ResNet-50 at 224, batch norms with
// momentum 0.9 and epsilon 1e-5, batch 4096, SGD with momentum 0.9 and the
// stepwise schedule (x0.1 at epochs 30, 60 and 80 after 5 warmup epochs),
// label smoothing 0.1 (its imagenet_resnet50 YAML files'), L2 1e-4, 90
// epochs.
std::shared_ptr<config::ExperimentConfig> resnet_imagenet() {
  constexpr int64_t kBatch = 4096, kStepsPerEpoch = 1281167 / kBatch;  // 312
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = task_config(224, kBatch);
  task->model.num_classes = 1001;
  task->model.backbone.resnet.model_id = 50;
  task->model.norm_activation.norm_momentum = 0.9;
  task->model.norm_activation.norm_epsilon = 1e-5;
  task->losses.l2_weight_decay = 1e-4;
  task->losses.label_smoothing = 0.1;
  task->train_data.input_path = "imagenet-2012-tfrecord/train*";
  task->validation_data.input_path = "imagenet-2012-tfrecord/valid*";
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 90 * kStepsPerEpoch;
  trainer.validation_steps = 50000 / kBatch;  // 12: Model Garden's ceil is 13 with a remainder
  trainer.validation_interval = kStepsPerEpoch;
  trainer.steps_per_loop = kStepsPerEpoch;
  trainer.summary_interval = kStepsPerEpoch;
  trainer.checkpoint_interval = kStepsPerEpoch;
  auto& opt = trainer.optimizer_config;
  opt.optimizer.type = "sgd";
  opt.optimizer.sgd.momentum = 0.9;
  opt.learning_rate.type = "stepwise";
  opt.learning_rate.stepwise.boundaries =
      std::vector<int64_t>{30 * kStepsPerEpoch, 60 * kStepsPerEpoch, 80 * kStepsPerEpoch};
  opt.learning_rate.stepwise.values = std::vector<double>{
      0.1 * kBatch / 256, 0.01 * kBatch / 256, 0.001 * kBatch / 256, 0.0001 * kBatch / 256};
  opt.warmup.type = "linear";
  opt.warmup.linear.warmup_steps = 5 * kStepsPerEpoch;
  return experiment;
}

// The CPU experiments' trainer: `steps` steps of SGD with momentum 0.9 and
// a cosine decay from `rate` after 100 linear warmup steps, an evaluation
// of the whole validation set and a checkpoint every `interval` steps, one
// process.
void cpu_schedule(config::ExperimentConfig& experiment, int64_t steps, int64_t interval,
                  double rate) {
  auto& trainer = experiment.trainer;
  trainer.train_steps = steps;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 100;
  trainer.checkpoint_interval = interval;
  trainer.validation_interval = interval;
  trainer.validation_steps = -1;
  trainer.max_to_keep = 2;
  auto& opt = trainer.optimizer_config;
  opt.optimizer.type = "sgd";
  opt.optimizer.sgd.momentum = 0.9;
  opt.learning_rate.type = "cosine";
  opt.learning_rate.cosine.initial_learning_rate = rate;
  opt.learning_rate.cosine.decay_steps = steps;
  opt.warmup.type = "linear";
  opt.warmup.linear.warmup_steps = 100;
  experiment.runtime.distribution_strategy = "one_device";
}

// MNIST on 2 cores: a ResNet-10 half as wide at 28 x 28, no crop
// (digits fill their frame), no flip (digits are not symmetric).
std::shared_ptr<config::ExperimentConfig> mnist() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = task_config(28, 128);
  task->model.num_classes = 10;
  task->model.backbone.resnet.model_id = 10;
  task->model.backbone.resnet.depth_multiplier = 0.5;
  task->train_data.aug_crop = false;
  task->train_data.aug_rand_hflip = false;
  task->validation_data.center_crop_fraction = 1.0;
  experiment->task = task;
  cpu_schedule(*experiment, 3000, 1500, 0.1);  // 6.4 epochs of the 60,000 digits
  return experiment;
}

// The flower photos (5 classes, 128 x 128 JPEGs) on 2 cores: Model Garden's
// ResNet-18 (torchvision's resnet18, bench/vision_bench.sh's peer, plus the
// first block's projection) at 112 x 112, torchvision's RandomResizedCrop
// and a flip, 400 steps (7.4 epochs).
std::shared_ptr<config::ExperimentConfig> flowers() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = task_config(112, 64);
  task->model.num_classes = 5;
  task->model.backbone.resnet.model_id = 18;
  // Keras' 0.99 averages the batch statistics over about 100 steps, too slow
  // for a run of 400: held-out accuracy 0.604 with it, 0.642 with 0.9
  // (docs/tasks/image_classification.md).
  task->model.norm_activation.norm_momentum = 0.9;
  // The area-uniform crop: held-out accuracy 0.645 over seeds 1 to 5
  // against 0.630 with TensorFlow's rule (docs/tasks/image_classification.md).
  task->train_data.crop_sampler = "torchvision";
  task->losses.label_smoothing = 0.1;
  task->losses.l2_weight_decay = 1e-4;
  experiment->task = task;
  cpu_schedule(*experiment, 400, 200, 0.05);
  return experiment;
}

}  // namespace

void register_vision() {
  register_task<ImageClassificationTaskConfig, ImageClassificationTask>("image_classification");
  register_serving_module<ImageClassificationTaskConfig, ImageClassificationTask,
                          ImageClassificationServing>("image_classification");
  config::register_experiment("resnet_imagenet",
                              "Model Garden's ResNet-50 on ImageNet (224, batch 4096, 90 epochs); "
                              "set the data paths",
                              resnet_imagenet);
  config::register_experiment("vision/mnist",
                              "MNIST digits with a small ResNet for a CPU; set the data paths "
                              "(garden create_image_records --mnist_dir)",
                              mnist);
  config::register_experiment("vision/flowers",
                              "Five flower classes with ResNet-18 at 112 for a CPU; set the "
                              "data paths (garden create_image_records --image_dir)",
                              flowers);
}

}  // namespace garden::vision
