// bert/sentence_prediction as Model Garden registers it, and a tiny one
// sized as electra/tiny's discriminator, for a CPU.
#include "garden/nlp/tasks/finetuning_experiments.h"

#include "garden/config/registry.h"
#include "garden/core/init_checkpoint_config.h"
#include "garden/nlp/tasks/huggingface_adoption.h"
#include "garden/nlp/tasks/huggingface_export.h"
#include "garden/nlp/tasks/question_answering_serving.h"
#include "garden/nlp/tasks/question_answering_task.h"
#include "garden/nlp/tasks/sentence_prediction_serving.h"
#include "garden/nlp/tasks/sentence_prediction_task.h"
#include "garden/nlp/tasks/tagging_serving.h"
#include "garden/nlp/tasks/tagging_task.h"

namespace garden::nlp {

namespace {

// Model Garden's fine-tuning optimizer: AdamW with weight decay 0.01 (not on
// layer norms and biases), polynomial decay to 0, polynomial warmup.
void finetuning_optimizer(config::ExperimentConfig& experiment, double learning_rate,
                          int64_t warmup_steps) {
  auto& opt = experiment.trainer.optimizer_config;
  opt.optimizer.type = "adamw";
  opt.optimizer.adamw.weight_decay_rate = 0.01;
  opt.optimizer.adamw.exclude_from_weight_decay =
      std::vector<std::string>{"LayerNorm", "layer_norm", "bias"};
  opt.learning_rate.type = "polynomial";
  opt.learning_rate.polynomial.initial_learning_rate = learning_rate;
  opt.learning_rate.polynomial.decay_steps = experiment.trainer.train_steps;
  opt.learning_rate.polynomial.end_learning_rate = 0.0;
  opt.warmup.type = "polynomial";
  opt.warmup.polynomial.warmup_steps = warmup_steps;
}

// electra/tiny's discriminator: 128 wide, 4 layers, 2 heads, ffn 512,
// embeddings 128, vocabulary 8000.
void tiny_encoder(BertEncoderConfig& encoder) {
  encoder.vocab_size = 8000;
  encoder.hidden_size = 128;
  encoder.num_layers = 4;
  encoder.num_attention_heads = 2;
  encoder.intermediate_size = 512;
  encoder.embedding_size = 128;
}

std::shared_ptr<config::ExperimentConfig> sentence_prediction_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  experiment->task = std::make_shared<SentencePredictionConfig>();
  // Model Garden leaves the schedule's length to the run; these are BERT's
  // GLUE settings (3 epochs of a mid-sized task, 10 % warmup).
  experiment->trainer.train_steps = 10000;
  finetuning_optimizer(*experiment, 3e-5, 1000);
  return experiment;
}

// electra/tiny's discriminator (128 wide, 4 layers, 2 heads, ffn 512,
// embeddings 128, vocabulary 8000, attention biases of slope 1.0) with a
// two-class head on the mean of the tokens' outputs (a discriminator learns
// nothing about its sentence in the [CLS] output: that token is never
// replaced); sequences of 64, batches of 32; 300 steps (about 5 epochs of
// the bundled 2,000 subjects), AdamW 3e-4 (the ELECTRA paper's rate for its
// small model) after 30 warmup steps, evaluated every 100. A checkpoint or a
// Hugging Face directory in init_checkpoint replaces the slope (and a
// Hugging Face directory the head's input) with its own.
std::shared_ptr<config::ExperimentConfig> sentence_prediction_tiny_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = std::make_shared<SentencePredictionConfig>();
  tiny_encoder(task->model.encoder.bert);
  task->model.encoder.bert.alibi_slope = 1.0;
  task->model.pooling = "mean";
  task->model.num_classes = 2;
  for (auto* data : {&task->train_data, &task->validation_data}) {
    data->seq_length = 64;
    data->global_batch_size = 32;
    data->tokenization = "SentencePiece";
    data->lower_case = false;
  }
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 300;
  trainer.steps_per_loop = 50;
  trainer.summary_interval = 50;
  trainer.checkpoint_interval = 100;
  trainer.validation_interval = 100;
  trainer.validation_steps = -1;
  trainer.max_to_keep = 2;
  finetuning_optimizer(*experiment, 3e-4, 30);
  experiment->runtime.distribution_strategy = "one_device";
  return experiment;
}

// Model Garden's TaggingTask with the fine-tuning optimizer above (a
// BERT-base encoder); set class_names, the data and init_checkpoint.
std::shared_ptr<config::ExperimentConfig> tagging_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  experiment->task = std::make_shared<TaggingConfig>();
  experiment->trainer.train_steps = 10000;
  finetuning_optimizer(*experiment, 3e-5, 1000);
  return experiment;
}

// Model Garden's bert/squad: a BERT-base encoder, AdamW 8e-5 with
// polynomial decay; set the data, vocab_file and init_checkpoint.
std::shared_ptr<config::ExperimentConfig> squad_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  experiment->task = std::make_shared<QuestionAnsweringConfig>();
  experiment->trainer.train_steps = 10000;
  finetuning_optimizer(*experiment, 8e-5, 1000);
  return experiment;
}

// Question answering on electra/tiny's encoder (sizes as
// sentence_prediction_tiny_experiment's): windows of 128 with questions of at most 32 pieces,
// 64 apart, batches of 32, SentencePiece; 600 steps (about 7 epochs of the
// bundled 1,500 man-page questions' windows) at 3e-4, evaluated every 200.
std::shared_ptr<config::ExperimentConfig> squad_tiny_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = std::make_shared<QuestionAnsweringConfig>();
  tiny_encoder(task->model.encoder.bert);
  for (auto* data : {&task->train_data, &task->validation_data}) {
    data->seq_length = 128;
    data->global_batch_size = 32;
    data->tokenization = "SentencePiece";
    data->do_lower_case = false;
  }
  // The training records' windows come from create_finetuning_data's
  // --max_query_length=32 --doc_stride=64.
  task->validation_data.query_length = 32;
  task->validation_data.doc_stride = 64;
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 600;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 100;
  trainer.checkpoint_interval = 200;
  trainer.validation_interval = 200;
  trainer.validation_steps = -1;
  trainer.max_to_keep = 2;
  finetuning_optimizer(*experiment, 3e-4, 60);
  experiment->runtime.distribution_strategy = "one_device";
  return experiment;
}

}  // namespace

void register_finetuning() {
  register_task<SentencePredictionConfig, SentencePredictionTask>("sentence_prediction");
  register_huggingface_exporter<SentencePredictionConfig>("sentence_prediction",
                                                          SentencePredictionTask::to_huggingface);
  register_serving_module<SentencePredictionConfig, SentencePredictionTask,
                          SentencePredictionServing>("sentence_prediction");
  register_init_checkpoint_adopter<SentencePredictionConfig>(adopt_sentence_prediction_checkpoint);
  config::register_experiment(
      "bert/sentence_prediction",
      "Model Garden's sentence prediction (GLUE) fine-tuning of a BERT-base "
      "encoder; set num_classes, the data and init_checkpoint",
      sentence_prediction_experiment);
  register_task<TaggingConfig, TaggingTask>("tagging");
  register_huggingface_exporter<TaggingConfig>("tagging", TaggingTask::to_huggingface);
  register_serving_module<TaggingConfig, TaggingTask, TaggingServing>("tagging");
  register_init_checkpoint_adopter<TaggingConfig>(adopt_tagging_checkpoint);
  config::register_experiment(
      "bert/tagging",
      "Model Garden's tagging (a label per word: NER, POS) fine-tuning of a "
      "BERT-base encoder; set class_names, the data and init_checkpoint",
      tagging_experiment);
  register_task<QuestionAnsweringConfig, QuestionAnsweringTask>("question_answering");
  register_huggingface_exporter<QuestionAnsweringConfig>("question_answering",
                                                         QuestionAnsweringTask::to_huggingface);
  register_init_checkpoint_adopter<QuestionAnsweringConfig>(adopt_question_answering_checkpoint);
  register_serving_module<QuestionAnsweringConfig, QuestionAnsweringTask, QuestionAnsweringServing>(
      "question_answering");
  config::register_experiment(
      "bert/squad",
      "Model Garden's question answering (SQuAD v1.1 / v2.0) fine-tuning of a BERT-base "
      "encoder; set the data, vocab_file and init_checkpoint",
      squad_experiment);
  config::register_experiment("bert/squad_tiny",
                              "Question answering on electra/tiny's encoder for a CPU; set the "
                              "data, vocab_file and init_checkpoint",
                              squad_tiny_experiment);
  config::register_experiment("bert/sentence_prediction_tiny",
                              "Sentence prediction on electra/tiny's encoder for a CPU; set the "
                              "data, vocab_file and init_checkpoint",
                              sentence_prediction_tiny_experiment);
}

}  // namespace garden::nlp
