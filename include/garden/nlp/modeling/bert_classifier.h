// Model Garden's BertClassifier (official/nlp/modeling/models/
// bert_classifier.py) without the encoder pooler: an encoder, then a
// ClassificationHead on the [CLS] token's output (dense to the hidden width
// with tanh, dropout, dense to num_classes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "garden/nlp/modeling/bert_encoder.h"

namespace garden::nlp {

struct BertClassifierOptions {
  BertEncoderOptions encoder;
  int64_t num_classes = 2;  // 1: a regression output
  double dropout_rate = 0.1;
  // What the head classifies: "cls", the first token's output (Model
  // Garden's, BERT's); "mean", the mean of the outputs of the tokens `mask`
  // keeps (Garden's; sentence-transformers' mean pooling).
  std::string pooling = "cls";
};

// sequence [B, S, W], mask [B, S] (nonzero: a token; undefined: every
// position) -> [B, W]: the mean of each row's kept outputs, summed in float
// (0 for a row with none).
at::Tensor mean_pool(const at::Tensor& sequence, const at::Tensor& mask);

class BertClassifierImpl : public torch::nn::Module {
 public:
  explicit BertClassifierImpl(const BertClassifierOptions& options);
  // word_ids, mask, type_ids [B, S] -> logits [B, num_classes].
  at::Tensor forward(const at::Tensor& word_ids, const at::Tensor& mask,
                     const at::Tensor& type_ids);
  const BertClassifierOptions& options() const { return options_; }

  BertEncoder encoder{nullptr};            // checkpoint item "encoder"
  ClassificationHead classifier{nullptr};  // Model Garden's "sentence_prediction" head

 private:
  BertClassifierOptions options_;
};
TORCH_MODULE(BertClassifier);

}  // namespace garden::nlp

namespace garden::nlp {

// Model Garden's BertTokenClassifier (models/bert_token_classifier.py): the
// encoder, dropout, then a dense layer to num_classes on every token.
struct BertTokenClassifierOptions {
  BertEncoderOptions encoder;
  int64_t num_classes = 2;
  double dropout_rate = 0.1;
  double initializer_range = 0.02;
};

class BertTokenClassifierImpl : public torch::nn::Module {
 public:
  explicit BertTokenClassifierImpl(const BertTokenClassifierOptions& options);
  // word_ids, mask, type_ids [B, S] -> logits [B, S, num_classes].
  at::Tensor forward(const at::Tensor& word_ids, const at::Tensor& mask,
                     const at::Tensor& type_ids);
  const BertTokenClassifierOptions& options() const { return options_; }

  BertEncoder encoder{nullptr};
  torch::nn::Linear classifier{nullptr};

 private:
  BertTokenClassifierOptions options_;
};
TORCH_MODULE(BertTokenClassifier);

}  // namespace garden::nlp

namespace garden::nlp {

// Model Garden's BertSpanLabeler (models/bert_span_labeler.py): the encoder,
// then one dense layer to two logits per token, the answer's start and end.
struct BertSpanLabelerOptions {
  BertEncoderOptions encoder;
  double initializer_range = 0.02;
};

class BertSpanLabelerImpl : public torch::nn::Module {
 public:
  explicit BertSpanLabelerImpl(const BertSpanLabelerOptions& options);
  // word_ids, mask, type_ids [B, S] -> start and end logits, each [B, S].
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& word_ids, const at::Tensor& mask,
                                            const at::Tensor& type_ids);
  const BertSpanLabelerOptions& options() const { return options_; }

  BertEncoder encoder{nullptr};
  torch::nn::Linear span_labeling{nullptr};  // [hidden] -> [start, end]

 private:
  BertSpanLabelerOptions options_;
};
TORCH_MODULE(BertSpanLabeler);

}  // namespace garden::nlp
