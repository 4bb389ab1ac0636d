// Model Garden's ElectraPretrainer (official/nlp/modeling/models/
// electra_pretrainer.py): a generator encoder with a masked-LM head, tokens
// sampled from it replace the masked ones, and a discriminator encoder learns
// which tokens were replaced.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "garden/base/types.h"
#include "garden/nlp/modeling/bert_encoder.h"

namespace garden::nlp {

struct ElectraPretrainerOptions {
  BertEncoderOptions generator;
  BertEncoderOptions discriminator;
  int64_t num_classes = 2;             // the generator's sentence classification head
  int64_t num_token_predictions = 76;  // most masked_lm_positions a batch may hold
  int64_t sequence_length = -1;        // longest input; -1: max_position_embeddings
  bool tie_embeddings = true;          // the generator uses the discriminator's word embeddings
  bool disallow_correct = false;
  // Extra heads on the discriminator's sequence output; each one's logits
  // are a model output under its name.
  std::vector<ClassificationHeadOptions> cls_heads;
};

// Model Garden's scatter_update for ids: `sequence` [B, S] with positions
// [B, P] replaced by updates [B, P]. Updates to position 0 are ignored; a
// position given several times gets the floor of the mean of its updates
// (so equal updates give that value). Returns the updated sequence and the
// [B, S] int64 mask of updated positions (0 or 1).
std::pair<at::Tensor, at::Tensor> scatter_update(const at::Tensor& sequence,
                                                 const at::Tensor& updates,
                                                 const at::Tensor& positions);

// Model Garden's _get_fake_data, as the model's forward runs it: the
// original ids (scatter_update of masked_lm_ids into the masked input), ids
// sampled from lm_logits [B, P, V] (never masked_lm_ids with
// disallow_correct) scattered into them, and labels = updated-mask * (fake !=
// original). No gradient.
struct FakeData {
  at::Tensor word_ids;     // [B, S] the discriminator's input
  at::Tensor labels;       // [B, S] int64, 1 where word_ids differs from the original
  at::Tensor sampled_ids;  // [B, P]
};
FakeData get_fake_data(const at::Tensor& input_word_ids, const at::Tensor& masked_lm_positions,
                       const at::Tensor& masked_lm_ids, const at::Tensor& lm_logits,
                       bool disallow_correct);

class ElectraPretrainerImpl : public torch::nn::Module {
 public:
  explicit ElectraPretrainerImpl(const ElectraPretrainerOptions& options);

  // inputs: input_word_ids, input_mask, input_type_ids [B, S];
  // masked_lm_positions, masked_lm_ids [B, P] (int64). Returns
  //   lm_outputs        [B, P, V] generator logits at the masked positions
  //   sentence_outputs  [B, num_classes] generator classification logits
  //   disc_logits       [B, S] replaced-token-detection logits
  //   disc_label        [B, S] float, 1 where the discriminator's input
  //                     token differs from the original
  //   sampled_ids       [B, P] the generator's samples
  //   <cls head name>   [B, num_classes] for each of options.cls_heads
  Batch forward(const Batch& inputs);
  // The replaced-token-detection logits [B, S] for a discriminator
  // sequence output [B, S, H] (what forward computes on the fake data).
  at::Tensor discriminator_logits(const at::Tensor& sequence);

  const ElectraPretrainerOptions& options() const { return options_; }

  BertEncoder generator{nullptr};
  BertEncoder discriminator{nullptr};
  // Masked LM: dense(generator hidden -> embedding width, activation),
  // layer norm, logits = h @ word_embeddings^T + bias.
  torch::nn::Linear mlm_dense{nullptr};
  torch::nn::LayerNorm mlm_norm{nullptr};
  at::Tensor mlm_bias;  // [V]
  ClassificationHead generator_classification{nullptr};
  torch::nn::Linear discriminator_projection{nullptr};  // H -> H, activation
  torch::nn::Linear discriminator_head{nullptr};        // H -> 1
  std::vector<ClassificationHead> cls_heads;

 private:
  ElectraPretrainerOptions options_;
};
TORCH_MODULE(ElectraPretrainer);

}  // namespace garden::nlp
