// Image-classification step benchmark (issue 79): the training step alone of
// Garden's image_classification task against torchvision's model in the
// PyTorch peer bench/peers/peer_image_step.py, on one fixed synthetic batch,
// measured alternately in one run. bench/vision_bench.sh measures the whole
// loop (decoding and augmentation too).
//
//   vision_step_bench [--preset resnet18|resnet50] [--threads 2] [--steps 5] [--warmup 2]
//                     [--batch 64] [--length 112] [--rounds 3] [--peer PATH|none]
//                     [--amp none|bf16] [--profile] [--smoke]
//
// --length is the image side. Garden's step is the task's own train_step
// (Task::train_step: call_model in channels-last order, build_losses,
// Minimizer::minimize, the accuracy metrics) of `vision/flowers` with the
// preset's model_id, 5 classes: SGD with momentum 0.9, label smoothing 0.1,
// L2 1e-4 on the kernels. The peer: torchvision's resnet18 / resnet50 with
// the same optimizer, smoothing and weight decay. The models differ where
// Model Garden's ResNet does: TensorFlow's 'same' padding, Keras' batch-norm
// epsilon 1e-3, and a projection on ResNet-18's first block (Garden has
// 0.1 % more parameters).
//
// --amp bf16: both sides' forward and loss under bfloat16 autocast
// (Garden's runtime.mixed_precision_dtype=bfloat16; the peer's
// torch.autocast("cpu", torch.bfloat16)); on a CPU with AVX512-BF16 or AMX
// oneDNN's convolutions then run in bfloat16.
//
// Peak memory: Garden's process (the step's) and the largest peer process.
// --profile: Garden's step under LibTorch's profiler (operators by self
// time), no peer.
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "garden/config/registry.h"
#include "garden/core/metrics.h"
#include "garden/core/minimizer.h"
#include "garden/core/task.h"
#include "garden/kernels/convolution.h"
#include "garden/optim/optimizer.h"
#include "garden/platform/allocator.h"
#include "garden/platform/process.h"
#include "garden/vision/tasks/image_classification_config.h"
#include "garden/vision/tasks/image_classification_experiments.h"
#include "peer.h"
#include "profile.h"

namespace {

using Clock = std::chrono::steady_clock;
using Options = garden_bench::StepOptions;
const char* const kUsage =
    "vision_step_bench [--preset resnet18|resnet50] [--threads N] [--steps S] [--warmup W] "
    "[--batch B] [--length SIDE] [--rounds R] [--peer PATH|none] [--amp none|bf16] [--profile] "
    "[--smoke] [--convolution auto|direct|winograd]";

// --convolution (runtime.convolution_algorithm, default auto), taken out of
// argv before the options every step benchmark shares.
std::string take_convolution(int& argc, char** argv) {
  std::string algorithm = "auto";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--convolution") continue;
    if (i + 1 >= argc) garden_bench::usage("--convolution needs a value", kUsage);
    algorithm = argv[i + 1];
    for (int j = i; j + 2 < argc; ++j) argv[j] = argv[j + 2];
    argc -= 2;
    break;
  }
  return algorithm;
}

Options parse(int argc, char** argv) {
  Options defaults;
  defaults.preset = "resnet18";
  defaults.threads = 2;
  defaults.batch = 64;
  defaults.length = 112;
  const Options o =
      garden_bench::parse_step_options(argc, argv, defaults, {"resnet18", "resnet50"}, kUsage);
  if (o.device != "cpu" || o.cuda_graph || o.replay)
    garden_bench::usage("vision_step_bench takes no --device, --cuda-graph or --replay", kUsage);
  return o;
}

class GardenStep {
 public:
  explicit GardenStep(const Options& o) {
    torch::manual_seed(0);
    garden::vision::register_vision();
    auto experiment = garden::config::get_experiment_config("vision/flowers");
    auto& task_config =
        dynamic_cast<garden::vision::ImageClassificationTaskConfig&>(*experiment->task);
    task_config.model.backbone.resnet.model_id = o.preset == "resnet50" ? 50 : 18;
    task_config.model.input_size = {o.length, o.length, 3};
    task_config.model.num_classes = 5;
    task_config.train_data.global_batch_size = o.batch;
    task_ = garden::get_task(experiment->task, "");
    model_ = task_->build_model();
    if (o.amp == "bf16") task_->set_mixed_precision("bfloat16", at::Device(at::kCPU));
    model_->train();
    optimizer_ = garden::Task::create_optimizer(experiment->trainer.optimizer_config,
                                                experiment->runtime, std::nullopt, *model_);
    minimizer_ = std::make_unique<garden::Minimizer>(*optimizer_);
    metrics_ = task_->build_metrics(true);
    // As the input pipeline hands a batch over: NCHW float, labels [B, 1].
    inputs_["image"] = torch::randn({o.batch, 3, o.length, o.length});
    inputs_["label"] = torch::randint(0, 5, {o.batch, 1}, torch::kLong);
  }

  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& p : model_->parameters()) n += p.numel();
    return n;
  }

  void step() { task_->train_step(inputs_, *model_, *minimizer_, metrics_); }

  // Mean step time in ms over `steps` after `warmup` untimed steps.
  double measure(int warmup, int steps) {
    for (int i = 0; i < warmup; ++i) step();
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
  }

 private:
  garden::TaskPtr task_;
  garden::ModelPtr model_;
  std::unique_ptr<garden::optim::Optimizer> optimizer_;
  std::unique_ptr<garden::Minimizer> minimizer_;
  garden::MetricList metrics_;
  garden::Batch inputs_;
};

// The summary's per-step counts are images here, not tokens.
void rename_tokens(nlohmann::json& summary) {
  nlohmann::json renamed;
  for (const auto& [key, value] : summary.items()) {
    std::string name = key;
    if (const auto at = name.find("tokens_per_s"); at != std::string::npos)
      name.replace(at, 12, "images_per_s");
    if (name == "length") name = "image_side";
    renamed[name] = value;
  }
  summary = renamed;
}

}  // namespace

int main(int argc, char** argv) {
  // As garden does; the peer runs with glibc's malloc, as PyTorch users run it.
  garden::restart_with_fast_settings(argv, true);
  garden::keep_freed_memory_in_the_heap();
  const std::string convolution = take_convolution(argc, argv);
  try {
    garden::kernels::set_convolution_algorithm(
        garden::kernels::parse_convolution_algorithm(convolution));
  } catch (const std::invalid_argument& e) {
    garden_bench::usage(std::string("--convolution: ") + e.what(), kUsage);
  }
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads);
  GardenStep garden(o);
  const double images = static_cast<double>(o.batch);
  if (o.profile) {
    for (int i = 0; i < o.warmup; ++i) garden.step();
    garden_bench::print_step_profile([&] { garden.step(); }, 40, garden_bench::product_dtype(o));
    return 0;
  }
  if (o.smoke) {
    const double g = garden.measure(o.warmup, o.steps);
    nlohmann::json summary =
        garden_bench::smoke_summary("vision_step", o, garden.parameter_count(), images, g);
    rename_tokens(summary);
    std::cout << summary.dump() << "\n";
    return 0;
  }
  const bool alone = o.peer == "none";
  const std::string peer =
      alone ? "none" : garden_bench::find_peer(o.peer, "peer_image_step.py", GARDEN_SOURCE_DIR);
  std::cout << "# " << o.preset << " at " << o.length << " x " << o.length << ", batch " << o.batch
            << ", threads " << o.threads << ", " << o.warmup << " warmup + " << o.steps
            << " timed steps a round, peer " << peer << "\n";
  const garden_bench::Rounds rounds = garden_bench::run_rounds(
      peer, o, [&] { return garden.measure(o.warmup, o.steps); },
      [&](double g) {
        return nlohmann::json{{"garden", "libtorch-cpp"},
                              {"task", "image_classification"},
                              {"preset", o.preset},
                              {"threads", o.threads},
                              {"params", garden.parameter_count()},
                              {"batch", o.batch},
                              {"image_side", o.length},
                              {"step_ms", garden_bench::rounded(g, 1)},
                              {"images_per_s", garden_bench::rounded(images / g * 1000.0, 1)}};
      });
  nlohmann::json summary =
      garden_bench::step_summary("vision_step", o, garden.parameter_count(), rounds.peer_info,
                                 images, rounds.peer_ms, rounds.garden_ms, rounds.ratios);
  rename_tokens(summary);
  std::cout << summary.dump() << "\n";
  return 0;
}
