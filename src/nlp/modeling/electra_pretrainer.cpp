// Model Garden's ElectraPretrainer; see include/garden/nlp/modeling/electra_pretrainer.h.
#include "garden/nlp/modeling/electra_pretrainer.h"

#include <torch/torch.h>

#include <set>
#include <sstream>
#include <string>

#include "garden/base/error.h"
#include "garden/kernels/gelu.h"
#include "garden/kernels/layer_norm.h"
#include "garden/kernels/linear.h"
#include "garden/kernels/sampling.h"

namespace garden::nlp {

namespace {

// The key is a literal: a std::string parameter would make each call's
// temporary look like what the returned reference could dangle from.
const at::Tensor& input(const Batch& inputs, const char* key) {
  const auto it = inputs.find(key);
  if (it == inputs.end() || !it->second.defined())
    throw Error(std::string("electra pretrainer: the inputs have no '") + key + "'");
  return it->second;
}

// Model Garden's mlm_activation: the generator's hidden activation, also used
// by the discriminator's projection.
at::Tensor activate(const at::Tensor& x, bool gelu) { return gelu ? kernels::gelu(x) : at::relu(x); }

const std::set<std::string>& output_names() {
  static const std::set<std::string> names = {"lm_outputs", "sentence_outputs", "disc_logits",
                                              "disc_label", "sampled_ids"};
  return names;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> scatter_update(const at::Tensor& sequence,
                                                 const at::Tensor& updates,
                                                 const at::Tensor& positions) {
  if (sequence.dim() != 2 || positions.dim() != 2 || updates.sizes() != positions.sizes() ||
      positions.size(0) != sequence.size(0)) {
    std::ostringstream message;
    message << "scatter_update expects sequence [B, S], updates and positions [B, P], got "
            << sequence.sizes() << ", " << updates.sizes() << ", " << positions.sizes();
    throw Error(message.str());
  }
  const int64_t batch = sequence.size(0), length = sequence.size(1);
  const auto long_options = sequence.options().dtype(at::kLong);
  // Flat indices into [B * S]; sums and counts per position, as Model
  // Garden's scatter_nd adds duplicates up.
  at::Tensor flat =
      (positions.to(at::kLong) + at::arange(batch, long_options).mul_(length).unsqueeze(1))
          .reshape({-1});
  at::Tensor sums = at::zeros({batch * length}, long_options)
                        .index_add_(0, flat, updates.to(at::kLong).reshape({-1}));
  at::Tensor counts = at::zeros({batch * length}, long_options)
                          .index_add_(0, flat, at::ones({flat.size(0)}, long_options));
  sums = sums.view({batch, length});
  counts = counts.view({batch, length});
  counts.select(1, 0).zero_();  // updates to position 0 ([CLS], or padding) are ignored
  at::Tensor mask = counts.clamp_max(1);
  at::Tensor mean = at::div(sums, counts.clamp_min(1), "floor");
  at::Tensor updated = at::where(mask.to(at::kBool), mean.to(sequence.scalar_type()), sequence);
  return {updated, mask};
}

FakeData get_fake_data(const at::Tensor& input_word_ids, const at::Tensor& masked_lm_positions,
                       const at::Tensor& masked_lm_ids, const at::Tensor& lm_logits,
                       bool disallow_correct) {
  torch::NoGradGuard no_grad;
  at::Tensor original = scatter_update(input_word_ids, masked_lm_ids, masked_lm_positions).first;
  at::Tensor sampled =
      kernels::sample_from_softmax(lm_logits, disallow_correct ? masked_lm_ids : at::Tensor());
  auto [fake, updated] = scatter_update(original, sampled, masked_lm_positions);
  at::Tensor labels = updated.mul_(fake != original);
  return {fake, labels, sampled};
}

// ---- ElectraPretrainer ------------------------------------------------------------

ElectraPretrainerImpl::ElectraPretrainerImpl(const ElectraPretrainerOptions& options)
    : options_(options) {
  const BertEncoderOptions& g = options.generator;
  const BertEncoderOptions& d = options.discriminator;
  if (g.vocab_size != d.vocab_size)
    throw Error("electra pretrainer: generator vocab_size " + std::to_string(g.vocab_size) +
                " differs from discriminator vocab_size " + std::to_string(d.vocab_size));
  if (options.tie_embeddings && g.embedding_width() != d.embedding_width())
    throw Error("electra pretrainer: tie_embeddings needs equal embedding widths, got generator " +
                std::to_string(g.embedding_width()) + " and discriminator " +
                std::to_string(d.embedding_width()));
  if (options.num_classes <= 0)
    throw Error("electra pretrainer: num_classes must be positive, got " +
                std::to_string(options.num_classes));

  // The discriminator owns the shared table, so "discriminator." prefixes
  // everything the fine-tuned encoder needs.
  discriminator = BertEncoder(d);
  generator = BertEncoder(g, options.tie_embeddings ? discriminator->word_embeddings : nullptr);
  register_module("generator", generator);
  register_module("discriminator", discriminator);

  // Heads: Model Garden's mlm_initializer is TruncatedNormal(generator range).
  const double range = g.initializer_range;
  const int64_t width = g.embedding_width();
  mlm_dense = register_module("mlm_dense", torch::nn::Linear(g.hidden_size, width));
  mlm_norm = register_module("mlm_layer_norm",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(1e-12)));
  mlm_bias = register_parameter("mlm_bias", at::zeros({g.vocab_size}));
  ClassificationHeadOptions sentence;
  sentence.input_width = g.hidden_size;
  sentence.inner_dim = g.hidden_size;
  sentence.num_classes = options.num_classes;
  sentence.activation = "tanh";
  sentence.initializer_range = range;
  sentence.name = "generator_classification";
  generator_classification =
      register_module("generator_classification", ClassificationHead(sentence));
  discriminator_projection =
      register_module("discriminator_projection", torch::nn::Linear(d.hidden_size, d.hidden_size));
  discriminator_head = register_module("discriminator_head", torch::nn::Linear(d.hidden_size, 1));
  for (torch::nn::Module* head : {static_cast<torch::nn::Module*>(mlm_dense.get()),
                                  static_cast<torch::nn::Module*>(mlm_norm.get()),
                                  static_cast<torch::nn::Module*>(discriminator_projection.get()),
                                  static_cast<torch::nn::Module*>(discriminator_head.get())})
    init_bert_weights(*head, range);

  std::set<std::string> seen;
  for (ClassificationHeadOptions head : options.cls_heads) {
    if (head.name.empty() || head.name.find('.') != std::string::npos ||
        output_names().count(head.name) || !seen.insert(head.name).second)
      throw Error("electra pretrainer: cls_heads name '" + head.name +
                  "' must be non-empty, without '.', unique and not one of the model's outputs");
    head.input_width = d.hidden_size;
    cls_heads.push_back(register_module("cls_head_" + head.name, ClassificationHead(head)));
  }
}

Batch ElectraPretrainerImpl::forward(const Batch& inputs) {
  const at::Tensor& word_ids = input(inputs, "input_word_ids");
  const at::Tensor& mask = input(inputs, "input_mask");
  const at::Tensor& type_ids = input(inputs, "input_type_ids");
  const at::Tensor& positions = input(inputs, "masked_lm_positions");
  const at::Tensor& masked_ids = input(inputs, "masked_lm_ids");
  const bool gelu = options_.generator.hidden_activation == "gelu";
  // position_ids (BertPretrainDataConfig.use_position_id), when the data has them.
  const auto position_it = inputs.find("position_ids");
  const at::Tensor position_ids = position_it == inputs.end() ? at::Tensor() : position_it->second;
  // Shapes are known on the host: the bounds cost no synchronization.
  if (options_.sequence_length > 0 && word_ids.size(1) > options_.sequence_length)
    throw Error("ELECTRA: input_word_ids has " + std::to_string(word_ids.size(1)) +
                " tokens, more than model.sequence_length " +
                std::to_string(options_.sequence_length));
  if (positions.size(1) > options_.num_token_predictions)
    throw Error("ELECTRA: masked_lm_positions has " + std::to_string(positions.size(1)) +
                " slots, more than model.num_masked_tokens " +
                std::to_string(options_.num_token_predictions));

  Batch out;
  // Generator: the MLM head runs on the masked positions only ([B, P, Hg]),
  // not on every token.
  at::Tensor sequence = generator->forward(word_ids, mask, type_ids, position_ids);
  const int64_t batch = positions.size(0), predictions = positions.size(1);
  at::Tensor gathered =
      sequence.gather(1, positions.to(at::kLong).unsqueeze(-1).expand({-1, -1, sequence.size(2)}));
  at::Tensor h = layer_norm(
      activate(kernels::linear(gathered, mlm_dense->weight, mlm_dense->bias), gelu), mlm_norm);
  // One addmm over the flattened positions.
  at::Tensor lm_outputs = kernels::linear(h.reshape({batch * predictions, h.size(2)}),
                                      generator->word_embeddings->weight, mlm_bias)
                              .view({batch, predictions, -1});
  out["lm_outputs"] = lm_outputs;
  out["sentence_outputs"] = generator_classification->forward(sequence);

  // Replaced tokens: no gradient flows through the sampling.
  FakeData fake =
      get_fake_data(word_ids, positions, masked_ids, lm_outputs, options_.disallow_correct);
  out["disc_label"] = fake.labels.to(discriminator->word_embeddings->weight.scalar_type());
  out["sampled_ids"] = fake.sampled_ids;

  at::Tensor disc_sequence = discriminator->forward(fake.word_ids, mask, type_ids, position_ids);
  out["disc_logits"] = discriminator_logits(disc_sequence);
  for (std::size_t i = 0; i < cls_heads.size(); ++i)
    out[options_.cls_heads[i].name] = cls_heads[i]->forward(disc_sequence);
  return out;
}

at::Tensor ElectraPretrainerImpl::discriminator_logits(const at::Tensor& sequence) {
  const bool gelu = options_.generator.hidden_activation == "gelu";
  return discriminator_head
      ->forward(activate(
          kernels::linear(sequence, discriminator_projection->weight, discriminator_projection->bias),
          gelu))
      .squeeze(-1);
}

}  // namespace garden::nlp
