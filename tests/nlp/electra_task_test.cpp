// The ELECTRA pretraining task: its loss and metrics against a computation
// by hand, its config (Model Garden's keys, a Model Garden pretraining YAML,
// what it refuses) and the experiments it registers.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/nlp/tasks/electra_task.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using garden::Batch;
using garden::Logs;
using garden::nlp::ElectraPretrainConfig;
using garden::nlp::ElectraPretrainTask;
using garden_test::error_of;

// -log softmax(logits)[label], in double, element by element.
double cross_entropy(const std::vector<double>& logits, int64_t label) {
  double max = logits[0];
  for (double l : logits) max = std::max(max, l);
  double sum = 0;
  for (double l : logits) sum += std::exp(l - max);
  return -(logits[label] - max - std::log(sum));
}

// log(1 + e^-x) for label 1, log(1 + e^x) for label 0.
double sigmoid_cross_entropy(double logit, double label) {
  return label * std::log1p(std::exp(-logit)) + (1 - label) * std::log1p(std::exp(logit));
}

double value(const Logs& logs, const std::string& key) {
  auto it = logs.find(key);
  if (it == logs.end()) {
    ADD_FAILURE() << "no " << key << " in the logs";
    return NAN;
  }
  return garden::to_double(it->second);
}

// Labels and model outputs made by hand: 2 sequences of 5 tokens (the second
// with 2 padding), 3 prediction slots (one unused), a vocabulary of 4.
struct HandMade {
  Batch labels, outputs;
  std::vector<std::vector<std::vector<double>>> lm;  // [B][P][V]
  std::vector<std::vector<int64_t>> lm_ids{{1, 3, 0}, {2, 2, 1}};
  std::vector<std::vector<double>> lm_weights{{1, 1, 0}, {1, 1, 1}};
  std::vector<std::vector<double>> disc_logits{{0.5, -1.0, 2.0, -0.2, 0.1},
                                               {-2.0, 1.5, 0.3, 4.0, -3.0}};
  std::vector<std::vector<double>> disc_labels{{0, 1, 1, 0, 1}, {0, 0, 1, 1, 1}};
  std::vector<std::vector<double>> mask{{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}};
  std::vector<std::vector<double>> sentence{{0.2, -0.4}, {1.0, 3.0}};
  std::vector<int64_t> sentence_labels{1, 0};

  HandMade() {
    torch::manual_seed(3);
    const at::Tensor lm_tensor = torch::randn({2, 3, 4}, torch::kDouble) * 2;
    lm.assign(2, std::vector<std::vector<double>>(3, std::vector<double>(4)));
    for (int b = 0; b < 2; ++b)
      for (int p = 0; p < 3; ++p)
        for (int v = 0; v < 4; ++v) lm[b][p][v] = lm_tensor[b][p][v].item<double>();
    // The first prediction of each sequence is right (its logit raised).
    lm[0][0][1] += 10;
    lm[1][0][2] += 10;
    labels["masked_lm_ids"] = torch::tensor({1, 3, 0, 2, 2, 1}, torch::kLong).reshape({2, 3});
    labels["masked_lm_weights"] = torch::tensor({1., 1., 0., 1., 1., 1.}).reshape({2, 3});
    labels["input_mask"] =
        torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, torch::kLong).reshape({2, 5});
    labels["next_sentence_labels"] = torch::tensor({1, 0}, torch::kLong);
    at::Tensor lm_out = torch::empty({2, 3, 4}, torch::kDouble);
    for (int b = 0; b < 2; ++b)
      for (int p = 0; p < 3; ++p)
        for (int v = 0; v < 4; ++v) lm_out[b][p][v] = lm[b][p][v];
    outputs["lm_outputs"] = lm_out.to(torch::kFloat);
    outputs["disc_logits"] = flat(disc_logits);
    outputs["disc_label"] = flat(disc_labels);
    outputs["disc_predictions"] = outputs["disc_logits"].gt(0).to(torch::kFloat);
    outputs["sentence_outputs"] = flat(sentence);
  }
  static at::Tensor flat(const std::vector<std::vector<double>>& rows) {
    std::vector<float> values;
    for (const auto& r : rows) values.insert(values.end(), r.begin(), r.end());
    return torch::tensor(values).reshape({static_cast<int64_t>(rows.size()), -1});
  }
};

std::shared_ptr<ElectraPretrainConfig> small_config(bool next_sentence) {
  auto config = std::make_shared<ElectraPretrainConfig>();
  config->train_data.use_next_sentence_label = next_sentence;
  config->model.discriminator_loss_weight = 50.0;
  return config;
}

TEST(ElectraTaskTest, TheLossIsMaskedLmPlusNextSentencePlusWeightedDetection) {
  HandMade h;
  ElectraPretrainTask task(small_config(true));
  const garden::Losses losses = task.build_losses(h.labels, h.outputs);

  double lm_sum = 0, lm_count = 0;
  for (int b = 0; b < 2; ++b)
    for (int p = 0; p < 3; ++p) {
      lm_sum += h.lm_weights[b][p] * cross_entropy(h.lm[b][p], h.lm_ids[b][p]);
      lm_count += h.lm_weights[b][p];
    }
  double rtd_sum = 0, rtd_count = 0;
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 5; ++s) {
      rtd_sum += h.mask[b][s] * sigmoid_cross_entropy(h.disc_logits[b][s], h.disc_labels[b][s]);
      rtd_count += h.mask[b][s];
    }
  const double nsp = (cross_entropy(h.sentence[0], 1) + cross_entropy(h.sentence[1], 0)) / 2;
  const double lm = lm_sum / lm_count, rtd = rtd_sum / rtd_count;

  const Logs logs = losses.logs();
  EXPECT_NEAR(value(logs, "lm_example_loss"), lm, 1e-5);
  EXPECT_NEAR(value(logs, "next_sentence_loss"), nsp, 1e-5);
  EXPECT_NEAR(value(logs, "discriminator_loss"), rtd, 1e-5);
  EXPECT_NEAR(value(logs, "loss"), lm + nsp + 50 * rtd, 1e-4);
  EXPECT_NEAR(losses.total().item<double>(), lm + nsp + 50 * rtd, 1e-4);
  // Each part carries what it averages: weights, sentences, real tokens.
  ASSERT_EQ(losses.parts().size(), 3u);
  EXPECT_DOUBLE_EQ(losses.parts()[0].count.item<double>(), lm_count);
  EXPECT_DOUBLE_EQ(losses.parts()[1].count.item<double>(), 2);
  EXPECT_DOUBLE_EQ(losses.parts()[2].count.item<double>(), rtd_count);

  // Without next-sentence labels, no next-sentence part.
  Batch labels = h.labels;
  labels.erase("next_sentence_labels");
  const Logs without =
      ElectraPretrainTask(small_config(false)).build_losses(labels, h.outputs).logs();
  EXPECT_EQ(without.count("next_sentence_loss"), 0u);
  EXPECT_NEAR(value(without, "loss"), lm + 50 * rtd, 1e-4);
}

TEST(ElectraTaskTest, NoMaskedWeightGivesAZeroMaskedLmLossNotNaN) {
  HandMade h;
  h.labels["masked_lm_weights"].zero_();
  const Logs logs =
      ElectraPretrainTask(small_config(true)).build_losses(h.labels, h.outputs).logs();
  EXPECT_EQ(value(logs, "lm_example_loss"), 0.0);
  EXPECT_FALSE(std::isnan(value(logs, "loss")));
}

TEST(ElectraTaskTest, MetricsMatchACountByHand) {
  HandMade h;
  ElectraPretrainTask task(small_config(true));
  garden::MetricList metrics = task.build_metrics();
  task.process_metrics(metrics, h.labels, h.outputs);

  double lm_right = 0, lm_total = 0;
  for (int b = 0; b < 2; ++b)
    for (int p = 0; p < 3; ++p) {
      int64_t best = 0;
      for (int v = 1; v < 4; ++v)
        if (h.lm[b][p][v] > h.lm[b][p][best]) best = v;
      lm_right += h.lm_weights[b][p] * (best == h.lm_ids[b][p]);
      lm_total += h.lm_weights[b][p];
    }
  double right = 0, total = 0, tp = 0, fp = 0, fn = 0;
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 5; ++s) {
      if (!h.mask[b][s]) continue;
      const bool predicted = h.disc_logits[b][s] > 0, replaced = h.disc_labels[b][s] > 0;
      right += predicted == replaced;
      total += 1;
      tp += predicted && replaced;
      fp += predicted && !replaced;
      fn += !predicted && replaced;
    }
  std::map<std::string, double> results;
  for (const auto& m : metrics) results[m->name()] = m->result();
  ASSERT_EQ(results.size(), 5u);
  EXPECT_DOUBLE_EQ(results["masked_lm_accuracy"], lm_right / lm_total);
  EXPECT_DOUBLE_EQ(results["discriminator_accuracy"], right / total);
  EXPECT_DOUBLE_EQ(results["rtd_precision"], tp / (tp + fp));
  EXPECT_DOUBLE_EQ(results["rtd_recall"], tp / (tp + fn));
  // Sequence 0: logits favour 0, label 1; sequence 1: favour 1, label 0.
  EXPECT_DOUBLE_EQ(results["next_sentence_accuracy"], 0.0);
  EXPECT_GT(lm_right, 0);
  EXPECT_GT(tp, 0);
  EXPECT_GT(fp + fn, 0);

  // Without next-sentence labels there is no next-sentence metric.
  EXPECT_EQ(ElectraPretrainTask(small_config(false)).build_metrics().size(), 4u);
}

TEST(ElectraTaskTest, PrecisionAndRecallFollowKerasWithWeights) {
  garden::Precision precision("p");
  garden::Recall recall("r");
  const at::Tensor labels = torch::tensor({1., 0., 1., 1., 0.});
  const at::Tensor predictions = torch::tensor({0.9, 0.7, 0.2, 0.6, 0.1});
  const at::Tensor weights = torch::tensor({1., 1., 1., 0., 1.});
  precision.update_state(labels, predictions, weights);
  recall.update_state(labels, predictions, weights);
  // Weighted: tp = 1 (index 0), fp = 1 (index 1), fn = 1 (index 2).
  EXPECT_DOUBLE_EQ(precision.result(), 0.5);
  EXPECT_DOUBLE_EQ(recall.result(), 0.5);
  garden::Precision empty("e");
  EXPECT_EQ(empty.result(), 0.0);
}

// The sections of a Model Garden pretraining YAML (official/nlp/configs/
// experiments/wiki_books_pretrain.yaml's layout), with ELECTRA's encoders.
const char* const kModelGardenYaml = R"(task:
  init_checkpoint: ''
  model:
    cls_heads: [{activation: tanh, cls_token_idx: 0, dropout_rate: 0.1, inner_dim: 768, name: next_sentence, num_classes: 2}]
    discriminator_encoder:
      type: bert
      bert:
        hidden_size: 256
        num_layers: 12
        num_attention_heads: 4
        intermediate_size: 1024
        embedding_size: 128
    generator_encoder:
      type: bert
      bert:
        hidden_size: 64
        num_layers: 12
        num_attention_heads: 1
        intermediate_size: 256
        embedding_size: 128
    discriminator_loss_weight: 50.0
    disallow_correct: false
  train_data:
    drop_remainder: true
    global_batch_size: 512
    input_path: '/data/wiki/part*,/data/books/part*'
    is_training: true
    max_predictions_per_seq: 76
    seq_length: 512
    use_next_sentence_label: true
    use_position_id: false
    use_v2_feature_names: true
  validation_data:
    drop_remainder: false
    global_batch_size: 512
    input_path: '/data/wiki/part-00000-of-00500'
    is_training: false
    max_predictions_per_seq: 76
    seq_length: 512
    use_next_sentence_label: true
    use_position_id: false
    use_v2_feature_names: true
trainer:
  checkpoint_interval: 20000
  max_to_keep: 5
  optimizer_config:
    learning_rate:
      polynomial:
        cycle: false
        decay_steps: 1000000
        end_learning_rate: 0.0
        initial_learning_rate: 0.0001
        power: 1.0
      type: polynomial
    optimizer:
      type: adamw
    warmup:
      polynomial:
        power: 1
        warmup_steps: 10000
      type: polynomial
  steps_per_loop: 1000
  summary_interval: 1000
  train_steps: 1000000
  validation_interval: 1000
  validation_steps: 64
)";

TEST(ElectraTaskTest, AModelGardenPretrainingYamlLoadsWithoutEdits) {
  garden::register_builtins();
  auto experiment = garden::config::get_experiment_config("electra/pretraining");
  const fs::path file =
      fs::temp_directory_path() / ("electra_mg_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(file) << kModelGardenYaml;
  garden::config::apply_file(*experiment, file.string());
  fs::remove(file);
  garden::config::validate_config(*experiment);
  const auto& task = static_cast<const ElectraPretrainConfig&>(*experiment->task);
  ASSERT_EQ(task.model.cls_heads.size(), 1u);
  EXPECT_EQ(task.model.cls_heads[0].name, "next_sentence");
  EXPECT_EQ(task.model.cls_heads[0].inner_dim, 768);
  EXPECT_DOUBLE_EQ(task.model.cls_heads[0].dropout_rate, 0.1);
  EXPECT_EQ(task.model.discriminator_encoder.bert.hidden_size, 256);
  EXPECT_EQ(task.model.generator_encoder.bert.hidden_size, 64);
  EXPECT_EQ(task.model.generator_encoder.bert.embedding_size, 128);
  EXPECT_TRUE(task.train_data.use_v2_feature_names);
  EXPECT_EQ(task.validation_data.input_path, "/data/wiki/part-00000-of-00500");
  EXPECT_EQ(experiment->trainer.validation_steps, 64);
  EXPECT_EQ(experiment->trainer.optimizer_config.learning_rate.polynomial.decay_steps, 1000000);

  // It writes back as it reads: the list of heads round-trips.
  auto again = garden::config::get_experiment_config("electra/pretraining");
  garden::config::read_config(*again, YAML::Load(garden::config::to_yaml_string(*experiment)));
  EXPECT_EQ(garden::config::to_yaml_string(*again), garden::config::to_yaml_string(*experiment));
}

TEST(ElectraTaskTest, ModelGardenDefaultsAndTheRegisteredExperiments) {
  garden::register_builtins();
  ElectraPretrainConfig defaults;
  EXPECT_EQ(defaults.model.num_masked_tokens, 76);
  EXPECT_EQ(defaults.model.sequence_length, 512);
  EXPECT_DOUBLE_EQ(defaults.model.discriminator_loss_weight, 50.0);
  EXPECT_TRUE(defaults.model.tie_embeddings);
  EXPECT_FALSE(defaults.model.disallow_correct);
  EXPECT_EQ(defaults.model.generator_encoder.type, "bert");
  EXPECT_EQ(defaults.model.discriminator_encoder.bert.hidden_size, 768);
  EXPECT_EQ(defaults.model.discriminator_encoder.bert.hidden_activation, "gelu");
  EXPECT_FALSE(defaults.model.discriminator_encoder.bert.embedding_size.has_value());
  ASSERT_EQ(defaults.model.cls_heads.size(), 1u);
  EXPECT_EQ(defaults.model.cls_heads[0].name, "next_sentence");
  EXPECT_EQ(defaults.train_data.seq_length, 512);
  EXPECT_EQ(defaults.train_data.max_predictions_per_seq, 76);
  EXPECT_TRUE(defaults.train_data.use_next_sentence_label);

  for (const char* name : {"electra/pretraining", "electra/small", "electra/tiny"}) {
    auto experiment = garden::config::get_experiment_config(name);
    EXPECT_NO_THROW(garden::config::validate_config(*experiment)) << name;
  }
  auto tiny = garden::config::get_experiment_config("electra/tiny");
  const auto& task = static_cast<const ElectraPretrainConfig&>(*tiny->task);
  // peer_electra.py's tiny preset.
  EXPECT_EQ(task.model.discriminator_encoder.bert.vocab_size, 8000);
  EXPECT_EQ(task.model.discriminator_encoder.bert.hidden_size, 128);
  EXPECT_EQ(task.model.discriminator_encoder.bert.num_layers, 4);
  EXPECT_EQ(task.model.discriminator_encoder.bert.num_attention_heads, 2);
  EXPECT_EQ(task.model.discriminator_encoder.bert.intermediate_size, 512);
  EXPECT_EQ(task.model.generator_encoder.bert.hidden_size, 32);
  EXPECT_EQ(task.model.generator_encoder.bert.intermediate_size, 128);
  EXPECT_EQ(*task.model.generator_encoder.bert.embedding_size, 128);
  EXPECT_EQ(task.train_data.seq_length, 128);
  EXPECT_EQ(task.train_data.max_predictions_per_seq, 20);
  // Garden's attention biases on both encoders (docs/tasks/electra.md).
  EXPECT_EQ(task.model.discriminator_encoder.bert.alibi_slope, 1.0);
  EXPECT_EQ(task.model.generator_encoder.bert.alibi_slope, 1.0);
}

TEST(ElectraTaskTest, WhatGardenCannotHonourIsRefusedNamingTheKey) {
  garden::register_builtins();
  const auto refused = [](const std::string& override_text) {
    auto experiment = garden::config::get_experiment_config("electra/small");
    return error_of([&] {
      garden::config::apply_override(*experiment, override_text);
      garden::config::validate_config(*experiment);
    });
  };
  EXPECT_NE(refused("task.model.generator_encoder.bert.return_all_encoder_outputs=true")
                .find("task.model.generator_encoder.bert.return_all_encoder_outputs"),
            std::string::npos);
  EXPECT_NE(refused("task.model.discriminator_encoder.bert.output_range=1")
                .find("task.model.discriminator_encoder.bert.output_range"),
            std::string::npos);
  EXPECT_NE(refused("task.model.generator_encoder.bert.embedding_size=64")
                .find("task.model.tie_embeddings"),
            std::string::npos);
  EXPECT_NE(refused("task.model.generator_encoder.bert.hidden_activation=swish")
                .find("task.model.generator_encoder.bert.hidden_activation"),
            std::string::npos);
  EXPECT_NE(refused("task.train_data.seq_length=256").find("task.train_data.seq_length"),
            std::string::npos);
  EXPECT_NE(refused("task.model.cls_heads=[{inner_dim: 8}]").find("task.model.cls_heads[0].name"),
            std::string::npos);
  EXPECT_NE(
      refused("task.model.cls_heads=[{name: a}, {name: a}]").find("task.model.cls_heads[1].name"),
      std::string::npos);
  EXPECT_NE(refused("task.model.discriminator_encoder.type=albert").find("albert"),
            std::string::npos);
  EXPECT_NE(
      refused("task.model.cls_heads=[{name: a, bogus: 1}]").find("task.model.cls_heads[0].bogus"),
      std::string::npos);
  EXPECT_EQ(refused("task.model.cls_heads=[{name: a, inner_dim: 16}]"), "(no error)");
}

}  // namespace
