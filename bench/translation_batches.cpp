// Real translation training batches: how much of each is padding, and how
// fast the task's input pipeline (SentencePiece, length buckets, shuffle,
// prefetch) makes them. Prints one JSON line.
//
//   translation_batches --experiment wmt_transformer/tiny --train PATH.tsv
//       [--sentencepiece MODEL] [--batches 2000] [--static] [--params_override S]
//
// Without --sentencepiece a model is trained into a temporary model_dir first.
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "garden/cli/builtins.h"
#include "garden/cli/cli.h"
#include "garden/data/sentencepiece.h"
#include "garden/nlp/tasks/translation_task.h"

namespace {

int usage() {
  std::cerr << "usage: translation_batches --experiment NAME --train PATH [--sentencepiece MODEL] "
               "[--batches N] [--static] [--params_override S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string experiment = "wmt_transformer/tiny", train, spm, extra;
  int64_t batches = 2000;
  bool static_batch = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(usage());
      return argv[++i];
    };
    if (arg == "--experiment")
      experiment = value();
    else if (arg == "--train")
      train = value();
    else if (arg == "--sentencepiece")
      spm = value();
    else if (arg == "--batches")
      batches = std::stoll(value());
    else if (arg == "--static")
      static_batch = true;
    else if (arg == "--params_override")
      extra = value();
    else
      return usage();
  }
  if (train.empty()) return usage();
  try {
    garden::register_builtins();
    std::string override = "task.train_data.input_path=" + train;
    if (!spm.empty()) override += ",task.sentencepiece_model_path=" + spm;
    if (static_batch) override += ",task.train_data.static_batch=true";
    if (!extra.empty()) override += "," + extra;
    auto params = garden::resolve_experiment(experiment, {}, override);
    auto config = std::dynamic_pointer_cast<garden::nlp::TranslationConfig>(params->task);
    if (!config) throw std::runtime_error(experiment + " is not a translation experiment");
    config->train_data.seed = 1;
    // The task's scratch (a SentencePiece model it trains): this process's
    // own directory, removed at the end.
    const auto model_dir = std::filesystem::temp_directory_path() /
                           ("garden_translation_batches_" + std::to_string(::getpid()));
    struct Remove {
      std::filesystem::path path;
      ~Remove() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
      }
    } remove{model_dir};
    garden::nlp::TranslationTask task(config, model_dir.string());
    task.tokenizer();  // trains one first when needed, outside the timing
    auto dataset = task.build_inputs(config->train_data, {});
    int64_t real = 0, padded = 0, sentences = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t b = 0; b < batches; ++b) {
      const garden::Batch batch = *dataset->next();
      for (const char* key : {"inputs", "targets"}) {
        const at::Tensor& ids = batch.at(key);
        real += (ids != 0).sum().item<int64_t>();
        padded += ids.numel();
      }
      sentences += batch.at("inputs").size(0);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    nlohmann::json line = {{"bench", "translation_batches"},
                           {"experiment", experiment},
                           {"static_batch", config->train_data.static_batch},
                           {"token_budget", config->train_data.global_batch_size},
                           {"max_seq_length", config->train_data.max_seq_length},
                           {"bucket_min_boundary", config->train_data.bucket_min_boundary},
                           {"bucket_boundary_scale", config->train_data.bucket_boundary_scale},
                           {"batches", batches},
                           {"sentences_per_batch", double(sentences) / double(batches)},
                           {"tokens_per_batch", double(real) / double(batches)},
                           {"non_pad_share", double(real) / double(padded)},
                           {"batches_per_s", double(batches) / seconds}};
    std::cout << line.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "translation_batches: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
