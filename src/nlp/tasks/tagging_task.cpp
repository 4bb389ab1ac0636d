#include "garden/nlp/tasks/tagging_task.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/metrics/seqeval.h"
#include "garden/nlp/tasks/huggingface_export.h"

namespace garden::nlp {

namespace {

constexpr std::string_view kTagging = "tagging";

constexpr const char* kLabelRows = "tagging_label_rows";
constexpr const char* kPredictRows = "tagging_predict_rows";

}  // namespace

TaggingTask::TaggingTask(std::shared_ptr<const TaggingConfig> params, std::string logging_dir)
    : Task(params, std::move(logging_dir)),
      config_(*params),
      text_tokenizer_(params->train_data.vocab_file, params->train_data.tokenization,
                      params->train_data.lower_case, "task.train_data.vocab_file",
                      params->model.encoder.bert.vocab_size) {}

DatasetPtr TaggingTask::build_inputs(const config::DataConfig& params,
                                     const InputContext& input_context) {
  const auto* data = dynamic_cast<const TaggingDataConfig*>(&params);
  if (!data) throw Error("the tagging task reads TaggingDataConfig data");
  return build_tagging_inputs(*data, input_context, config_.model.encoder.bert.vocab_size,
                              config_.class_names);
}

void TaggingTask::initialize(Model& model) {
  // A Hugging Face BERT or ELECTRA directory gives the encoder; anything
  // else is a Garden checkpoint.
  // A *ForTokenClassification's head is Garden's classifier layer, restored
  // with init_checkpoint_modules [all] (or [classifier]).
  if (!initialize_from_huggingface(
          config_, model, config_.model.encoder.bert.options(),
          {{"classifier.weight", "classifier.weight"}, {"classifier.bias", "classifier.bias"}}))
    Task::initialize(model);
}

ModelPtr TaggingTask::build_model() {
  // Empty is bert/tagging's default, so that garden config shows it.
  if (config_.class_names.empty())
    throw Error(
        "task.class_names is empty: list the label of each id (create_finetuning_data's "
        "meta data holds them as label_list; a training run takes them from the meta data "
        "beside task.train_data.input_path)");
  text_tokenizer_.check();
  return BertTokenClassifier(config_.model_options()).ptr();
}

Batch TaggingTask::call_model(Model& model, const Batch& features, bool) {
  return {{"logits", model_as<BertTokenClassifierImpl>(model, kTagging, "a BertTokenClassifier")
                         .forward(batch_tensor(features, "input_word_ids", kTagging),
                                  batch_tensor(features, "input_mask", kTagging),
                                  batch_tensor(features, "input_type_ids", kTagging))}};
}

Losses TaggingTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                 const at::Tensor& aux_losses) {
  const at::Tensor logits = batch_tensor(model_outputs, "logits", kTagging).to(at::kFloat);
  const at::Tensor label_ids =
      batch_tensor(labels, "label_ids", kTagging).reshape(-1).to(at::kLong);
  const at::Tensor weights = label_ids.ge(0).to(at::kFloat);
  const at::Tensor per_token = at::cross_entropy_loss(
      logits.reshape({-1, logits.size(-1)}), label_ids.clamp_min(0), {}, at::Reduction::None);
  const at::Tensor count = weights.sum();
  Losses losses;
  losses.add(kLoss, (per_token * weights).sum() / count.clamp_min(1e-12), count);
  losses.add_aux(aux_losses);
  return losses;
}

MetricList TaggingTask::build_metrics(bool) {
  return {std::make_shared<SparseCategoricalAccuracy>(
      "accuracy", MetricInputs{"label_ids", "logits", "label_weights"})};
}

void TaggingTask::process_metrics(MetricList& metrics, const Batch& labels,
                                  const Batch& model_outputs) {
  Batch with_weights = labels;
  const at::Tensor label_ids = batch_tensor(labels, "label_ids", kTagging);
  with_weights["label_weights"] = label_ids.ge(0).to(at::kFloat);
  with_weights["label_ids"] = label_ids.clamp_min(0);
  Task::process_metrics(metrics, with_weights, model_outputs);
}

void TaggingTask::add_validation_outputs(const Batch& inputs, const Batch& outputs, Logs& logs) {
  const at::Tensor labels =
      batch_tensor(inputs, "label_ids", kTagging).to(at::kCPU, at::kLong).contiguous();
  const at::Tensor predictions =
      outputs.at("logits").argmax(-1).to(at::kCPU, at::kLong).contiguous();
  const auto label_at = labels.accessor<int64_t, 2>();
  const auto predicted_at = predictions.accessor<int64_t, 2>();
  std::vector<std::vector<int64_t>> label_rows, predict_rows;
  for (int64_t b = 0; b < labels.size(0); ++b) {
    std::vector<int64_t> l, p;
    for (int64_t t = 0; t < labels.size(1); ++t) {
      if (label_at[b][t] < 0) continue;
      l.push_back(label_at[b][t]);
      p.push_back(predicted_at[b][t]);
    }
    label_rows.push_back(std::move(l));
    predict_rows.push_back(std::move(p));
  }
  logs[kLabelRows] = std::move(label_rows);
  logs[kPredictRows] = std::move(predict_rows);
}

Logs TaggingTask::reduce_aggregated_logs(const Logs& aggregated_logs, int64_t) {
  Logs logs;
  const auto labels = aggregated_logs.find(kLabelRows);
  const auto predictions = aggregated_logs.find(kPredictRows);
  if (labels == aggregated_logs.end() || predictions == aggregated_logs.end()) return logs;
  const auto names = [&](const std::vector<std::vector<int64_t>>& rows) {
    std::vector<std::vector<std::string>> out;
    for (const auto& row : rows) {
      std::vector<std::string> tags;
      for (const int64_t id : row)
        tags.push_back(config_.class_names.at(static_cast<std::size_t>(id)));
      out.push_back(std::move(tags));
    }
    return out;
  };
  const SeqevalScores scores = seqeval_scores(
      names(std::get<std::vector<std::vector<int64_t>>>(labels->second)),
      names(std::get<std::vector<std::vector<int64_t>>>(predictions->second)),
      config_.seqeval_mode == "strict" ? SeqevalMode::kStrict : SeqevalMode::kDefault);
  logs["precision"] = scores.precision;
  logs["recall"] = scores.recall;
  logs["f1"] = scores.f1;
  logs["accuracy"] = scores.accuracy;
  return logs;
}

const FinetuningTokenizer& TaggingTask::tokenizer() { return text_tokenizer_.get(); }

Batch TaggingTask::inference_step(const Batch& inputs, Model& model) {
  torch::NoGradGuard no_grad;
  if (model.is_training()) model.eval();
  Batch outputs = call_model(model, inputs, /*training=*/false);
  outputs["predictions"] = outputs.at("logits").argmax(-1);
  const auto positions = inputs.find("word_positions");
  if (positions != inputs.end()) outputs["word_positions"] = positions->second;
  return outputs;
}

HuggingFaceExport TaggingTask::to_huggingface(Task& task, Model& model) {
  const auto* c = &dynamic_cast<const TaggingConfig&>(task.task_config());
  const BertEncoderOptions o = c->model.encoder.bert.options();
  const std::string type = encoder_projects(o) ? "Electra" : "Bert";
  HuggingFaceExport out =
      huggingface_encoder_export(model, o, "encoder.", type + "ForTokenClassification");
  out.tensors.emplace_back("classifier.weight", huggingface_parameter(model, "classifier.weight"));
  out.tensors.emplace_back("classifier.bias", huggingface_parameter(model, "classifier.bias"));
  add_huggingface_labels(out.config, c->class_names, static_cast<int64_t>(c->class_names.size()));
  out.config["classifier_dropout"] = c->model.head_dropout;
  add_huggingface_tokenizer_config(out, c->train_data.tokenization, c->train_data.lower_case);
  return out;
}

}  // namespace garden::nlp
