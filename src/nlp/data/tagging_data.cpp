#include "garden/nlp/data/tagging_data.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/config/validation.h"
#include "garden/data/example.h"
#include "garden/data/parse_spec.h"
#include "garden/data/pipeline.h"
#include "garden/data/tfrecord.h"
#include "garden/nlp/data/conll_data.h"
#include "garden/nlp/data/sentence_prediction_data.h"

namespace garden::nlp {

const std::vector<std::string>& tagging_labels(const std::string& tagging_task_name) {
  static const std::vector<std::string> panx = {"O",     "B-PER", "I-PER", "B-LOC",
                                                "I-LOC", "B-ORG", "I-ORG"};
  static const std::vector<std::string> udpos = {"ADJ",   "ADP",   "ADV", "AUX",  "CCONJ", "DET",
                                                 "INTJ",  "NOUN",  "NUM", "PART", "PRON",  "PROPN",
                                                 "PUNCT", "SCONJ", "SYM", "VERB", "X"};
  if (tagging_task_name == "panx") return panx;
  if (tagging_task_name == "udpos") return udpos;
  if (tagging_task_name == "conll2003") return conll2003_labels();
  if (tagging_task_name == "conll")
    throw Error(
        "--tagging_task_name=conll has no fixed label list: its labels are the training file's "
        "or --label_list");
  throw Error("--tagging_task_name '" + tagging_task_name +
              "' is not one of panx, udpos, conll2003, conll (any tag set)");
}

std::vector<TaggingExample> read_tagging_examples(const std::string& path,
                                                  const std::vector<std::string>& labels) {
  check_input_file(path, "tagging file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::vector<TaggingExample> examples;
  TaggingExample example;
  std::string line;
  int64_t number = 0;
  auto finish = [&] {
    if (example.words.empty()) return;
    example.sentence_id = static_cast<int64_t>(examples.size());
    examples.push_back(std::move(example));
    example = TaggingExample{};
  };
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      finish();
      continue;
    }
    const std::string where = path + ":" + std::to_string(number);
    if (unicode::invalid_utf8_offset(line) != std::string::npos)
      throw Error(where + ": " + unicode::utf8_error(line));
    const auto tab = line.find('\t');
    if (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos)
      throw Error(where + ": expected word<TAB>label");
    auto trim = [](std::string text) {
      const auto begin = text.find_first_not_of(" \t");
      const auto end = text.find_last_not_of(" \t");
      return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
    };
    const std::string word = trim(line.substr(0, tab));
    const std::string label = trim(line.substr(tab + 1));
    const auto it = std::find(labels.begin(), labels.end(), label);
    if (it == labels.end()) {
      std::string known;
      for (const auto& l : labels) known += (known.empty() ? "" : ", ") + l;
      throw Error(where + ", column 2: label '" + label + "' is not one of " + known);
    }
    if (example.words.empty()) example.where = where;
    example.words.push_back(word);
    example.label_ids.push_back(it - labels.begin());
  }
  if (in.bad()) throw Error("reading '" + path + "' failed");
  finish();
  return examples;
}

std::vector<TaggingFeatures> encode_tagging_example(const FinetuningTokenizer& tokenizer,
                                                    const TaggingExample& example,
                                                    int64_t max_seq_length) {
  if (max_seq_length < 3)
    throw Error("max_seq_length " + std::to_string(max_seq_length) + " leaves no room for text");
  const auto room = static_cast<std::size_t>(max_seq_length - 2);
  struct Part {
    std::vector<int64_t> pieces, labels;
  };
  std::vector<Part> parts(1);
  for (std::size_t i = 0; i < example.words.size(); ++i) {
    std::vector<int64_t> pieces = tokenizer.tokenize(example.words[i]);
    if ((pieces.empty() || pieces.size() > room) && !example.words[i].empty())
      pieces = {tokenizer.unk_id()};
    if (pieces.size() + parts.back().pieces.size() > room) parts.emplace_back();
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      parts.back().pieces.push_back(pieces[j]);
      parts.back().labels.push_back(j == 0 ? example.label_ids[i] : kPaddingLabelId);
    }
  }
  if (parts.back().pieces.empty() && parts.size() > 1) parts.pop_back();
  std::vector<TaggingFeatures> out;
  const auto length = static_cast<std::size_t>(max_seq_length);
  for (std::size_t p = 0; p < parts.size(); ++p) {
    TaggingFeatures f;
    f.sentence_id = example.sentence_id;
    f.sub_sentence_id = static_cast<int64_t>(p);
    f.input_ids.push_back(tokenizer.cls_id());
    f.input_ids.insert(f.input_ids.end(), parts[p].pieces.begin(), parts[p].pieces.end());
    f.input_ids.push_back(tokenizer.sep_id());
    f.label_ids.push_back(kPaddingLabelId);
    f.label_ids.insert(f.label_ids.end(), parts[p].labels.begin(), parts[p].labels.end());
    f.label_ids.push_back(kPaddingLabelId);
    f.input_mask.assign(f.input_ids.size(), 1);
    f.input_ids.resize(length, 0);
    f.input_mask.resize(length, 0);
    f.segment_ids.assign(length, 0);
    f.label_ids.resize(length, kPaddingLabelId);
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

int64_t write_tagging_records(const FinetuningTokenizer& tokenizer,
                              const std::vector<TaggingExample>& examples, int64_t max_seq_length,
                              const std::string& output) {
  AtomicFile file(output);
  data::TFRecordWriter writer(file.temporary_path());
  int64_t records = 0;
  for (const auto& example : examples) {
    for (const auto& f : encode_tagging_example(tokenizer, example, max_seq_length)) {
      data::Example record;
      record["input_ids"] = data::FeatureValue::of_ints(f.input_ids);
      record["input_mask"] = data::FeatureValue::of_ints(f.input_mask);
      record["segment_ids"] = data::FeatureValue::of_ints(f.segment_ids);
      record["label_ids"] = data::FeatureValue::of_ints(f.label_ids);
      record["sentence_id"] = data::FeatureValue::of_ints({f.sentence_id});
      record["sub_sentence_id"] = data::FeatureValue::of_ints({f.sub_sentence_id});
      writer.write(data::serialize_example(record));
      ++records;
    }
  }
  writer.close();
  file.commit();
  return records;
}

// panx and udpos: Model Garden's file names and word<TAB>label lines.
TaggingSplits read_xtreme_splits(const FinetuningDataOptions& o) {
  TaggingSplits splits;
  splits.labels = tagging_labels(o.tagging_task_name);
  if (!o.label_list.empty())
    throw Error("--label_list is for --tagging_task_name=conll (any tag set); " +
                o.tagging_task_name + "'s labels are fixed");
  const std::filesystem::path dir(o.input_data_dir);
  splits.train = read_tagging_examples((dir / "train-en.tsv").string(), splits.labels);
  if (!o.eval_data_output_path.empty())
    splits.dev = read_tagging_examples((dir / "dev-en.tsv").string(), splits.labels);
  if (!o.test_data_output_path.empty())
    splits.test = read_tagging_examples((dir / "test-en.tsv").string(), splits.labels);
  return splits;
}

}  // namespace

FinetuningDataReport create_tagging_data(const FinetuningDataOptions& options,
                                         const std::string& tagging_task_name) {
  FinetuningDataOptions o = options;
  o.tagging_task_name = tagging_task_name;
  if (tagging_task_name != "conll") tagging_labels(tagging_task_name);  // a known name
  // Every file a tagging layout may read from input_data_dir: no output may
  // be one of them.
  std::vector<NamedPath> data_files;
  for (const char* name : {"train-en.tsv", "dev-en.tsv", "test-en.tsv", "train.txt", "valid.txt",
                           "dev.txt", "test.txt", "eng.train", "eng.testa", "eng.testb"})
    data_files.push_back({std::string("--input_data_dir's ") + name,
                          (std::filesystem::path(o.input_data_dir) / name).string()});
  const auto tokenizer = open_finetuning_tokenizer(o, data_files);
  // Everything is read and checked before anything is written.
  const TaggingSplits splits = tagging_task_name == "conll2003" || tagging_task_name == "conll"
                                   ? read_conll_splits(o)
                                   : read_xtreme_splits(o);
  FinetuningDataReport report;
  report.train_examples =
      write_tagging_records(*tokenizer, splits.train, o.max_seq_length, o.train_data_output_path);
  if (!o.eval_data_output_path.empty())
    report.eval_examples =
        write_tagging_records(*tokenizer, splits.dev, o.max_seq_length, o.eval_data_output_path);
  if (!o.test_data_output_path.empty())
    report.test_examples =
        write_tagging_records(*tokenizer, splits.test, o.max_seq_length, o.test_data_output_path);
  nlohmann::json meta = {{"task_type", "bert_tagging"},
                         {"label_list", splits.labels},
                         {"max_seq_length", o.max_seq_length},
                         {"train_data_size", report.train_examples}};
  if (!o.eval_data_output_path.empty()) meta["eval_data_size"] = report.eval_examples;
  if (!o.test_data_output_path.empty()) meta["test_data_size"] = report.test_examples;
  report.meta_data = meta.dump(2) + "\n";
  write_file_atomically(o.meta_data_file_path, report.meta_data);
  return report;
}

std::vector<std::pair<std::string, nlohmann::json>> meta_data_beside(const std::string& input_path,
                                                                     const std::string& task_type) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, nlohmann::json>> found;
  const std::string first = input_path.substr(0, input_path.find(','));
  if (first.empty()) return found;
  fs::path dir = fs::path(first).parent_path();
  if (dir.empty()) dir = ".";
  if (dir.string().find_first_of("*?[") != std::string::npos) return found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && entry.file_size(ec) <= kMaxMetaDataBytes)
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    auto meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (meta.is_object() && meta.value("task_type", nlohmann::json()) == task_type)
      found.emplace_back(file.string(), std::move(meta));
  }
  return found;
}

std::optional<TaggingMetaData> find_tagging_meta_data(const std::string& input_path) {
  std::vector<TaggingMetaData> found;
  for (const auto& [path, meta] : meta_data_beside(input_path, "bert_tagging")) {
    const auto labels = meta.find("label_list");
    if (labels == meta.end() || !labels->is_array()) continue;
    TaggingMetaData m;
    m.path = path;
    for (const auto& label : *labels)
      if (label.is_string()) m.label_list.push_back(label.get<std::string>());
    if (m.label_list.size() == labels->size()) found.push_back(std::move(m));
  }
  if (found.empty()) return std::nullopt;
  TaggingMetaData result = found.front();
  for (const auto& other : found)
    if (other.label_list != result.label_list) result.others.push_back(other);
  return result;
}

void TaggingDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("seq_length", seq_length, "Tokens per sequence: the length of input_ids in the records.");
  v("include_sentence_id", include_sentence_id,
    "Read sentence_id and sub_sentence_id (not implemented: nothing in Garden reads them yet; "
    "false only).");
  v("vocab_file", vocab_file,
    "The tokenizer the records were made with: serving takes raw text with it.");
  v("tokenization", tokenization, "WordPiece or SentencePiece: what vocab_file is.");
  v("lower_case", lower_case, "Lower-case (and strip accents) before tokenizing.");
}

void TaggingDataConfig::validate() const {
  validate_reading();
  if (file_type != "tfrecord" && file_type != "tfrecord_compressed")
    config::refuse("file_type", "'" + file_type + "' is not one of tfrecord, tfrecord_compressed");
  config::check_range("seq_length", seq_length, config::Range::at_least(3));
  if (include_sentence_id)
    config::refuse("include_sentence_id",
                   "true is not implemented: nothing in Garden reads "
                   "sentence ids yet");
  if (tokenization != "WordPiece" && tokenization != "SentencePiece")
    config::refuse("tokenization", "'" + tokenization + "' is not one of WordPiece, SentencePiece");
}

DatasetPtr build_tagging_inputs(const TaggingDataConfig& params, const InputContext& input_context,
                                int64_t vocab_size, std::vector<std::string> class_names) {
  if (params.input_path.empty())
    config::refuse("input_path", "is empty; name the TFRecord files create_finetuning_data wrote");
  using data::DType;
  using data::FixedLenFeature;
  auto spec = std::make_shared<data::ParseSpec>();
  for (const char* name : {"input_ids", "input_mask", "segment_ids", "label_ids"})
    (*spec)[name] = FixedLenFeature{{params.seq_length}, DType::kInt64, std::nullopt};
  std::shared_ptr<const data::ParseSpec> frozen = spec;
  data::LocatedMapFn map_fn = [frozen, vocab_size, class_names = std::move(class_names)](
                                  const std::string& record, const data::RecordLocation& where) {
    const std::string at = record_place(where);
    Batch parsed = parse_record(record, where, *frozen, at);
    check_input_ids(parsed.at("input_ids"), vocab_size, at);
    // Records of another label list than the model's classes.
    if (!class_names.empty()) {
      const at::Tensor& labels = parsed.at("label_ids");
      const int64_t* v = labels.data_ptr<int64_t>();
      const auto count = static_cast<int64_t>(class_names.size());
      for (int64_t i = 0; i < labels.numel(); ++i)
        if (v[i] != kPaddingLabelId && (v[i] < 0 || v[i] >= count)) {
          std::string names;
          for (const auto& name : class_names) names += (names.empty() ? "" : ", ") + name;
          throw Error(at + ": feature 'label_ids' holds " + std::to_string(v[i]) + " at index " +
                      std::to_string(i) + ", but the model has " + std::to_string(count) +
                      " classes (task.class_names [" + names +
                      "]); the records were written with another label list");
        }
    }
    return Batch{{"input_word_ids", parsed.at("input_ids")},
                 {"input_mask", parsed.at("input_mask")},
                 {"input_type_ids", parsed.at("segment_ids")},
                 {"label_ids", parsed.at("label_ids")}};
  };
  return std::make_shared<data::InputPipeline>(params, std::move(map_fn), data::BatchingOptions{},
                                               input_context);
}

}  // namespace garden::nlp
