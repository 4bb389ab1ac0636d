// What the serving tests share: three runs trained and exported once for the
// whole binary (iris, iris with a moving average, a tiny translation model),
// their model_dirs removed so every load needs the export alone, and what
// the run's own task gives for the same inputs without the serving layer.
#pragma once

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

namespace serving_fixture {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline const std::vector<std::string> kIrisColumns = {"sepal_length", "sepal_width", "petal_length",
                                                      "petal_width"};

inline void train(const std::string& experiment, const std::string& overrides,
                  const std::string& model_dir) {
  auto params = garden::config::get_experiment_config(experiment);
  garden::config::apply_override(*params, overrides);
  garden::finalize_config(*params);
  garden::RunOptions options;
  options.mode = "train";
  options.model_dir = model_dir;
  garden::run_experiment(params, options);
}

inline std::string write_text(const fs::path& path, const std::string& text) {
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

  // A small ELECTRA export, made on first use: a model_dir as garden train
  // leaves it (params.yaml and a checkpoint of a freshly initialized model:
  // serving needs no trained weights), exported.
  static std::string electra_export() {
    if (!electra_export_.empty()) return electra_export_;
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
    electra_export_ = export_run("electra/tiny", "electra", "electra_export");
    return electra_export_;
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

  inline static fs::path root_;
  inline static std::string iris_checkpoint_, translation_checkpoint_;
  inline static std::string iris_export_, ema_export_, translation_export_;
  inline static std::vector<std::string> sources_;
  inline static std::string electra_export_;
};

}  // namespace serving_fixture
