#include "garden/nlp/data/conll_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"

namespace garden::nlp {

namespace {

std::vector<std::string> split_columns(const std::string& line) {
  std::vector<std::string> columns;
  std::size_t at = 0;
  while (true) {
    const auto begin = line.find_first_not_of(" \t", at);
    if (begin == std::string::npos) break;
    const auto end = line.find_first_of(" \t", begin);
    columns.push_back(line.substr(begin, end == std::string::npos ? end : end - begin));
    if (end == std::string::npos) break;
    at = end;
  }
  return columns;
}

std::string comma_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

const std::vector<std::string> kConll2003Types = {"PER", "ORG", "LOC", "MISC"};

}  // namespace

std::vector<TaggedSentence> read_column_sentences(const std::string& path, int64_t columns) {
  check_input_file(path, "tagging file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::vector<TaggedSentence> sentences;
  TaggedSentence sentence;
  int64_t expected = columns, expected_from = 0;
  auto finish = [&] {
    if (!sentence.words.empty()) sentences.push_back(std::move(sentence));
    sentence = TaggedSentence{};
  };
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A byte order mark (a file saved by a Windows editor) is not a word.
    if (number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    const std::string where = path + ":" + std::to_string(number);
    if (unicode::invalid_utf8_offset(line) != std::string::npos)
      throw Error(where + ": " + unicode::utf8_error(line));
    const auto fields = split_columns(line);
    if (fields.empty() || fields[0] == "-DOCSTART-") {
      finish();
      continue;
    }
    const auto count = static_cast<int64_t>(fields.size());
    if (expected == 0) {
      if (count < 2)
        throw Error(where +
                    ": expected a word and a tag (columns separated by spaces or tabs, "
                    "the tag last), got 1 column");
      expected = count;
      expected_from = number;
    }
    if (count != expected)
      throw Error(where + ": expected " + std::to_string(expected) + " columns" +
                  (columns > 0 ? " (word POS chunk NER)"
                               : " (as line " + std::to_string(expected_from) + ")") +
                  ", got " + std::to_string(count));
    sentence.words.push_back(fields.front());
    sentence.tags.push_back(fields.back());
    sentence.lines.push_back(number);
    sentence.tag_column = count;
  }
  if (in.bad()) throw Error("reading '" + path + "' failed");
  finish();
  return sentences;
}

void check_iob_tag(const std::string& tag, const std::vector<std::string>& types,
                   const std::string& where) {
  if (tag == "O") return;
  if (tag.size() < 3 || (tag[0] != 'B' && tag[0] != 'I') || tag[1] != '-')
    throw Error(where + ": tag '" + tag +
                "' is not an IOB tag: O, or B- or I- before the entity type");
  const std::string type = tag.substr(2);
  if (!types.empty() && std::find(types.begin(), types.end(), type) == types.end())
    throw Error(where + ": tag '" + tag + "' has the entity type '" + type + "', not one of " +
                comma_list(types));
}

std::vector<std::string> iob1_to_iob2(const std::vector<std::string>& tags) {
  std::vector<std::string> out = tags;
  for (std::size_t i = 0; i < tags.size(); ++i) {
    if (tags[i].rfind("I-", 0) != 0) continue;
    const std::string type = tags[i].substr(2);
    // The tag before, as written: B-T and I-T continue T; O, another type or
    // the sentence's start make this I-T the first word of an entity.
    const bool continues =
        i > 0 && tags[i - 1].size() > 2 && tags[i - 1][1] == '-' && tags[i - 1].substr(2) == type;
    if (!continues) out[i] = "B-" + type;
  }
  return out;
}

std::vector<std::string> labels_of(const std::vector<TaggedSentence>& sentences) {
  std::set<std::string> seen;
  for (const auto& s : sentences) seen.insert(s.tags.begin(), s.tags.end());
  std::vector<std::string> labels;
  if (seen.erase("O")) labels.push_back("O");
  labels.insert(labels.end(), seen.begin(), seen.end());
  return labels;
}

std::vector<std::string> parse_label_list(const std::string& text) {
  std::vector<std::string> labels;
  std::size_t at = 0;
  while (true) {
    const auto comma = text.find(',', at);
    std::string label = text.substr(at, comma == std::string::npos ? comma : comma - at);
    const auto begin = label.find_first_not_of(" \t");
    const auto end = label.find_last_not_of(" \t");
    label = begin == std::string::npos ? "" : label.substr(begin, end - begin + 1);
    const std::string place = "--label_list, label " + std::to_string(labels.size() + 1);
    if (label.empty()) throw Error(place + " is empty ('" + text + "')");
    if (std::find(labels.begin(), labels.end(), label) != labels.end())
      throw Error(place + ": '" + label + "' is listed twice");
    labels.push_back(label);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return labels;
}

const std::vector<std::string>& conll2003_labels() {
  static const std::vector<std::string> labels = {"O",     "B-PER", "I-PER",  "B-ORG", "I-ORG",
                                                  "B-LOC", "I-LOC", "B-MISC", "I-MISC"};
  return labels;
}

std::string find_split_file(const std::string& dir, const std::string& split,
                            const std::vector<std::string>& candidates) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& name : candidates)
    if (fs::exists(fs::path(dir) / name, ec)) found.push_back(name);
  if (found.empty())
    throw Error("--input_data_dir '" + dir + "' has no " + split + " file: looked for " +
                comma_list(candidates));
  if (found.size() > 1)
    throw Error("--input_data_dir '" + dir + "' has two " + split + " files, " + found[0] +
                " and " + found[1] + ": keep one");
  return (fs::path(dir) / found[0]).string();
}

namespace {

// The sentences of one split, tags checked (and for CoNLL-2003 made IOB2),
// as label ids of `labels`; `source` says where the labels came from.
std::vector<TaggingExample> labelled_examples(const std::string& path, bool conll2003,
                                              const std::vector<std::string>& labels,
                                              const std::string& source) {
  auto sentences = read_column_sentences(path, conll2003 ? 4 : 0);
  std::vector<TaggingExample> examples;
  for (auto& s : sentences) {
    const auto at = [&](std::size_t i) {
      return path + ":" + std::to_string(s.lines[i]) + ", column " + std::to_string(s.tag_column);
    };
    if (conll2003) {
      for (std::size_t i = 0; i < s.tags.size(); ++i)
        check_iob_tag(s.tags[i], kConll2003Types, at(i));
      s.tags = iob1_to_iob2(s.tags);
    }
    TaggingExample example;
    example.sentence_id = static_cast<int64_t>(examples.size());
    example.where = path + ":" + std::to_string(s.lines.front());
    for (std::size_t i = 0; i < s.tags.size(); ++i) {
      const auto it = std::find(labels.begin(), labels.end(), s.tags[i]);
      if (it == labels.end())
        throw Error(at(i) + ": label '" + s.tags[i] + "' is not in the label list (" + source +
                    ": " + comma_list(labels) + ")");
      example.label_ids.push_back(it - labels.begin());
    }
    example.words = std::move(s.words);
    examples.push_back(std::move(example));
  }
  return examples;
}

}  // namespace

TaggingSplits read_conll_splits(const FinetuningDataOptions& o) {
  const bool conll2003 = o.tagging_task_name == "conll2003";
  if (!conll2003 && o.tagging_task_name != "conll")
    throw Error("read_conll_splits: --tagging_task_name '" + o.tagging_task_name +
                "' is not conll2003 or conll");
  if (conll2003 && !o.label_list.empty())
    throw Error(
        "--label_list is for --tagging_task_name=conll (any tag set); conll2003's labels are "
        "fixed: " +
        comma_list(conll2003_labels()));
  const std::string& dir = o.input_data_dir;
  const std::string train_path =
      find_split_file(dir, "training", {"train.txt", "eng.train", "train-en.tsv"});
  TaggingSplits splits;
  std::string source;
  if (conll2003) {
    splits.labels = conll2003_labels();
    source = "CoNLL-2003's";
  } else if (!o.label_list.empty()) {
    splits.labels = parse_label_list(o.label_list);
    source = "--label_list";
  } else {
    splits.labels = labels_of(read_column_sentences(train_path, 0));
    if (splits.labels.empty()) throw Error("'" + train_path + "' holds no tagged word");
    source = "the labels of '" + train_path + "'";
  }
  splits.train = labelled_examples(train_path, conll2003, splits.labels, source);
  if (!o.eval_data_output_path.empty())
    splits.dev = labelled_examples(
        find_split_file(dir, "dev", {"valid.txt", "dev.txt", "eng.testa", "dev-en.tsv"}), conll2003,
        splits.labels, source);
  if (!o.test_data_output_path.empty())
    splits.test =
        labelled_examples(find_split_file(dir, "test", {"test.txt", "eng.testb", "test-en.tsv"}),
                          conll2003, splits.labels, source);
  return splits;
}

}  // namespace garden::nlp
