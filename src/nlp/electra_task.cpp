#include "garden/nlp/electra_task.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "garden/base/error.h"
#include "garden/nlp/bert_pretrain_data.h"
#include "garden/nlp/electra_pretrainer.h"

namespace garden::nlp {

namespace {

ElectraPretrainerImpl& as_pretrainer(Model& model) {
  auto* pretrainer = model.as<ElectraPretrainerImpl>();
  if (!pretrainer)
    throw Error("the ELECTRA task was given a model that is not an ElectraPretrainer");
  return *pretrainer;
}

const at::Tensor& input(const Batch& batch, const std::string& key) {
  auto it = batch.find(key);
  if (it == batch.end()) throw Error("ELECTRA pretraining: the batch has no '" + key + "'");
  return it->second;
}

// Model Garden's tf.math.divide_no_nan for a sum over items whose weights
// sum to `count`: 0 when there is nothing to average.
at::Tensor mean_over(const at::Tensor& weighted_sum, const at::Tensor& count) {
  return weighted_sum / count.clamp_min(1e-12);
}

}  // namespace

ElectraPretrainTask::ElectraPretrainTask(std::shared_ptr<const ElectraPretrainConfig> params,
                                         std::string logging_dir)
    : Task(params, std::move(logging_dir)), config_(*params) {}

DatasetPtr ElectraPretrainTask::build_inputs(const config::DataConfig& params,
                                             const InputContext& input_context) {
  const auto* data = dynamic_cast<const BertPretrainDataConfig*>(&params);
  if (!data) throw Error("the ELECTRA task reads BertPretrainDataConfig data");
  // Ids the encoders cannot embed are refused with the record that holds
  // them rather than as an index error deep in the model.
  const BertEncoderConfig& generator = config_.model.generator_encoder.bert;
  const BertEncoderConfig& discriminator = config_.model.discriminator_encoder.bert;
  PretrainIdBounds bounds;
  bounds.vocab_size = std::min(generator.vocab_size, discriminator.vocab_size);
  bounds.type_vocab_size = std::min(generator.type_vocab_size, discriminator.type_vocab_size);
  return build_bert_pretrain_inputs(*data, input_context, bounds);
}

ModelPtr ElectraPretrainTask::build_model() {
  return ElectraPretrainer(config_.model.options()).ptr();
}

Batch ElectraPretrainTask::call_model(Model& model, const Batch& features, bool) {
  Batch outputs = as_pretrainer(model).forward(features);
  outputs["disc_predictions"] = outputs.at("disc_logits").detach().gt(0).to(at::kFloat);
  return outputs;
}

Losses ElectraPretrainTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                         const at::Tensor& aux_losses) {
  Losses losses;
  // Generator: cross-entropy at the masked positions, weighted.
  const at::Tensor lm_logits = input(model_outputs, "lm_outputs").to(at::kFloat);
  const int64_t vocab = lm_logits.size(-1);
  const at::Tensor lm_weights = input(labels, "masked_lm_weights").to(at::kFloat).reshape(-1);
  const at::Tensor lm_losses = at::cross_entropy_loss(
      lm_logits.reshape({-1, vocab}), input(labels, "masked_lm_ids").reshape(-1).to(at::kLong), {},
      at::Reduction::None);
  const at::Tensor lm_count = lm_weights.sum();
  losses.add("lm_example_loss", mean_over((lm_losses * lm_weights).sum(), lm_count), lm_count);

  // Next sentence, from the generator's classification head, when the data has it.
  if (labels.count("next_sentence_labels")) {
    const at::Tensor sentence_logits = input(model_outputs, "sentence_outputs").to(at::kFloat);
    const at::Tensor sentence_labels = labels.at("next_sentence_labels").reshape(-1).to(at::kLong);
    losses.add("next_sentence_loss", at::cross_entropy_loss(sentence_logits, sentence_labels),
               at::scalar_tensor(static_cast<double>(sentence_labels.size(0))));
  }

  // Discriminator: replaced-token detection over the real tokens.
  const at::Tensor disc_logits = input(model_outputs, "disc_logits").to(at::kFloat);
  const at::Tensor disc_labels = input(model_outputs, "disc_label").to(at::kFloat);
  const at::Tensor input_mask = input(labels, "input_mask").to(at::kFloat);
  const at::Tensor rtd_losses =
      at::binary_cross_entropy_with_logits(disc_logits, disc_labels, {}, {}, at::Reduction::None);
  const at::Tensor rtd_count = input_mask.sum();
  losses.add("discriminator_loss", mean_over((rtd_losses * input_mask).sum(), rtd_count), rtd_count,
             config_.model.discriminator_loss_weight);
  losses.add_aux(aux_losses);
  return losses;
}

MetricList ElectraPretrainTask::build_metrics(bool) {
  MetricList metrics{
      std::make_shared<SparseCategoricalAccuracy>(
          "masked_lm_accuracy", MetricInputs{"masked_lm_ids", "lm_outputs", "masked_lm_weights"}),
      std::make_shared<Accuracy>("discriminator_accuracy",
                                 MetricInputs{"disc_label", "disc_predictions", "input_mask"}),
      std::make_shared<Precision>("rtd_precision",
                                  MetricInputs{"disc_label", "disc_predictions", "input_mask"}),
      std::make_shared<Recall>("rtd_recall",
                               MetricInputs{"disc_label", "disc_predictions", "input_mask"}),
  };
  if (config_.train_data.use_next_sentence_label)
    metrics.push_back(std::make_shared<SparseCategoricalAccuracy>(
        "next_sentence_accuracy", MetricInputs{"next_sentence_labels", "sentence_outputs", ""}));
  return metrics;
}

void ElectraPretrainTask::process_metrics(MetricList& metrics, const Batch& labels,
                                          const Batch& model_outputs) {
  Batch with_disc_labels = labels;
  with_disc_labels["disc_label"] = input(model_outputs, "disc_label");
  Task::process_metrics(metrics, with_disc_labels, model_outputs);
}

Logs ElectraPretrainTask::train_step(const Batch& inputs, Model& model, Minimizer& minimizer,
                                     MetricList& metrics) {
  Logs logs = Task::train_step(inputs, model, minimizer, metrics);
  logs["total_loss"] = logs.at(kLoss);
  return logs;
}

Logs ElectraPretrainTask::validation_step(const Batch& inputs, Model& model, MetricList& metrics) {
  Logs logs = Task::validation_step(inputs, model, metrics);
  logs["total_loss"] = logs.at(kLoss);
  return logs;
}

std::vector<std::string> ElectraPretrainTask::loss_part_names() const {
  std::vector<std::string> names{"lm_example_loss", "discriminator_loss", "total_loss"};
  if (config_.train_data.use_next_sentence_label) names.push_back("next_sentence_loss");
  return names;
}

}  // namespace garden::nlp
