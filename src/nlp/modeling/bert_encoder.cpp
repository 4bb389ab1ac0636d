// Model Garden's BertEncoderV2 and ClassificationHead; see
// include/garden/nlp/modeling/bert_encoder.h.
#include "garden/nlp/modeling/bert_encoder.h"

#include <torch/torch.h>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/gelu.h"
#include "garden/kernels/layer_norm.h"
#include "garden/kernels/linear.h"
#include "garden/nlp/modeling/attention.h"

namespace garden::nlp {

namespace {

void check_positive(int64_t value, const char* what) {
  if (value <= 0)
    throw Error(std::string("bert encoder: ") + what + " must be positive, got " +
                std::to_string(value));
}

void check_rate(double value, const char* what) {
  if (!(value >= 0.0 && value < 1.0))
    throw Error(std::string("bert encoder: ") + what + " must be in [0, 1), got " +
                std::to_string(value));
}

void validate(const BertEncoderOptions& o) {
  check_positive(o.vocab_size, "vocab_size");
  check_positive(o.hidden_size, "hidden_size");
  check_positive(o.num_attention_heads, "num_attention_heads");
  check_positive(o.intermediate_size, "intermediate_size");
  check_positive(o.max_position_embeddings, "max_position_embeddings");
  check_positive(o.type_vocab_size, "type_vocab_size");
  if (o.num_layers < 0)
    throw Error("bert encoder: num_layers must be >= 0, got " + std::to_string(o.num_layers));
  if (o.hidden_size % o.num_attention_heads != 0)
    throw Error("bert encoder: hidden_size " + std::to_string(o.hidden_size) +
                " is not a multiple of num_attention_heads " +
                std::to_string(o.num_attention_heads));
  if (o.hidden_activation != "gelu" && o.hidden_activation != "relu")
    throw Error("bert encoder: hidden_activation '" + o.hidden_activation +
                "' is not supported (gelu or relu)");
  check_rate(o.dropout_rate, "dropout_rate");
  check_rate(o.attention_dropout_rate, "attention_dropout_rate");
  if (!(o.initializer_range > 0.0))
    throw Error("bert encoder: initializer_range must be positive, got " +
                std::to_string(o.initializer_range));
  if (!(o.alibi_slope >= 0.0 && std::isfinite(o.alibi_slope)))
    throw Error("bert encoder: alibi_slope must be finite and >= 0, got " +
                std::to_string(o.alibi_slope));
}

TransformerBlockOptions block_options(const BertEncoderOptions& o) {
  TransformerBlockOptions b;
  b.hidden_size = o.hidden_size;
  b.num_heads = o.num_attention_heads;
  b.intermediate_size = o.intermediate_size;
  b.activation = o.hidden_activation;
  b.dropout_rate = o.dropout_rate;
  b.attention_dropout_rate = o.attention_dropout_rate;
  b.intermediate_dropout = 0.0;  // Model Garden's TransformerEncoderBlock default
  b.use_bias = true;
  b.norm_first = o.norm_first;
  b.norm_epsilon = o.norm_epsilon;
  return b;
}

}  // namespace

void init_bert_weights(torch::nn::Module& module, double initializer_range) {
  torch::NoGradGuard no_grad;
  module.apply([&](torch::nn::Module& m) {
    if (auto* dense = m.as<torch::nn::Linear>()) {
      truncated_normal_(dense->weight, initializer_range);
      if (dense->bias.defined()) dense->bias.zero_();
    } else if (auto* dense = m.as<DenseImpl>()) {
      truncated_normal_(dense->weight, initializer_range);
      if (dense->bias.defined()) dense->bias.zero_();
    } else if (auto* embedding = m.as<torch::nn::Embedding>()) {
      truncated_normal_(embedding->weight, initializer_range);
    } else if (auto* norm = m.as<torch::nn::LayerNorm>()) {
      if (norm->weight.defined()) norm->weight.fill_(1.0);
      if (norm->bias.defined()) norm->bias.zero_();
    }
  });
}

at::Tensor alibi_biases(const at::Tensor& positions, int64_t heads, double slope,
                        c10::ScalarType dtype) {
  // Head h's slope is slope * 2^-h: ALiBi's geometric slopes, from `slope`.
  // Computed where the positions are, without a copy from the host (which a
  // CUDA graph's capture would refuse).
  const auto p = positions.to(at::kDouble);
  const auto distance = (p.unsqueeze(-1) - p.unsqueeze(-2)).abs_().unsqueeze(-3);  // [.., 1, S, S]
  const auto per_head =
      at::exp2(torch::arange(heads, p.options()).neg_()).mul_(-slope).view({heads, 1, 1});
  auto biases = (distance * per_head).to(dtype);
  return biases.dim() == 3 ? biases.unsqueeze(0) : biases;
}

// ---- BertEncoder ------------------------------------------------------------------

BertEncoderImpl::BertEncoderImpl(const BertEncoderOptions& options,
                                 torch::nn::Embedding shared_word_embeddings)
    : options_(options) {
  validate(options);
  const int64_t width = options.embedding_width(), hidden = options.hidden_size;
  if (shared_word_embeddings) {
    const auto& w = shared_word_embeddings->weight;
    if (w.dim() != 2 || w.size(0) != options.vocab_size || w.size(1) != width)
      throw Error("bert encoder: shared word embeddings are [" + std::to_string(w.size(0)) + ", " +
                  std::to_string(w.dim() == 2 ? w.size(1) : -1) + "], expected [" +
                  std::to_string(options.vocab_size) + ", " + std::to_string(width) + "]");
  }
  // Names follow Model Garden's where they are one word; blocks are layer_<i>.
  // Every layer norm's name holds "layer_norm", so Model Garden's
  // exclude_from_weight_decay patterns (LayerNorm, layer_norm, bias) find it.
  if (!shared_word_embeddings)
    word_embeddings =
        register_module("word_embeddings", torch::nn::Embedding(options.vocab_size, width));
  position_embeddings = register_module(
      "position_embeddings", torch::nn::Embedding(options.max_position_embeddings, width));
  type_embeddings =
      register_module("type_embeddings", torch::nn::Embedding(options.type_vocab_size, width));
  embedding_norm =
      register_module("embedding_layer_norm", make_layer_norm(width, options.norm_epsilon));
  if (width != hidden)
    embedding_projection =
        register_module("embedding_projection", torch::nn::Linear(width, hidden));
  const auto block = block_options(options);
  for (int64_t i = 0; i < options.num_layers; ++i)
    layers.push_back(register_module("layer_" + std::to_string(i), TransformerEncoderBlock(block)));
  if (options.norm_first)
    output_norm =
        register_module("final_layer_norm", make_layer_norm(hidden, options.norm_epsilon));
  // Everything registered so far; a shared table keeps its owner's values.
  init_bert_weights(*this, options.initializer_range);
  if (shared_word_embeddings) word_embeddings = shared_word_embeddings;
}

at::Tensor BertEncoderImpl::forward(const at::Tensor& word_ids, const at::Tensor& mask,
                                    const at::Tensor& type_ids, const at::Tensor& position_ids) {
  if (word_ids.dim() != 2)
    throw Error("bert encoder: word_ids must be [batch, length], got " +
                std::to_string(word_ids.dim()) + " dims");
  const int64_t batch = word_ids.size(0), length = word_ids.size(1);
  if (!position_ids.defined() && length > options_.max_position_embeddings)
    throw Error("bert encoder: sequence length " + std::to_string(length) +
                " exceeds max_position_embeddings " +
                std::to_string(options_.max_position_embeddings));
  at::Tensor x = word_embeddings->forward(word_ids);
  // Positions 0 .. S-1 are a slice of the table, broadcast over the batch.
  x = position_ids.defined() ? x + position_embeddings->forward(position_ids)
                             : x + position_embeddings->weight.narrow(0, 0, length);
  if (type_ids.defined()) x = x + type_embeddings->forward(type_ids);
  x = kernels::dropout(layer_norm(x, embedding_norm), options_.dropout_rate, is_training());
  if (embedding_projection)
    x = kernels::linear(x, embedding_projection->weight, embedding_projection->bias);

  at::Tensor attention_mask;
  // Without padding the mask would add zeros to every layer's [B, H, S, S]
  // scores; on the CPU one look at the [B, S] mask (a host sync, which is
  // free there) skips those passes. Elsewhere the mask is always applied.
  if (mask.defined() && (!mask.device().is_cpu() || (mask == 0).any().item<bool>()))
    attention_mask = (mask == 0).to(x.scalar_type()).mul_(kMaskedValue).view({batch, 1, 1, length});
  if (options_.alibi_slope > 0.0) {
    const auto biases = alibi_biases(
        position_ids.defined() ? position_ids : torch::arange(length, x.options().dtype(at::kLong)),
        options_.num_attention_heads, options_.alibi_slope, x.scalar_type());
    attention_mask = attention_mask.defined() ? attention_mask + biases : biases;
  }
  // Each layer's output goes on with its second handle (forward_with_skip).
  at::Tensor skip = x;
  for (auto& layer : layers) {
    auto out = layer->forward_with_skip(x, skip, attention_mask);
    x = out[0];
    skip = out[1];
  }
  if (output_norm) x = layer_norm(x, output_norm);
  return x;
}

// ---- ClassificationHead -----------------------------------------------------------

namespace {
at::Tensor activate(const at::Tensor& x, const std::string& activation) {
  if (activation == "tanh") return at::tanh(x);
  if (activation == "gelu") return kernels::gelu(x);
  return at::relu(x);
}
}  // namespace

ClassificationHeadImpl::ClassificationHeadImpl(const ClassificationHeadOptions& options)
    : options_(options) {
  const std::string where = "classification head '" + options.name + "': ";
  if (options.activation != "tanh" && options.activation != "gelu" && options.activation != "relu")
    throw Error(where + "activation '" + options.activation +
                "' is not supported (tanh, gelu or relu)");
  if (options.input_width <= 0 || options.num_classes <= 0 || options.inner_dim < 0)
    throw Error(where + "input_width and num_classes must be positive and inner_dim >= 0");
  if (!(options.dropout_rate >= 0.0 && options.dropout_rate < 1.0))
    throw Error(where + "dropout_rate must be in [0, 1), got " +
                std::to_string(options.dropout_rate));
  int64_t width = options.input_width;
  if (options.inner_dim > 0) {
    dense = register_module("dense", torch::nn::Linear(width, options.inner_dim));
    width = options.inner_dim;
  }
  out_proj = register_module("out_proj", torch::nn::Linear(width, options.num_classes));
  init_bert_weights(*this, options.initializer_range);
}

at::Tensor ClassificationHeadImpl::forward(const at::Tensor& sequence) {
  if (sequence.dim() != 3 || options_.cls_token_idx >= sequence.size(1))
    throw Error("classification head '" + options_.name +
                "': expects [batch, length, width] with length > cls_token_idx " +
                std::to_string(options_.cls_token_idx));
  at::Tensor x = sequence.select(1, options_.cls_token_idx);
  if (dense) x = activate(dense->forward(x), options_.activation);
  x = kernels::dropout(x, options_.dropout_rate, is_training());
  return out_proj->forward(x);
}

std::vector<double> layerwise_learning_rate_scales(const std::vector<std::string>& names,
                                                   const std::string& prefix, int64_t num_layers,
                                                   double decay) {
  if (decay == 1.0) return {};
  const auto factor = [&](int64_t depth) { return std::pow(decay, num_layers + 2 - depth); };
  std::vector<double> scales;
  scales.reserve(names.size());
  for (const std::string& name : names) {
    double scale = 1.0;  // the task's own layers
    if (name.rfind(prefix, 0) == 0) {
      const std::string local = name.substr(prefix.size());
      const auto module = local.substr(0, local.find('.'));
      if (module.rfind("layer_", 0) == 0 && module.size() > 6 &&
          module.find_first_not_of("0123456789", 6) == std::string::npos) {
        scale = factor(std::stoll(module.substr(6)) + 1);
      } else if (module == "final_layer_norm") {
        scale = factor(num_layers + 1);
      } else if (module == "word_embeddings" || module == "position_embeddings" ||
                 module == "type_embeddings" || module == "embedding_layer_norm" ||
                 module == "embedding_projection") {
        scale = factor(0);
      } else {
        throw Error("layerwise_lr_decay: no depth for encoder parameter '" + name + "'");
      }
    }
    scales.push_back(scale);
  }
  std::ostringstream line;
  line << std::setprecision(3) << "layerwise_lr_decay " << decay
       << ": the learning rate times " << factor(0) << " for the embeddings, ";
  if (num_layers > 0)
    line << factor(1) << " for layer_0 to " << factor(num_layers) << " for layer_"
         << num_layers - 1 << ", ";
  line << "1 for the task's layers";
  log_info() << line.str();
  return scales;
}

}  // namespace garden::nlp
