#include "garden/nlp/modeling/bert_classifier.h"

namespace garden::nlp {

BertClassifierImpl::BertClassifierImpl(const BertClassifierOptions& options)
    : options_(options) {
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
  return classifier->forward(encoder->forward(word_ids, mask, type_ids));
}

}  // namespace garden::nlp
