// What the translation task's tests share: pairs from the bundled gettext
// sample, one SentencePiece model trained once per suite, a small model
// config over TSV files, and the examples of an evaluation pass by id.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device_util.h"
#include "garden/base/error.h"
#include "garden/cli/builtins.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/core/trainer.h"
#include "garden/data/example.h"
#include "garden/data/sentencepiece.h"
#include "garden/data/tfrecord.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/metrics/bleu.h"
#include "garden/nlp/tasks/translation_task.h"

namespace translation_fixture {

namespace fs = std::filesystem;
using garden::Batch;
using garden::Logs;
using garden::nlp::TranslationConfig;
using garden::nlp::TranslationTask;

struct Pair {
  std::string source, target;
};

// The first `count` pairs of the bundled gettext sample.
inline std::vector<Pair> sample_pairs(std::size_t count) {
  std::ifstream in(std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv");
  std::vector<Pair> pairs;
  std::string line;
  while (pairs.size() < count && std::getline(in, line)) {
    const auto tab = line.find('\t');
    pairs.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  return pairs;
}

inline void write_tsv(const std::string& path, const std::vector<Pair>& pairs) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : pairs) out << p.source << '\t' << p.target << '\n';
}

class TranslationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("garden_translation_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // One SentencePiece model (pad 0, eos 1) shared by the tests that do not
    // test training it.
    const auto pairs = sample_pairs(900);
    {
      std::ofstream text(dir_ / "spm.txt");
      for (const auto& p : pairs) text << p.source << '\n' << p.target << '\n';
    }
    garden::data::SentencePieceTrainOptions options;
    options.input = {(dir_ / "spm.txt").string()};
    options.model_prefix = (dir_ / "spm").string();
    options.vocab_size = 500;
    options.pad_id = 0;
    options.eos_id = 1;
    options.unk_id = 2;
    options.bos_id = -1;
    garden::data::train_sentencepiece(options);
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static std::string spm_path() { return (dir_ / "spm.model").string(); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  // A small model in eval mode, its weights drawn from seed 11.
  static garden::ModelPtr seeded_model() {
    TranslationTask task(small_config(path("unused.tsv"), path("unused.tsv")));
    torch::manual_seed(11);
    auto model = task.build_model();
    model->eval();
    return model;
  }
  // Three sentences of different lengths, padded with 0, each ending in EOS (1).
  static at::Tensor three_sentences() {
    return torch::tensor({{5, 6, 7, 8, 1}, {9, 10, 1, 0, 0}, {11, 1, 0, 0, 0}});
  }

  // A small task config over `train` / `validation` TSV files.
  static std::shared_ptr<TranslationConfig> small_config(const std::string& train,
                                                         const std::string& validation) {
    auto config = std::make_shared<TranslationConfig>();
    config->sentencepiece_model_path = spm_path();
    config->model.embedding_width = 32;
    for (auto* stack : {&config->model.encoder, &config->model.decoder}) {
      stack->num_layers = 1;
      stack->num_attention_heads = 4;
      stack->intermediate_size = 64;
    }
    for (auto* data : {&config->train_data, &config->validation_data}) {
      data->file_type = "tsv";
      data->global_batch_size = 256;
      data->max_seq_length = 64;
      data->seed = 7;
    }
    config->train_data.input_path = train;
    config->train_data.is_training = true;
    config->validation_data.input_path = validation;
    config->validation_data.is_training = false;
    config->validation_data.drop_remainder = false;
    return config;
  }

  // Every example of an evaluation pass, by unique id: (inputs, targets).
  static std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> eval_examples(
      TranslationTask& task, const garden::config::DataConfig& data) {
    auto dataset = task.build_inputs(data, {});
    std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> examples;
    while (auto batch = dataset->next()) {
      const auto& inputs = batch->at("inputs");
      const auto& targets = batch->at("targets");
      const auto& ids = batch->at("unique_id");
      for (int64_t b = 0; b < inputs.size(0); ++b) {
        auto strip = [](const at::Tensor& row) {
          std::vector<int64_t> out;
          for (int64_t i = 0; i < row.size(0); ++i)
            if (row[i].item<int64_t>() != 0) out.push_back(row[i].item<int64_t>());
          return out;
        };
        const int64_t id = ids[b][0].item<int64_t>();
        EXPECT_EQ(examples.count(id), 0u) << "unique id " << id << " twice";
        examples[id] = {strip(inputs[b]), strip(targets[b])};
      }
    }
    return examples;
  }

  inline static fs::path dir_;
};

}  // namespace translation_fixture
