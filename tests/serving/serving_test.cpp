// Export and the Predictor: an export loads with nothing but itself and
// predicts what inference_step gives for the same checkpoint; errors name
// what is wrong.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "safetensors_reader.h"
#include "serving/serving_fixture.h"
#include "test_util.h"

namespace fs = std::filesystem;
using garden_test::error_of;
using json = nlohmann::json;

namespace {

using namespace serving_fixture;  // NOLINT

struct RemoveRuns : ::testing::Environment {
  void TearDown() override { ServingTest::remove_runs(); }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new RemoveRuns);

TEST_F(ServingTest, AnExportIsAVersionedDirectoryWithEverythingItNeeds) {
  const fs::path dir = iris_export_;
  EXPECT_GT(std::stoll(dir.filename().string()), 1'600'000'000);  // Unix time
  for (const char* file : {"params.yaml", "weights.ckpt", "weights.safetensors", "signature.json"})
    EXPECT_TRUE(fs::is_regular_file(dir / file)) << file;
  const json info = json::parse(std::ifstream(dir / "signature.json"));
  EXPECT_EQ(info.at("experiment"), "tabular/iris");
  EXPECT_EQ(info.at("global_step"), 60);
  EXPECT_EQ(info.at("ema"), false);
  const json& def = info.at("signature_def").at("serving_default");
  EXPECT_EQ(def.at("method_name"), "tensorflow/serving/predict");
  for (const auto& column : kIrisColumns) {
    EXPECT_EQ(def.at("inputs").at(column).at("dtype"), "DT_FLOAT");
    EXPECT_EQ(def.at("inputs").at(column).at("tensor_shape").at("dim").size(), 1u);
  }
  EXPECT_EQ(def.at("outputs").at("probabilities").at("tensor_shape").at("dim").at(1).at("size"),
            "3");
  EXPECT_EQ(def.at("outputs").at("classes").at("dtype"), "DT_STRING");
  // The translation export carries its tokenizer.
  EXPECT_TRUE(
      fs::is_regular_file(fs::path(translation_export_) / "assets" / "sentencepiece.model"));
  // A second export is a higher version beside the first; nothing temporary stays.
  const std::string second = export_run("tabular/iris", "iris", "iris_export_twice");
  const std::string third = export_run("tabular/iris", "iris", "iris_export_twice");
  EXPECT_GT(std::stoll(fs::path(third).filename().string()),
            std::stoll(fs::path(second).filename().string()));
  EXPECT_EQ(garden::serving::export_versions((root_ / "iris_export_twice").string()).size(), 2u);
  for (const auto& entry : fs::directory_iterator(root_ / "iris_export_twice"))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos);
}

TEST_F(ServingTest, TheSafetensorsFileHoldsTheCheckpointsWeightsBitForBit) {
  const auto file =
      garden_test::safetensors::read((fs::path(iris_export_) / "weights.safetensors").string());
  const auto checkpoint = garden::read_checkpoint_file(iris_checkpoint_);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("garden_experiment"), "tabular/iris");
  std::size_t model_tensors = 0;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    ++model_tensors;
    const auto it = file.tensors.find(name.substr(6));
    ASSERT_NE(it, file.tensors.end()) << name;
    const at::Tensor value = tensor.contiguous();
    EXPECT_EQ(it->second.shape, value.sizes().vec()) << name;
    ASSERT_EQ(it->second.bytes.size(), value.nbytes()) << name;
    EXPECT_EQ(std::memcmp(it->second.bytes.data(), value.data_ptr(), value.nbytes()), 0) << name;
  }
  EXPECT_GT(model_tensors, 2u);
  EXPECT_EQ(file.tensors.size(), model_tensors);
}

TEST_F(ServingTest, ARunWithAMovingAverageExportsTheAverages) {
  const json info = json::parse(std::ifstream(fs::path(ema_export_) / "signature.json"));
  EXPECT_EQ(info.at("ema"), true);
  const auto exported =
      garden::read_checkpoint_file((fs::path(ema_export_) / "weights.ckpt").string());
  const auto checkpoint =
      garden::read_checkpoint_file(*garden::latest_checkpoint((root_ / "iris_ema").string()));
  int averaged = 0;
  for (const auto& [name, tensor] : exported.tensors) {
    const std::string weight = name.substr(6);  // "model/"
    const auto average = checkpoint.tensors.find("optimizer/ema/" + weight);
    if (average == checkpoint.tensors.end()) {
      EXPECT_TRUE(torch::equal(tensor, checkpoint.tensors.at(name))) << name;
      continue;
    }
    ++averaged;
    EXPECT_TRUE(torch::equal(tensor, average->second)) << name;
    EXPECT_FALSE(torch::equal(tensor, checkpoint.tensors.at(name))) << name;
  }
  EXPECT_GT(averaged, 0);
}

TEST_F(ServingTest, IrisPredictionsEqualInferenceStepOnTheSameCheckpoint) {
  garden::serving::Predictor predictor((root_ / "iris_export").string());  // the base directory
  EXPECT_EQ(predictor.directory(), iris_export_);
  const std::vector<std::vector<float>> rows = {
      {5.1f, 3.5f, 1.4f, 0.2f}, {6.2f, 2.9f, 4.3f, 1.3f}, {7.7f, 3.0f, 6.1f, 2.3f}};
  std::vector<json> instances;
  for (const auto& row : rows) {
    json instance = json::object();
    for (std::size_t f = 0; f < row.size(); ++f) instance[kIrisColumns[f]] = row[f];
    instances.push_back(instance);
  }
  instances[2] = json(rows[2]);  // a list in signature order works too
  const auto predictions = predictor.predict(instances);
  ASSERT_EQ(predictions.size(), 3u);

  at::Tensor features = torch::empty({3, 4});
  for (int r = 0; r < 3; ++r)
    for (int f = 0; f < 4; ++f) features[r][f] = rows[r][f];
  garden::TaskPtr task;
  const auto expected =
      reference("tabular/iris", "iris", iris_checkpoint_, {{"features", features}}, &task);
  const std::vector<std::string> classes = {"setosa", "versicolor", "virginica"};
  for (int r = 0; r < 3; ++r) {
    const auto& p = predictions[r];
    EXPECT_EQ(p.at("class_ids").get<int64_t>(), expected.at("class_ids")[r].item<int64_t>());
    EXPECT_EQ(p.at("classes").get<std::string>(),
              classes.at(static_cast<std::size_t>(p.at("class_ids").get<int64_t>())));
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(static_cast<float>(p.at("probabilities")[c].get<double>()),
                expected.at("probabilities")[r][c].item<float>());
      EXPECT_EQ(static_cast<float>(p.at("logits")[c].get<double>()),
                expected.at("logits")[r][c].item<float>());
    }
  }
  // The tensor form gives inference_step's outputs themselves.
  const auto tensors = predictor.predict_batch({{"features", features}});
  EXPECT_TRUE(torch::equal(tensors.at("logits"), expected.at("logits")));
}

// Batches predicted several at a time come back in their order, each equal
// to its own predict_batch; a bad batch among them is the one error thrown.
TEST_F(ServingTest, PredictBatchesOnThreadsKeepsTheOrderAndRethrowsAFailure) {
  const garden::serving::Predictor predictor(iris_export_);
  std::vector<garden::Batch> batches;
  for (int b = 0; b < 7; ++b) batches.push_back({{"features", torch::rand({b + 1, 4}) * 8.0}});
  for (const int threads : {1, 3, 16}) {
    const auto outputs = predictor.predict_batches(batches, threads);
    ASSERT_EQ(outputs.size(), batches.size());
    for (std::size_t b = 0; b < batches.size(); ++b)
      EXPECT_TRUE(
          torch::equal(outputs[b].at("logits"), predictor.predict_batch(batches[b]).at("logits")))
          << "batch " << b << ", " << threads << " threads";
  }
  EXPECT_TRUE(predictor.predict_batches({}, 2).empty());
  batches[4] = {{"features", torch::rand({2, 3})}};  // a feature short
  const auto first_line_of_error = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return what.substr(0, what.find('\n'));
    }
    return "(no error)";
  };
  const std::string error = first_line_of_error([&] { predictor.predict_batches(batches, 3); });
  EXPECT_NE(error, "(no error)");
  EXPECT_EQ(error, first_line_of_error([&] { predictor.predict_batch(batches[4]); }));
  EXPECT_NE(error_of([&] { predictor.predict_batches(batches, 0); }).find("threads must be >= 1"),
            std::string::npos);
}

TEST_F(ServingTest, TranslationsEqualInferenceStepOnTheSameCheckpoint) {
  // The model_dir (and its SentencePiece model) and the training data are
  // gone: the export alone must serve.
  fs::rename(root_ / "translation", root_ / "translation_moved");
  fs::rename(root_ / "pairs.tsv", root_ / "pairs_moved.tsv");
  std::unique_ptr<garden::serving::Predictor> loaded;
  const std::string error =
      error_of([&] { loaded = std::make_unique<garden::serving::Predictor>(translation_export_); });
  fs::rename(root_ / "translation_moved", root_ / "translation");
  fs::rename(root_ / "pairs_moved.tsv", root_ / "pairs.tsv");
  ASSERT_EQ(error, "(no error)");
  const auto& predictor = *loaded;
  std::vector<json> instances;
  for (int i = 0; i < 4; ++i) instances.emplace_back(sources_[i]);
  instances[1] = {{"inputs", sources_[1]}};
  const auto predictions = predictor.predict(instances);
  ASSERT_EQ(predictions.size(), 4u);

  garden::TaskPtr task;
  auto params =
      garden::serving::read_run_params("wmt_transformer/demo", (root_ / "translation").string());
  auto translation = std::make_shared<garden::nlp::TranslationTask>(
      std::static_pointer_cast<const garden::nlp::TranslationConfig>(params->task),
      (root_ / "translation").string());
  translation->set_tokenizer_training(false);
  std::vector<std::vector<int64_t>> rows;
  std::size_t longest = 0;
  for (int i = 0; i < 4; ++i) {
    rows.push_back(translation->encode_source(
        sources_[i], translation->config().validation_data.max_seq_length));
    longest = std::max(longest, rows.back().size());
  }
  at::Tensor source = torch::zeros({4, static_cast<int64_t>(longest)}, torch::kLong);
  for (int i = 0; i < 4; ++i)
    for (std::size_t t = 0; t < rows[i].size(); ++t)
      source[i][static_cast<int64_t>(t)] = rows[i][t];
  const auto data = garden::read_checkpoint_file(translation_checkpoint_);
  // The weights an export serves: the moving averages where the run kept
  // them (the demo's recipe does), else the live ones.
  std::map<std::string, at::Tensor> weights;
  for (const auto& [key, tensor] : data.tensors) {
    if (key.rfind("model/", 0) != 0) continue;
    const auto average = data.tensors.find("optimizer/ema/" + key.substr(6));
    weights[key] = average != data.tensors.end() ? average->second : tensor;
  }
  ASSERT_TRUE(std::any_of(data.tensors.begin(), data.tensors.end(), [](const auto& item) {
    return item.first.rfind("optimizer/ema/", 0) == 0;
  })) << "the demo's recipe keeps moving averages";
  auto model = translation->build_model();
  garden::load_model_state(*model, weights, "model/", true);
  const at::Tensor ids = translation->inference_step({{"inputs", source}}, *model).at("outputs");
  for (int i = 0; i < 4; ++i) {
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < ids.size(1) && ids[i][t].item<int64_t>() != 0; ++t)
      tokens.push_back(ids[i][t].item<int64_t>());
    EXPECT_EQ(predictions[i].at("outputs").get<std::string>(),
              translation->tokenizer().decode(tokens))
        << sources_[i];
  }
}

TEST_F(ServingTest, AWrongInstanceIsAnInputErrorNamingItAndTheInput) {
  garden::serving::Predictor predictor(iris_export_);
  json good = json::object();
  for (const auto& column : kIrisColumns) good[column] = 1.0;
  auto message = [&](const json& bad) {
    try {
      predictor.predict({good, bad});
    } catch (const garden::InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  json missing = good;
  missing.erase("petal_width");
  EXPECT_EQ(message(missing), "instance 1 has no input 'petal_width'");
  json text = good;
  text["sepal_width"] = "wide";
  EXPECT_EQ(message(text), "instance 1: input 'sepal_width' must be a number, not string");
  json huge = good;
  huge["sepal_width"] = 1e300;
  EXPECT_NE(message(huge).find("out of float range"), std::string::npos);
  json extra = good;
  extra["colour"] = 2;
  EXPECT_EQ(message(extra), "instance 1 has an unknown input 'colour'");
  EXPECT_EQ(message(json::array({1, 2})),
            "instance 1 is a list of 2 values; the signature has 4 inputs");
  EXPECT_NE(message(json(3.0)).find("instance 1 is a number"), std::string::npos);
  garden::serving::Predictor translator(translation_export_);
  try {
    translator.predict({json(7)});
    ADD_FAILURE() << "a number translated";
  } catch (const garden::InputError& e) {
    EXPECT_STREQ(e.what(), "instance 0: input 'inputs' must be a string, not number");
  }
}

TEST_F(ServingTest, ExportAndLoadErrorsAreOneLineNamingWhatIsWrong) {
  garden::serving::ExportOptions options;
  options.experiment = "tabular/iris";
  options.model_dir = (root_ / "nothing").string();
  options.export_dir = (root_ / "out").string();
  EXPECT_NE(error_of([&] { garden::serving::export_model(options); }).find("has no params.yaml"),
            std::string::npos);
  options.model_dir = (root_ / "iris").string();
  options.checkpoint = (root_ / "missing").string();
  EXPECT_NE(error_of([&] {
              garden::serving::export_model(options);
            }).find("is not a checkpoint or holds none"),
            std::string::npos);
  options.checkpoint = "";
  options.experiment = "wmt_transformer/demo";
  EXPECT_NE(error_of([&] {
              garden::serving::export_model(options);
            }).find("is not a params.yaml of experiment 'wmt_transformer/demo'"),
            std::string::npos);
  options.experiment = "tabular/iris";
  options.export_dir = write_text(root_ / "a_file", "x");
  EXPECT_NE(error_of([&] { garden::serving::export_model(options); }).find("is a file"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "out"));

  EXPECT_EQ(error_of([&] {
              garden::serving::Predictor p(iris_export_, "gpu");
            }).rfind("device 'gpu' is not a device: ", 0),
            0u);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(error_of([&] { garden::serving::Predictor p(iris_export_, "cuda"); }),
              "device 'cuda': this LibTorch has no CUDA device; use cpu");
  }
  EXPECT_EQ(error_of([&] { garden::serving::Predictor p((root_ / "nowhere").string()); }),
            "export '" + (root_ / "nowhere").string() + "' does not exist");
  fs::create_directories(root_ / "empty_export");
  EXPECT_NE(error_of([&] {
              garden::serving::Predictor p((root_ / "empty_export").string());
            }).find("holds no version"),
            std::string::npos);
  // A damaged copy names the file that is wrong.
  const fs::path broken = root_ / "broken" / "1";
  fs::create_directories(broken.parent_path());
  fs::copy(iris_export_, broken, fs::copy_options::recursive);
  {
    std::fstream weights(broken / "weights.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    weights.seekp(-3, std::ios::end);
    weights.put('\x7f');
  }
  EXPECT_NE(error_of([&] { garden::serving::Predictor p(broken.string()); }).find("weights.ckpt"),
            std::string::npos);
  write_text(broken / "signature.json", "{\"experiment\": 3}");
  EXPECT_NE(error_of([&] {
              garden::serving::Predictor p(broken.string());
            }).find("is not an export's signature"),
            std::string::npos);
}

TEST_F(ServingTest, ElectraExportsServeTheDiscriminatorPerToken) {
  const std::string exported = electra_export();
  garden::serving::Predictor predictor(exported);
  const json short_one = {{"input_word_ids", {2, 7, 9, 3}}};
  const json long_one = {{"input_word_ids", {2, 11, 12, 13, 14, 3}},
                         {"input_type_ids", {0, 0, 0, 1, 1, 1}}};
  const auto rows = predictor.predict({short_one, long_one});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("disc_probabilities").size(), 4u);  // no padding in the answer
  EXPECT_EQ(rows[1].at("sequence_output").size(), 6u);
  EXPECT_EQ(rows[1].at("sequence_output")[0].size(), 8u);
  // The short instance alone, unpadded, through the discriminator itself
  // (the exported checkpoint's weights).
  const fs::path run = root_ / "electra";
  auto params = garden::serving::read_run_params("electra/tiny", run.string());
  auto task = garden::get_task(params->task, run.string());
  auto model = task->build_model();
  garden::load_model_state(*model, garden::read_checkpoint_file((run / "ckpt-1").string()).tensors,
                           "model/", true);
  auto& pretrainer = *model->as<garden::nlp::ElectraPretrainerImpl>();
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor ids = torch::tensor({2, 7, 9, 3}, torch::kLong).unsqueeze(0);
  const at::Tensor sequence =
      pretrainer.discriminator->forward(ids, torch::ones_like(ids), torch::zeros_like(ids));
  const at::Tensor probabilities = torch::sigmoid(pretrainer.discriminator_logits(sequence));
  for (int t = 0; t < 4; ++t) {
    EXPECT_NEAR(rows[0]["disc_probabilities"][t].get<double>(), probabilities[0][t].item<double>(),
                1e-5);
    EXPECT_NEAR(rows[0]["sequence_output"][t][3].get<double>(), sequence[0][t][3].item<double>(),
                1e-5);
  }
  EXPECT_NE(error_of([&] {
              predictor.predict({json{{"input_word_ids", {1, 50}}}});
            }).find("holds 50, outside [0, 50)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              predictor.predict({json{{"input_word_ids", std::vector<int>(17, 1)}}});
            }).find("has 17 tokens; the model takes 16"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              predictor.predict({json{{"input_word_ids", {1, 2}}, {"input_mask", {1}}}});
            }).find("must be as long as input_word_ids"),
            std::string::npos);
}

}  // namespace
