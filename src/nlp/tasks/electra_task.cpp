#include "garden/nlp/tasks/electra_task.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "garden/base/error.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/data/bert_pretrain_data.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/modeling/electra_pretrainer.h"
#include "garden/nlp/tasks/huggingface_export.h"

namespace garden::nlp {

namespace {

constexpr std::string_view kElectra = "ELECTRA pretraining";

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

Batch ElectraPretrainTask::inference_step(const Batch& inputs, Model& model) {
  at::NoGradGuard no_grad;
  model.eval();
  auto& pretrainer = model_as<ElectraPretrainerImpl>(model, kElectra, "an ElectraPretrainer");
  const at::Tensor sequence =
      pretrainer.discriminator->forward(batch_tensor(inputs, "input_word_ids", kElectra),
                                        batch_tensor(inputs, "input_mask", kElectra),
                                        batch_tensor(inputs, "input_type_ids", kElectra));
  const at::Tensor logits = pretrainer.discriminator_logits(sequence);
  Batch outputs = {{"sequence_output", sequence},
                   {"disc_logits", logits},
                   {"disc_probabilities", at::sigmoid(logits.to(at::kFloat))}};
  const auto lengths = inputs.find("lengths");  // ElectraServing's: each row's own length
  if (lengths != inputs.end()) outputs["lengths"] = lengths->second;
  return outputs;
}

ModelPtr ElectraPretrainTask::build_model() {
  return ElectraPretrainer(config_.model.options()).ptr();
}

Batch ElectraPretrainTask::call_model(Model& model, const Batch& features, bool) {
  Batch outputs =
      model_as<ElectraPretrainerImpl>(model, kElectra, "an ElectraPretrainer").forward(features);
  outputs["disc_predictions"] = outputs.at("disc_logits").detach().gt(0).to(at::kFloat);
  return outputs;
}

Losses ElectraPretrainTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                         const at::Tensor& aux_losses) {
  Losses losses;
  // Generator: cross-entropy at the masked positions, weighted.
  const at::Tensor lm_logits = batch_tensor(model_outputs, "lm_outputs", kElectra).to(at::kFloat);
  const int64_t vocab = lm_logits.size(-1);
  const at::Tensor lm_weights =
      batch_tensor(labels, "masked_lm_weights", kElectra).to(at::kFloat).reshape(-1);
  const at::Tensor lm_losses = kernels::sparse_cross_entropy_rows(
      lm_logits.reshape({-1, vocab}), batch_tensor(labels, "masked_lm_ids", kElectra).reshape(-1));
  const at::Tensor lm_count = lm_weights.sum();
  losses.add("lm_example_loss", mean_over((lm_losses * lm_weights).sum(), lm_count), lm_count);

  // Next sentence, from the generator's classification head, when the data has it.
  if (labels.count("next_sentence_labels")) {
    const at::Tensor sentence_logits =
        batch_tensor(model_outputs, "sentence_outputs", kElectra).to(at::kFloat);
    const at::Tensor sentence_labels = labels.at("next_sentence_labels").reshape(-1).to(at::kLong);
    losses.add("next_sentence_loss", at::cross_entropy_loss(sentence_logits, sentence_labels),
               at::scalar_tensor(static_cast<double>(sentence_labels.size(0))));
  }

  // Discriminator: replaced-token detection over the real tokens.
  const at::Tensor disc_logits =
      batch_tensor(model_outputs, "disc_logits", kElectra).to(at::kFloat);
  const at::Tensor disc_labels = batch_tensor(model_outputs, "disc_label", kElectra).to(at::kFloat);
  const at::Tensor input_mask = batch_tensor(labels, "input_mask", kElectra).to(at::kFloat);
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
  with_disc_labels["disc_label"] = batch_tensor(model_outputs, "disc_label", kElectra);
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

HuggingFaceExport ElectraPretrainTask::to_huggingface(Task& task, Model& model) {
  const auto* c = &dynamic_cast<const ElectraPretrainConfig&>(task.task_config());
  const ElectraPretrainerOptions o = c->model.options();
  if (o.generator.hidden_activation != o.discriminator.hidden_activation)
    throw Error(
        "--format=huggingface: ElectraForPreTraining's discriminator head computes the "
        "discriminator's hidden_act; Garden's (Model Garden's) computes the generator's "
        "hidden_activation '" +
        o.generator.hidden_activation + "', which differs from '" +
        o.discriminator.hidden_activation + "'");
  HuggingFaceExport out;
  BertEncoderOptions d = o.discriminator;
  out.config = huggingface_encoder_config(d, "electra");
  out.config["architectures"] = nlohmann::json::array({"ElectraForPreTraining"});
  out.tensors = garden_encoder_to_huggingface(model, d, "discriminator.", "electra.");
  out.tensors.emplace_back("discriminator_predictions.dense.weight",
                           huggingface_parameter(model, "discriminator_projection.weight"));
  out.tensors.emplace_back("discriminator_predictions.dense.bias",
                           huggingface_parameter(model, "discriminator_projection.bias"));
  out.tensors.emplace_back("discriminator_predictions.dense_prediction.weight",
                           huggingface_parameter(model, "discriminator_head.weight"));
  out.tensors.emplace_back("discriminator_predictions.dense_prediction.bias",
                           huggingface_parameter(model, "discriminator_head.bias"));
  return out;
}

}  // namespace garden::nlp
