// Export, Predictor and the HTTP server: an export loads with nothing but
// itself, predicts what inference_step gives for the same checkpoint, and
// answers TF Serving's REST API, bad requests included.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/data/sentencepiece.h"
#include "garden/nlp/modeling/electra_pretrainer.h"
#include "garden/nlp/tasks/translation_task.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "garden/serving/server.h"
#include "safetensors_reader.h"
#include "test_util.h"

namespace fs = std::filesystem;
using garden_test::error_of;
using json = nlohmann::json;

namespace {

const std::vector<std::string> kIrisColumns = {"sepal_length", "sepal_width", "petal_length",
                                               "petal_width"};

void train(const std::string& experiment, const std::string& overrides,
           const std::string& model_dir) {
  auto params = garden::config::get_experiment_config(experiment);
  garden::config::apply_override(*params, overrides);
  garden::finalize_config(*params);
  garden::RunOptions options;
  options.mode = "train";
  options.model_dir = model_dir;
  garden::run_experiment(params, options);
}

std::string write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

class ServingTest : public ::testing::Test {
 public:
  // Three runs for the suite: iris, iris with a moving average, and a tiny
  // translation model; each exported once, then its model_dir removed, so
  // every load below needs the export alone.
  static void SetUpTestSuite() {
    if (!root_.empty()) return;  // once for both suites
    garden::register_builtins();
    garden::set_quiet(true);
    root_ = fs::path(::testing::TempDir()) / ("garden_serving_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    train("tabular/iris",
          "trainer.train_steps=60,trainer.steps_per_loop=30,"
          "trainer.checkpoint_interval=30,trainer.summary_interval=30,runtime.seed=3",
          (root_ / "iris").string());
    train("tabular/iris",
          "trainer.train_steps=40,trainer.steps_per_loop=20,trainer.summary_interval=20,"
          "trainer.checkpoint_interval=20,runtime.seed=4,"
          "trainer.optimizer_config.ema.average_decay=0.9",
          (root_ / "iris_ema").string());
    std::ifstream sample(std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv");
    std::ofstream pairs(root_ / "pairs.tsv");
    std::string line;
    for (int i = 0; i < 16 && std::getline(sample, line); ++i) {
      pairs << line << '\n';
      sources_.push_back(line.substr(0, line.find('\t')));
    }
    pairs.close();
    const std::string data = (root_ / "pairs.tsv").string();
    train("wmt_transformer/demo",
          "task.sentencepiece_vocab_size=100,task.model.embedding_width=32,"
          "task.model.encoder.num_layers=1,task.model.decoder.num_layers=1,"
          "task.model.encoder.intermediate_size=64,task.model.decoder.intermediate_size=64,"
          "task.model.beam_size=2,task.train_data.input_path=" +
              data + ",task.validation_data.input_path=" + data +
              ",task.train_data.global_batch_size=256,trainer.train_steps=20,"
              "trainer.steps_per_loop=10,trainer.summary_interval=10,"
              "trainer.checkpoint_interval=10,runtime.seed=5",
          (root_ / "translation").string());
    iris_checkpoint_ = *garden::latest_checkpoint((root_ / "iris").string());
    translation_checkpoint_ = *garden::latest_checkpoint((root_ / "translation").string());
    iris_export_ = export_run("tabular/iris", "iris", "iris_export");
    ema_export_ = export_run("tabular/iris", "iris_ema", "iris_ema_export");
    translation_export_ = export_run("wmt_transformer/demo", "translation", "translation_export");
  }
  // The runs are removed once every suite is done (see kCleanup).
  static void remove_runs() {
    std::error_code ignored;
    if (!root_.empty()) fs::remove_all(root_, ignored);
    garden::set_quiet(false);
  }

  static std::string export_run(const std::string& experiment, const std::string& run,
                                const std::string& out) {
    garden::serving::ExportOptions options;
    options.experiment = experiment;
    options.model_dir = (root_ / run).string();
    options.export_dir = (root_ / out).string();
    const auto result = garden::serving::export_model(options);
    return result.directory;
  }

  // What the run's own task and checkpoint give for `inputs`, computed
  // without the serving layer.
  static garden::Batch reference(const std::string& experiment, const std::string& run,
                                 const std::string& checkpoint, const garden::Batch& inputs,
                                 garden::TaskPtr* task_out = nullptr) {
    auto params = garden::serving::read_run_params(experiment, (root_ / run).string());
    auto task = garden::get_task(params->task, (root_ / run).string());
    const auto data = garden::read_checkpoint_file(checkpoint);
    auto model = task->build_model();
    garden::load_model_state(*model, data.tensors, "model/", true);
    if (task_out) *task_out = task;
    return task->inference_step(inputs, *model);
  }

  static fs::path root_;
  static std::string iris_checkpoint_, translation_checkpoint_;
  static std::string iris_export_, ema_export_, translation_export_;
  static std::vector<std::string> sources_;
};

fs::path ServingTest::root_;
std::string ServingTest::iris_checkpoint_, ServingTest::translation_checkpoint_;
std::string ServingTest::iris_export_, ServingTest::ema_export_, ServingTest::translation_export_;
std::vector<std::string> ServingTest::sources_;

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
  auto model = translation->build_model();
  garden::load_model_state(*model, data.tensors, "model/", true);
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
  // A model_dir as garden train leaves it: params.yaml and a checkpoint (of
  // a freshly initialized small model: serving needs no trained weights).
  auto params = garden::config::get_experiment_config("electra/tiny");
  garden::config::apply_override(
      *params,
      "task.model.sequence_length=16,task.model.num_masked_tokens=2,"
      "task.model.discriminator_encoder.bert.vocab_size=50,"
      "task.model.discriminator_encoder.bert.hidden_size=8,"
      "task.model.discriminator_encoder.bert.num_layers=1,"
      "task.model.discriminator_encoder.bert.num_attention_heads=2,"
      "task.model.discriminator_encoder.bert.intermediate_size=16,"
      "task.model.discriminator_encoder.bert.embedding_size=8,"
      "task.model.generator_encoder.bert.vocab_size=50,"
      "task.model.generator_encoder.bert.hidden_size=8,"
      "task.model.generator_encoder.bert.num_layers=1,"
      "task.model.generator_encoder.bert.num_attention_heads=2,"
      "task.model.generator_encoder.bert.intermediate_size=16,"
      "task.model.generator_encoder.bert.embedding_size=8,"
      "task.train_data.seq_length=16,task.validation_data.seq_length=16,"
      "task.train_data.max_predictions_per_seq=2,task.validation_data.max_predictions_per_seq=2,"
      "runtime.seed=1");
  const fs::path run = root_ / "electra";
  fs::create_directories(run);
  write_text(run / "params.yaml", garden::config::to_yaml_string(*params));
  auto task = garden::get_task(params->task, run.string());
  auto model = task->build_model();
  garden::CheckpointData data;
  for (const auto& [name, tensor] : garden::model_state(*model))
    data.tensors["model/" + name] = tensor;
  data.meta = {{"global_step", 1}, {"task", task->checkpoint_metadata()}};
  garden::write_checkpoint_file((run / "ckpt-1").string(), data);
  const std::string exported = export_run("electra/tiny", "electra", "electra_export");

  garden::serving::Predictor predictor(exported);
  const json short_one = {{"input_word_ids", {2, 7, 9, 3}}};
  const json long_one = {{"input_word_ids", {2, 11, 12, 13, 14, 3}},
                         {"input_type_ids", {0, 0, 0, 1, 1, 1}}};
  const auto rows = predictor.predict({short_one, long_one});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("disc_probabilities").size(), 4u);  // no padding in the answer
  EXPECT_EQ(rows[1].at("sequence_output").size(), 6u);
  EXPECT_EQ(rows[1].at("sequence_output")[0].size(), 8u);
  // The short instance alone, unpadded, through the discriminator itself.
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

// ---- the HTTP server

class ServerTest : public ServingTest {
 protected:
  void start(const std::string& export_dir, garden::serving::ServerOptions options = {}) {
    options.port = 0;
    options.model_name = "iris";
    server_ = std::make_unique<garden::serving::ModelServer>(export_dir, options);
    port_ = server_->start();
    runner_ = std::thread([this] { server_->run(); });
    ASSERT_TRUE(server_->wait_until_loaded());
  }
  void TearDown() override {
    if (server_) server_->shutdown(5);
    if (runner_.joinable()) runner_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30);
    return c;
  }
  static json instance(double a, double b, double c, double d) {
    return {{"sepal_length", a}, {"sepal_width", b}, {"petal_length", c}, {"petal_width", d}};
  }

  std::unique_ptr<garden::serving::ModelServer> server_;
  std::thread runner_;
  int port_ = 0;
};

TEST_F(ServerTest, StatusMetadataAndBothRequestFormats) {
  start(iris_export_);
  auto c = client();
  const std::string version = fs::path(iris_export_).filename().string();
  auto status = c.Get("/v1/models/iris");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  const json s = json::parse(status->body);
  EXPECT_EQ(s["model_version_status"][0]["version"], version);
  EXPECT_EQ(s["model_version_status"][0]["state"], "AVAILABLE");
  auto metadata = c.Get("/v1/models/iris/metadata");
  ASSERT_TRUE(metadata);
  const json m = json::parse(metadata->body);
  EXPECT_EQ(m["model_spec"]["version"], version);
  EXPECT_EQ(m["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"].size(),
            4u);

  garden::serving::Predictor predictor(iris_export_);
  const auto expected =
      predictor.predict({instance(5.1, 3.5, 1.4, 0.2), instance(6.2, 2.9, 4.3, 1.3)});
  const json rows = {{"instances", {instance(5.1, 3.5, 1.4, 0.2), instance(6.2, 2.9, 4.3, 1.3)}}};
  auto answer = c.Post("/v1/models/iris:predict", rows.dump(), "application/json");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const json predictions = json::parse(answer->body).at("predictions");
  ASSERT_EQ(predictions.size(), 2u);
  EXPECT_EQ(predictions[0], expected[0]);
  EXPECT_EQ(predictions[1], expected[1]);
  // Columnar in, columnar out; the version may be named.
  const json columns = {{"inputs",
                         {{"sepal_length", {5.1, 6.2}},
                          {"sepal_width", {3.5, 2.9}},
                          {"petal_length", {1.4, 4.3}},
                          {"petal_width", {0.2, 1.3}}}}};
  answer = c.Post("/v1/models/iris/versions/" + version + ":predict", columns.dump(),
                  "application/json");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const json outputs = json::parse(answer->body).at("outputs");
  EXPECT_EQ(outputs.at("classes"), json({expected[0]["classes"], expected[1]["classes"]}));
  EXPECT_EQ(outputs.at("probabilities")[1], expected[1]["probabilities"]);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("garden_serving_responses_total{code=\"200\"} 4"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("garden_serving_instances_total 4"), std::string::npos);
}

TEST_F(ServerTest, MalformedRequestsGet4xxAndTheServerStillAnswers) {
  garden::serving::ServerOptions options;
  options.max_body_bytes = 4096;
  options.read_timeout_seconds = 1;
  start(iris_export_, options);
  auto c = client();
  const json good = {{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}};
  const std::string path = "/v1/models/iris:predict";
  struct Case {
    std::string body;
    int status;
    std::string error;
  };
  const std::vector<Case> cases = {
      {good.dump().substr(0, 20), 400, "malformed JSON body"},
      {"", 400, "malformed JSON body"},
      {"[1, 2]", 400, "must be a JSON object"},
      {"{\"instances\": 3}", 400, "'instances' must be a list"},
      {"{\"instances\": []}", 400, "holds no instance"},
      {"{}", 400, "exactly one of 'instances' and 'inputs'"},
      {"{\"instances\": [{\"sepal_length\": \"x\", \"sepal_width\": 1, \"petal_length\": 1, "
       "\"petal_width\": 1}]}",
       400, "must be a number, not string"},
      {"{\"instances\": [{\"sepal_length\": 1e999, \"sepal_width\": 1, \"petal_length\": 1, "
       "\"petal_width\": 1}]}",
       400, ""},
      {"{\"instances\": [[1, 2, 3, 1e39]]}", 400, "out of float range"},
      {"{\"instances\": [[1, 2, 3, 123456789012345678901234567890]]}", 200, ""},  // 1.2e29 fits
      {std::string(10000, '['), 413, "larger than the limit"},
      {std::string(1000, '[') + std::string(1000, ']'), 400, "nests deeper than"},
      {"{\"inputs\": {\"sepal_length\": [1, 2], \"sepal_width\": [1]}}", 400, "differ in length"},
      {"{\"signature_name\": \"other\", \"instances\": []}", 400, "unknown signature_name"},
  };
  for (const auto& test : cases) {
    auto answer = c.Post(path, test.body, "application/json");
    ASSERT_TRUE(answer) << test.body.substr(0, 80);
    EXPECT_EQ(answer->status, test.status) << test.body.substr(0, 80) << " -> " << answer->body;
    const json body = json::parse(answer->body);
    if (test.status == 200) continue;
    EXPECT_NE(body.value("error", "(none)").find(test.error), std::string::npos) << answer->body;
  }
  auto unknown = c.Post("/v1/models/roses:predict", good.dump(), "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto old_version = c.Post("/v1/models/iris/versions/1:predict", good.dump(), "application/json");
  ASSERT_TRUE(old_version);
  EXPECT_EQ(old_version->status, 404);
  auto no_route = c.Get("/v2/anything");
  ASSERT_TRUE(no_route);
  EXPECT_EQ(no_route->status, 404);
  EXPECT_TRUE(json::parse(no_route->body).contains("error"));

  // A Content-Length that promises more than is sent: the server stops
  // waiting after its read timeout (1 s here), answers 400 or closes, and
  // goes on serving.
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: 500\r\n\r\n{\"instances\"";
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    pollfd wait{fd, POLLIN, 0};
    const auto started = std::chrono::steady_clock::now();
    ASSERT_EQ(::poll(&wait, 1, 10'000), 1) << "the server neither answered nor closed";
    char buffer[512] = {};
    const ssize_t got = ::recv(fd, buffer, sizeof buffer - 1, 0);
    if (got > 0) {
      EXPECT_EQ(std::string(buffer).rfind("HTTP/1.1 4", 0), 0u) << buffer;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    ::close(fd);
  }
  auto after = c.Post(path, good.dump(), "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200) << after->body;
}

TEST_F(ServerTest, BatchingMergesConcurrentRequestsAndAnswersEachItsOwnRows) {
  garden::serving::ServerOptions options;
  options.enable_batching = true;
  options.max_batch_size = 64;
  options.batch_timeout_micros = 300'000;
  start(iris_export_, options);
  garden::serving::Predictor predictor(iris_export_);
  constexpr int kClients = 8;
  std::vector<json> sent(kClients), got(kClients);
  std::vector<int> status(kClients, 0);
  std::atomic<int> waiting{kClients};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    sent[i] = instance(4.5 + 0.4 * i, 3.0, 1.0 + 0.7 * i, 0.1 + 0.3 * i);
    clients.emplace_back([&, i] {
      auto c = client();
      --waiting;
      while (waiting > 0) std::this_thread::yield();
      auto answer = c.Post("/v1/models/iris:predict", json{{"instances", {sent[i]}}}.dump(),
                           "application/json");
      if (!answer) return;
      status[i] = answer->status;
      got[i] = json::parse(answer->body);
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(status[i], 200) << got[i];
    // Alone or merged, the same answer (up to the float rounding of another
    // batch size's kernels).
    const json alone = predictor.predict({sent[i]})[0];
    const json& merged = got[i]["predictions"][0];
    EXPECT_EQ(merged["classes"], alone["classes"]) << i;
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(merged["logits"][c].get<double>(), alone["logits"][c].get<double>(), 1e-5) << i;
  }
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  const std::string key = "garden_serving_batch_size_count ";
  const auto at = metrics->body.find(key);
  ASSERT_NE(at, std::string::npos);
  const int passes = std::stoi(metrics->body.substr(at + key.size()));
  EXPECT_LT(passes, kClients) << "no request was merged:\n" << metrics->body;
  EXPECT_GE(passes, 1);
}

TEST_F(ServerTest, ANewVersionIsServedWithoutARestart) {
  const fs::path base = root_ / "rolling";
  fs::remove_all(base);
  fs::create_directories(base);
  fs::copy(iris_export_, base / "1", fs::copy_options::recursive);
  garden::serving::ServerOptions options;
  options.file_system_poll_wait_seconds = 0.05;
  start(base.string(), options);
  auto c = client();
  auto version = [&] {
    auto status = c.Get("/v1/models/iris");
    return status
               ? json::parse(status->body)["model_version_status"][0]["version"].get<std::string>()
               : std::string("?");
  };
  EXPECT_EQ(version(), "1");
  // A damaged version 2 is refused and 1 goes on serving; a good 3 replaces it.
  fs::create_directories(base / "2");
  write_text(base / "2" / "signature.json", "{");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(version(), "1");
  fs::copy(iris_export_, base / ".staging", fs::copy_options::recursive);
  fs::rename(base / ".staging", base / "3");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (version() != "3" && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(version(), "3");
  auto answer =
      c.Post("/v1/models/iris:predict", json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump(),
             "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
}

TEST_F(ServerTest, ShutdownFinishesTheRequestInFlightAndRefusesNewOnes) {
  garden::serving::ServerOptions options;
  options.enable_batching = true;
  options.batch_timeout_micros = 1'500'000;  // holds the first request in the batcher
  start(iris_export_, options);
  const std::string body = json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump();
  int in_flight_status = 0;
  std::thread first([&] {
    auto answer = client().Post("/v1/models/iris:predict", body, "application/json");
    if (answer) in_flight_status = answer->status;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread stopper([&] { server_->shutdown(10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto late = client().Post("/v1/models/iris:predict", body, "application/json");
  if (late) {  // or no connection at all
    EXPECT_EQ(late->status, 503) << late->body;
  }
  first.join();
  stopper.join();
  runner_.join();
  EXPECT_EQ(in_flight_status, 200);
}

}  // namespace
