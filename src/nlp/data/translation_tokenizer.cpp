#include "garden/nlp/data/translation_tokenizer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <thread>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/nlp/data/sentence_pairs.h"
#include "garden/platform/stop_signals.h"

namespace garden::nlp {

namespace fs = std::filesystem;

void train_translation_sentencepiece(const TranslationDataConfig& train, int64_t vocab_size,
                                     const std::string& model_path) {
  if (train.input_path.empty())
    throw Error(
        "task.sentencepiece_model_path is empty, and task.train_data.input_path is too: there "
        "is no text to train a SentencePiece model on");
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = fs::path(model_path).parent_path();
  // A failure leaves model_dir as it was: removed again if made here.
  const bool made_dir = fs::create_directories(dir);
  // The text goes to a scratch file of this process; train_sentencepiece
  // writes the model under a temporary name and renames it on success, so a
  // killed run never leaves a half-written model where the next would load it.
  const std::string text_path = temporary_path_for((dir / "sentencepiece.txt").string());
  struct Cleanup {
    std::string text;
    fs::path dir;
    bool made_dir;
    bool keep_dir = false;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove(text, ignored);
      if (made_dir && !keep_dir) fs::remove(dir, ignored);  // only when empty
    }
  } cleanup{text_path, dir, made_dir};

  int64_t sentences = 0;
  {
    std::ofstream text(text_path, std::ios::binary | std::ios::trunc);
    if (!text) throw Error("cannot write '" + text_path + "'");
    for_each_pair(train, [&](int64_t, const std::string& source, const std::string& target) {
      for (const std::string* line : {&source, &target}) {
        if (line->empty()) continue;
        text << *line << '\n';
        ++sentences;
      }
    });
    if (!text.flush()) throw Error("cannot write '" + text_path + "'");
  }
  log_info() << "training a joint SentencePiece model (vocab_size " << vocab_size << ") on "
             << sentences << " sentences of '" << train.input_path << "'";
  data::SentencePieceTrainOptions options;
  options.input = {text_path};
  options.recorded_input = {train.input_path};
  options.model_prefix = (dir / fs::path(model_path).stem()).string();
  options.vocab_size = vocab_size;
  options.model_type = "unigram";
  options.character_coverage = 1.0;
  // Model Garden's ids: 0 pads (and starts decoding), 1 ends a sentence.
  options.pad_id = 0;
  options.eos_id = 1;
  options.unk_id = 2;
  options.bos_id = -1;
  // SentencePiece holds its input in memory; a sample is as good for a vocabulary.
  if (sentences > 4'000'000) options.input_sentence_size = 4'000'000;
  options.num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.extra_flags = {"max_sentence_length=16384"};
  // SentencePiece cannot stop part-way: a stop signal leaves it behind (the
  // work owns copies of what it reads, and writes only under a temporary
  // name), and this run unwinds, removing what it made.
  run_until_stopped(
      [options, input = train.input_path] {
        try {
          data::train_sentencepiece(options);
        } catch (const std::exception& e) {
          throw Error("task.sentencepiece_vocab_size " + std::to_string(options.vocab_size) +
                      " on '" + input + "': " + e.what());
        }
      },
      "training the SentencePiece model",
      "stopped before the first step, nothing to save; run the same command to start again");
  cleanup.keep_dir = true;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info() << "SentencePiece model written to " << model_path << " in " << std::fixed
             << std::setprecision(1) << seconds << " s";
}

data::SentencePieceTokenizer load_translation_sentencepiece(const std::string& path) {
  data::SentencePieceTokenizer tokenizer = data::SentencePieceTokenizer::load(path);
  if (tokenizer.pad_id() != 0 && tokenizer.piece_to_id("<pad>") != 0)
    throw Error("SentencePiece model '" + path + "' has pad_id " +
                std::to_string(tokenizer.pad_id()) +
                "; the translation task pads with id 0 (train it with --pad_id=0)");
  if (tokenizer.eos_id() < 1)
    throw Error("SentencePiece model '" + path + "' has no EOS piece (train it with --eos_id=1)");
  return tokenizer;
}

}  // namespace garden::nlp
