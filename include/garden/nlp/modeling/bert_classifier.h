// Model Garden's BertClassifier (official/nlp/modeling/models/
// bert_classifier.py) without the encoder pooler: an encoder, then a
// ClassificationHead on the [CLS] token's output (dense to the hidden width
// with tanh, dropout, dense to num_classes).
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "garden/nlp/modeling/bert_encoder.h"

namespace garden::nlp {

struct BertClassifierOptions {
  BertEncoderOptions encoder;
  int64_t num_classes = 2;  // 1: a regression output
  double dropout_rate = 0.1;
};

class BertClassifierImpl : public torch::nn::Module {
 public:
  explicit BertClassifierImpl(const BertClassifierOptions& options);
  // word_ids, mask, type_ids [B, S] -> logits [B, num_classes].
  at::Tensor forward(const at::Tensor& word_ids, const at::Tensor& mask,
                     const at::Tensor& type_ids);
  const BertClassifierOptions& options() const { return options_; }

  BertEncoder encoder{nullptr};             // checkpoint item "encoder"
  ClassificationHead classifier{nullptr};  // Model Garden's "sentence_prediction" head

 private:
  BertClassifierOptions options_;
};
TORCH_MODULE(BertClassifier);

}  // namespace garden::nlp
