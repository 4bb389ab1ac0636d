// Exporting and serving image_classification: the served answers for
// encoded images ({"b64": ...}) equal the task's own inference_step on the
// evaluation preprocessing of the same images, garden predict --images
// gives the same classes, and a bad image is one error naming it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/data/example.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "garden/vision/data/image_codec.h"
#include "garden/vision/tasks/image_classification.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using garden::vision::Image;

Image pattern(int64_t height, int64_t width, int seed) {
  Image image;
  image.height = height;
  image.width = width;
  image.channels = 3;
  for (int64_t i = 0; i < height * width * 3; ++i)
    image.pixels.push_back(static_cast<uint8_t>((i * 37 + seed * 101) % 256));
  return image;
}

TEST(ImageClassificationServingTest, ServedAnswersEqualInferenceStepAndPredictReadsImageFiles) {
  garden::register_builtins();
  const fs::path root = fs::path(::testing::TempDir()) / "vision_serving";
  fs::remove_all(root);
  fs::create_directories(root / "run");
  // A run directory as garden train leaves it: params.yaml and a checkpoint
  // of a freshly initialized model (serving needs no trained weights).
  auto params = garden::config::get_experiment_config("vision/mnist");
  garden::config::apply_override(
      *params,
      "task.train_data.input_path=x,task.model.num_classes=4,task.model.input_size=[20,20,3],"
      "task.model.backbone.resnet.depth_multiplier=0.25,task.evaluation.top_k=2,"
      "task.validation_data.center_crop_fraction=0.875,runtime.seed=1");
  garden::finalize_config(*params);
  std::ofstream(root / "run" / "params.yaml") << garden::config::to_yaml_string(*params);
  auto task = garden::get_task(params->task, (root / "run").string());
  auto model = task->build_model();
  {
    torch::NoGradGuard no_grad;  // non-trivial running statistics
    for (auto& buffer : model->named_buffers())
      if (buffer.key().find("running_mean") != std::string::npos) buffer.value().uniform_(-0.1, 0.1);
  }
  garden::CheckpointData data;
  for (const auto& [name, tensor] : garden::model_state(*model)) data.tensors["model/" + name] = tensor;
  data.meta = {{"global_step", 1}, {"task", task->checkpoint_metadata()}};
  garden::write_checkpoint_file((root / "run" / "ckpt-1").string(), data);
  garden::serving::ExportOptions options;
  options.experiment = "vision/mnist";
  options.model_dir = (root / "run").string();
  options.export_dir = (root / "export").string();
  garden::serving::export_model(options);

  // Three images of other sizes and formats (a non-square one is center-cropped).
  const std::vector<std::string> files = {
      garden::vision::encode_png(pattern(24, 32, 1)), garden::vision::encode_jpeg(pattern(20, 20, 2), 95),
      garden::vision::encode_png(pattern(40, 30, 3))};
  std::vector<json> instances;
  for (const auto& bytes : files) instances.push_back(json{{"b64", garden::base64_encode(bytes)}});
  garden::serving::Predictor predictor((root / "export").string());
  const auto answers = predictor.predict(instances);
  ASSERT_EQ(answers.size(), 3u);

  // The reference: evaluation's own preprocessing of records of the same bytes.
  const auto& config = dynamic_cast<const garden::vision::ImageClassificationTaskConfig&>(*params->task);
  std::vector<at::Tensor> images;
  for (std::size_t i = 0; i < files.size(); ++i) {
    garden::data::Example example;
    example["image/encoded"] = garden::data::FeatureValue::of_bytes({files[i]});
    example["image/class/label"] = garden::data::FeatureValue::of_ints({0});
    images.push_back(garden::vision::image_example(garden::data::serialize_example(example), "f",
                                                   static_cast<int64_t>(i), 0, config.validation_data,
                                                   20, 20, false, 0, 1)
                         .at("image"));
  }
  auto restored = task->build_model();
  garden::load_model_state(*restored, data.tensors, "model/", true);
  const auto expected = task->inference_step({{"image", torch::stack(images)}}, *restored);
  for (int r = 0; r < 3; ++r) {
    const auto& a = answers[static_cast<std::size_t>(r)];
    EXPECT_EQ(a.at("classes").get<int64_t>(), expected.at("classes")[r].item<int64_t>());
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(static_cast<float>(a.at("logits")[c].get<double>()),
                expected.at("logits")[r][c].item<float>());
      EXPECT_EQ(static_cast<float>(a.at("probabilities")[c].get<double>()),
                expected.at("probabilities")[r][c].item<float>());
    }
    ASSERT_EQ(a.at("top_k_classes").size(), 2u);
    EXPECT_EQ(a.at("top_k_classes")[0], a.at("classes"));
    EXPECT_GE(a.at("top_k_probabilities")[0].get<double>(), a.at("top_k_probabilities")[1].get<double>());
  }
  // A bad image: one error naming the instance.
  EXPECT_EQ(garden_test::error_of([&] {
              predictor.predict({json{{"b64", garden::base64_encode("GIF")}}});
            }),
            "instance 0: not a JPEG or PNG image (3 bytes)");

  // garden predict --images: one line per file, in order.
  for (std::size_t i = 0; i < files.size(); ++i)
    std::ofstream(root / ("image" + std::to_string(i)), std::ios::binary) << files[i];
  const std::string command = std::string(GARDEN_CLI_PATH) + " predict --export_dir=" +
                              (root / "export").string() + " --images " +
                              (root / "image0").string() + " " + (root / "image1").string() + " " +
                              (root / "image2").string() + " > " + (root / "out").string() +
                              " 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::ifstream out(root / "out");
  std::string line;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(std::getline(out, line));
    EXPECT_EQ(json::parse(line).at("classes"), answers[static_cast<std::size_t>(r)].at("classes"));
  }
  std::ofstream(root / "bad.gif") << "GIF89a";
  const std::string bad = std::string(GARDEN_CLI_PATH) + " predict --export_dir=" +
                          (root / "export").string() + " --images " + (root / "bad.gif").string() +
                          " > /dev/null 2> " + (root / "err").string();
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::ifstream err(root / "err");
  const std::string message(std::istreambuf_iterator<char>(err), {});
  EXPECT_NE(message.find("--images file '" + (root / "bad.gif").string() +
                         "': not a JPEG or PNG image (6 bytes)"),
            std::string::npos)
      << message;
  // An --output that is one of the images is refused before anything is written.
  const std::string same = std::string(GARDEN_CLI_PATH) + " predict --export_dir=" +
                           (root / "export").string() + " --images " + (root / "image0").string() +
                           " --output=" + (root / "image0").string() + " > /dev/null 2>&1";
  EXPECT_NE(std::system(same.c_str()), 0);
  std::ifstream kept(root / "image0", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), files[0]);
  fs::remove_all(root);
}

}  // namespace
