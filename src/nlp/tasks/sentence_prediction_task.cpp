#include "garden/nlp/tasks/sentence_prediction_task.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "garden/base/error.h"
#include "garden/nlp/data/classifier_data.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/metrics/glue_metrics.h"
#include "garden/nlp/tasks/huggingface_export.h"

namespace garden::nlp {

namespace {

constexpr std::string_view kSentencePrediction = "sentence prediction";

constexpr const char* kSentencePredictionRows = "sentence_prediction_rows";

}  // namespace

SentencePredictionTask::SentencePredictionTask(
    std::shared_ptr<const SentencePredictionConfig> params, std::string logging_dir)
    : Task(params, std::move(logging_dir)),
      config_(*params),
      text_tokenizer_(params->train_data.vocab_file, params->train_data.tokenization,
                      params->train_data.lower_case, "task.train_data.vocab_file",
                      params->model.encoder.bert.vocab_size) {}

DatasetPtr SentencePredictionTask::build_inputs(const config::DataConfig& params,
                                                const InputContext& input_context) {
  const auto* data = dynamic_cast<const SentencePredictionDataConfig*>(&params);
  if (!data) throw Error("the sentence prediction task reads SentencePredictionDataConfig data");
  return build_sentence_prediction_inputs(*data, input_context,
                                          config_.model.encoder.bert.vocab_size);
}

ModelPtr SentencePredictionTask::build_model() {
  if (config_.model.num_classes < 1)
    throw Error("task.model.num_classes is 0: set the number of classes (1 for a regression)");
  text_tokenizer_.check();
  return BertClassifier(config_.model.options()).ptr();
}

Batch SentencePredictionTask::call_model(Model& model, const Batch& features, bool) {
  const at::Tensor logits =
      model_as<BertClassifierImpl>(model, kSentencePrediction, "a BertClassifier")
          .forward(batch_tensor(features, "input_word_ids", kSentencePrediction),
                   batch_tensor(features, "input_mask", kSentencePrediction),
                   batch_tensor(features, "input_type_ids", kSentencePrediction));
  Batch outputs{{"logits", logits}};
  if (regression()) outputs["predictions"] = logits.select(1, 0);
  return outputs;
}

Losses SentencePredictionTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                            const at::Tensor& aux_losses) {
  Losses losses;
  const at::Tensor logits =
      batch_tensor(model_outputs, "logits", kSentencePrediction).to(at::kFloat);
  const at::Tensor label_ids = batch_tensor(labels, "label_ids", kSentencePrediction).reshape(-1);
  const auto count = at::scalar_tensor(static_cast<double>(label_ids.size(0)));
  if (regression())
    losses.add(kLoss, at::mse_loss(logits.select(1, 0), label_ids.to(at::kFloat)), count);
  else
    losses.add(kLoss, at::cross_entropy_loss(logits, label_ids.to(at::kLong)), count);
  losses.add_aux(aux_losses);
  return losses;
}

MetricList SentencePredictionTask::build_metrics(bool) {
  if (regression())
    return {std::make_shared<MeanSquaredError>("mean_squared_error",
                                               MetricInputs{"label_ids", "predictions", ""})};
  return {std::make_shared<SparseCategoricalAccuracy>("cls_accuracy",
                                                      MetricInputs{"label_ids", "logits", ""})};
}

void SentencePredictionTask::add_validation_outputs(const Batch& inputs, const Batch& outputs,
                                                    Logs& logs) {
  const at::Tensor labels =
      batch_tensor(inputs, "label_ids", kSentencePrediction).reshape(-1).to(at::kCPU, at::kDouble);
  const at::Tensor logits = outputs.at("logits").to(at::kCPU, at::kDouble);
  const at::Tensor best = logits.argmax(-1).contiguous();
  const auto label_at = labels.accessor<double, 1>();
  const auto logit_at = logits.accessor<double, 2>();
  const auto best_at = best.accessor<int64_t, 1>();
  // [label, prediction] per example: values for a regression, class ids
  // otherwise.
  if (regression()) {
    ValueRows rows;
    for (int64_t b = 0; b < labels.size(0); ++b) rows.push_back({label_at[b], logit_at[b][0]});
    logs[kSentencePredictionRows] = std::move(rows);
  } else {
    IdRows rows;
    for (int64_t b = 0; b < labels.size(0); ++b)
      rows.push_back({static_cast<int64_t>(label_at[b]), best_at[b]});
    logs[kSentencePredictionRows] = std::move(rows);
  }
}

Logs SentencePredictionTask::reduce_aggregated_logs(const Logs& aggregated_logs, int64_t) {
  Logs logs;
  const auto it = aggregated_logs.find(kSentencePredictionRows);
  if (it == aggregated_logs.end()) return logs;
  if (regression()) {
    std::vector<double> labels, predictions;
    for (const auto& row : std::get<ValueRows>(it->second)) {
      labels.push_back(row[0]);
      predictions.push_back(row[1]);
    }
    if (config_.metric_type == "pearson_spearman_corr")
      logs["pearson_spearman_corr"] =
          (pearson_correlation(predictions, labels) + spearman_correlation(predictions, labels)) /
          2.0;
    return logs;
  }
  std::vector<int64_t> labels, predictions;
  for (const auto& row : std::get<IdRows>(it->second)) {
    labels.push_back(row[0]);
    predictions.push_back(row[1]);
  }
  if (config_.metric_type == "matthews_corrcoef")
    logs["matthews_corrcoef"] = matthews_correlation(labels, predictions);
  if (config_.model.num_classes == 2) logs["f1"] = f1_score(labels, predictions, 1);
  return logs;
}

std::vector<std::string> SentencePredictionTask::aggregated_log_names() const {
  std::vector<std::string> names;
  if (config_.metric_type != "accuracy") names.push_back(config_.metric_type);
  if (config_.model.num_classes == 2) names.push_back("f1");
  return names;
}

void SentencePredictionTask::initialize(Model& model) {
  // A Hugging Face BERT: its pooler is the head's dense layer (Model
  // Garden's init_cls_pooler), BertForSequenceClassification's classifier
  // the head's output layer.
  const std::map<std::string, std::string> pooler{
      {"classifier.dense.weight", "pooler.dense.weight"},
      {"classifier.dense.bias", "pooler.dense.bias"}};
  std::map<std::string, std::string> extra = pooler;
  extra["classifier.out_proj.weight"] = "classifier.weight";
  extra["classifier.out_proj.bias"] = "classifier.bias";
  if (initialize_from_huggingface(
          config_, model, config_.model.encoder.bert.options(), extra,
          config_.init_cls_pooler ? pooler : std::map<std::string, std::string>{}))
    return;
  if (!config_.init_cls_pooler || config_.init_checkpoint.empty()) {
    Task::initialize(model);
    return;
  }
  // Model Garden maps the pretrainer's next_sentence.pooler_dense to the
  // head's dense layer: here the ELECTRA pretrainer's cls_head_next_sentence.
  InitCheckpointMapping mapping{config_.init_checkpoint_modules, config_.init_checkpoint_rename};
  mapping.rename.emplace("cls_head_next_sentence.dense.", "classifier.dense.");
  mapping.modules.push_back("classifier.dense");
  initialize_from_checkpoint(model, config_.init_checkpoint, std::move(mapping));
}

Batch SentencePredictionTask::inference_step(const Batch& inputs, Model& model) {
  torch::NoGradGuard no_grad;
  if (model.is_training()) model.eval();
  Batch outputs = call_model(model, inputs, /*training=*/false);
  if (!regression())
    outputs["probabilities"] = at::softmax(outputs.at("logits").to(at::kFloat), -1);
  return outputs;
}

const FinetuningTokenizer& SentencePredictionTask::tokenizer() { return text_tokenizer_.get(); }

HuggingFaceExport SentencePredictionTask::to_huggingface(Task& task, Model& model) {
  const auto* c = &dynamic_cast<const SentencePredictionConfig&>(task.task_config());
  const BertEncoderOptions o = c->model.encoder.bert.options();
  if (c->model.pooling != "cls")
    throw Error("--format=huggingface: task.model.pooling is '" + c->model.pooling +
                "', but BertForSequenceClassification classifies the [CLS] output: no Hugging "
                "Face architecture computes this model");
  if (encoder_projects(o))
    throw Error(
        "--format=huggingface: this encoder projects its embeddings (embedding_size " +
        std::to_string(o.embedding_width()) + ", hidden_size " + std::to_string(o.hidden_size) +
        "), so it would be an ELECTRA, whose ElectraForSequenceClassification head computes "
        "gelu where Garden's head (Model Garden's) computes tanh: no Hugging Face "
        "architecture computes this model");
  HuggingFaceExport out =
      huggingface_encoder_export(model, o, "encoder.", "BertForSequenceClassification");
  out.tensors.emplace_back("bert.pooler.dense.weight",
                           huggingface_parameter(model, "classifier.dense.weight"));
  out.tensors.emplace_back("bert.pooler.dense.bias",
                           huggingface_parameter(model, "classifier.dense.bias"));
  out.tensors.emplace_back("classifier.weight",
                           huggingface_parameter(model, "classifier.out_proj.weight"));
  out.tensors.emplace_back("classifier.bias",
                           huggingface_parameter(model, "classifier.out_proj.bias"));
  const int64_t classes = c->model.num_classes;
  add_huggingface_labels(out.config, c->class_names, classes);
  out.config["problem_type"] = classes == 1 ? "regression" : "single_label_classification";
  add_huggingface_tokenizer_config(out, c->train_data.tokenization, c->train_data.lower_case);
  return out;
}

}  // namespace garden::nlp
