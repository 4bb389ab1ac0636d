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
  const auto lengths = inputs.find("lengths");  // serving_inputs': each row's own length
  if (lengths != inputs.end()) outputs["lengths"] = lengths->second;
  return outputs;
}

ServingSignature ElectraPretrainTask::serving_signature() {
  const int64_t hidden = config_.model.discriminator_encoder.bert.hidden_size;
  return {{{"input_word_ids", {"DT_INT32", {-1}}},
           {"input_mask", {"DT_INT32", {-1}}},
           {"input_type_ids", {"DT_INT32", {-1}}}},
          {{"sequence_output", {"DT_FLOAT", {-1, hidden}}},
           {"disc_probabilities", {"DT_FLOAT", {-1}}}}};
}

Batch ElectraPretrainTask::serving_inputs(const std::vector<nlohmann::json>& instances) {
  const BertEncoderConfig& encoder = config_.model.discriminator_encoder.bert;
  const int64_t longest_allowed =
      std::min(config_.model.sequence_length, encoder.max_position_embeddings);
  struct Row {
    std::vector<int64_t> ids, mask, types;
  };
  std::vector<Row> rows(instances.size());
  int64_t longest = 1;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const std::string where = "instance " + std::to_string(i);
    auto read = [&](const char* name, int64_t bound, std::vector<int64_t>& out) {
      const auto it = instances[i].find(name);
      if (it == instances[i].end()) return false;
      if (!it->is_array())
        throw InputError(where + ": input '" + name + "' must be a list of ints, not " +
                         std::string(it->type_name()));
      for (const auto& value : *it) {
        if (!value.is_number_integer())
          throw InputError(where + ": input '" + name + "' holds " + value.dump() + ", not an int");
        const int64_t v = value.get<int64_t>();
        if (v < 0 || v >= bound)
          throw InputError(where + ": input '" + name + "' holds " + std::to_string(v) +
                           ", outside [0, " + std::to_string(bound) + ")");
        out.push_back(v);
      }
      return true;
    };
    Row& row = rows[i];
    if (!read("input_word_ids", encoder.vocab_size, row.ids))
      throw InputError(where + " has no input 'input_word_ids'");
    const auto length = static_cast<int64_t>(row.ids.size());
    if (length == 0) throw InputError(where + ": input 'input_word_ids' is empty");
    if (length > longest_allowed)
      throw InputError(where + " has " + std::to_string(length) + " tokens; the model takes " +
                       std::to_string(longest_allowed));
    if (!read("input_mask", 2, row.mask)) row.mask.assign(row.ids.size(), 1);
    if (!read("input_type_ids", encoder.type_vocab_size, row.types))
      row.types.assign(row.ids.size(), 0);
    for (const auto* list : {&row.mask, &row.types})
      if (list->size() != row.ids.size())
        throw InputError(where +
                         ": input_mask and input_type_ids must be as long as "
                         "input_word_ids (" +
                         std::to_string(length) + ")");
    longest = std::max(longest, length);
  }
  const auto batch = static_cast<int64_t>(rows.size());
  at::Tensor ids = at::zeros({batch, longest}, at::kLong);
  at::Tensor mask = at::zeros({batch, longest}, at::kLong);
  at::Tensor types = at::zeros({batch, longest}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const Row& row = rows[static_cast<std::size_t>(b)];
    std::copy(row.ids.begin(), row.ids.end(), ids.data_ptr<int64_t>() + b * longest);
    std::copy(row.mask.begin(), row.mask.end(), mask.data_ptr<int64_t>() + b * longest);
    std::copy(row.types.begin(), row.types.end(), types.data_ptr<int64_t>() + b * longest);
  }
  std::vector<int64_t> lengths;
  for (const Row& row : rows) lengths.push_back(static_cast<int64_t>(row.ids.size()));
  return {{"input_word_ids", ids},
          {"input_mask", mask},
          {"input_type_ids", types},
          {"lengths", at::tensor(lengths, at::kLong)}};
}

std::vector<nlohmann::json> ElectraPretrainTask::serving_outputs(const Batch& outputs,
                                                                 std::size_t count) {
  const at::Tensor sequence = outputs.at("sequence_output").to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor probabilities =
      outputs.at("disc_probabilities").to(at::kCPU, at::kDouble).contiguous();
  // Each instance's own length: the padding is left out.
  const at::Tensor lengths = outputs.at("lengths").to(at::kCPU, at::kLong).contiguous();
  const int64_t length = sequence.size(1), hidden = sequence.size(2);
  std::vector<nlohmann::json> rows;
  rows.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto b = static_cast<int64_t>(i);
    const int64_t used = std::min(length, lengths.data_ptr<int64_t>()[b]);
    nlohmann::json seq = nlohmann::json::array();
    for (int64_t t = 0; t < used; ++t) {
      const double* h = sequence.data_ptr<double>() + (b * length + t) * hidden;
      seq.push_back(std::vector<double>(h, h + hidden));
    }
    const double* p = probabilities.data_ptr<double>() + b * length;
    rows.push_back({{"sequence_output", std::move(seq)},
                    {"disc_probabilities", std::vector<double>(p, p + used)}});
  }
  return rows;
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
