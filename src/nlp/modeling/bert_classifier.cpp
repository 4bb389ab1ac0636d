#include "garden/nlp/modeling/bert_classifier.h"

#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/kernels/dropout.h"

namespace garden::nlp {

at::Tensor mean_pool(const at::Tensor& sequence, const at::Tensor& mask) {
  if (sequence.dim() == 3 && !mask.defined())
    return sequence.to(at::kFloat).mean(1).to(sequence.scalar_type());
  if (sequence.dim() != 3 || mask.dim() != 2 || mask.size(0) != sequence.size(0) ||
      mask.size(1) != sequence.size(1))
    throw Error(
        "mean pooling: expects a sequence [batch, length, width] and a mask [batch, "
        "length]");
  const at::Tensor kept = mask.ne(0).unsqueeze(-1).to(at::kFloat);  // [B, S, 1]
  const at::Tensor sums = at::sum(sequence.to(at::kFloat) * kept, {1});
  return (sums / kept.sum(1).clamp_min(1.0)).to(sequence.scalar_type());
}

BertClassifierImpl::BertClassifierImpl(const BertClassifierOptions& options) : options_(options) {
  if (options.pooling != "cls" && options.pooling != "mean")
    throw Error("classifier: pooling '" + options.pooling + "' is not one of cls, mean");
  encoder = register_module("encoder", BertEncoder(options.encoder));
  ClassificationHeadOptions head;
  head.input_width = options.encoder.hidden_size;
  head.inner_dim = options.encoder.hidden_size;
  head.num_classes = options.num_classes;
  head.activation = "tanh";
  head.dropout_rate = options.dropout_rate;
  head.initializer_range = options.encoder.initializer_range;
  head.name = "sentence_prediction";
  classifier = register_module("classifier", ClassificationHead(head));
}

at::Tensor BertClassifierImpl::forward(const at::Tensor& word_ids, const at::Tensor& mask,
                                       const at::Tensor& type_ids) {
  const at::Tensor sequence = encoder->forward(word_ids, mask, type_ids);
  if (options_.pooling == "mean")  // the head reads position 0 of [B, 1, W]
    return classifier->forward(mean_pool(sequence, mask).unsqueeze(1));
  return classifier->forward(sequence);
}

}  // namespace garden::nlp

namespace garden::nlp {

BertTokenClassifierImpl::BertTokenClassifierImpl(const BertTokenClassifierOptions& options)
    : options_(options) {
  if (options.num_classes < 1) throw Error("token classifier: num_classes must be positive");
  if (!(options.dropout_rate >= 0.0 && options.dropout_rate < 1.0))
    throw Error("token classifier: dropout_rate must be in [0, 1)");
  encoder = register_module("encoder", BertEncoder(options.encoder));
  classifier = register_module("classifier",
                               torch::nn::Linear(options.encoder.hidden_size, options.num_classes));
  torch::NoGradGuard no_grad;
  truncated_normal_(classifier->weight, options.initializer_range);
  classifier->bias.zero_();
}

at::Tensor BertTokenClassifierImpl::forward(const at::Tensor& word_ids, const at::Tensor& mask,
                                            const at::Tensor& type_ids) {
  const at::Tensor sequence = encoder->forward(word_ids, mask, type_ids);
  return classifier->forward(kernels::dropout(sequence, options_.dropout_rate, is_training()));
}

}  // namespace garden::nlp

namespace garden::nlp {

BertSpanLabelerImpl::BertSpanLabelerImpl(const BertSpanLabelerOptions& options)
    : options_(options) {
  encoder = register_module("encoder", BertEncoder(options.encoder));
  span_labeling =
      register_module("span_labeling", torch::nn::Linear(options.encoder.hidden_size, 2));
  torch::NoGradGuard no_grad;
  truncated_normal_(span_labeling->weight, options.initializer_range);
  span_labeling->bias.zero_();
}

std::pair<at::Tensor, at::Tensor> BertSpanLabelerImpl::forward(const at::Tensor& word_ids,
                                                               const at::Tensor& mask,
                                                               const at::Tensor& type_ids) {
  const at::Tensor logits = span_labeling->forward(encoder->forward(word_ids, mask, type_ids));
  return {logits.select(-1, 0), logits.select(-1, 1)};
}

}  // namespace garden::nlp
