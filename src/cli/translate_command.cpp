#include "garden/cli/translate_command.h"

#include <torch/torch.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/cli/files.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/data/sentencepiece.h"
#include "garden/kernels/int8.h"
#include "garden/nlp/tasks/translation_task.h"
#include "garden/platform/blas.h"
#include "garden/platform/cpu_share.h"
#include "garden/platform/threads.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"

namespace garden {

namespace {

namespace fs = std::filesystem;

struct TranslateFlags {
  std::string model_dir;
  std::string checkpoint;
  std::optional<int64_t> beam_size;
  std::optional<int64_t> no_repeat_ngram_size;
  int64_t batch_size = 32;
  std::string input;
  std::string output;
  bool int8 = false;
  int64_t parallel_batches = 0;  // 0: the cores this process may use (1 on a GPU)
};

struct Line {
  int64_t number = 0;  // 1-based
  std::vector<int64_t> ids;
};

void run_translate(const TranslateFlags& flags) {
  if (flags.batch_size < 1) throw Error("--batch_size must be >= 1");
  if (flags.beam_size && *flags.beam_size < 1) throw Error("--beam_size must be >= 1");
  if (flags.no_repeat_ngram_size && *flags.no_repeat_ngram_size < 0)
    throw Error("--no_repeat_ngram_size must be >= 0");
  if (flags.parallel_batches < 0) throw Error("--parallel_batches must be >= 0 (0: one per core)");
  // Files first, before the model loads: a bad path fails at once.
  if (!flags.input.empty()) {
    check_input_file(flags.input, "--input");
    refuse_same_file(flags.input, "--input", flags.output, "--output");
  }
  std::error_code ec;
  if (fs::exists(flags.model_dir, ec) && !fs::is_directory(flags.model_dir, ec))
    throw Error("--model_dir '" + flags.model_dir + "' is a file, not a directory");
  const std::string params_path = (fs::path(flags.model_dir) / "params.yaml").string();
  if (!fs::exists(params_path, ec))
    throw Error("'" + flags.model_dir + "' has no params.yaml: not a model_dir of garden train");
  check_input_file(params_path, "--model_dir's params.yaml");
  auto params = std::make_shared<config::ExperimentConfig>();
  auto task_config = std::make_shared<nlp::TranslationConfig>();
  params->task = task_config;
  try {
    config::apply_file(*params, params_path);
  } catch (const std::exception& e) {
    throw Error("'" + params_path + "' is not a translation experiment's: " + e.what());
  }
  if (flags.beam_size) task_config->model.beam_size = *flags.beam_size;
  if (flags.no_repeat_ngram_size)
    task_config->model.no_repeat_ngram_size = *flags.no_repeat_ngram_size;
  config::validate_config(*params);
  apply_runtime(params->runtime);
  const std::string checkpoint =
      serving::resolve_checkpoint(flags.model_dir, flags.checkpoint, *params);

  // The model, its task and tokenizer, as garden serve would load them.
  serving::Predictor predictor(params, flags.model_dir, checkpoint, params->runtime.device);
  if (flags.int8) predictor.use_int8();
  const bool on_cpu = predictor.device().is_cpu();
  if (flags.parallel_batches > 1 && !on_cpu)
    throw Error("--parallel_batches=" + std::to_string(flags.parallel_batches) +
                " decodes batches on CPU threads; runtime.device is " + predictor.device().str() +
                " (use 1)");
  const int64_t parallel =
      flags.parallel_batches > 0 ? flags.parallel_batches : (on_cpu ? available_cores() : 1);
  if (parallel > 1) {
    // Each batch on its own core: LibTorch's and OpenBLAS's kernels run on
    // the thread that calls them.
    at::set_num_threads(1);
    set_blas_threads(1);
  }
  auto& task = dynamic_cast<nlp::TranslationTask&>(predictor.task());
  // The output is never a file this run reads, and replaces an existing
  // file only once every line is translated.
  std::unique_ptr<AtomicFile> output;
  if (!flags.output.empty()) {
    refuse_same_file(params_path, "--model_dir's params.yaml", flags.output, "--output");
    refuse_same_file(checkpoint, "the checkpoint", flags.output, "--output");
    refuse_same_file(task.tokenizer_path(), "the SentencePiece model", flags.output, "--output");
    output = cli::create_output(flags.output, "--output");
  }
  const auto& tokenizer = task.tokenizer();
  const nlp::DecodeOptions decode = task.decode_options();
  const int64_t max_length = task_config->validation_data.max_seq_length;

  cli::LineStreams streams(flags.input, std::move(output), flags.output, "sentences");
  std::istream& in = streams.in();
  std::ostream& out = streams.out();

  const auto start = std::chrono::steady_clock::now();
  int64_t lines = 0, translated = 0;
  // A window of lines is sorted by length so batches carry little padding,
  // then written back in input order.
  constexpr int64_t kMaxWindow = std::numeric_limits<int64_t>::max();
  const int64_t window =
      flags.batch_size > kMaxWindow / 16 ? kMaxWindow : flags.batch_size * 16;  // no overflow
  std::vector<std::string> texts;
  std::string text;
  auto flush_window = [&] {
    std::vector<std::string> results(texts.size());
    std::vector<Line> pending;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].empty() && texts[i].back() == '\r') texts[i].pop_back();
      if (texts[i].empty()) continue;
      bool truncated = false;
      Line line{lines - static_cast<int64_t>(texts.size()) + static_cast<int64_t>(i) + 1,
                task.encode_source(texts[i], max_length, &truncated)};
      if (truncated)
        std::cerr << "garden: warning: line " << line.number << " is longer than the model's "
                  << max_length << " tokens (validation_data.max_seq_length); translating its "
                  << "first " << max_length - 1 << "\n";
      pending.push_back(std::move(line));
    }
    std::vector<std::size_t> order(pending.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return pending[a].ids.size() < pending[b].ids.size();
    });
    const int64_t first_number = lines - static_cast<int64_t>(texts.size()) + 1;
    // The window's batches, decoded `parallel` at a time.
    std::vector<Batch> batches;
    std::vector<std::size_t> starts;
    for (std::size_t begin = 0; begin < order.size();
         begin += static_cast<std::size_t>(flags.batch_size)) {
      const std::size_t end =
          std::min(order.size(), begin + static_cast<std::size_t>(flags.batch_size));
      std::size_t longest = 0;
      for (std::size_t k = begin; k < end; ++k)
        longest = std::max(longest, pending[order[k]].ids.size());
      at::Tensor source = torch::zeros(
          {static_cast<int64_t>(end - begin), static_cast<int64_t>(longest)}, torch::kLong);
      for (std::size_t k = begin; k < end; ++k) {
        const auto& ids = pending[order[k]].ids;
        std::copy(ids.begin(), ids.end(),
                  source.data_ptr<int64_t>() + static_cast<int64_t>(k - begin) * source.size(1));
      }
      batches.push_back({{"inputs", source}});
      starts.push_back(begin);
    }
    const std::vector<Batch> decoded =
        predictor.predict_batches(batches, static_cast<int>(std::min<int64_t>(parallel, 1 << 16)));
    for (std::size_t b = 0; b < decoded.size(); ++b) {
      // The decoded ids [B, L], 0-padded, without EOS.
      const at::Tensor outputs = decoded[b].at("outputs").cpu().contiguous();
      const std::size_t begin = starts[b];
      for (std::size_t k = begin; k < begin + static_cast<std::size_t>(outputs.size(0)); ++k) {
        const Line& line = pending[order[k]];
        const int64_t* row =
            outputs.data_ptr<int64_t>() + static_cast<int64_t>(k - begin) * outputs.size(1);
        std::vector<int64_t> ids(row, row + outputs.size(1));
        while (!ids.empty() && ids.back() == 0) ids.pop_back();
        results[static_cast<std::size_t>(line.number - first_number)] = tokenizer.decode(ids);
      }
      translated += outputs.size(0);
    }
    for (const auto& result : results) out << result << '\n';
    out.flush();
    texts.clear();
  };
  while (std::getline(in, text)) {
    ++lines;
    // Not text a tokenizer can read (Python would fail to decode it): say where.
    if (const std::string bad = unicode::utf8_error(text); !bad.empty())
      throw Error(
          (flags.input.empty() ? std::string("standard input") : "--input '" + flags.input + "'") +
          ", line " + std::to_string(lines) + ": " + bad);
    texts.push_back(text);
    if (static_cast<int64_t>(texts.size()) >= window) flush_window();
  }
  if (!texts.empty()) flush_window();
  streams.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "garden: translated " << lines << " lines (" << translated << " non-empty) in "
            << std::fixed << std::setprecision(2) << seconds << " s, " << std::setprecision(1)
            << (seconds > 0 ? static_cast<double>(translated) / seconds : 0.0)
            << " sentences/s, beam " << decode.beam_size
            << (flags.int8 ? ", int8 (" + kernels::int8_kernel() + ")" : std::string()) << ", "
            << parallel << (parallel == 1 ? " batch" : " batches") << " at once"
            << ", checkpoint " << checkpoint
            << (predictor.moving_averages() ? " (moving averages)" : "") << "\n";
}

}  // namespace

CLI::App* add_translate_command(CLI::App& app) {
  auto flags = std::make_shared<TranslateFlags>();
  auto* translate =
      app.add_subcommand("translate", "Translate lines of text with a trained translation model");
  translate->add_option("--model_dir", flags->model_dir, "model_dir of a translation run")
      ->required();
  translate->add_option("--checkpoint", flags->checkpoint,
                        "Checkpoint file or directory, or `best` (default: the latest)");
  translate->add_option("--beam_size", flags->beam_size,
                        "Beam width (default: the model's beam_size); 1 is greedy");
  translate->add_option("--no_repeat_ngram_size", flags->no_repeat_ngram_size,
                        "No output repeats an n-gram of this many tokens (default: the model's "
                        "no_repeat_ngram_size); 0 is off");
  translate->add_option("--batch_size", flags->batch_size, "Sentences decoded at once")
      ->capture_default_str();
  translate->add_option("--input", flags->input,
                        "Input file, one sentence a line (default: stdin)");
  translate->add_option("--output", flags->output, "Output file (default: stdout)");
  translate->add_flag("--int8", flags->int8,
                      "Decode with int8 weights and products (dynamic quantization; CPU)");
  translate
      ->add_option("--parallel_batches", flags->parallel_batches,
                   "Batches decoded at once on the CPU, each on its own thread with one "
                   "LibTorch and BLAS thread (0: one per core; 1: one batch, with the "
                   "run's thread settings)")
      ->capture_default_str();
  translate->callback([flags] { run_translate(*flags); });
  return translate;
}

}  // namespace garden
