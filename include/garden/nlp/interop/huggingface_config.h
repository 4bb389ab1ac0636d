// A task config taking its shape from a Hugging Face directory, as
// from_pretrained takes a model's from config.json: every key the user did
// not set gets the directory's value; a key the user set (a --config_file or
// --params_override: config::SetKeys) to another value is one garden::Error
// naming both,
//   task.model.encoder.bert.hidden_size 256 (set by --params_override)
//   differs from D/config.json hidden_size 128
// An experiment's default is not the user's: it is replaced.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "garden/config/yaml_io.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/modeling/encoder_config.h"

namespace garden::nlp {

class ConfigAdoption {
 public:
  // `dir`: the Hugging Face directory, named in messages.
  ConfigAdoption(std::string dir, const config::SetKeys& set_by_user);

  // Sets `field` (the config key `key`, a dotted path) to `value`, which
  // `from` describes ("hidden_size" for config.json's key, or a sentence of
  // its own), unless the user set `key`: then a different value throws.
  void take(const std::string& key, int64_t& field, int64_t value, const std::string& from);
  void take(const std::string& key, double& field, double value, const std::string& from);
  void take(const std::string& key, bool& field, bool value, const std::string& from);
  void take(const std::string& key, std::string& field, const std::string& value,
            const std::string& from);
  void take(const std::string& key, std::optional<int64_t>& field, std::optional<int64_t> value,
            const std::string& from);
  void take(const std::string& key, config::NameList& field, const config::NameList& value,
            const std::string& from);

  // As take, for a key the user may set differently (a dropout, say): the
  // user's different value is kept, and a note says so ("keeps KEY VALUE
  // (set by WHERE) instead of FROM VALUE").
  void offer(const std::string& key, double& field, double value, const std::string& from);
  void offer(const std::string& key, std::string& field, const std::string& value,
             const std::string& from);

  // Whether the user set `key`, and where ("--params_override", ...).
  bool set_by_user(const std::string& key) const;
  std::string where_set(const std::string& key) const;
  const std::string& dir() const { return dir_; }
  // "DIR/config.json KEY": the default `from` of a config.json key.
  std::string config_key(const std::string& key) const;

  // A line to log after the changes' line.
  void note(std::string line) { notes_.push_back(std::move(line)); }
  // The lines to log: one naming every key whose value changed ("from DIR:
  // KEY VALUE, ...", none when none did), then the notes.
  std::vector<std::string> log_lines() const;

 private:
  template <class T>
  // A value the user set and `value` contradicts: refused, or with
  // `keep_users` kept with a note (offer).
  void take_value(const std::string& key, T& field, const T& value, const std::string& from,
                  std::string (*text)(const T&), bool keep_users = false);
  std::string dir_;
  const config::SetKeys& set_by_user_;
  std::vector<std::string> changed_, notes_;
};

// config.json's value of an integer, number or string key, or `fallback`
// (the transformers config class's default) when the key is absent or null;
// another type throws naming the file and the key.
int64_t config_integer(const HuggingFaceModel& model, const char* key, int64_t fallback);
double config_number(const HuggingFaceModel& model, const char* key, double fallback);
std::string config_string(const HuggingFaceModel& model, const char* key,
                          const std::string& fallback);

// A BERT or ELECTRA config.json into Model Garden's BertEncoderConfig at
// `prefix` ("task.model.encoder.bert."): vocab_size, hidden_size,
// num_layers (num_hidden_layers), num_attention_heads, intermediate_size,
// hidden_activation (hidden_act: gelu, relu), dropout_rate
// (hidden_dropout_prob), attention_dropout_rate
// (attention_probs_dropout_prob), max_position_embeddings,
// type_vocab_size, initializer_range and embedding_size (ELECTRA's; null
// for BERT, which has no projection). What Garden cannot compute
// (check_huggingface_encoder_config) is refused in one line.
void adopt_huggingface_encoder(const HuggingFaceModel& model, BertEncoderConfig& encoder,
                               const std::string& prefix, ConfigAdoption& adoption);

// The WordPiece tokenizer of a Hugging Face directory, as BertTokenizer
// (or ElectraTokenizer) from_pretrained reads it.
struct HuggingFaceWordPiece {
  std::string vocab_file;  // DIR/vocab.txt, else DIR/tokenizer.json when WordPiece
  bool lower_case = true;  // BertTokenizer's default
  // What lower_case was read from: "DIR/tokenizer_config.json
  // do_lower_case", "DIR/tokenizer.json normalizer.lowercase", or
  // "BertTokenizer's default do_lower_case".
  std::string lower_case_from;
};
// Nothing when the directory holds no WordPiece vocabulary.
std::optional<HuggingFaceWordPiece> huggingface_wordpiece(const std::string& dir);

}  // namespace garden::nlp
