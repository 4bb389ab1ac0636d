#include "garden/nlp/tasks/huggingface_adoption.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
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

// A Garden checkpoint's encoder, as Model Garden's fine-tuning reads the
// pretrainer's encoder config: what the restored weights need to compute
// what they computed there. The module restored as the task's "encoder"
// (the checkpoint's checkpoint_items: an ELECTRA run's "discriminator") has
// its config at task.model.<module>_encoder or task.model.<module> of the
// params the checkpoint carries. Its shapes, heads, activation and
// normalization are taken (a different value the user set is refused: the
// weights would compute something else); its dropouts, initializer and
// attention biases too, unless the user set them, since a fine-tuning may
// change those (a line says which the user's value replaces).
void adopt_garden_encoder(const config::TaskConfig& task, BertEncoderConfig& encoder,
                          const config::SetKeys& set_by_user, std::vector<std::string>& lines) {
  if (task.init_checkpoint.empty() || !task.init_checkpoint_rename.empty()) return;
  const auto& modules = task.init_checkpoint_modules;
  if (std::find(modules.begin(), modules.end(), "encoder") == modules.end()) return;
  const auto file = latest_checkpoint(task.init_checkpoint);
  if (!file) return;  // refused when the task initializes, naming the path
  const json meta = read_checkpoint_meta(*file);
  if (!meta.contains("params") || !meta.at("params").is_string()) return;  // older checkpoints
  std::string module = "encoder";
  if (const auto items = meta.value("checkpoint_items", json::object());
      items.is_object() && items.contains("encoder") && items.at("encoder").is_string())
    module = items.at("encoder").get<std::string>();
  YAML::Node model;
  try {
    model = YAML::Load(meta.at("params").get<std::string>())["task"]["model"];
  } catch (const YAML::Exception& e) {
    throw Error("checkpoint '" + *file + "': its params are not YAML: " + e.what());
  }
  std::string path;
  YAML::Node node;
  for (const std::string& name : {module + "_encoder", module}) {
    if (!model.IsMap() || !model[name].IsMap() || !model[name]["bert"].IsMap()) continue;
    path = "task.model." + name + ".bert.";
    node = model[name]["bert"];
    break;
  }
  if (!node) return;  // not a BERT encoder's checkpoint
  BertEncoderConfig source;
  try {
    config::read_config(source, node, path.substr(0, path.size() - 1));
  } catch (const Error& e) {
    // A checkpoint of another Garden version, say: its weights may still load.
    lines.push_back("took nothing from " + *file + "'s params: " + e.what());
    return;
  }

  ConfigAdoption adoption(*file, set_by_user);
  const std::string prefix = "task.model.encoder.bert.";
  const auto from = [&](const char* key) { return *file + " " + path + key; };
  const auto take_integer = [&](const char* key, int64_t& field, int64_t value) {
    adoption.take(prefix + key, field, value, from(key));
  };
  take_integer("vocab_size", encoder.vocab_size, source.vocab_size);
  take_integer("hidden_size", encoder.hidden_size, source.hidden_size);
  take_integer("num_layers", encoder.num_layers, source.num_layers);
  take_integer("num_attention_heads", encoder.num_attention_heads, source.num_attention_heads);
  adoption.take(prefix + "hidden_activation", encoder.hidden_activation, source.hidden_activation,
                from("hidden_activation"));
  take_integer("intermediate_size", encoder.intermediate_size, source.intermediate_size);
  take_integer("max_position_embeddings", encoder.max_position_embeddings,
               source.max_position_embeddings);
  take_integer("type_vocab_size", encoder.type_vocab_size, source.type_vocab_size);
  // null means hidden_size: compared as the width the weights have.
  const int64_t width = source.embedding_size.value_or(source.hidden_size);
  if (encoder.embedding_size.value_or(encoder.hidden_size) != width)
    adoption.take(prefix + "embedding_size", encoder.embedding_size, std::optional<int64_t>(width),
                  from("embedding_size"));
  adoption.take(prefix + "norm_first", encoder.norm_first, source.norm_first, from("norm_first"));
  const auto offer = [&](const char* key, double& field, double value) {
    adoption.offer(prefix + key, field, value, from(key));
  };
  offer("dropout_rate", encoder.dropout_rate, source.dropout_rate);
  offer("attention_dropout_rate", encoder.attention_dropout_rate, source.attention_dropout_rate);
  offer("initializer_range", encoder.initializer_range, source.initializer_range);
  offer("alibi_slope", encoder.alibi_slope, source.alibi_slope);
  for (auto& line : adoption.log_lines()) lines.push_back(std::move(line));
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
  if (!hf) {
    std::vector<std::string> lines;
    adopt_garden_encoder(task, task.model.encoder.bert, set_by_user, lines);
    return lines;
  }
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
    // BERT's pooler (the head's dense layer) and ELECTRA's head read the
    // [CLS] output: a trained classifier's head is refused another input; a
    // bare encoder's pooler may be given the tokens' mean (a line says so).
    const std::string cls = hf.dir + "'s " + hf.model_type + " pools the [CLS] output:";
    if (!architecture_ends_with(hf, "ForSequenceClassification")) {
      adoption.offer("task.model.pooling", task.model.pooling, std::string("cls"), cls);
      return;
    }
    adoption.take("task.model.pooling", task.model.pooling, std::string("cls"), cls);
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
    // A head the run does not restore starts fresh: its labels are the
    // data's (the meta data's label_list, or task.class_names), not the
    // checkpoint's id2label.
    const auto& modules = task.init_checkpoint_modules;
    const auto names = [&modules](const char* module) {
      return std::find(modules.begin(), modules.end(), module) != modules.end();
    };
    if (!modules.empty() && !names("all") && !names("classifier")) return;
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
