#include "garden/nlp/interop/marian.h"

#include <torch/torch.h>

#include <cmath>

#include "garden/base/error.h"
#include "garden/config/validation.h"

namespace garden::nlp {

namespace {

using json = nlohmann::json;

int64_t decoder_depth(const Seq2SeqTransformerOptions& o) {
  return o.decoder_num_layers >= 0 ? o.decoder_num_layers : o.num_layers;
}

// MarianConfig's defaults for keys a config.json leaves out.
const json& marian_defaults() {
  static const json defaults = {{"vocab_size", 58101},
                                {"max_position_embeddings", 1024},
                                {"encoder_layers", 12},
                                {"encoder_ffn_dim", 4096},
                                {"encoder_attention_heads", 16},
                                {"decoder_layers", 12},
                                {"decoder_ffn_dim", 4096},
                                {"decoder_attention_heads", 16},
                                {"encoder_layerdrop", 0.0},
                                {"decoder_layerdrop", 0.0},
                                {"activation_function", "gelu"},
                                {"d_model", 1024},
                                {"dropout", 0.1},
                                {"attention_dropout", 0.0},
                                {"activation_dropout", 0.0},
                                {"decoder_start_token_id", 58100},
                                {"scale_embedding", false},
                                {"pad_token_id", 58100},
                                {"eos_token_id", 0},
                                {"share_encoder_decoder_embeddings", true},
                                {"tie_word_embeddings", true},
                                {"is_decoder", false}};
  return defaults;
}

}  // namespace

nlohmann::json marian_config_value(const HuggingFaceModel& model, const char* key) {
  const json& c = model.config;
  if (c.contains(key) && !c[key].is_null()) return c[key];
  const auto it = marian_defaults().find(key);
  if (it == marian_defaults().end())
    throw Error(model.dir + "/config.json has no " + key + " (MarianConfig has no default)");
  return *it;
}

std::string marian_activation(const HuggingFaceModel& model) {
  const json act = marian_config_value(model, "activation_function");
  const std::string name = act.is_string() ? act.get<std::string>() : act.dump();
  if (name == "silu" || name == "swish") return "swish";
  if (name == "relu" || name == "gelu") return name;
  throw Error(model.dir + "/config.json: activation_function " + act.dump() +
              " is not computed by Garden (relu, gelu, swish or silu)");
}

namespace {

// Garden's name for MarianMT's activation_function (transformers' ACT2FN:
// swish and silu are one function).
std::string garden_activation(const std::string& hf) { return hf == "silu" ? "swish" : hf; }

at::Tensor rotate_rows(const at::Tensor& t, int64_t marian_pad) {
  // Garden row g is the file's row (g + pad) mod V.
  return at::roll(t, {-marian_pad}, {0}).contiguous();
}

}  // namespace

void check_marian_config(const HuggingFaceModel& model, const Seq2SeqTransformerOptions& o,
                         double embedding_dropout, int64_t marian_pad, int64_t marian_eos) {
  const std::string where = model.dir + "/config.json: ";
  if (model.model_type != "marian")
    throw Error(where + "model_type '" + model.model_type +
                "' is not a translation model Garden reads (marian)");
  const json& c = model.config;
  const auto value = [&](const char* key) -> json {
    if (c.contains(key) && !c[key].is_null()) return c[key];
    return marian_defaults().at(key);
  };
  const auto integer = [&](const char* key, int64_t garden, const std::string& garden_key) {
    const json v = value(key);
    if (!v.is_number_integer() || v.get<int64_t>() != garden)
      throw Error(where + key + " " + v.dump() + " differs from " + garden_key + " " +
                  std::to_string(garden));
  };
  const auto real = [&](const char* key, double garden, const std::string& garden_key) {
    const json v = value(key);
    if (!v.is_number() || std::abs(v.get<double>() - garden) > 1e-12)
      throw Error(where + key + " " + v.dump() + " differs from " + garden_key + " " +
                  config::number_text(garden));
  };
  const auto flag = [&](const char* key, bool required, const std::string& why) {
    const json v = value(key);
    if (!v.is_boolean() || v.get<bool>() != required)
      throw Error(where + key + " " + v.dump() + " " + why);
  };
  integer("vocab_size", o.vocab_size, "the tokenizer's vocabulary of");
  if (c.contains("decoder_vocab_size") && !c["decoder_vocab_size"].is_null())
    integer("decoder_vocab_size", o.vocab_size, "the tokenizer's vocabulary of");
  integer("d_model", o.hidden_size, "task.model.embedding_width");
  integer("encoder_layers", o.num_layers, "task.model.encoder.num_layers");
  integer("decoder_layers", decoder_depth(o), "task.model.decoder.num_layers");
  integer("encoder_attention_heads", o.num_heads, "task.model.encoder.num_attention_heads");
  integer("decoder_attention_heads", o.num_heads, "task.model.decoder.num_attention_heads");
  integer("encoder_ffn_dim", o.intermediate_size, "task.model.encoder.intermediate_size");
  integer("decoder_ffn_dim", o.intermediate_size, "task.model.decoder.intermediate_size");
  const json act = value("activation_function");
  if (!act.is_string() || garden_activation(act.get<std::string>()) != o.activation)
    throw Error(where + "activation_function " + act.dump() +
                " differs from task.model.encoder.activation '" + o.activation +
                "' (Garden computes relu, gelu and swish)");
  real("dropout", o.dropout_rate, "task.model.encoder.dropout_rate");
  real("dropout", embedding_dropout, "task.model.dropout_rate");
  real("attention_dropout", o.attention_dropout_rate, "task.model.encoder.attention_dropout_rate");
  real("activation_dropout", o.intermediate_dropout, "task.model.encoder.intermediate_dropout");
  real("encoder_layerdrop", 0.0, "Garden's layer drop, which is not implemented:");
  real("decoder_layerdrop", 0.0, "Garden's layer drop, which is not implemented:");
  flag("scale_embedding", true,
       "is not supported: Garden's Transformer scales its embeddings by sqrt(d_model)");
  flag("share_encoder_decoder_embeddings", true,
       "is not supported: Garden's Transformer shares one embedding");
  flag("tie_word_embeddings", true,
       "is not supported: Garden's Transformer projects with its embedding");
  flag("is_decoder", false, "is not supported: Garden reads the encoder-decoder");
  integer("pad_token_id", marian_pad, "vocab.json's '<pad>',");
  integer("decoder_start_token_id", marian_pad,
          "vocab.json's '<pad>' (Garden's decoding starts with the padding id),");
  const json eos = value("eos_token_id");
  if (!eos.is_number_integer() || eos.get<int64_t>() != marian_eos)
    throw Error(where + "eos_token_id " + eos.dump() + " differs from vocab.json's '</s>', " +
                std::to_string(marian_eos));
  if (o.norm_first)
    throw Error(where + "MarianMT is post-layer-norm; task.model.encoder.norm_first true differs");
  if (!o.use_bias)
    throw Error(where +
                "MarianMT's projections have biases; task.model.encoder.use_bias false "
                "differs");
  if (std::abs(o.norm_epsilon - 1e-5) > 1e-12)
    throw Error(where +
                "MarianMT's layer norms have epsilon 1e-05; task.model.encoder.norm_epsilon " +
                config::number_text(o.norm_epsilon) + " differs");
  if (o.position_encoding != PositionEncoding::kMarian)
    throw Error(where +
                "MarianMT adds its own sinusoids; task.model.position_encoding must be marian");
}

std::map<std::string, at::Tensor> marian_to_garden(const HuggingFaceModel& model,
                                                   const Seq2SeqTransformerOptions& o,
                                                   int64_t marian_pad) {
  const std::string file = model.dir + "/model.safetensors";
  // MarianMTModel's tensors are under "model."; MarianModel's are not.
  const std::string p = model.tensors.count("model.shared.weight") ||
                                model.tensors.count("model.encoder.embed_tokens.weight")
                            ? "model."
                            : "";
  const auto find = [&](const std::string& name) -> const at::Tensor* {
    const auto it = model.tensors.find(name);
    return it == model.tensors.end() ? nullptr : &it->second;
  };
  const auto get = [&](const std::string& name) -> const at::Tensor& {
    const at::Tensor* t = find(p + name);
    if (!t) throw Error(file + " has no tensor '" + p + name + "'");
    return *t;
  };
  std::map<std::string, at::Tensor> out;
  const at::Tensor* shared = find(p + "shared.weight");
  if (!shared) shared = find(p + "encoder.embed_tokens.weight");
  if (!shared) throw Error(file + " has no tensor '" + p + "shared.weight'");
  for (const std::string& name :
       {p + "encoder.embed_tokens.weight", p + "decoder.embed_tokens.weight",
        std::string("lm_head.weight")}) {
    const at::Tensor* other = find(name);
    if (other && !other->equal(*shared))
      throw Error(file + ": " + name +
                  " differs from the shared embedding; Garden's Transformer has one (tied) "
                  "embedding");
  }
  const int64_t vocab = shared->size(0);
  if (marian_pad < 0 || marian_pad >= vocab)
    throw Error(file + ": <pad> id " + std::to_string(marian_pad) + " is outside the embedding's " +
                std::to_string(vocab) + " rows");
  if (o.zero_pad_embedding && shared->select(0, marian_pad).abs().max().item<double>() != 0.0)
    throw Error(file + ": the embedding row of <pad> (id " + std::to_string(marian_pad) +
                ", the decoder's start) is not zero, and task.model.zero_pad_embedding true "
                "would read it as zero (set it false)");
  out["embedding.weight"] = rotate_rows(*shared, marian_pad);
  if (const at::Tensor* bias = find("final_logits_bias")) {
    const at::Tensor row = bias->reshape({-1});
    if (o.output_bias)
      out["final_logits_bias"] = rotate_rows(row, marian_pad);
    else if (row.abs().max().item<double>() != 0.0)
      throw Error(file + ": final_logits_bias is not zero; set task.model.output_bias: true");
  } else if (o.output_bias) {
    out["final_logits_bias"] = torch::zeros({vocab});
  }
  for (const char* stack : {"encoder", "decoder"}) {
    const std::string positions = p + stack + ".embed_positions.weight";
    if (const at::Tensor* stored = find(positions)) {
      const at::Tensor expected = position_encoding(PositionEncoding::kMarian, stored->size(0),
                                                    o.hidden_size, 0, at::kDouble);
      if (stored->sizes() != expected.sizes() ||
          (stored->to(at::kDouble) - expected).abs().max().item<double>() > 1e-6)
        throw Error(file + ": " + positions +
                    " is not MarianMT's sinusoids (Garden computes them)");
    }
  }
  const auto both = [&](const std::string& hf, const std::string& garden) {
    out[garden + ".weight"] = get(hf + ".weight");
    out[garden + ".bias"] = get(hf + ".bias");
  };
  const auto stacked = [&](const std::string& hf, const std::vector<const char*>& parts,
                           const std::string& garden) {
    for (const char* kind : {"weight", "bias"}) {
      std::vector<at::Tensor> pieces;
      for (const char* part : parts) pieces.push_back(get(hf + part + "." + kind));
      out[garden + "." + kind] = at::cat(pieces, 0);
    }
  };
  const int64_t depths[] = {o.num_layers, decoder_depth(o)};
  for (int s = 0; s < 2; ++s) {
    const std::string stack = s == 0 ? "encoder" : "decoder";
    for (int64_t i = 0; i < depths[s]; ++i) {
      const std::string hf = stack + ".layers." + std::to_string(i) + ".";
      const std::string g = stack + "_layer_" + std::to_string(i) + ".";
      stacked(hf + "self_attn.", {"q_proj", "k_proj", "v_proj"},
              g + "self_attention.query_key_value");
      both(hf + "self_attn.out_proj", g + "self_attention.output");
      both(hf + "self_attn_layer_norm", g + "self_attention_layer_norm");
      if (s == 1) {
        both(hf + "encoder_attn.q_proj", g + "encdec_attention.query");
        stacked(hf + "encoder_attn.", {"k_proj", "v_proj"}, g + "encdec_attention.key_value");
        both(hf + "encoder_attn.out_proj", g + "encdec_attention.output");
        both(hf + "encoder_attn_layer_norm", g + "encdec_attention_layer_norm");
      }
      both(hf + "fc1", g + "feed_forward.intermediate");
      both(hf + "fc2", g + "feed_forward.output");
      both(hf + "final_layer_norm", g + "output_layer_norm");
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> garden_to_marian(Seq2SeqTransformerImpl& model,
                                                                 int64_t marian_pad) {
  const Seq2SeqTransformerOptions& o = model.options();
  if (o.norm_first)
    throw Error(
        "--format=huggingface: MarianMT is post-layer-norm; this model's "
        "task.model.encoder.norm_first is true (no transformers architecture computes it)");
  if (o.position_encoding != PositionEncoding::kMarian)
    throw Error(
        "--format=huggingface: MarianMT computes its own sinusoids; this model was trained "
        "with task.model.position_encoding model_garden (train with marian to export)");
  if (o.activation != "relu" && o.activation != "gelu" && o.activation != "swish")
    throw Error("--format=huggingface: activation '" + o.activation + "' has no MarianMT name");
  auto parameters = model.named_parameters(/*recurse=*/true);
  const auto get = [&](const std::string& name) {
    const at::Tensor* t = parameters.find(name);
    if (!t) throw Error("the model has no parameter '" + name + "'");
    return t->detach().to(at::kCPU, at::kFloat).contiguous();
  };
  const int64_t d = o.hidden_size;
  std::vector<std::pair<std::string, at::Tensor>> out;
  // Garden row g is the file's row (g + pad) mod V.
  const auto unrotate = [&](const at::Tensor& t) {
    return at::roll(t, {marian_pad}, {0}).contiguous();
  };
  at::Tensor embedding = get("embedding.weight").clone();
  // <pad> starts MarianMT's decoding: zero when Garden zeroes it as an input.
  if (o.zero_pad_embedding) embedding.select(0, 0).zero_();
  out.emplace_back("model.shared.weight", unrotate(embedding));
  const at::Tensor bias = model.final_logits_bias.defined()
                              ? model.final_logits_bias.detach().to(at::kCPU, at::kFloat)
                              : torch::zeros({o.vocab_size});
  out.emplace_back("final_logits_bias", unrotate(bias).reshape({1, -1}));
  const auto dense = [&](const std::string& garden, const std::string& hf, int64_t rows) {
    out.emplace_back(hf + ".weight", get(garden + ".weight"));
    const at::Tensor* b = parameters.find(garden + ".bias");
    out.emplace_back(hf + ".bias", b && b->defined()
                                       ? b->detach().to(at::kCPU, at::kFloat).contiguous()
                                       : torch::zeros({rows}));
  };
  const auto split = [&](const std::string& garden, const std::string& hf,
                         const std::vector<const char*>& parts) {
    const at::Tensor w = get(garden + ".weight");
    const at::Tensor* b = parameters.find(garden + ".bias");
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const auto at = static_cast<int64_t>(k) * d;
      out.emplace_back(hf + parts[k] + ".weight", w.narrow(0, at, d).contiguous());
      out.emplace_back(hf + parts[k] + ".bias",
                       b && b->defined()
                           ? b->detach().to(at::kCPU, at::kFloat).narrow(0, at, d).contiguous()
                           : torch::zeros({d}));
    }
  };
  const auto norm = [&](const std::string& garden, const std::string& hf) {
    out.emplace_back(hf + ".weight", get(garden + ".weight"));
    out.emplace_back(hf + ".bias", get(garden + ".bias"));
  };
  const int64_t depths[] = {o.num_layers, decoder_depth(o)};
  for (int s = 0; s < 2; ++s) {
    const std::string stack = s == 0 ? "encoder" : "decoder";
    for (int64_t i = 0; i < depths[s]; ++i) {
      const std::string hf = "model." + stack + ".layers." + std::to_string(i) + ".";
      const std::string g = stack + "_layer_" + std::to_string(i) + ".";
      split(g + "self_attention.query_key_value", hf + "self_attn.",
            {"q_proj", "k_proj", "v_proj"});
      dense(g + "self_attention.output", hf + "self_attn.out_proj", d);
      norm(g + "self_attention_layer_norm", hf + "self_attn_layer_norm");
      if (s == 1) {
        dense(g + "encdec_attention.query", hf + "encoder_attn.q_proj", d);
        split(g + "encdec_attention.key_value", hf + "encoder_attn.", {"k_proj", "v_proj"});
        dense(g + "encdec_attention.output", hf + "encoder_attn.out_proj", d);
        norm(g + "encdec_attention_layer_norm", hf + "encoder_attn_layer_norm");
      }
      dense(g + "feed_forward.intermediate", hf + "fc1", o.intermediate_size);
      dense(g + "feed_forward.output", hf + "fc2", d);
      norm(g + "output_layer_norm", hf + "final_layer_norm");
    }
  }
  return out;
}

json marian_config(const Seq2SeqTransformerOptions& o, double embedding_dropout, int64_t marian_pad,
                   int64_t marian_eos) {
  if (std::abs(o.norm_epsilon - 1e-5) > 1e-12)
    throw Error(
        "--format=huggingface: MarianMT's layer norms have epsilon 1e-05; this model's "
        "task.model.encoder.norm_epsilon is " +
        config::number_text(o.norm_epsilon));
  if (std::abs(embedding_dropout - o.dropout_rate) > 1e-12)
    throw Error(
        "--format=huggingface: MarianMT has one dropout; this model's task.model.dropout_rate " +
        config::number_text(embedding_dropout) + " differs from encoder.dropout_rate " +
        config::number_text(o.dropout_rate));
  return {{"architectures", json::array({"MarianMTModel"})},
          {"model_type", "marian"},
          {"vocab_size", o.vocab_size},
          {"decoder_vocab_size", o.vocab_size},
          {"d_model", o.hidden_size},
          {"encoder_layers", o.num_layers},
          {"decoder_layers", decoder_depth(o)},
          {"encoder_attention_heads", o.num_heads},
          {"decoder_attention_heads", o.num_heads},
          {"encoder_ffn_dim", o.intermediate_size},
          {"decoder_ffn_dim", o.intermediate_size},
          {"activation_function", o.activation},
          {"dropout", o.dropout_rate},
          {"attention_dropout", o.attention_dropout_rate},
          {"activation_dropout", o.intermediate_dropout},
          {"encoder_layerdrop", 0.0},
          {"decoder_layerdrop", 0.0},
          {"max_position_embeddings", 1024},
          {"scale_embedding", true},
          {"share_encoder_decoder_embeddings", true},
          {"tie_word_embeddings", true},
          {"is_encoder_decoder", true},
          {"pad_token_id", marian_pad},
          {"decoder_start_token_id", marian_pad},
          {"eos_token_id", marian_eos},
          {"forced_eos_token_id", marian_eos},
          {"torch_dtype", "float32"}};
}

json marian_generation_config(int64_t marian_pad, int64_t marian_eos, int64_t beam_size,
                              int64_t no_repeat_ngram_size) {
  json config = {{"decoder_start_token_id", marian_pad},
                 {"pad_token_id", marian_pad},
                 {"eos_token_id", marian_eos},
                 {"forced_eos_token_id", marian_eos},
                 {"bad_words_ids", json::array({json::array({marian_pad})})},
                 {"num_beams", beam_size},
                 {"max_length", 512}};
  if (no_repeat_ngram_size > 0) config["no_repeat_ngram_size"] = no_repeat_ngram_size;
  return config;
}

}  // namespace garden::nlp
