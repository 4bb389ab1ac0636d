#include "garden/nlp/data/pretraining_data.h"

#include <glob.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/core/progress.h"
#include "garden/data/sentencepiece.h"
#include "garden/data/tfrecord.h"
#include "garden/data/wordpiece.h"
#include "garden/nlp/data/pretraining_instances.h"

namespace garden::nlp {

namespace {

// Streams of PretrainingRng::derive: each use of randomness has its own, so
// changing one (say the number of passes) leaves the others as they were.
constexpr uint64_t kDocumentOrderStream = 1;
constexpr uint64_t kInstanceStream = 2;
constexpr uint64_t kRecordOrderStream = 3;

void validate(const PretrainingDataOptions& o) {
  auto fail = [](const std::string& what) { throw Error(what); };
  if (o.input_files.empty()) fail("--input_file: name at least one file");
  if (o.output_file.empty()) fail("--output_file: name at least one file");
  if (o.vocab_file.empty() == o.sp_model_file.empty())
    fail(o.vocab_file.empty() ? "give --vocab_file (WordPiece) or --sp_model_file (SentencePiece)"
                              : "give only one of --vocab_file and --sp_model_file, not both");
  // [CLS] A [SEP] B [SEP] with A and B of at least one token each.
  if (o.max_seq_length < 5)
    fail("--max_seq_length must be >= 5, got " + std::to_string(o.max_seq_length));
  if (o.max_predictions_per_seq < 1)
    fail("--max_predictions_per_seq must be >= 1, got " +
         std::to_string(o.max_predictions_per_seq));
  if (o.dupe_factor < 1) fail("--dupe_factor must be >= 1, got " + std::to_string(o.dupe_factor));
  if (!(o.masked_lm_prob >= 0.0 && o.masked_lm_prob <= 1.0))
    fail("--masked_lm_prob must be in [0, 1], got " + std::to_string(o.masked_lm_prob));
  if (!(o.short_seq_prob >= 0.0 && o.short_seq_prob <= 1.0))
    fail("--short_seq_prob must be in [0, 1], got " + std::to_string(o.short_seq_prob));
  if (o.num_threads < 0)
    fail("--num_threads must be >= 0 (0: all cores), got " + std::to_string(o.num_threads));
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (true) {
    const auto comma = text.find(',', begin);
    parts.push_back(text.substr(begin, comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return parts;
}

// Each entry is a file or a glob pattern (as BERT's tf.io.gfile.glob), in
// sorted order within a pattern.
std::vector<std::string> expand_inputs(const std::vector<std::string>& entries) {
  std::vector<std::string> files;
  for (const auto& entry : entries) {
    if (entry.find_first_of("*?[") == std::string::npos) {
      files.push_back(entry);
      continue;
    }
    glob_t matches{};
    const int status = ::glob(entry.c_str(), 0, nullptr, &matches);
    if (status == 0)
      for (std::size_t i = 0; i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    if (status == GLOB_NOMATCH) throw Error("--input_file pattern '" + entry + "' matches no file");
    if (status != 0) throw Error("--input_file pattern '" + entry + "' cannot be read");
  }
  return files;
}

// Runs work(i) for i in [0, n) on `threads` threads, taking indices in
// blocks; the caller's thread shows progress meanwhile. The first exception
// stops the others and is rethrown.
void parallel_for(int64_t n, int64_t threads, int64_t block,
                  const std::function<void(int64_t)>& work,
                  const std::function<void(int64_t)>& progress) {
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    while (!failed.load()) {
      const int64_t begin = next.fetch_add(block);
      if (begin >= n) return;
      const int64_t end = std::min(n, begin + block);
      try {
        for (int64_t i = begin; i < end; ++i) work(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
      done.fetch_add(end - begin);
    }
  };
  std::vector<std::thread> pool;
  const int64_t count = std::max<int64_t>(1, std::min(threads, (n + block - 1) / block));
  for (int64_t t = 0; t < count; ++t) pool.emplace_back(worker);
  while (done.load() < n && !failed.load()) {
    progress(done.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
  progress(n);
}

// Documents (or lines) done, rate and ETA: a line redrawn in place on a
// terminal; otherwise a log line every ten seconds, so a log file gets a
// few lines rather than a stream of carriage returns.
class StageProgress {
 public:
  StageProgress(std::string stage, std::string unit, int64_t total)
      : stage_(std::move(stage)),
        unit_(std::move(unit)),
        total_(total),
        interactive_(stderr_is_terminal()),
        start_(std::chrono::steady_clock::now()),
        last_(start_) {}

  void update(int64_t done) {
    const auto now = std::chrono::steady_clock::now();
    const bool finished = done >= total_;
    const auto interval = interactive_ ? std::chrono::milliseconds(200) : std::chrono::seconds(10);
    if (!finished && now - last_ < interval) return;
    if (finished && !interactive_ && !logged_) return;  // a short stage stays silent in logs
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : -1.0;
    char line[256];
    std::snprintf(
        line, sizeof line, "create_pretraining_data: %s %lld/%lld %s (%.0f%%), %.0f %s/s, %s %s",
        stage_.c_str(), static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
        total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0, rate,
        unit_.c_str(), finished ? "took" : "ETA",
        Progress::format_duration(finished ? seconds : eta).c_str());
    if (interactive_) {
      std::cerr << "\r" << line << "\033[K" << (finished ? "\n" : "") << std::flush;
    } else {
      log_info() << line;
      logged_ = true;
    }
  }

 private:
  std::string stage_, unit_;
  int64_t total_;
  bool interactive_;
  bool logged_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

// The tokenizer and what the algorithm needs from its vocabulary.
struct Vocabulary {
  std::unique_ptr<data::Tokenizer> tokenizer;
  InstanceVocabulary ids;
};

Vocabulary load_vocabulary(const PretrainingDataOptions& options) {
  Vocabulary vocabulary;
  const bool wordpiece = !options.vocab_file.empty();
  const std::string& path = wordpiece ? options.vocab_file : options.sp_model_file;
  const std::string flag = wordpiece ? "--vocab_file" : "--sp_model_file";
  check_input_file(path, flag);
  if (wordpiece)
    vocabulary.tokenizer = std::make_unique<data::WordPieceTokenizer>(
        data::WordPieceTokenizer::from_vocab_file(path, options.do_lower_case));
  else
    vocabulary.tokenizer =
        std::make_unique<data::SentencePieceTokenizer>(data::SentencePieceTokenizer::load(path));
  const auto& tokenizer = *vocabulary.tokenizer;
  auto special = [&](const char* piece) {
    const int64_t id = tokenizer.piece_to_id(piece);
    if (id < 0 || tokenizer.id_to_piece(id) != piece)
      throw Error(flag + " '" + path + "' has no piece " + piece +
                  (wordpiece
                       ? " (add it to the vocabulary)"
                       : " (train the model with --user_defined_symbols=[CLS],[SEP],[MASK])"));
    return static_cast<int32_t>(id);
  };
  auto& ids = vocabulary.ids;
  ids.cls_id = special("[CLS]");
  ids.sep_id = special("[SEP]");
  ids.mask_id = special("[MASK]");
  ids.size = tokenizer.vocab_size();
  if (ids.size > INT32_MAX) throw Error(flag + " '" + path + "': more than 2^31 pieces");
  ids.continues_word.resize(static_cast<std::size_t>(ids.size));
  for (int64_t id = 0; id < ids.size; ++id) {
    const std::string piece = tokenizer.id_to_piece(id);
    ids.continues_word[static_cast<std::size_t>(id)] =
        wordpiece ? piece.rfind("##", 0) == 0 : piece.rfind("\xE2\x96\x81", 0) != 0;  // "▁"
  }
  return vocabulary;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view strip(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Splits a file's content into stripped lines; a blank line (and the start
// of each file) starts a new document. Refuses invalid UTF-8 with the line
// and the column (in characters) of the first bad byte.
void split_lines(const std::string& path, std::string_view content,
                 std::vector<std::string_view>& lines) {
  lines.emplace_back();  // each file starts a document of its own
  int64_t number = 0;
  bool any_text = false;
  for (std::size_t begin = 0; begin < content.size();) {
    auto end = content.find('\n', begin);
    if (end == std::string_view::npos) end = content.size();
    const std::string_view raw = content.substr(begin, end - begin);
    ++number;
    const auto bad = unicode::invalid_utf8_offset(raw);
    if (bad != std::string_view::npos) {
      int64_t column = 1;
      for (std::size_t i = 0; i < bad; ++i)
        if ((static_cast<unsigned char>(raw[i]) & 0xC0) != 0x80) ++column;
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(raw[bad]));
      throw Error("--input_file '" + path + "' line " + std::to_string(number) + ", column " +
                  std::to_string(column) + ": invalid UTF-8 (byte " + byte + ")");
    }
    const auto text = strip(raw);
    any_text = any_text || !text.empty();
    lines.push_back(text);
    begin = end + 1;
  }
  if (!any_text) throw Error("--input_file '" + path + "' is empty (no text lines)");
}

}  // namespace

PretrainingDataReport create_pretraining_data(const PretrainingDataOptions& options) {
  validate(options);
  const auto inputs = expand_inputs(options.input_files);
  const auto outputs = split_commas(options.output_file);
  std::set<std::string> seen;
  for (const auto& output : outputs) {
    if (output.empty())
      throw Error("--output_file '" + options.output_file + "' names an empty file");
    if (!seen.insert(output).second) throw Error("--output_file names '" + output + "' twice");
  }
  std::vector<NamedPath> read{{"--vocab_file", options.vocab_file},
                              {"--sp_model_file", options.sp_model_file}};
  for (const auto& input : inputs) {
    check_input_file(input, "--input_file");
    read.push_back({"--input_file", input});
  }
  std::vector<NamedPath> written;
  for (const auto& output : outputs) written.push_back({"--output_file", output});
  refuse_outputs_over_inputs(read, written);
  const Vocabulary vocabulary = load_vocabulary(options);
  // Created now, so an unwritable output fails before the work; removed
  // unless everything is written.
  std::vector<std::unique_ptr<AtomicFile>> files;
  for (const auto& output : outputs) {
    try {
      files.push_back(std::make_unique<AtomicFile>(output));
    } catch (const Error& e) {
      throw Error(std::string("--output_file: ") + e.what());
    }
  }
  const int64_t threads =
      options.num_threads > 0
          ? options.num_threads
          : std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));

  // Reading: every file in memory, as BERT holds it; checked before any work.
  std::vector<std::string> contents;
  std::vector<std::string_view> lines;  // stripped; empty: a new document
  for (const auto& input : inputs) {
    contents.push_back(read_file(input, "--input_file"));
    if (contents.back().empty()) throw Error("--input_file '" + input + "' is empty");
  }
  for (std::size_t f = 0; f < inputs.size(); ++f) split_lines(inputs[f], contents[f], lines);

  // Tokenizing, the slow part with WordPiece: lines in parallel.
  std::vector<Sentence> tokens(lines.size());
  {
    StageProgress progress("tokenized", "lines", static_cast<int64_t>(lines.size()));
    parallel_for(
        static_cast<int64_t>(lines.size()), threads, 256,
        [&](int64_t i) {
          const auto text = lines[static_cast<std::size_t>(i)];
          if (text.empty()) return;
          const auto ids = vocabulary.tokenizer->encode(text);
          tokens[static_cast<std::size_t>(i)].assign(ids.begin(), ids.end());
        },
        [&](int64_t done) { progress.update(done); });
  }
  std::vector<Document> documents;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) {
      if (documents.empty() || !documents.back().empty()) documents.emplace_back();
    } else if (!tokens[i].empty()) {
      documents.back().push_back(std::move(tokens[i]));
    }
  }
  if (!documents.empty() && documents.back().empty()) documents.pop_back();
  tokens.clear();
  contents.clear();
  lines.clear();
  if (documents.empty()) throw Error("--input_file: no line has a token");
  auto order_rng = PretrainingRng::derive(options.random_seed, kDocumentOrderStream, 0);
  order_rng.shuffle(documents);

  // Instances: every (pass, document) with a generator of its own, so the
  // threads may take them in any order.
  InstanceOptions instance_options;
  instance_options.max_seq_length = options.max_seq_length;
  instance_options.max_predictions_per_seq = options.max_predictions_per_seq;
  instance_options.masked_lm_prob = options.masked_lm_prob;
  instance_options.short_seq_prob = options.short_seq_prob;
  instance_options.do_whole_word_mask = options.do_whole_word_mask;
  const auto document_count = static_cast<int64_t>(documents.size());
  const int64_t units = options.dupe_factor * document_count;
  std::vector<std::vector<std::string>> records(static_cast<std::size_t>(units));
  {
    StageProgress progress("masked", "documents", units);
    parallel_for(
        units, threads, 16,
        [&](int64_t unit) {
          auto rng = PretrainingRng::derive(options.random_seed, kInstanceStream,
                                            static_cast<uint64_t>(unit));
          const auto instances = create_instances_from_document(
              documents, static_cast<std::size_t>(unit % document_count), instance_options,
              vocabulary.ids, rng);
          auto& out = records[static_cast<std::size_t>(unit)];
          for (const auto& instance : instances)
            out.push_back(serialize_instance(instance, options.max_seq_length,
                                             options.max_predictions_per_seq));
        },
        [&](int64_t done) { progress.update(done); });
  }

  // Writing: all instances shuffled together (as BERT does), then dealt
  // round-robin over the output files.
  std::vector<std::string> all;
  for (auto& unit : records)
    for (auto& record : unit) all.push_back(std::move(record));
  records.clear();
  auto record_rng = PretrainingRng::derive(options.random_seed, kRecordOrderStream, 0);
  record_rng.shuffle(all);
  std::vector<data::TFRecordWriter> writers;
  for (const auto& file : files) writers.emplace_back(file->temporary_path());
  for (std::size_t i = 0; i < all.size(); ++i) writers[i % writers.size()].write(all[i]);
  for (auto& writer : writers) writer.close();
  for (auto& file : files) file->commit();

  PretrainingDataReport report;
  report.documents = document_count;
  report.instances = static_cast<int64_t>(all.size());
  report.output_files = outputs;
  return report;
}

}  // namespace garden::nlp
