// Model Garden's BertEncoder (official/nlp/modeling/networks/bert_encoder.py)
// written by hand: word, position and type embeddings (a projection to the
// hidden size when embedding_size differs), then post- or pre-layer-norm
// Transformer blocks, BERT's truncated-normal initializer throughout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "garden/base/initializers.h"  // truncated_normal_, which the networks here use
#include "garden/nlp/modeling/transformer.h"

namespace garden::nlp {

// Model Garden's BertEncoderConfig, as the model takes it.
struct BertEncoderOptions {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_attention_heads = 12;
  std::string hidden_activation = "gelu";  // gelu (exact, erf) or relu
  int64_t intermediate_size = 3072;
  double dropout_rate = 0.1;  // embeddings and each block's sublayer outputs
  double attention_dropout_rate = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;  // stddev of the truncated normal
  int64_t embedding_size = -1;      // -1: hidden_size (no projection)
  bool norm_first = false;          // pre-layer-norm blocks
  // Linear attention biases (ALiBi, as MosaicBERT puts them in a BERT): head
  // h (from 0) adds -alibi_slope * 2^-h * |i - j| to its scores between
  // positions i and j. 0: none, as BERT.
  double alibi_slope = 0.0;
  double norm_epsilon = 1e-12;

  int64_t embedding_width() const { return embedding_size > 0 ? embedding_size : hidden_size; }
};

// BERT's initializer for every layer registered under `module` (itself
// included): Linear and Embedding weights truncated_normal_(range), biases
// zero, LayerNorm weight 1 and bias 0.
void init_bert_weights(torch::nn::Module& module, double initializer_range);

// The additive attention biases of BertEncoderOptions::alibi_slope for
// `heads` heads: [1, heads, S, S] from positions [S], [B, heads, S, S] from
// [B, S], in `dtype`.
at::Tensor alibi_biases(const at::Tensor& positions, int64_t heads, double slope,
                        c10::ScalarType dtype);

class BertEncoderImpl : public torch::nn::Module {
 public:
  // `shared_word_embeddings`, when given, is used as this encoder's word
  // embeddings, NOT registered here (its owner registers it, so it is one
  // parameter of the model, updated and saved once): ELECTRA's generator
  // shares the discriminator's. Its shape must be [vocab_size,
  // options.embedding_width()].
  explicit BertEncoderImpl(const BertEncoderOptions& options,
                           torch::nn::Embedding shared_word_embeddings = nullptr);

  // word_ids, type_ids [B, S] int64; mask [B, S] 1 for real tokens, 0 for
  // padding (any integer or float dtype); position_ids [B, S] or undefined
  // (0 .. S-1), which alibi_slope's distances are measured in too. Returns
  // the sequence output [B, S, hidden_size].
  at::Tensor forward(const at::Tensor& word_ids, const at::Tensor& mask, const at::Tensor& type_ids,
                     const at::Tensor& position_ids = {});

  const BertEncoderOptions& options() const { return options_; }

  torch::nn::Embedding word_embeddings{nullptr};      // [V, E]
  torch::nn::Embedding position_embeddings{nullptr};  // [max_position_embeddings, E]
  torch::nn::Embedding type_embeddings{nullptr};      // [type_vocab_size, E]
  torch::nn::LayerNorm embedding_norm{nullptr};
  torch::nn::Linear embedding_projection{nullptr};  // E -> H, only when E != H
  std::vector<TransformerEncoderBlock> layers;
  torch::nn::LayerNorm output_norm{nullptr};  // only when norm_first

 private:
  BertEncoderOptions options_;
};
TORCH_MODULE(BertEncoder);

// Model Garden's ClassificationHead (ClsHeadConfig): dense(inner_dim,
// activation) on the token at cls_token_idx, dropout, dense(num_classes).
struct ClassificationHeadOptions {
  int64_t input_width = 768;
  int64_t inner_dim = 0;  // 0: no inner dense layer
  int64_t num_classes = 2;
  std::string activation = "tanh";  // tanh, gelu or relu
  double dropout_rate = 0.0;
  int64_t cls_token_idx = 0;
  double initializer_range = 0.02;
  std::string name = "cls";
};

class ClassificationHeadImpl : public torch::nn::Module {
 public:
  explicit ClassificationHeadImpl(const ClassificationHeadOptions& options);
  // sequence [B, S, input_width] -> logits [B, num_classes].
  at::Tensor forward(const at::Tensor& sequence);
  const ClassificationHeadOptions& options() const { return options_; }

  torch::nn::Linear dense{nullptr};  // only when inner_dim > 0
  torch::nn::Linear out_proj{nullptr};

 private:
  ClassificationHeadOptions options_;
};
TORCH_MODULE(ClassificationHead);

// ELECTRA's layer-wise learning-rate decay (its fine-tuning flag
// layerwise_lr_decay) for an encoder whose parameters are named `prefix`
// ("encoder.") + BertEncoder's names: with L layers and decay d, the
// embeddings (tables, their layer norm and projection) take the rate times
// d^(L+2), layer_i times d^(L+1-i), the final layer norm d, and every other
// parameter (the task's heads) the rate itself, as ELECTRA's depths do (0
// for the embeddings, i+1 for layer_i, L+2 for the task's layers). One
// factor per parameter name, in order; empty when d is 1. Logs one line.
std::vector<double> layerwise_learning_rate_scales(const std::vector<std::string>& names,
                                                   const std::string& prefix, int64_t num_layers,
                                                   double decay);

// The same for a fine-tuning task's parameters (anything with a `name`)
// and its config (model.encoder.bert.num_layers, layerwise_lr_decay), its
// encoder registered as "encoder".
template <class Parameters, class TaskConfig>
std::vector<double> encoder_learning_rate_scales(const Parameters& parameters,
                                                 const TaskConfig& config) {
  std::vector<std::string> names;
  for (const auto& parameter : parameters) names.push_back(parameter.name);
  return layerwise_learning_rate_scales(names, "encoder.", config.model.encoder.bert.num_layers,
                                        config.layerwise_lr_decay);
}

}  // namespace garden::nlp
