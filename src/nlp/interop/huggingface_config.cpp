#include "garden/nlp/interop/huggingface_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <type_traits>
#include <utility>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/config/validation.h"

namespace garden::nlp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string integer_text(const int64_t& v) { return std::to_string(v); }
std::string real_text(const double& v) { return config::number_text(v); }
std::string bool_text(const bool& v) { return v ? "true" : "false"; }
std::string string_text(const std::string& v) { return "'" + v + "'"; }
std::string optional_text(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "null";
}
std::string names_text(const config::NameList& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out + "]";
}

bool same_real(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b)); }

const json* config_value(const HuggingFaceModel& model, const char* key) {
  const auto it = model.config.find(key);
  return it == model.config.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong_type(const HuggingFaceModel& model, const char* key, const json& value,
                             const char* expected) {
  throw Error(model.dir + "/config.json: " + key + " " + value.dump() + " is not " + expected);
}

// A JSON file of the directory, or null when it has none.
json optional_json(const fs::path& path) {
  std::error_code ignored;
  if (!fs::is_regular_file(path, ignored)) return nullptr;
  try {
    return json::parse(read_file(path.string(), "tokenizer file"));
  } catch (const json::parse_error& e) {
    throw Error(path.string() + ": not JSON (" + e.what() + ")");
  }
}

}  // namespace

ConfigAdoption::ConfigAdoption(std::string dir, const config::SetKeys& set_by_user)
    : dir_(std::move(dir)), set_by_user_(set_by_user) {}

bool ConfigAdoption::set_by_user(const std::string& key) const {
  return set_by_user_.count(key) > 0;
}

std::string ConfigAdoption::where_set(const std::string& key) const {
  const auto it = set_by_user_.find(key);
  return it == set_by_user_.end() ? std::string() : it->second;
}

std::string ConfigAdoption::config_key(const std::string& key) const {
  return dir_ + "/config.json " + key;
}

template <class T>
void ConfigAdoption::take_value(const std::string& key, T& field, const T& value,
                                const std::string& from, std::string (*text)(const T&),
                                bool keep_users) {
  bool equal;
  if constexpr (std::is_same_v<T, double>)
    equal = same_real(field, value);
  else
    equal = field == value;
  if (set_by_user(key)) {
    if (equal) return;
    if (keep_users)
      note("keeps " + key + " " + text(field) + " (set by " + where_set(key) + ") instead of " +
           from + " " + text(value));
    else
      throw Error(key + " " + text(field) + " (set by " + where_set(key) + ") differs from " +
                  from + " " + text(value));
    return;
  }
  if (equal) return;
  field = value;
  changed_.push_back(key + " " + text(value));
}

void ConfigAdoption::take(const std::string& key, int64_t& field, int64_t value,
                          const std::string& from) {
  take_value(key, field, value, from, integer_text);
}
void ConfigAdoption::take(const std::string& key, double& field, double value,
                          const std::string& from) {
  take_value(key, field, value, from, real_text);
}
void ConfigAdoption::offer(const std::string& key, double& field, double value,
                           const std::string& from) {
  take_value(key, field, value, from, real_text, /*keep_users=*/true);
}
void ConfigAdoption::offer(const std::string& key, std::string& field, const std::string& value,
                           const std::string& from) {
  take_value(key, field, value, from, string_text, /*keep_users=*/true);
}
void ConfigAdoption::take(const std::string& key, bool& field, bool value,
                          const std::string& from) {
  take_value(key, field, value, from, bool_text);
}
void ConfigAdoption::take(const std::string& key, std::string& field, const std::string& value,
                          const std::string& from) {
  take_value(key, field, value, from, string_text);
}
void ConfigAdoption::take(const std::string& key, std::optional<int64_t>& field,
                          std::optional<int64_t> value, const std::string& from) {
  take_value(key, field, value, from, optional_text);
}
void ConfigAdoption::take(const std::string& key, config::NameList& field,
                          const config::NameList& value, const std::string& from) {
  take_value(key, field, value, from, names_text);
}

std::vector<std::string> ConfigAdoption::log_lines() const {
  std::vector<std::string> lines;
  if (!changed_.empty()) {
    std::string line;
    for (const auto& change : changed_) line += (line.empty() ? "" : ", ") + change;
    lines.push_back("from " + dir_ + ": " + line);
  }
  lines.insert(lines.end(), notes_.begin(), notes_.end());
  return lines;
}

int64_t config_integer(const HuggingFaceModel& model, const char* key, int64_t fallback) {
  const json* value = config_value(model, key);
  if (!value) return fallback;
  if (!value->is_number_integer()) wrong_type(model, key, *value, "an integer");
  return value->get<int64_t>();
}

double config_number(const HuggingFaceModel& model, const char* key, double fallback) {
  const json* value = config_value(model, key);
  if (!value) return fallback;
  if (!value->is_number()) wrong_type(model, key, *value, "a number");
  return value->get<double>();
}

std::string config_string(const HuggingFaceModel& model, const char* key,
                          const std::string& fallback) {
  const json* value = config_value(model, key);
  if (!value) return fallback;
  if (!value->is_string()) wrong_type(model, key, *value, "a string");
  return value->get<std::string>();
}

void adopt_huggingface_encoder(const HuggingFaceModel& model, BertEncoderConfig& encoder,
                               const std::string& prefix, ConfigAdoption& adoption) {
  if (model.model_type != "bert" && model.model_type != "electra")
    throw Error(model.dir + "/config.json: model_type '" + model.model_type +
                "' is not an encoder Garden reads (bert, electra)");
  const auto take_integer = [&](const char* garden, int64_t& field, const char* key,
                                int64_t fallback) {
    adoption.take(prefix + garden, field, config_integer(model, key, fallback),
                  adoption.config_key(key));
  };
  const auto take_real = [&](const char* garden, double& field, const char* key, double fallback) {
    adoption.take(prefix + garden, field, config_number(model, key, fallback),
                  adoption.config_key(key));
  };
  // BertConfig's and ElectraConfig's defaults for what config.json leaves out.
  const bool electra = model.model_type == "electra";
  take_integer("vocab_size", encoder.vocab_size, "vocab_size", 30522);
  take_integer("hidden_size", encoder.hidden_size, "hidden_size", electra ? 256 : 768);
  take_integer("num_layers", encoder.num_layers, "num_hidden_layers", 12);
  take_integer("num_attention_heads", encoder.num_attention_heads, "num_attention_heads",
               electra ? 4 : 12);
  take_integer("intermediate_size", encoder.intermediate_size, "intermediate_size",
               electra ? 1024 : 3072);
  take_integer("max_position_embeddings", encoder.max_position_embeddings,
               "max_position_embeddings", 512);
  take_integer("type_vocab_size", encoder.type_vocab_size, "type_vocab_size", 2);
  take_real("dropout_rate", encoder.dropout_rate, "hidden_dropout_prob", 0.1);
  take_real("attention_dropout_rate", encoder.attention_dropout_rate,
            "attention_probs_dropout_prob", 0.1);
  take_real("initializer_range", encoder.initializer_range, "initializer_range", 0.02);
  const std::string act = config_string(model, "hidden_act", "gelu");
  if (act != "gelu" && act != "relu")
    throw Error(model.dir + "/config.json: hidden_act '" + act +
                "' is not computed by Garden (gelu, the exact erf form, and relu)");
  adoption.take(prefix + "hidden_activation", encoder.hidden_activation, act,
                adoption.config_key("hidden_act"));
  // ELECTRA projects its embeddings (embedding_size, 128 by default); BERT
  // has no projection: Garden's null. A user's null means hidden_size, so
  // a user's value of the same width is the same model.
  const int64_t width =
      electra ? config_integer(model, "embedding_size", 128) : encoder.hidden_size;
  const std::string key = prefix + "embedding_size";
  if (!(adoption.set_by_user(key) && encoder.embedding_size.value_or(encoder.hidden_size) == width))
    adoption.take(key, encoder.embedding_size,
                  electra ? std::optional<int64_t>(width) : std::optional<int64_t>(),
                  electra ? adoption.config_key("embedding_size")
                          : model.dir + "/config.json model_type bert (no embedding projection):");
  // What BERT and ELECTRA do not compute: an experiment's attention biases
  // (bert/sentence_prediction_tiny's) or pre-layer-norm blocks are replaced;
  // the user's are refused, naming both values.
  const std::string computes = model.dir + "/config.json's " + model.model_type + " computes";
  adoption.take(prefix + "alibi_slope", encoder.alibi_slope, 0.0,
                computes + " no attention biases:");
  adoption.take(prefix + "norm_first", encoder.norm_first, false,
                computes + " post-layer-norm blocks:");
  // What the config cannot express: refused now, not at the first step.
  check_huggingface_encoder_config(model, encoder.options(), prefix);
}

std::optional<HuggingFaceWordPiece> huggingface_wordpiece(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ignored;
  HuggingFaceWordPiece out;
  const json tokenizer = optional_json(root / "tokenizer.json");
  const bool wordpiece_json = tokenizer.is_object() && tokenizer.contains("model") &&
                              tokenizer["model"].is_object() &&
                              tokenizer["model"].value("type", "") == "WordPiece";
  if (fs::is_regular_file(root / "vocab.txt", ignored))
    out.vocab_file = (root / "vocab.txt").string();
  else if (wordpiece_json)
    out.vocab_file = (root / "tokenizer.json").string();
  else
    return std::nullopt;
  const json settings = optional_json(root / "tokenizer_config.json");
  if (settings.is_object() && settings.contains("do_lower_case") &&
      settings["do_lower_case"].is_boolean()) {
    out.lower_case = settings["do_lower_case"].get<bool>();
    out.lower_case_from = (root / "tokenizer_config.json").string() + " do_lower_case";
  } else if (wordpiece_json && tokenizer.contains("normalizer") &&
             tokenizer["normalizer"].is_object() && tokenizer["normalizer"].contains("lowercase") &&
             tokenizer["normalizer"]["lowercase"].is_boolean()) {
    out.lower_case = tokenizer["normalizer"]["lowercase"].get<bool>();
    out.lower_case_from = (root / "tokenizer.json").string() + " normalizer.lowercase";
  } else {
    out.lower_case = true;
    out.lower_case_from = "BertTokenizer's default do_lower_case (" + dir + " does not say)";
  }
  return out;
}

}  // namespace garden::nlp
