#include "garden/nlp/tasks/huggingface_adoption.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/interop/huggingface_config.h"
#include "garden/nlp/interop/marian.h"
#include "garden/nlp/tasks/question_answering_config.h"
#include "garden/nlp/tasks/sentence_prediction_config.h"
#include "garden/nlp/tasks/tagging_config.h"
#include "garden/nlp/tasks/translation_config.h"

namespace garden::nlp {

namespace {

using json = nlohmann::json;

std::optional<HuggingFaceModel> huggingface_checkpoint(const config::TaskConfig& task) {
  if (!is_huggingface_dir(task.init_checkpoint)) return std::nullopt;
  return read_huggingface_config(task.init_checkpoint);
}

// The text keys of one data config of a BERT-family task.
struct TextData {
  std::string name;  // train_data, validation_data
  int64_t& seq_length;
  std::string& vocab_file;
  std::string& tokenization;
  bool& lower_case;
  const char* lower_case_key;  // lower_case, or do_lower_case (question answering)
};

// The encoder, the tokenizer and the sequence lengths of a BERT-family task.
void adopt_encoder_task(const HuggingFaceModel& hf, EncoderConfig& encoder,
                        std::vector<TextData> data, ConfigAdoption& adoption) {
  adopt_huggingface_encoder(hf, encoder.bert, "task.model.encoder.bert.", adoption);
  if (const auto wordpiece = huggingface_wordpiece(hf.dir)) {
    // A vocabulary of the user's own (either data config's) is kept, with
    // its tokenization; the lower-casing is the directory's tokenizer's.
    bool own_vocabulary = false;
    for (const auto& d : data)
      own_vocabulary |= adoption.set_by_user("task." + d.name + ".vocab_file");
    for (auto& d : data) {
      const std::string prefix = "task." + d.name + ".";
      if (!own_vocabulary) {
        adoption.take(prefix + "vocab_file", d.vocab_file, wordpiece->vocab_file,
                      "the directory's vocabulary");
        adoption.take(prefix + "tokenization", d.tokenization, std::string("WordPiece"),
                      wordpiece->vocab_file + ", a WordPiece vocabulary:");
      }
      adoption.take(prefix + d.lower_case_key, d.lower_case, wordpiece->lower_case,
                    wordpiece->lower_case_from);
    }
  }
  // Sequences the position table cannot hold: the experiment's length is
  // cut to it; one the user set is refused by validation (check_fits).
  const int64_t positions = encoder.bert.max_position_embeddings;
  std::string capped;
  for (auto& d : data) {
    const std::string key = "task." + d.name + ".seq_length";
    if (adoption.set_by_user(key) || d.seq_length <= positions) continue;
    capped += (capped.empty() ? "" : " and ") + key + " " + std::to_string(d.seq_length);
    d.seq_length = positions;
  }
  if (!capped.empty())
    adoption.note("the experiment's " + capped + " capped at " + hf.dir +
                  "/config.json max_position_embeddings " + std::to_string(positions));
}

// id2label of a model with a head ("0": "LABEL_0", ...), in id order.
config::NameList huggingface_labels(const HuggingFaceModel& hf) {
  const auto it = hf.config.find("id2label");
  if (it == hf.config.end() || !it->is_object()) return {};
  std::vector<std::pair<int64_t, std::string>> labels;
  for (const auto& [id, label] : it->items()) {
    int64_t value = -1;
    try {
      std::size_t used = 0;
      value = std::stoll(id, &used);
      if (used != id.size()) value = -1;
    } catch (const std::exception&) {
    }
    if (value < 0 || !label.is_string())
      throw Error(hf.dir + "/config.json: id2label '" + id + "' is not an id with a label name");
    labels.emplace_back(value, label.get<std::string>());
  }
  std::sort(labels.begin(), labels.end());
  config::NameList names;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].first != static_cast<int64_t>(i))
      throw Error(hf.dir + "/config.json: id2label has no id " + std::to_string(i));
    names.push_back(labels[i].second);
  }
  return names;
}

bool architecture_ends_with(const HuggingFaceModel& hf, const std::string& suffix) {
  const std::string& a = hf.architecture;
  return a.size() >= suffix.size() &&
         a.compare(a.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A BERT-family task from the directory its init_checkpoint names: the
// head's keys (`head`), then the encoder, tokenizer and lengths of its
// train_data and validation_data (`lower_case`: their lower-casing key).
template <class Config, class Data, class Head>
std::vector<std::string> adopt_bert_task(config::TaskConfig& base,
                                         const config::SetKeys& set_by_user, bool Data::*lower_case,
                                         const char* lower_case_key, Head head) {
  auto& task = static_cast<Config&>(base);
  const auto hf = huggingface_checkpoint(task);
  if (!hf) return {};
  ConfigAdoption adoption(hf->dir, set_by_user);
  head(task, *hf, adoption);
  std::vector<TextData> data;
  for (Data* d : {&task.train_data, &task.validation_data})
    data.push_back(TextData{d == &task.train_data ? "train_data" : "validation_data", d->seq_length,
                            d->vocab_file, d->tokenization, d->*lower_case, lower_case_key});
  adopt_encoder_task(*hf, task.model.encoder, std::move(data), adoption);
  return adoption.log_lines();
}

}  // namespace

std::vector<std::string> adopt_sentence_prediction_checkpoint(config::TaskConfig& base,
                                                              const config::SetKeys& set_by_user) {
  const auto head = [](SentencePredictionConfig& task, const HuggingFaceModel& hf,
                       ConfigAdoption& adoption) {
    if (!architecture_ends_with(hf, "ForSequenceClassification")) return;
    const auto labels = huggingface_labels(hf);
    if (labels.empty()) return;
    const auto count = static_cast<int64_t>(labels.size());
    adoption.take("task.model.num_classes", task.model.num_classes, count,
                  adoption.config_key("id2label") + "'s count:");
    // One output is a regression (problem_type regression).
    if (count == 1)
      for (auto* d : {&task.train_data, &task.validation_data})
        adoption.take(std::string("task.") + (d == &task.train_data ? "train" : "validation") +
                          "_data.label_type",
                      d->label_type, std::string("float"),
                      adoption.config_key("id2label") + " has one label (regression):");
  };
  return adopt_bert_task<SentencePredictionConfig>(
      base, set_by_user, &SentencePredictionDataConfig::lower_case, "lower_case", head);
}

std::vector<std::string> adopt_tagging_checkpoint(config::TaskConfig& base,
                                                  const config::SetKeys& set_by_user) {
  const auto head = [](TaggingConfig& task, const HuggingFaceModel& hf, ConfigAdoption& adoption) {
    if (!architecture_ends_with(hf, "ForTokenClassification")) return;
    const auto labels = huggingface_labels(hf);
    if (!labels.empty())
      adoption.take("task.class_names", task.class_names, labels, adoption.config_key("id2label"));
  };
  return adopt_bert_task<TaggingConfig>(base, set_by_user, &TaggingDataConfig::lower_case,
                                        "lower_case", head);
}

std::vector<std::string> adopt_question_answering_checkpoint(config::TaskConfig& base,
                                                             const config::SetKeys& set_by_user) {
  const auto no_head = [](QuestionAnsweringConfig&, const HuggingFaceModel&, ConfigAdoption&) {};
  return adopt_bert_task<QuestionAnsweringConfig>(base, set_by_user, &QADataConfig::do_lower_case,
                                                  "do_lower_case", no_head);
}

std::vector<std::string> adopt_translation_checkpoint(config::TaskConfig& base,
                                                      const config::SetKeys& set_by_user) {
  auto& task = static_cast<TranslationConfig&>(base);
  const auto found = huggingface_checkpoint(task);
  // Another model type is refused by the task, naming what it is.
  if (!found || found->model_type != "marian") return {};
  const HuggingFaceModel& hf = *found;
  ConfigAdoption adoption(hf.dir, set_by_user);
  const auto integer = [&](const char* key) {
    const json value = marian_config_value(hf, key);
    if (!value.is_number_integer())
      throw Error(hf.dir + "/config.json: " + key + " " + value.dump() + " is not an integer");
    return value.get<int64_t>();
  };
  const auto number = [&](const char* key) {
    const json value = marian_config_value(hf, key);
    if (!value.is_number())
      throw Error(hf.dir + "/config.json: " + key + " " + value.dump() + " is not a number");
    return value.get<double>();
  };
  auto& model = task.model;
  adoption.take("task.model.embedding_width", model.embedding_width, integer("d_model"),
                adoption.config_key("d_model"));
  const double dropout = number("dropout");
  adoption.take("task.model.dropout_rate", model.dropout_rate, dropout,
                adoption.config_key("dropout"));
  const std::string activation = marian_activation(hf);
  const std::string marian = hf.dir + "/config.json's MarianMT computes";
  for (const std::string stack : {"encoder", "decoder"}) {
    auto& s = stack == "encoder" ? model.encoder : model.decoder;
    const std::string p = "task.model." + stack + ".";
    const auto key = [&](const char* suffix) { return stack + suffix; };
    adoption.take(p + "num_layers", s.num_layers, integer(key("_layers").c_str()),
                  adoption.config_key(key("_layers")));
    adoption.take(p + "num_attention_heads", s.num_attention_heads,
                  integer(key("_attention_heads").c_str()),
                  adoption.config_key(key("_attention_heads")));
    adoption.take(p + "intermediate_size", s.intermediate_size, integer(key("_ffn_dim").c_str()),
                  adoption.config_key(key("_ffn_dim")));
    adoption.take(p + "activation", s.activation, activation,
                  adoption.config_key("activation_function"));
    adoption.take(p + "dropout_rate", s.dropout_rate, dropout, adoption.config_key("dropout"));
    adoption.take(p + "attention_dropout_rate", s.attention_dropout_rate,
                  number("attention_dropout"), adoption.config_key("attention_dropout"));
    adoption.take(p + "intermediate_dropout", s.intermediate_dropout, number("activation_dropout"),
                  adoption.config_key("activation_dropout"));
    adoption.take(p + "use_bias", s.use_bias, true, marian + " biases:");
    adoption.take(p + "norm_first", s.norm_first, false, marian + " post-layer-norm blocks:");
    adoption.take(p + "norm_epsilon", s.norm_epsilon, 1e-5, marian + " layer norms of epsilon");
  }
  adoption.take("task.model.position_encoding", model.position_encoding, std::string("marian"),
                marian + " its own sinusoids:");
  adoption.take("task.model.output_bias", model.output_bias, true,
                marian + " a final_logits_bias:");
  adoption.take("task.model.zero_pad_embedding", model.zero_pad_embedding, false,
                marian + " the <pad> row's embedding (decoding starts there):");
  return adoption.log_lines();
}

}  // namespace garden::nlp
