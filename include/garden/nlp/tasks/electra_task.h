// Model Garden's ELECTRA pretraining task (official/nlp/tasks/electra_task.py):
// joint masked-LM (generator) and replaced-token detection (discriminator)
// on BERT pretraining data.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "garden/core/task.h"
#include "garden/nlp/tasks/electra_config.h"

namespace garden::nlp {

struct HuggingFaceExport;

class ElectraPretrainTask : public Task {
 public:
  // garden export --format=huggingface: the model as ElectraForPreTraining (the discriminator);
  // registered for the task's config beside register_task.
  static HuggingFaceExport to_huggingface(Task& task, Model& model);

  ElectraPretrainTask(std::shared_ptr<const ElectraPretrainConfig> params,
                      std::string logging_dir = "");

  DatasetPtr build_inputs(const config::DataConfig& params,
                          const InputContext& input_context) override;
  ModelPtr build_model() override;
  // ElectraPretrainer's outputs (lm_outputs, sentence_outputs, disc_logits,
  // disc_label, sampled_ids, one per classification head) plus
  // disc_predictions: 1 where the discriminator says "replaced".
  Batch call_model(Model& model, const Batch& features, bool training) override;
  // Parts, each averaged over its own items:
  //   lm_example_loss     masked-LM cross-entropy weighted by masked_lm_weights
  //   next_sentence_loss  when train_data.use_next_sentence_label
  //   discriminator_loss  replaced-token detection over input_mask, entering
  //                       the total times discriminator_loss_weight
  Losses build_losses(const Batch& labels, const Batch& model_outputs,
                      const at::Tensor& aux_losses = {}) override;
  // masked_lm_accuracy, discriminator_accuracy, rtd_precision, rtd_recall
  // (of the "replaced" class over real tokens) and next_sentence_accuracy
  // when next-sentence labels are used.
  MetricList build_metrics(bool training = true) override;
  // The discriminator's labels are a model output: metrics read them there.
  void process_metrics(MetricList& metrics, const Batch& labels,
                       const Batch& model_outputs) override;
  // The default step, plus total_loss (Model Garden's name for the loss).
  Logs train_step(const Batch& inputs, Model& model, Minimizer& minimizer,
                  MetricList& metrics) override;
  Logs validation_step(const Batch& inputs, Model& model, MetricList& metrics) override;
  std::vector<std::string> loss_part_names() const override;
  // Model Garden's ElectraPretrainer.checkpoint_items: the discriminator is
  // the "encoder" a fine-tuning task restores.
  std::map<std::string, std::string> checkpoint_items() const override {
    return {{"encoder", "discriminator"}};
  }

  // The discriminator alone, as Model Garden exports a BERT encoder:
  // sequence_output [B, S, H], disc_logits and disc_probabilities [B, S];
  // "lengths" passes through when the inputs carry it (ElectraServing's).
  Batch inference_step(const Batch& inputs, Model& model) override;

  const ElectraPretrainConfig& config() const { return config_; }

 private:
  const ElectraPretrainConfig& config_;
};

}  // namespace garden::nlp
