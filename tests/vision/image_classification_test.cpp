// The image_classification task: its records-to-example map against the
// preprocessing's definitions, augmentation that changes with the epoch and
// not with the run, errors naming the record, top-k accuracy, the configs'
// refusals, and a training run that learns a separable image set.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "garden/core/metrics.h"
#include "garden/data/example.h"
#include "garden/data/tfrecord.h"
#include "garden/vision/data/image_codec.h"
#include "garden/vision/tasks/image_classification.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using garden::vision::Image;
using garden::vision::ImageClassificationDataConfig;

std::string record_of(const Image& image, int64_t label) {
  garden::data::Example example;
  example["image/encoded"] =
      garden::data::FeatureValue::of_bytes({garden::vision::encode_png(image)});
  example["image/class/label"] = garden::data::FeatureValue::of_ints({label});
  return garden::data::serialize_example(example);
}

Image gradient(int64_t height, int64_t width) {
  Image image;
  image.height = height;
  image.width = width;
  image.channels = 3;
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) image.pixels.push_back(static_cast<uint8_t>(10 * y + x + 50 * c));
  return image;
}

TEST(ImageClassificationTest, AnExampleIsTheNormalizedImageAndItsLabel) {
  ImageClassificationDataConfig data;
  data.aug_crop = false;
  data.aug_rand_hflip = false;
  const std::string record = record_of(gradient(4, 4), 3);
  const auto example =
      garden::vision::image_example(record, "/x/train-0", 0, 0, data, 4, 4, true, 1, 10);
  EXPECT_EQ(example.at("label").item<int64_t>(), 3);
  const at::Tensor image = example.at("image");
  ASSERT_EQ(image.sizes(), (at::IntArrayRef{3, 4, 4}));
  // Channel 1 at (2, 3): 10 * 2 + 3 + 50 = 73, normalized by ImageNet's green.
  EXPECT_NEAR(image[1][2][3].item<float>(), (73 - 0.456 * 255) / (0.224 * 255), 1e-5);
  // Evaluation: the center crop (0.875 of 4 = 3.5 -> 3, offset 0) resized to 4.
  const auto eval = garden::vision::image_example(record, "/x/v", 0, 0, data, 3, 3, false, 1, 10);
  EXPECT_NEAR(eval.at("image")[0][0][0].item<float>(), (0 - 0.485 * 255) / (0.229 * 255), 1e-5);
  EXPECT_NEAR(eval.at("image")[0][2][2].item<float>(), (22 - 0.485 * 255) / (0.229 * 255), 1e-5);
}

TEST(ImageClassificationTest, AugmentationChangesWithTheEpochNotWithTheRun) {
  ImageClassificationDataConfig data;  // Inception crop and flip
  const std::string record = record_of(gradient(32, 32), 1);
  const auto draw = [&](int64_t index, int64_t epoch, const std::string& dir) {
    return garden::vision::image_example(record, dir + "/train-00000-of-00001.tfrecord", index,
                                         epoch, data, 16, 16, true, 7, 10)
        .at("image");
  };
  // The same record, epoch and file name (any folder): the same pixels.
  EXPECT_TRUE(torch::equal(draw(5, 0, "/a"), draw(5, 0, "/b")));
  int differ = 0;
  for (int64_t epoch = 1; epoch < 6; ++epoch)
    differ += !torch::equal(draw(5, 0, "/a"), draw(5, epoch, "/a"));
  EXPECT_GE(differ, 4);
  EXPECT_FALSE(torch::equal(draw(5, 0, "/a"), draw(6, 0, "/a")));
}

TEST(ImageClassificationTest, TheCropSamplerChoosesWhoseRuleDrawsTheCrop) {
  // A 32 x 32 gradient cropped by each rule and resized to 16 x 16: the
  // same seed gives the same image per rule, and the rules crop differently.
  const std::string record = record_of(gradient(32, 32), 1);
  const auto draw = [&](const std::string& sampler, int64_t index) {
    ImageClassificationDataConfig data;
    data.aug_rand_hflip = false;
    data.crop_sampler = sampler;
    return garden::vision::image_example(record, "/a/train-0", index, 0, data, 16, 16, true, 7, 10)
        .at("image");
  };
  int differ = 0;
  for (int64_t index = 0; index < 8; ++index) {
    EXPECT_TRUE(torch::equal(draw("torchvision", index), draw("torchvision", index)));
    differ += !torch::equal(draw("torchvision", index), draw("tensorflow", index));
  }
  EXPECT_GE(differ, 7);
}

TEST(ImageClassificationTest, ABadRecordIsOneErrorNamingIt) {
  ImageClassificationDataConfig data;
  std::string message = garden_test::error_of([&] {
    garden::vision::image_example("not an example", "f.tfrecord", 12, 0, data, 8, 8, true, 1, 10);
  });
  EXPECT_NE(message.find("'f.tfrecord', record 12"), std::string::npos) << message;
  garden::data::Example example;
  example["image/encoded"] = garden::data::FeatureValue::of_bytes({"GIF89a"});
  example["image/class/label"] = garden::data::FeatureValue::of_ints({0});
  message = garden_test::error_of([&] {
    garden::vision::image_example(garden::data::serialize_example(example), "f.tfrecord", 3, 0,
                                  data, 8, 8, true, 1, 10);
  });
  EXPECT_EQ(message, "'f.tfrecord', record 3: not a JPEG or PNG image (6 bytes)");
  example.erase("image/class/label");
  message = garden_test::error_of([&] {
    garden::vision::image_example(garden::data::serialize_example(example), "f.tfrecord", 4, 0,
                                  data, 8, 8, true, 1, 10);
  });
  EXPECT_NE(message.find("no single int64 feature 'image/class/label' (label_field_key)"),
            std::string::npos)
      << message;
  // A label the model has no class for (records of 10 classes, num_classes
  // 5): named with its record, not LibTorch's "Target 8 is out of bounds".
  for (const int64_t label : {int64_t{8}, int64_t{-1}}) {
    const std::string record = record_of(gradient(4, 4), label);
    message = garden_test::error_of([&] {
      garden::vision::image_example(record, "f.tfrecord", 5, 0, data, 4, 4, false, 1, 5);
    });
    EXPECT_EQ(message, "'f.tfrecord', record 5: label " + std::to_string(label) +
                           " is not a class of the model (image/class/label must be in [0, 5), "
                           "task.model.num_classes 5)");
  }
}

TEST(ImageClassificationTest, TopKAccuracyCountsTheLabelAmongTheKLargest) {
  garden::SparseTopKCategoricalAccuracy top2("top_2_accuracy", 2);
  const at::Tensor logits =
      torch::tensor({{0.1f, 0.5f, 0.4f}, {0.9f, 0.04f, 0.06f}, {0.2f, 0.3f, 0.5f}});
  top2.update_state(torch::tensor({2, 1, 0}), logits);
  // Row 0: label 2 is second (in); row 1: label 1 is last (out); row 2: label 0 last (out).
  EXPECT_NEAR(top2.result(), 1.0 / 3.0, 1e-9);
}

std::string run(const std::string& command) {
  const std::string out = (fs::path(::testing::TempDir()) / "vision_cli_out").string();
  const int rc = std::system((command + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  return std::to_string(rc == 0 ? 0 : 1) + "\n" +
         std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ImageClassificationTest, TheConfigRefusesWhatIsNotBuiltInOneLine) {
  const std::string garden = GARDEN_CLI_PATH;
  for (const auto& [key, words] : std::vector<std::pair<std::string, std::string>>{
           {"task.train_data.aug_type=randaug", "aug_type: 'randaug' is not implemented"},
           {"task.train_data.crop_sampler=keras", "crop_sampler: 'keras' is not one of"},
           {"task.model.backbone.resnet.model_id=19", "model_id: 19 is not one of"},
           {"task.train_data.tfds_name=mnist",
            "tfds_name: TensorFlow Datasets are not available"}}) {
    const std::string out = run(garden + " config --experiment=vision/mnist --params_override=" +
                                "task.train_data.input_path=x," + key);
    EXPECT_EQ(out[0], '1') << key;
    EXPECT_NE(out.find(words), std::string::npos) << out;
  }
  // The experiment shows before its paths are set; training refuses each
  // empty path naming it, before model_dir exists.
  const std::string shown = run(garden + " config --experiment=vision/mnist");
  EXPECT_EQ(shown[0], '0') << shown;
  EXPECT_NE(shown.find("    input_path: \"\"\n"), std::string::npos) << shown;
  const fs::path model_dir = fs::path(::testing::TempDir()) / "vision_no_paths";
  fs::remove_all(model_dir);
  std::string out =
      run(garden + " train --experiment=vision/mnist --model_dir='" + model_dir.string() + "'");
  EXPECT_EQ(out[0], '1') << out;
  EXPECT_NE(out.find("task.train_data.input_path: is empty: name the records"), std::string::npos)
      << out;
  out = run(garden + " train --experiment=vision/mnist --mode=eval --model_dir='" +
            model_dir.string() + "'");
  EXPECT_NE(out.find("task.validation_data.input_path: is empty"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(model_dir));
}

TEST(ImageClassificationTest, FlowersTrainsWithTorchvisionsCropAndImageNetWithModelGardens) {
  const std::string garden = GARDEN_CLI_PATH;
  const auto sampler = [&](const std::string& experiment) {
    const std::string out = run(garden + " config --experiment=" + experiment +
                                " --params_override=task.train_data.input_path=x");
    const auto at = out.find("crop_sampler: ");
    return at == std::string::npos ? out : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_EQ(sampler("vision/flowers"), "crop_sampler: torchvision");
  EXPECT_EQ(sampler("resnet_imagenet"), "crop_sampler: tensorflow");
}

// Two classes, red and blue squares with noise, 16 x 16 PNG records; a
// quarter-width ResNet-10 learns them in 60 steps (it did with each of
// runtime.seed 1 to 6 when written).
TEST(ImageClassificationTest, ATinyRunLearnsSeparableImages) {
  const fs::path dir = fs::path(::testing::TempDir()) / "vision_tiny";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(1);
  for (const std::string split : {"train", "valid"}) {
    garden::data::TFRecordWriter writer((dir / (split + ".tfrecord")).string());
    for (int i = 0; i < 64; ++i) {
      Image image;
      image.height = image.width = 16;
      image.channels = 3;
      const int label = i % 2;
      for (int p = 0; p < 256; ++p) {
        const int noise = static_cast<int>(rng() % 60);
        image.pixels.push_back(static_cast<uint8_t>(label ? noise : 180 + noise / 2));
        image.pixels.push_back(static_cast<uint8_t>(noise));
        image.pixels.push_back(static_cast<uint8_t>(label ? 180 + noise / 2 : noise));
      }
      writer.write(record_of(image, label));
    }
    writer.close();
  }
  const std::string out = run(
      std::string(GARDEN_CLI_PATH) +
      " train --experiment=vision/mnist --model_dir=" + (dir / "run").string() +
      " --params_override=task.train_data.input_path=" + (dir / "train.tfrecord").string() +
      ",task.validation_data.input_path=" + (dir / "valid.tfrecord").string() +
      ",task.model.num_classes=2,task.model.input_size=[16,16,3],task.model.backbone.resnet."
      "depth_multiplier=0.25,task.train_data.global_batch_size=16,task.validation_data.global_"
      "batch_size=16,task.train_data.aug_rand_hflip=true,task.train_data.aug_crop=true,"
      "task.train_data.shuffle_buffer_size=64,task.model.norm_activation.norm_momentum=0.9,"
      "task.evaluation.top_k=1,trainer.train_steps=60,trainer.steps_per_loop=20,trainer."
      "validation_interval=60,trainer.checkpoint_interval=60,trainer.optimizer_config."
      "learning_rate.cosine.decay_steps=60,trainer.optimizer_config.warmup.linear.warmup_steps=5,"
      "runtime.seed=1");
  ASSERT_EQ(out[0], '0') << out;
  const auto at = out.find("evaluation:  accuracy ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GE(std::stod(out.substr(at + 22)), 0.95) << out;
  EXPECT_NE(out.find("top_1_accuracy"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
