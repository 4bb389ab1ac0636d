#include "garden/nlp/data/classifier_data.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/unicode_case.h"
#include "garden/data/example.h"
#include "garden/data/sentencepiece.h"
#include "garden/data/tfrecord.h"
#include "garden/data/wordpiece.h"
#include "garden/data/wordpiece_unicode.h"
#include "garden/nlp/data/squad_data.h"
#include "garden/nlp/data/tagging_data.h"

namespace garden::nlp {

namespace {

const std::vector<ClassifierProcessor>& processors() {
  static const std::vector<ClassifierProcessor> all = [] {
    std::vector<ClassifierProcessor> p;
    const std::vector<std::string> binary{"0", "1"};
    const std::vector<std::string> entailment{"entailment", "not_entailment"};
    ClassifierProcessor cola{"COLA", binary};
    cola.header = false;  // train and dev have none
    cola.text_a = 3;
    cola.label = 1;
    p.push_back(cola);
    ClassifierProcessor sst{"SST-2", binary};
    sst.text_a = 0;
    sst.label = 1;
    p.push_back(sst);
    ClassifierProcessor mrpc{"MRPC", binary};
    mrpc.text_a = 3;
    mrpc.text_b = 4;
    mrpc.label = 0;
    p.push_back(mrpc);
    ClassifierProcessor qqp{"QQP", binary};
    qqp.text_a = 3;
    qqp.text_b = 4;
    qqp.label = 5;
    qqp.skip_short_lines = true;
    p.push_back(qqp);
    ClassifierProcessor mnli{"MNLI", {"contradiction", "entailment", "neutral"}};
    mnli.dev_file = "dev_matched.tsv";
    mnli.text_a = 8;
    mnli.text_b = 9;
    mnli.label = -1;
    p.push_back(mnli);
    for (const char* name : {"QNLI", "RTE"}) {
      ClassifierProcessor pair{name, entailment};
      pair.text_a = 1;
      pair.text_b = 2;
      pair.label = -1;
      p.push_back(pair);
    }
    ClassifierProcessor wnli{"WNLI", binary};
    wnli.text_a = 1;
    wnli.text_b = 2;
    wnli.label = -1;
    p.push_back(wnli);
    ClassifierProcessor stsb{"STS-B", {}};
    stsb.text_a = 7;
    stsb.text_b = 8;
    stsb.label = -1;
    p.push_back(stsb);
    return p;
  }();
  return all;
}

std::string upper(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> columns;
  std::size_t begin = 0;
  while (true) {
    const auto tab = line.find('\t', begin);
    columns.push_back(line.substr(begin, tab - begin));
    if (tab == std::string::npos) break;
    begin = tab + 1;
  }
  return columns;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

void check_not_empty(const std::string& value, const std::string& flag) {
  if (value.empty()) throw Error(flag + " is required");
}

}  // namespace

std::vector<std::string> classifier_task_names() {
  std::vector<std::string> names;
  for (const auto& p : processors()) names.push_back(p.name);
  return names;
}

const ClassifierProcessor& classifier_processor(const std::string& task_name) {
  for (const auto& p : processors())
    if (p.name == upper(task_name)) return p;
  throw Error("--classification_task_name '" + task_name + "' is not one of " +
              join(classifier_task_names()));
}

std::vector<ClassifierExample> read_classifier_examples(const ClassifierProcessor& processor,
                                                        const std::string& path) {
  check_input_file(path, processor.name + " file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::vector<ClassifierExample> examples;
  std::string line;
  int64_t number = 0;
  const int needed = 1 + std::max({processor.text_a, processor.text_b,
                                   processor.label >= 0 ? processor.label : -processor.label - 1});
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (processor.header && number == 1) continue;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(number);
    if (unicode::invalid_utf8_offset(line) != std::string::npos)
      throw Error(where + ": " + unicode::utf8_error(line));
    const auto columns = split_tabs(line);
    const auto count = static_cast<int>(columns.size());
    if (count < needed) {
      if (processor.skip_short_lines) continue;
      throw Error(where + ": " + std::to_string(count) + " tab-separated column(s); " +
                  processor.name + " needs at least " + std::to_string(needed));
    }
    ClassifierExample example;
    example.where = where;
    example.text_a = columns[static_cast<std::size_t>(processor.text_a)];
    if (processor.text_b >= 0) example.text_b = columns[static_cast<std::size_t>(processor.text_b)];
    const int label_column = processor.label >= 0 ? processor.label : count + processor.label;
    example.label = columns[static_cast<std::size_t>(label_column)];
    const std::string at_label = where + ", column " + std::to_string(label_column + 1);
    if (processor.regression()) {
      errno = 0;
      char* end = nullptr;
      std::strtod(example.label.c_str(), &end);
      if (example.label.empty() || *end != '\0' || errno == ERANGE)
        throw Error(at_label + ": label '" + example.label + "' is not a number");
    } else if (std::find(processor.labels.begin(), processor.labels.end(), example.label) ==
               processor.labels.end()) {
      throw Error(at_label + ": label '" + example.label + "' is not one of " +
                  join(processor.labels));
    }
    examples.push_back(std::move(example));
  }
  if (in.bad()) throw Error("reading '" + path + "' failed");
  return examples;
}

ClassifierFeatures encode_classifier_input(const FinetuningTokenizer& tokenizer,
                                           std::string_view text_a,
                                           const std::optional<std::string>& text_b,
                                           int64_t max_seq_length) {
  if (max_seq_length < (text_b ? 3 : 2))
    throw Error("max_seq_length " + std::to_string(max_seq_length) + " leaves no room for text");
  std::vector<int64_t> a = tokenizer.tokenize(text_a);
  std::vector<int64_t> b;
  if (text_b) {
    b = tokenizer.tokenize(*text_b);
    const auto room = static_cast<std::size_t>(max_seq_length - 3);
    while (a.size() + b.size() > room) (a.size() > b.size() ? a : b).pop_back();
  } else if (a.size() > static_cast<std::size_t>(max_seq_length - 2)) {
    a.resize(static_cast<std::size_t>(max_seq_length - 2));
  }
  ClassifierFeatures f;
  f.input_ids.push_back(tokenizer.cls_id());
  f.input_ids.insert(f.input_ids.end(), a.begin(), a.end());
  f.input_ids.push_back(tokenizer.sep_id());
  f.segment_ids.assign(f.input_ids.size(), 0);
  if (text_b) {
    f.input_ids.insert(f.input_ids.end(), b.begin(), b.end());
    f.input_ids.push_back(tokenizer.sep_id());
    f.segment_ids.resize(f.input_ids.size(), 1);
  }
  f.input_mask.assign(f.input_ids.size(), 1);
  const auto length = static_cast<std::size_t>(max_seq_length);
  f.input_ids.resize(length, 0);
  f.input_mask.resize(length, 0);
  f.segment_ids.resize(length, 0);
  return f;
}

namespace {

int64_t write_records(const ClassifierProcessor& processor, const FinetuningTokenizer& tokenizer,
                      const std::vector<ClassifierExample>& examples, int64_t max_seq_length,
                      const std::string& output) {
  AtomicFile file(output);
  data::TFRecordWriter writer(file.temporary_path());
  for (const auto& example : examples) {
    const ClassifierFeatures f =
        encode_classifier_input(tokenizer, example.text_a, example.text_b, max_seq_length);
    data::Example record;
    record["input_ids"] = data::FeatureValue::of_ints(f.input_ids);
    record["input_mask"] = data::FeatureValue::of_ints(f.input_mask);
    record["segment_ids"] = data::FeatureValue::of_ints(f.segment_ids);
    if (processor.regression()) {
      record["label_ids"] =
          data::FeatureValue::of_floats({static_cast<float>(std::stod(example.label))});
    } else {
      const auto it = std::find(processor.labels.begin(), processor.labels.end(), example.label);
      record["label_ids"] =
          data::FeatureValue::of_ints({static_cast<int64_t>(it - processor.labels.begin())});
    }
    record["is_real_example"] = data::FeatureValue::of_ints({1});
    writer.write(data::serialize_example(record));
  }
  writer.close();
  file.commit();
  return static_cast<int64_t>(examples.size());
}

}  // namespace

std::shared_ptr<const FinetuningTokenizer> open_finetuning_tokenizer(
    const FinetuningDataOptions& o, const std::vector<NamedPath>& data_files) {
  if (o.fine_tuning_task_type != "squad") check_not_empty(o.input_data_dir, "--input_data_dir");
  check_not_empty(o.train_data_output_path, "--train_data_output_path");
  check_not_empty(o.meta_data_file_path, "--meta_data_file_path");
  if (o.vocab_file.empty() == o.sp_model_file.empty())
    throw Error(o.vocab_file.empty()
                    ? "give --vocab_file (WordPiece) or --sp_model_file (SentencePiece)"
                    : "give only one of --vocab_file and --sp_model_file, not both");
  if (o.max_seq_length < 3 || o.max_seq_length > 1000000)
    throw Error("--max_seq_length must be in [3, 1000000], got " +
                std::to_string(o.max_seq_length));
  std::vector<NamedPath> inputs = data_files;
  inputs.push_back({"--vocab_file", o.vocab_file});
  inputs.push_back({"--sp_model_file", o.sp_model_file});
  refuse_outputs_over_inputs(inputs, {{"--train_data_output_path", o.train_data_output_path},
                                      {"--eval_data_output_path", o.eval_data_output_path},
                                      {"--test_data_output_path", o.test_data_output_path},
                                      {"--meta_data_file_path", o.meta_data_file_path}});
  const bool wordpiece = !o.vocab_file.empty();
  return FinetuningTokenizer::open(
      wordpiece ? FinetuningTokenizer::Kind::kWordPiece : FinetuningTokenizer::Kind::kSentencePiece,
      wordpiece ? o.vocab_file : o.sp_model_file, o.do_lower_case,
      wordpiece ? "--vocab_file" : "--sp_model_file");
}

namespace {

// A flag of another task type would be ignored (Model Garden's script
// ignores it): refused, naming the type it belongs to.
void refuse_flags_of_other_types(const FinetuningDataOptions& o) {
  const FinetuningDataOptions defaults;
  const std::string& type = o.fine_tuning_task_type;
  const bool squad = type == "squad", tagging = type == "tagging";
  const auto refuse = [&type](const char* flag, bool set, const std::string& which) {
    if (set)
      throw Error(std::string(flag) + " applies to " + which +
                  ", not to --fine_tuning_task_type=" + type);
  };
  if (!squad) {
    refuse("--squad_data_file", !o.squad_data_file.empty(), "squad");
    refuse("--version_2_with_negative", o.version_2_with_negative, "squad");
    refuse("--doc_stride", o.doc_stride != defaults.doc_stride, "squad");
    refuse("--max_query_length", o.max_query_length != defaults.max_query_length, "squad");
  }
  if (!tagging) {
    refuse("--tagging_task_name", o.tagging_task_name != defaults.tagging_task_name, "tagging");
    refuse("--label_list", !o.label_list.empty(), "tagging");
    refuse("--test_data_output_path", !o.test_data_output_path.empty(), "tagging");
  }
  if (squad)
    refuse("--input_data_dir", !o.input_data_dir.empty(),
           "classification, regression and tagging (squad reads --squad_data_file)");
  if (squad || tagging)
    refuse("--classification_task_name",
           o.classification_task_name != defaults.classification_task_name,
           "classification and regression");
}

}  // namespace

FinetuningDataReport create_finetuning_data(const FinetuningDataOptions& o) {
  const std::string& type = o.fine_tuning_task_type;
  if (type != "classification" && type != "regression" && type != "tagging" && type != "squad") {
    if (o.fine_tuning_task_type == "retrieval")
      throw Error(
          "--fine_tuning_task_type=retrieval is not implemented yet; Garden makes "
          "classification, regression, tagging and squad data");
    throw Error("--fine_tuning_task_type '" + o.fine_tuning_task_type +
                "' is not one of classification, regression, tagging, squad");
  }
  refuse_flags_of_other_types(o);
  if (type == "tagging") return create_tagging_data(o, o.tagging_task_name);
  if (type == "squad") return create_squad_data(o);
  const ClassifierProcessor& processor = classifier_processor(o.classification_task_name);
  if (processor.regression() != (o.fine_tuning_task_type == "regression"))
    throw Error("--classification_task_name=" + processor.name + " is a " +
                (processor.regression() ? "regression" : "classification") +
                " task; pass --fine_tuning_task_type=" +
                (processor.regression() ? "regression" : "classification"));
  const std::string train_file =
      (std::filesystem::path(o.input_data_dir) / processor.train_file).string();
  const std::string dev_file =
      (std::filesystem::path(o.input_data_dir) / processor.dev_file).string();
  const auto tokenizer =
      open_finetuning_tokenizer(o, {{"--input_data_dir's " + processor.train_file, train_file},
                                    {"--input_data_dir's " + processor.dev_file,
                                     o.eval_data_output_path.empty() ? "" : dev_file}});

  // Everything is read and checked before anything is written.
  const auto train = read_classifier_examples(processor, train_file);
  std::vector<ClassifierExample> eval;
  if (!o.eval_data_output_path.empty()) eval = read_classifier_examples(processor, dev_file);

  FinetuningDataReport report;
  report.train_examples =
      write_records(processor, *tokenizer, train, o.max_seq_length, o.train_data_output_path);
  if (!o.eval_data_output_path.empty())
    report.eval_examples =
        write_records(processor, *tokenizer, eval, o.max_seq_length, o.eval_data_output_path);
  nlohmann::json meta = {
      {"task_type", processor.regression() ? "bert_regression" : "bert_classification"},
      {"processor_type", processor.name},
      {"num_labels", processor.regression() ? 1 : static_cast<int64_t>(processor.labels.size())},
      {"train_data_size", report.train_examples},
      {"max_seq_length", o.max_seq_length},
      {"label_type", processor.regression() ? "float" : "int"},
  };
  if (!processor.regression()) meta["labels"] = processor.labels;
  if (!o.eval_data_output_path.empty()) meta["eval_data_size"] = report.eval_examples;
  report.meta_data = meta.dump(2) + "\n";
  write_file_atomically(o.meta_data_file_path, report.meta_data);
  return report;
}

}  // namespace garden::nlp
