// The registered ELECTRA experiments: Model Garden's electra/pretraining, the
// ELECTRA paper's small model, and a tiny one sized for a CPU (the sizes of
// bench/peers/peer_electra.py's tiny preset).
#include "garden/nlp/tasks/electra_experiments.h"

#include "garden/config/registry.h"
#include "garden/nlp/tasks/electra_serving.h"
#include "garden/nlp/tasks/electra_task.h"
#include "garden/nlp/tasks/huggingface_export.h"

namespace garden::nlp {

namespace {

// BERT's and ELECTRA's AdamW: weight decay 0.01, not on layer norms and biases.
void pretraining_adamw(config::OptimizationConfig& opt) {
  opt.optimizer.type = "adamw";
  opt.optimizer.adamw.weight_decay_rate = 0.01;
  opt.optimizer.adamw.exclude_from_weight_decay =
      std::vector<std::string>{"LayerNorm", "layer_norm", "bias"};
}

// Model Garden's pretraining trainer (official/nlp/configs/
// pretraining_experiments.py): that AdamW, polynomial decay from
// `learning_rate` to 0 over the training, polynomial warmup.
void pretraining_trainer(config::ExperimentConfig& experiment, double learning_rate,
                         int64_t warmup_steps) {
  auto& trainer = experiment.trainer;
  trainer.train_steps = 1000000;
  auto& opt = trainer.optimizer_config;
  pretraining_adamw(opt);
  opt.learning_rate.type = "polynomial";
  opt.learning_rate.polynomial.initial_learning_rate = learning_rate;
  opt.learning_rate.polynomial.decay_steps = trainer.train_steps;
  opt.learning_rate.polynomial.end_learning_rate = 0.0;
  // Model Garden leaves warmup_steps unset, which its schedule cannot run
  // with; 10,000 is BERT's and ELECTRA's.
  opt.warmup.type = "polynomial";
  opt.warmup.polynomial.warmup_steps = warmup_steps;
}

std::shared_ptr<ElectraPretrainConfig> electra_task() {
  auto task = std::make_shared<ElectraPretrainConfig>();
  task->train_data.is_training = true;
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  return task;
}

std::shared_ptr<config::ExperimentConfig> pretraining_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  experiment->task = electra_task();
  pretraining_trainer(*experiment, 1e-4, 10000);
  return experiment;
}

struct EncoderSize {
  int64_t hidden, layers, heads, ffn;
};

void set_encoder(BertEncoderConfig& encoder, const EncoderSize& size, int64_t vocab,
                 int64_t embedding) {
  encoder.vocab_size = vocab;
  encoder.hidden_size = size.hidden;
  encoder.num_layers = size.layers;
  encoder.num_attention_heads = size.heads;
  encoder.intermediate_size = size.ffn;
  encoder.embedding_size = embedding;
}

// ELECTRA as the paper trains it: no next-sentence objective, sequences of
// 128 with at most 20 masked tokens.
std::shared_ptr<ElectraPretrainConfig> sized_task(int64_t vocab, int64_t embedding,
                                                  const EncoderSize& discriminator,
                                                  const EncoderSize& generator,
                                                  int64_t batch_size) {
  auto task = electra_task();
  auto& model = task->model;
  model.sequence_length = 128;
  model.num_masked_tokens = 20;
  model.cls_heads.clear();
  set_encoder(model.discriminator_encoder.bert, discriminator, vocab, embedding);
  set_encoder(model.generator_encoder.bert, generator, vocab, embedding);
  for (auto* data : {&task->train_data, &task->validation_data}) {
    data->seq_length = 128;
    data->max_predictions_per_seq = 20;
    data->use_next_sentence_label = false;
    data->global_batch_size = batch_size;
  }
  return task;
}

std::shared_ptr<config::ExperimentConfig> small_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  experiment->task = sized_task(30522, 128, {256, 12, 4, 1024}, {64, 12, 1, 256}, 128);
  pretraining_trainer(*experiment, 5e-4, 10000);
  return experiment;
}

// The tiny model of peer_electra.py for a 2-core CPU: AdamW 5e-4 after 500
// linear warmup steps, batches of 32 x 128, evaluations of 1,024 sequences.
// Both encoders add linear attention biases (alibi_slope 1.0): without them
// a 30-minute run on a GLUE task's own text leaves a discriminator that
// fine-tunes worse than random initialization; with them it fine-tunes
// better (docs/tasks/sentence_prediction.md). peer_electra.py has none:
// bench/electra_quality.sh sets 0 for its comparison.
std::shared_ptr<config::ExperimentConfig> electra_tiny_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = sized_task(8000, 128, {128, 4, 2, 512}, {32, 4, 1, 128}, 32);
  task->model.discriminator_encoder.bert.alibi_slope = 1.0;
  task->model.generator_encoder.bert.alibi_slope = 1.0;
  task->validation_data.global_batch_size = 32;
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 4000;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 100;
  trainer.checkpoint_interval = 500;
  trainer.validation_interval = 500;
  trainer.validation_steps = 32;
  trainer.max_to_keep = 2;
  auto& opt = trainer.optimizer_config;
  pretraining_adamw(opt);
  opt.learning_rate.type = "constant";
  opt.learning_rate.constant.learning_rate = 5e-4;
  opt.warmup.type = "linear";
  opt.warmup.linear.warmup_steps = 500;
  experiment->runtime.distribution_strategy = "one_device";
  // runtime.intra_op_parallelism_threads stays 0, every core, as for the
  // translation experiments (docs/runtime.md).
  return experiment;
}

}  // namespace

void register_electra() {
  register_task<ElectraPretrainConfig, ElectraPretrainTask>("electra_pretrain");
  register_huggingface_exporter<ElectraPretrainConfig>("electra",
                                                       ElectraPretrainTask::to_huggingface);
  register_serving_module<ElectraPretrainConfig, ElectraPretrainTask, ElectraServing>(
      "electra_pretrain");
  config::register_experiment("electra/pretraining",
                              "Model Garden's ELECTRA pretraining (BERT-base sized encoders); set "
                              "the data paths",
                              pretraining_experiment);
  config::register_experiment("electra/small",
                              "ELECTRA-Small (discriminator 256 wide x 12, generator 64 wide); "
                              "set the data paths",
                              small_experiment);
  config::register_experiment("electra/tiny",
                              "ELECTRA for a CPU (discriminator 128 wide x 4, generator 32 wide, "
                              "vocabulary 8000); set the data paths",
                              electra_tiny_experiment);
}

}  // namespace garden::nlp
