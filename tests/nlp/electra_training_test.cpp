// ELECTRA end to end on the bundled man-page slice: a SentencePiece model with
// BERT's special pieces, create_pretraining_data's records, a small model
// that learns, and its discriminator restored alone by another model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "garden/cli/builtins.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/data/sentencepiece.h"
#include "garden/nlp/modeling/bert_encoder.h"
#include "garden/nlp/tasks/electra_task.h"
#include "garden/nlp/data/pretraining_data.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using garden::Logs;
using garden::nlp::ElectraPretrainConfig;

class ElectraTrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("electra_training_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string train = std::string(GARDEN_SOURCE_DIR) + "/data/pretraining/man_en_train.txt";
    const std::string valid = std::string(GARDEN_SOURCE_DIR) + "/data/pretraining/man_en_valid.txt";
    garden::data::SentencePieceTrainOptions spm;
    spm.input = {train};
    spm.model_prefix = (dir_ / "sp").string();
    spm.vocab_size = 600;
    spm.pad_id = 0;
    spm.unk_id = 1;
    spm.bos_id = -1;
    spm.eos_id = -1;
    spm.user_defined_symbols = {"[CLS]", "[SEP]", "[MASK]"};
    garden::data::train_sentencepiece(spm);
    for (const auto& [input, output] :
         {std::pair{train, "train.tfrecord"}, {valid, "valid.tfrecord"}}) {
      garden::nlp::PretrainingDataOptions data;
      data.input_files = {input};
      data.output_file = (dir_ / output).string();
      data.sp_model_file = (dir_ / "sp.model").string();
      data.max_seq_length = 64;
      data.max_predictions_per_seq = 10;
      data.dupe_factor = 2;
      data.num_threads = 1;
      garden::nlp::create_pretraining_data(data);
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::shared_ptr<garden::config::ExperimentConfig> small_experiment(
      int64_t steps, const std::string& extra_override = "") {
    garden::register_builtins();
    auto experiment = garden::config::get_experiment_config("electra/tiny");
    garden::config::apply_override(
        *experiment,
        "task.model.sequence_length=64,task.model.num_masked_tokens=10,"
        "task.model.discriminator_encoder.bert.vocab_size=600,"
        "task.model.discriminator_encoder.bert.hidden_size=32,"
        "task.model.discriminator_encoder.bert.num_layers=2,"
        "task.model.discriminator_encoder.bert.intermediate_size=64,"
        "task.model.discriminator_encoder.bert.embedding_size=32,"
        "task.model.generator_encoder.bert.vocab_size=600,"
        "task.model.generator_encoder.bert.hidden_size=16,"
        "task.model.generator_encoder.bert.num_layers=2,"
        "task.model.generator_encoder.bert.intermediate_size=32,"
        "task.model.generator_encoder.bert.embedding_size=32,"
        "task.train_data.seq_length=64,task.train_data.max_predictions_per_seq=10,"
        "task.validation_data.seq_length=64,task.validation_data.max_predictions_per_seq=10,"
        "task.train_data.global_batch_size=16,task.validation_data.global_batch_size=16,"
        "trainer.optimizer_config.learning_rate.constant.learning_rate=0.003,"
        "trainer.optimizer_config.warmup.linear.warmup_steps=10,"
        "trainer.validation_steps=-1,runtime.seed=1");
    if (!extra_override.empty()) garden::config::apply_override(*experiment, extra_override);
    auto& task = static_cast<ElectraPretrainConfig&>(*experiment->task);
    task.train_data.input_path = (dir_ / "train.tfrecord").string();
    task.validation_data.input_path = (dir_ / "valid.tfrecord").string();
    auto& trainer = experiment->trainer;
    trainer.train_steps = steps;
    trainer.steps_per_loop = steps / 2;
    trainer.summary_interval = steps / 2;
    trainer.checkpoint_interval = steps;
    trainer.validation_interval = steps;
    garden::config::validate_config(*experiment);
    garden::finalize_config(*experiment);
    return experiment;
  }

  static fs::path dir_;
};
fs::path ElectraTrainingTest::dir_;

TEST_F(ElectraTrainingTest, ASmallModelLearnsFromCreatePretrainingDataRecords) {
  auto experiment = small_experiment(600);
  garden::RunOptions options;
  options.model_dir = (dir_ / "run").string();
  options.mode = "train_and_eval";
  const Logs logs = garden::run_experiment(experiment, options);
  // Evaluated on held-out documents after 600 steps: the generator beats
  // the uniform guess (1/600) and the most frequent piece by far, and the
  // discriminator has at least learned how rare replacements are (it starts
  // near 0.5). Every metric is in the logs under its name.
  for (const char* name :
       {"masked_lm_accuracy", "lm_example_loss", "discriminator_accuracy", "discriminator_loss",
        "total_loss", "rtd_precision", "rtd_recall", "validation_loss"})
    ASSERT_TRUE(logs.count(name)) << name;
  EXPECT_GT(garden::to_double(logs.at("masked_lm_accuracy")), 0.07);
  EXPECT_LT(garden::to_double(logs.at("lm_example_loss")), std::log(600.0) - 1.0);
  EXPECT_GT(garden::to_double(logs.at("discriminator_accuracy")), 0.8);
  EXPECT_NEAR(garden::to_double(logs.at("total_loss")),
              garden::to_double(logs.at("validation_loss")), 1e-6);
}

// runtime.mixed_precision_dtype=bfloat16 on the CPU: the generator's
// embedding projection returns bfloat16 under autocast, and its layer norms
// (float32 parameters) once refused that. It trains: the masked-LM loss
// falls below the uniform guess's log(600) = 6.40.
TEST_F(ElectraTrainingTest, TrainsUnderBfloat16AutocastOnTheCpu) {
  auto experiment = small_experiment(100, "runtime.mixed_precision_dtype=bfloat16");
  garden::RunOptions options;
  options.model_dir = (dir_ / "bfloat16").string();
  options.mode = "train_and_eval";
  const Logs logs = garden::run_experiment(experiment, options);
  const double lm_loss = garden::to_double(logs.at("lm_example_loss"));
  std::cerr << "bfloat16: lm_example_loss " << lm_loss << ", masked_lm_accuracy "
            << garden::to_double(logs.at("masked_lm_accuracy")) << "\n";
  EXPECT_LT(lm_loss, std::log(600.0) - 0.5);
  EXPECT_TRUE(std::isfinite(garden::to_double(logs.at("validation_loss"))));
}

// The model tensors of one checkpoint equal another's, name by name.
void expect_same_model(const std::map<std::string, at::Tensor>& expected,
                       const std::map<std::string, at::Tensor>& actual) {
  int64_t compared = 0;
  for (const auto& [name, tensor] : expected) {
    if (name.rfind("model/", 0) != 0) continue;
    ASSERT_TRUE(actual.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, actual.at(name))) << name;
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

// Evaluations between the steps draw from the random generator (the
// generator's samples replace the masked pieces): the training after them
// goes on with the stream as the last step left it, so a run with
// evaluations trains bitwise what the same run without them trains.
TEST_F(ElectraTrainingTest, EvaluationsDoNotChangeWhatARunTrains) {
  const auto weights_after = [](const std::string& name, const std::string& mode) {
    auto experiment = small_experiment(20);
    experiment->trainer.validation_interval = 5;
    experiment->trainer.validation_steps = 2;
    garden::RunOptions options;
    options.model_dir = (dir_ / name).string();
    options.mode = mode;
    garden::run_experiment(experiment, options);
    return garden::read_checkpoint_file((dir_ / name / "ckpt-20").string()).tensors;
  };
  expect_same_model(weights_after("train_alone", "train"),
                    weights_after("train_evaluated", "train_and_eval"));
}

// Writing a checkpoint records the input position and the random state
// without moving either: a run that saves every 5 steps (and keeps them
// all) trains bitwise what one saving only at its end trains.
TEST_F(ElectraTrainingTest, CheckpointsDoNotChangeWhatARunTrains) {
  const auto weights_after = [](const std::string& name, int64_t interval, int64_t keep) {
    auto experiment = small_experiment(20);
    experiment->trainer.steps_per_loop = interval;
    experiment->trainer.checkpoint_interval = interval;
    experiment->trainer.max_to_keep = keep;
    garden::RunOptions options;
    options.model_dir = (dir_ / name).string();
    options.mode = "train";
    garden::run_experiment(experiment, options);
    return garden::read_checkpoint_file((dir_ / name / "ckpt-20").string()).tensors;
  };
  const auto often = weights_after("saved_often", 5, 10);
  EXPECT_TRUE(fs::exists(dir_ / "saved_often" / "ckpt-5"));
  expect_same_model(weights_after("saved_at_end", 20, 1), often);
}

TEST_F(ElectraTrainingTest, RecordsOfALargerVocabularyAreRefusedNamingTheFile) {
  // The records hold pieces of a 600-piece model; encoders of 400 cannot
  // embed them: one error naming the file and the feature, not an index
  // error from inside the model.
  auto experiment = small_experiment(2,
                                     "task.model.discriminator_encoder.bert.vocab_size=400,"
                                     "task.model.generator_encoder.bert.vocab_size=400");
  garden::RunOptions options;
  options.model_dir = (dir_ / "small_vocab").string();
  options.mode = "train";
  const std::string error =
      garden_test::error_of([&] { garden::run_experiment(experiment, options); });
  EXPECT_NE(error.find("train.tfrecord'"), std::string::npos) << error;
  EXPECT_NE(error.find("outside the model's vocabulary (vocab_size) of 400"), std::string::npos)
      << error;
}

TEST_F(ElectraTrainingTest, TheDiscriminatorRestoresAloneIntoAnotherModel) {
  auto experiment = small_experiment(20);
  garden::RunOptions options;
  options.model_dir = (dir_ / "short").string();
  options.mode = "train";
  garden::run_experiment(experiment, options);
  const auto checkpoint = garden::read_checkpoint_file((dir_ / "short" / "ckpt-20").string());
  // Model Garden's checkpoint_items: the checkpoint names the discriminator
  // as the "encoder" item, which init_checkpoint_modules: encoder restores
  // without a rename (Task::initialize, tests/core/step_test.cpp).
  EXPECT_EQ(checkpoint.meta.at("checkpoint_items"), (nlohmann::json{{"encoder", "discriminator"}}));

  // A fine-tuning model that holds the discriminator's encoder as "encoder".
  struct Classifier : torch::nn::Module {
    explicit Classifier(const garden::nlp::BertEncoderOptions& o)
        : encoder(register_module("encoder", garden::nlp::BertEncoder(o))) {}
    garden::nlp::BertEncoder encoder;
  };
  const auto& task_config = static_cast<const ElectraPretrainConfig&>(*experiment->task);
  Classifier classifier(task_config.model.discriminator_encoder.bert.options());
  garden::InitCheckpointMapping mapping;
  mapping.modules = {"encoder"};
  mapping.rename = {{"discriminator.", "encoder."}};
  // As Task::initialize does: rename, then keep the selected module.
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : garden::map_init_checkpoint(checkpoint.tensors, mapping))
    if (name.rfind("encoder.", 0) == 0) tensors.emplace(name, tensor);
  const auto report = garden::load_model_state(classifier, tensors, "", /*strict=*/true);
  EXPECT_TRUE(report.missing.empty());
  int64_t compared = 0;
  for (const auto& item : classifier.named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& tensor = item.value();
    const std::string source = "model/discriminator." + name.substr(std::string("encoder.").size());
    ASSERT_TRUE(checkpoint.tensors.count(source)) << source;
    EXPECT_TRUE(torch::equal(tensor, checkpoint.tensors.at(source))) << name;
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

}  // namespace
