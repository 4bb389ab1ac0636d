#include "garden/nlp/interop/huggingface.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/config/definitions.h"
#include "garden/config/validation.h"
#include "garden/core/safetensors.h"

namespace garden::nlp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;  // c10's "[3, 32]"
  return out.str();
}

// The encoder's prefix in the file: "" (BertModel, ElectraModel), "bert."
// or "electra." (the models with heads).
std::string encoder_prefix(const HuggingFaceModel& model) {
  for (const char* prefix : {"", "bert.", "electra."})
    if (model.tensors.count(std::string(prefix) + "embeddings.word_embeddings.weight"))
      return prefix;
  throw Error(model.dir + "/" + model.weights_file +
              " has no embeddings.word_embeddings.weight (nor under bert. or electra.): not a "
              "BERT or ELECTRA encoder");
}

}  // namespace

bool is_huggingface_dir(const std::string& path) {
  std::error_code ignored;
  return !path.empty() && fs::is_directory(path, ignored) &&
         fs::is_regular_file(fs::path(path) / "config.json", ignored);
}

HuggingFaceModel read_huggingface_config(const std::string& dir) {
  HuggingFaceModel model;
  model.dir = dir;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string text = read_file(config_path, "Hugging Face config");
  try {
    model.config = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(config_path + ": not JSON (" + e.what() + ")");
  }
  if (!model.config.is_object()) throw Error(config_path + ": not a JSON object");
  model.model_type = model.config.value("model_type", "");
  const auto architectures = model.config.find("architectures");
  if (architectures != model.config.end() && architectures->is_array() && !architectures->empty() &&
      architectures->front().is_string())
    model.architecture = architectures->front().get<std::string>();
  return model;
}

HuggingFaceModel read_huggingface_dir(const std::string& dir) {
  HuggingFaceModel model = read_huggingface_config(dir);
  const fs::path weights = fs::path(dir) / "model.safetensors";
  if (!fs::exists(weights)) {
    const fs::path pickle = fs::path(dir) / "pytorch_model.bin";
    if (!fs::exists(pickle)) throw Error(dir + " has no model.safetensors");
    model.tensors = read_pytorch_state_dict(pickle.string());
    model.weights_file = "pytorch_model.bin";
    return model;
  }
  model.tensors = read_safetensors(weights.string()).tensors;
  return model;
}

std::map<std::string, at::Tensor> read_pytorch_state_dict(const std::string& path) {
  const std::string bytes = read_file(path, "PyTorch checkpoint");
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    // LibTorch's unpickler takes a dict of tensors, not the OrderedDict
    // (with its _metadata) that torch.save(model.state_dict()) writes.
    std::string why = e.what_without_backtrace();
    why = why.substr(0, why.find('\n'));
    throw Error(path + ": LibTorch cannot unpickle it (" + why +
                "); it reads a dict of tensors, not save_pretrained's OrderedDict: convert it to "
                "model.safetensors (save_pretrained(dir, safe_serialization=True))");
  }
  if (!value.isGenericDict()) throw Error(path + ": not a dict of tensors");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor())
      throw Error(path + ": not a dict of name -> tensor");
    tensors.emplace(item.key().toStringRef(), item.value().toTensor().contiguous());
  }
  return tensors;
}

void check_huggingface_encoder_config(const HuggingFaceModel& model,
                                      const BertEncoderOptions& options,
                                      const std::string& garden_prefix) {
  const json& c = model.config;
  const std::string where = model.dir + "/config.json: ";
  if (model.model_type != "bert" && model.model_type != "electra")
    throw Error(where + "model_type '" + model.model_type +
                "' is not an encoder Garden reads (bert, electra)");
  const auto integer = [&](const char* key, int64_t fallback, int64_t garden,
                           const std::string& garden_key) {
    const int64_t value =
        c.contains(key) && c[key].is_number_integer() ? c[key].get<int64_t>() : fallback;
    if (value != garden)
      throw Error(where + key + " " + std::to_string(value) + " differs from " + garden_prefix +
                  garden_key + " " + std::to_string(garden));
  };
  const auto real = [&](const char* key, double fallback, double garden,
                        const std::string& garden_key) {
    const double value = c.contains(key) && c[key].is_number() ? c[key].get<double>() : fallback;
    if (std::abs(value - garden) > 1e-12 * std::max(1.0, std::abs(garden)))
      throw Error(where + key + " " + config::number_text(value) + " differs from " +
                  garden_prefix + garden_key + " " + config::number_text(garden));
  };
  // BertConfig's and ElectraConfig's defaults for what config.json leaves out.
  const bool electra = model.model_type == "electra";
  const int64_t hidden = c.contains("hidden_size") && c["hidden_size"].is_number_integer()
                             ? c["hidden_size"].get<int64_t>()
                             : (electra ? 256 : 768);
  integer("vocab_size", 30522, options.vocab_size, "vocab_size");
  integer("hidden_size", hidden, options.hidden_size, "hidden_size");
  integer("num_hidden_layers", 12, options.num_layers, "num_layers");
  integer("num_attention_heads", electra ? 4 : 12, options.num_attention_heads,
          "num_attention_heads");
  integer("intermediate_size", electra ? 1024 : 3072, options.intermediate_size,
          "intermediate_size");
  integer("max_position_embeddings", 512, options.max_position_embeddings,
          "max_position_embeddings");
  integer("type_vocab_size", 2, options.type_vocab_size, "type_vocab_size");
  const int64_t embedding =
      electra ? (c.contains("embedding_size") && c["embedding_size"].is_number_integer()
                     ? c["embedding_size"].get<int64_t>()
                     : 128)
              : hidden;
  if (embedding != options.embedding_width())
    throw Error(where + "embedding_size " + std::to_string(embedding) + " differs from " +
                garden_prefix + "embedding_size " + std::to_string(options.embedding_width()));
  real("layer_norm_eps", 1e-12, options.norm_epsilon, "layer-norm epsilon (Garden's is fixed)");
  real("hidden_dropout_prob", 0.1, options.dropout_rate, "dropout_rate");
  real("attention_probs_dropout_prob", 0.1, options.attention_dropout_rate,
       "attention_dropout_rate");
  const std::string act = c.value("hidden_act", "gelu");
  if (act != options.hidden_activation || (act != "gelu" && act != "relu"))
    throw Error(where + "hidden_act '" + act + "' differs from " + garden_prefix +
                "hidden_activation '" + options.hidden_activation +
                "' (Garden computes gelu, the exact erf form, and relu)");
  const std::string positions = c.value("position_embedding_type", "absolute");
  if (positions != "absolute")
    throw Error(where + "position_embedding_type '" + positions +
                "' is not supported (absolute only)");
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (c.value(key, false))
      throw Error(where + key + " true is not supported: Garden reads encoders");
  if (options.norm_first)
    throw Error(where + "BERT and ELECTRA are post-layer-norm; " + garden_prefix +
                "norm_first true differs");
  if (options.alibi_slope != 0.0)
    throw Error(where + "BERT and ELECTRA have no attention biases; " + garden_prefix +
                "alibi_slope " + std::to_string(options.alibi_slope) + " differs");
}

std::map<std::string, at::Tensor> huggingface_encoder_tensors(const HuggingFaceModel& model,
                                                              const BertEncoderOptions& options,
                                                              const std::string& garden_prefix) {
  const std::string p = encoder_prefix(model);
  const auto get = [&](const std::string& name) -> const at::Tensor& {
    const auto it = model.tensors.find(p + name);
    if (it == model.tensors.end())
      throw Error(model.dir + "/" + model.weights_file + " has no tensor '" + p + name + "'");
    return it->second;
  };
  std::map<std::string, at::Tensor> out;
  const std::string& g = garden_prefix;
  const auto both = [&](const std::string& hf, const std::string& garden) {
    out[g + garden + ".weight"] = get(hf + ".weight");
    out[g + garden + ".bias"] = get(hf + ".bias");
  };
  out[g + "word_embeddings.weight"] = get("embeddings.word_embeddings.weight");
  out[g + "position_embeddings.weight"] = get("embeddings.position_embeddings.weight");
  out[g + "type_embeddings.weight"] = get("embeddings.token_type_embeddings.weight");
  both("embeddings.LayerNorm", "embedding_layer_norm");
  if (options.embedding_width() != options.hidden_size)
    both("embeddings_project", "embedding_projection");
  for (int64_t i = 0; i < options.num_layers; ++i) {
    const std::string hf = "encoder.layer." + std::to_string(i) + ".";
    const std::string garden = "layer_" + std::to_string(i) + ".";
    for (const char* part : {"weight", "bias"})
      out[g + garden + "self_attention.query_key_value." + part] =
          at::cat({get(hf + "attention.self.query." + part), get(hf + "attention.self.key." + part),
                   get(hf + "attention.self.value." + part)},
                  0);
    both(hf + "attention.output.dense", garden + "self_attention.output");
    both(hf + "attention.output.LayerNorm", garden + "self_attention_layer_norm");
    both(hf + "intermediate.dense", garden + "feed_forward.intermediate");
    both(hf + "output.dense", garden + "feed_forward.output");
    both(hf + "output.LayerNorm", garden + "output_layer_norm");
  }
  return out;
}

int64_t load_named_tensors(torch::nn::Module& module,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source) {
  auto parameters = module.named_parameters(/*recurse=*/true);
  auto buffers = module.named_buffers(/*recurse=*/true);
  torch::NoGradGuard no_grad;
  int64_t copied = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor* target = parameters.find(name);
    if (!target) target = buffers.find(name);
    if (!target) throw Error(source + ": the model has no parameter '" + name + "'");
    if (target->sizes() != tensor.sizes())
      throw Error(source + ": " + name + " is " + shape_text(tensor.sizes()) + ", expected " +
                  shape_text(target->sizes()));
    target->copy_(tensor.to(target->device(), target->scalar_type()));
    ++copied;
  }
  return copied;
}

std::vector<std::pair<std::string, at::Tensor>> garden_encoder_to_huggingface(
    torch::nn::Module& module, const BertEncoderOptions& options, const std::string& garden_prefix,
    const std::string& hf_prefix) {
  auto parameters = module.named_parameters(/*recurse=*/true);
  const auto get = [&](const std::string& name) {
    const at::Tensor* t = parameters.find(garden_prefix + name);
    if (!t) throw Error("the model has no parameter '" + garden_prefix + name + "'");
    return t->detach().to(at::kCPU).contiguous();
  };
  std::vector<std::pair<std::string, at::Tensor>> out;
  const std::string& p = hf_prefix;
  const auto both = [&](const std::string& garden, const std::string& hf) {
    out.emplace_back(p + hf + ".weight", get(garden + ".weight"));
    out.emplace_back(p + hf + ".bias", get(garden + ".bias"));
  };
  out.emplace_back(p + "embeddings.word_embeddings.weight", get("word_embeddings.weight"));
  out.emplace_back(p + "embeddings.position_embeddings.weight", get("position_embeddings.weight"));
  out.emplace_back(p + "embeddings.token_type_embeddings.weight", get("type_embeddings.weight"));
  both("embedding_layer_norm", "embeddings.LayerNorm");
  if (options.embedding_width() != options.hidden_size)
    both("embedding_projection", "embeddings_project");
  const int64_t d = options.hidden_size;
  for (int64_t i = 0; i < options.num_layers; ++i) {
    const std::string garden = "layer_" + std::to_string(i) + ".";
    const std::string hf = "encoder.layer." + std::to_string(i) + ".";
    for (const char* part : {"weight", "bias"}) {
      const at::Tensor qkv = get(garden + "self_attention.query_key_value." + part);
      const char* names[] = {"query", "key", "value"};
      for (int64_t k = 0; k < 3; ++k)
        out.emplace_back(p + hf + "attention.self." + names[k] + "." + part,
                         qkv.narrow(0, k * d, d).contiguous());
    }
    both(garden + "self_attention.output", hf + "attention.output.dense");
    both(garden + "self_attention_layer_norm", hf + "attention.output.LayerNorm");
    both(garden + "feed_forward.intermediate", hf + "intermediate.dense");
    both(garden + "feed_forward.output", hf + "output.dense");
    both(garden + "output_layer_norm", hf + "output.LayerNorm");
  }
  return out;
}

json huggingface_encoder_config(const BertEncoderOptions& o, const std::string& model_type) {
  if (model_type == "bert" && o.embedding_width() != o.hidden_size)
    throw Error("a BERT checkpoint has no embedding projection: embedding_size " +
                std::to_string(o.embedding_width()) + " differs from hidden_size " +
                std::to_string(o.hidden_size) + " (export it as electra)");
  if (o.norm_first) throw Error("norm_first true has no Hugging Face BERT or ELECTRA equivalent");
  if (o.alibi_slope != 0.0)
    throw Error("alibi_slope " + std::to_string(o.alibi_slope) +
                " has no Hugging Face BERT or ELECTRA equivalent (0 has)");
  json c = {{"model_type", model_type},
            {"vocab_size", o.vocab_size},
            {"hidden_size", o.hidden_size},
            {"num_hidden_layers", o.num_layers},
            {"num_attention_heads", o.num_attention_heads},
            {"intermediate_size", o.intermediate_size},
            {"hidden_act", o.hidden_activation},
            {"hidden_dropout_prob", o.dropout_rate},
            {"attention_probs_dropout_prob", o.attention_dropout_rate},
            {"max_position_embeddings", o.max_position_embeddings},
            {"type_vocab_size", o.type_vocab_size},
            {"initializer_range", o.initializer_range},
            {"layer_norm_eps", o.norm_epsilon},
            {"position_embedding_type", "absolute"},
            {"pad_token_id", 0},
            {"torch_dtype", "float32"}};
  if (model_type == "electra") c["embedding_size"] = o.embedding_width();
  return c;
}

}  // namespace garden::nlp

namespace garden::nlp {

bool initialize_from_huggingface(const config::TaskConfig& task, torch::nn::Module& model,
                                 const BertEncoderOptions& encoder,
                                 const std::map<std::string, std::string>& extra,
                                 const std::map<std::string, std::string>& required_extra) {
  if (!is_huggingface_dir(task.init_checkpoint)) return false;
  const HuggingFaceModel hf = read_huggingface_dir(task.init_checkpoint);
  check_huggingface_encoder_config(hf, encoder, "task.model.encoder.bert.");
  std::map<std::string, at::Tensor> tensors = huggingface_encoder_tensors(hf, encoder, "encoder.");
  const auto& modules = task.init_checkpoint_modules;
  const bool all =
      modules.empty() || std::find(modules.begin(), modules.end(), "all") != modules.end();
  for (const auto& module : modules) {
    if (module == "all" || module == "encoder") continue;
    bool known = false;
    for (const auto& [garden, hf_name] : extra) known |= garden.rfind(module + ".", 0) == 0;
    if (!known)
      throw Error("task.init_checkpoint_modules: '" + module + "' is not something " + hf.dir +
                  " holds for this task (encoder, all)");
  }
  // A head's tensor is at its own name, or under the encoder's prefix
  // ("pooler.dense.weight" in BertModel, "bert.pooler.dense.weight" in the
  // models with heads).
  const std::string prefix = encoder_prefix(hf);
  std::set<std::string> taken;
  const auto take = [&](const std::string& garden, const std::string& hf_name, bool required) {
    auto it = hf.tensors.find(hf_name);
    if (it == hf.tensors.end()) it = hf.tensors.find(prefix + hf_name);
    if (it == hf.tensors.end()) {
      if (required)
        throw Error(hf.dir + "/" + hf.weights_file + " has no tensor '" + prefix + hf_name + "'");
      return;
    }
    tensors[garden] = it->second;
    taken.insert(it->first);
  };
  for (const auto& [garden, hf_name] : extra) {
    bool selected = all;
    for (const auto& module : modules) selected |= garden.rfind(module + ".", 0) == 0;
    if (selected) take(garden, hf_name, false);
  }
  for (const auto& [garden, hf_name] : required_extra) take(garden, hf_name, true);
  // A classification head the task's model cannot take is not dropped
  // silently.
  if (all)
    for (const auto& [name, tensor] : hf.tensors)
      if ((name.rfind("classifier.", 0) == 0 || name.rfind("qa_outputs.", 0) == 0) &&
          !taken.count(name))
        throw Error(hf.dir + ": " + name + " (" +
                    (hf.architecture.empty() ? hf.model_type : hf.architecture) +
                    "'s head) has no place in this task's model: restore the encoder alone "
                    "(task.init_checkpoint_modules: [encoder])");
  const int64_t copied = load_named_tensors(model, tensors, hf.dir);
  log_info() << "initialized the model from " << hf.dir << " ("
             << (hf.architecture.empty() ? hf.model_type : hf.architecture) << "): " << copied
             << " tensors restored";
  return true;
}

}  // namespace garden::nlp
