// ELECTRA's model half against hand-made cases and independent computations:
// scatter_update and the replaced-token labels by hand, the Gumbel sampler's
// frequencies against the softmax, the BERT encoder's gradients by finite
// differences, the masked-LM logits recomputed from the module's own weights,
// embedding tying and the truncated-normal initializer.
#include "garden/nlp/modeling/electra_pretrainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "garden/nlp/modeling/bert_encoder.h"
#include "garden/kernels/layer_norm.h"
#include "garden/kernels/sampling.h"
#include "garden/optim/optimizer.h"
#include "test_util.h"

namespace {

using namespace garden::nlp;
using garden::Batch;
using garden::truncated_normal_;
using garden_test::error_of;

const auto kLong = torch::TensorOptions().dtype(torch::kLong);
const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

at::Tensor ids(std::vector<std::vector<int64_t>> rows) {
  std::vector<at::Tensor> out;
  for (const auto& row : rows) out.push_back(torch::tensor(row, kLong));
  return torch::stack(out);
}

void expect_equal(const at::Tensor& actual, const at::Tensor& expected) {
  EXPECT_TRUE(actual.sizes() == expected.sizes() && actual.equal(expected))
      << "actual\n"
      << actual << "\nexpected\n"
      << expected;
}

// ---- scatter_update -----------------------------------------------------------------

TEST(ElectraScatterUpdate, PositionsDuplicatesAndPositionZero) {
  at::Tensor sequence = ids({{5, 6, 7, 8, 9}, {10, 11, 12, 13, 14}, {20, 21, 22, 23, 24}});
  // Row 0: ordinary positions, and an update to position 0 that must be ignored.
  // Row 1: position 2 twice with different updates: floor((20 + 25) / 2) = 22.
  // Row 2: position 1 twice with the same update; position 0 again ignored.
  at::Tensor positions = ids({{1, 3, 0}, {2, 2, 4}, {1, 1, 0}});
  at::Tensor updates = ids({{50, 70, 99}, {20, 25, 40}, {7, 7, 5}});
  auto [updated, mask] = scatter_update(sequence, updates, positions);
  expect_equal(updated, ids({{5, 50, 7, 70, 9}, {10, 11, 22, 13, 40}, {20, 7, 22, 23, 24}}));
  expect_equal(mask, ids({{0, 1, 0, 1, 0}, {0, 0, 1, 0, 1}, {0, 1, 0, 0, 0}}));
  EXPECT_EQ(mask.scalar_type(), torch::kLong);
}

TEST(ElectraScatterUpdate, RefusesMismatchedShapes) {
  EXPECT_NE(error_of([] {
              scatter_update(ids({{1, 2, 3}}), ids({{1, 2}}), ids({{1}}));
            }).find("scatter_update"),
            std::string::npos);
}

// ---- replaced-token labels ----------------------------------------------------------

// Logits [B, P, V] that pick `favoured[b][p]` whatever the Gumbel noise
// (a margin of 60 beats any noise the sampler draws, which is within ~21).
at::Tensor favouring(const std::vector<std::vector<int64_t>>& favoured, int64_t vocab) {
  at::Tensor logits = torch::zeros(
      {static_cast<int64_t>(favoured.size()), static_cast<int64_t>(favoured[0].size()), vocab});
  for (std::size_t b = 0; b < favoured.size(); ++b)
    for (std::size_t p = 0; p < favoured[b].size(); ++p) logits[b][p][favoured[b][p]] = 60.0;
  return logits;
}

TEST(ElectraFakeData, LabelsCompareWithTheOriginalAfterDuplicatesAndPositionZero) {
  torch::manual_seed(3);
  const int64_t mask_id = 5;
  at::Tensor masked = ids({{1, mask_id, 2, mask_id, 3}, {1, mask_id, 3, 3, 3}});
  // Row 0: position 1 samples its original (4): label 0; position 3 samples
  // 1 for original 2: label 1; the padding entry at position 0 changes nothing.
  // Row 1: position 1 twice (original 4 both times), samples 3 and 5: the
  // update is floor(8 / 2) = 4, the original again, so no label at all.
  at::Tensor positions = ids({{1, 3, 0}, {1, 1, 0}});
  at::Tensor masked_lm_ids = ids({{4, 2, 0}, {4, 4, 0}});
  at::Tensor logits = favouring({{4, 1, 3}, {3, 5, 2}}, 6);
  FakeData fake = get_fake_data(masked, positions, masked_lm_ids, logits, false);
  expect_equal(fake.sampled_ids, ids({{4, 1, 3}, {3, 5, 2}}));
  expect_equal(fake.word_ids, ids({{1, 4, 2, 1, 3}, {1, 4, 3, 3, 3}}));
  expect_equal(fake.labels, ids({{0, 0, 0, 1, 0}, {0, 0, 0, 0, 0}}));
}

TEST(ElectraFakeData, DisallowCorrectNeverSamplesTheOriginal) {
  torch::manual_seed(4);
  const int64_t batch = 64, length = 6, vocab = 5;
  at::Tensor positions = torch::arange(1, length, kLong).repeat({batch, 1});  // [B, 5]
  at::Tensor originals = torch::randint(vocab, positions.sizes(), kLong);
  at::Tensor masked = torch::full({batch, length}, vocab - 1, kLong);
  // Strongly favouring the original: e^20 against four e^0.
  at::Tensor logits =
      torch::zeros({batch, length - 1, vocab}).scatter_(-1, originals.unsqueeze(-1), 20.0);

  FakeData allowed = get_fake_data(masked, positions, originals, logits, false);
  // Without disallow_correct the original is (almost) always drawn, so the
  // check below can fail.
  EXPECT_GT(allowed.sampled_ids.eq(originals).sum().item<int64_t>(), positions.numel() - 3);

  FakeData fake = get_fake_data(masked, positions, originals, logits, true);
  EXPECT_EQ(fake.sampled_ids.eq(originals).sum().item<int64_t>(), 0);
  // Every masked position is then replaced, and labelled so.
  expect_equal(fake.labels.slice(1, 1), torch::ones_like(originals));
  expect_equal(fake.labels.select(1, 0), torch::zeros({batch}, kLong));
}

// ---- the sampler's distribution -----------------------------------------------------

TEST(ElectraSampler, FrequenciesMatchTheSoftmax) {
  torch::manual_seed(1234);
  const int64_t draws = 20000;
  at::Tensor logits = torch::tensor({0.5, -1.0, 2.0, 0.0, 1.0});
  at::Tensor probabilities = torch::softmax(logits, 0);
  at::Tensor samples = garden::kernels::sample_from_softmax(logits.view({1, 1, 5}).expand({draws, 1, 5}));
  ASSERT_EQ(samples.sizes(), (std::vector<int64_t>{draws, 1}));
  at::Tensor counts = torch::bincount(samples.view({-1}), {}, 5).to(torch::kDouble);
  for (int64_t v = 0; v < 5; ++v) {
    const double p = probabilities[v].item<double>();
    const double frequency = counts[v].item<double>() / draws;
    // Five binomial standard deviations of a frequency over `draws` draws.
    const double tolerance = 5.0 * std::sqrt(p * (1.0 - p) / draws);
    EXPECT_NEAR(frequency, p, tolerance) << "id " << v;
  }
}

// ---- the encoder ----------------------------------------------------------------------

BertEncoderOptions tiny_encoder(bool norm_first) {
  BertEncoderOptions o;
  o.vocab_size = 11;
  o.hidden_size = 8;
  o.num_layers = 2;
  o.num_attention_heads = 2;
  o.intermediate_size = 12;
  o.max_position_embeddings = 7;
  o.type_vocab_size = 2;
  o.embedding_size = 6;  // a projection to the hidden size
  o.dropout_rate = 0.0;
  o.attention_dropout_rate = 0.0;
  o.initializer_range = 0.5;  // large weights: every path matters to the gradient
  o.norm_first = norm_first;
  return o;
}

struct EncoderInputs {
  at::Tensor word_ids = ids({{1, 4, 7, 2, 0}, {3, 9, 10, 5, 6}});
  at::Tensor mask = ids({{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}});
  at::Tensor type_ids = ids({{0, 0, 1, 1, 0}, {0, 1, 1, 1, 1}});
};

// (norm_first, alibi_slope)
class BertEncoderGradients : public ::testing::TestWithParam<std::tuple<bool, double>> {};

TEST_P(BertEncoderGradients, MatchFiniteDifferences) {
  torch::manual_seed(7);
  BertEncoderOptions options = tiny_encoder(std::get<0>(GetParam()));
  options.alibi_slope = std::get<1>(GetParam());
  BertEncoder encoder(options);
  encoder->to(torch::kDouble);
  EncoderInputs in;
  at::Tensor projection = torch::randn({2, 5, 8}, kF64);
  auto objective = [&] {
    return (encoder->forward(in.word_ids, in.mask, in.type_ids) * projection).sum();
  };
  encoder->zero_grad();
  objective().backward();

  std::vector<std::string> names = {"word_embeddings.weight",
                                    "position_embeddings.weight",
                                    "type_embeddings.weight",
                                    "embedding_layer_norm.weight",
                                    "embedding_projection.weight",
                                    "layer_0.self_attention.query_key_value.weight",
                                    "layer_1.self_attention.output.bias",
                                    "layer_0.feed_forward.intermediate.weight",
                                    "layer_1.feed_forward.output.weight",
                                    "layer_0.self_attention_layer_norm.weight",
                                    "layer_1.output_layer_norm.bias"};
  if (std::get<0>(GetParam())) names.push_back("final_layer_norm.weight");
  auto parameters = encoder->named_parameters();
  const double eps = 1e-6;
  for (const auto& name : names) {
    ASSERT_TRUE(parameters.contains(name)) << name;
    at::Tensor p = parameters[name];
    // The entries of rows the inputs use (the word and position tables
    // have unused rows whose gradient is exactly zero).
    const int64_t row = name.rfind("word_", 0) == 0 ? 7 : 1;
    const int64_t width = p.dim() == 2 ? p.size(1) : 1;
    for (int64_t k : {int64_t{0}, int64_t{2}, int64_t{5}}) {
      const int64_t index = std::min(row * width + k, p.numel() - 1);
      double saved, plus, minus;
      {
        torch::NoGradGuard no_grad;
        at::Tensor flat = p.view({-1});
        saved = flat[index].item<double>();
        flat[index] = saved + eps;
        plus = objective().item<double>();
        flat[index] = saved - eps;
        minus = objective().item<double>();
        flat[index] = saved;
      }
      const double numeric = (plus - minus) / (2 * eps);
      const double analytic = p.grad().view({-1})[index].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
          << name << "[" << index << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PostAndPreLayerNormWithAndWithoutAlibi, BertEncoderGradients,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0.0, 0.8)));

TEST(BertEncoder, PaddingIsNotAttendedTo) {
  torch::manual_seed(8);
  BertEncoder encoder(tiny_encoder(false));
  encoder->eval();
  EncoderInputs in;
  at::Tensor out = encoder->forward(in.word_ids, in.mask, in.type_ids);
  at::Tensor changed = in.word_ids.clone();
  changed[0][4] = 9;  // the padded token of row 0
  at::Tensor again = encoder->forward(changed, in.mask, in.type_ids);
  EXPECT_TRUE(torch::allclose(again.slice(1, 0, 4)[0], out.slice(1, 0, 4)[0], 1e-6, 1e-6));
  // Unmasked, the same change reaches the other tokens.
  at::Tensor unmasked = encoder->forward(changed, torch::ones_like(in.mask), in.type_ids);
  at::Tensor before = encoder->forward(in.word_ids, torch::ones_like(in.mask), in.type_ids);
  EXPECT_FALSE(torch::allclose(unmasked[0][0], before[0][0], 1e-6, 1e-6));
}

// alibi_slope's biases by hand: head h adds -slope * 2^-h * |i - j|.
TEST(BertEncoder, AlibiBiasesByHand) {
  const at::Tensor biases = alibi_biases(torch::arange(3, kLong), 2, 0.5, torch::kDouble);
  const at::Tensor expected = torch::tensor({0.0, -0.5, -1.0,    //
                                             -0.5, 0.0, -0.5,    //
                                             -1.0, -0.5, 0.0,    // head 0: slope 0.5
                                             0.0, -0.25, -0.5,   //
                                             -0.25, 0.0, -0.25,  //
                                             -0.5, -0.25, 0.0},  // head 1: 0.25
                                            kF64)
                                  .view({1, 2, 3, 3});
  expect_equal(biases, expected);
  // Positions per example: the distances are the ids'.
  const at::Tensor per_example = alibi_biases(ids({{0, 1, 2}, {0, 0, 4}}), 2, 0.5, torch::kDouble);
  ASSERT_EQ(per_example.sizes(), (std::vector<int64_t>{2, 2, 3, 3}));
  expect_equal(per_example[0], expected[0]);
  EXPECT_EQ(per_example[1][0][0][2].item<double>(), -2.0);
  EXPECT_EQ(per_example[1][1][0][1].item<double>(), 0.0);
}

// With a steep slope every query attends to its own position alone, so a
// token's output no longer depends on the others; without it, it does.
TEST(BertEncoder, SteepAlibiSlopeKeepsEachTokenToItself) {
  for (double slope : {0.0, 1e4}) {
    BertEncoderOptions o = tiny_encoder(false);
    o.alibi_slope = slope;
    torch::manual_seed(9);
    BertEncoder encoder(o);
    encoder->eval();
    EncoderInputs in;
    const at::Tensor out = encoder->forward(in.word_ids, in.mask, in.type_ids);
    at::Tensor changed = in.word_ids.clone();
    changed[1][3] = 2;
    const at::Tensor again = encoder->forward(changed, in.mask, in.type_ids);
    const bool others_same =
        torch::allclose(again[1].slice(0, 0, 3), out[1].slice(0, 0, 3), 1e-6, 1e-6);
    EXPECT_EQ(others_same, slope > 0) << "alibi_slope " << slope;
    EXPECT_FALSE(torch::allclose(again[1][3], out[1][3], 1e-6, 1e-6));
  }
}

// The biases reach float32's fused attention as they reach the unfused path
// in double, with and without padding.
TEST(BertEncoder, AlibiInFloat32AgreesWithDouble) {
  BertEncoderOptions o = tiny_encoder(false);
  o.alibi_slope = 0.7;
  torch::manual_seed(10);
  BertEncoder encoder(o);
  encoder->eval();
  BertEncoder twin(o);
  twin->eval();
  {
    torch::NoGradGuard no_grad;
    auto from = encoder->named_parameters();
    for (auto& p : twin->named_parameters()) p.value().copy_(from[p.key()]);
  }
  twin->to(torch::kDouble);
  EncoderInputs in;
  for (const at::Tensor& mask : {in.mask, torch::ones_like(in.mask)}) {
    const at::Tensor single = encoder->forward(in.word_ids, mask, in.type_ids);
    const at::Tensor twice = twin->forward(in.word_ids, mask, in.type_ids);
    EXPECT_TRUE(torch::allclose(single.to(torch::kDouble), twice, 1e-5, 1e-5));
  }
}

TEST(BertEncoder, RefusesANegativeAlibiSlope) {
  BertEncoderOptions o = tiny_encoder(false);
  o.alibi_slope = -1.0;
  EXPECT_NE(error_of([&] { BertEncoder encoder(o); }).find("alibi_slope"), std::string::npos);
}

TEST(BertEncoder, RefusesAnUnknownActivationByName) {
  BertEncoderOptions o = tiny_encoder(false);
  o.hidden_activation = "swish";
  EXPECT_NE(error_of([&] { BertEncoder encoder(o); }).find("'swish'"), std::string::npos);
}

// ---- the initializer ------------------------------------------------------------------

TEST(BertInitializer, TruncatedNormalStddevAndBounds) {
  torch::manual_seed(11);
  const double stddev = 0.02;
  const int64_t n = 400000;
  at::Tensor w = torch::empty({n}, kF64);
  truncated_normal_(w, stddev);
  EXPECT_LE(w.abs().max().item<double>(), 2 * stddev);
  // A standard normal truncated at +-2 has variance 1 - 2 * 2 phi(2) / (2 Phi(2) - 1).
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * M_PI);
  const double mass = std::erf(2.0 / std::sqrt(2.0));
  const double expected_std = stddev * std::sqrt(1.0 - 4.0 * phi2 / mass);  // 0.8796 stddev
  // The sample stddev's own stddev is about sigma / sqrt(2n) (0.1% here).
  EXPECT_NEAR(w.std().item<double>(), expected_std, 0.005 * expected_std);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 5 * expected_std / std::sqrt(double(n)));
  // Within one stddev: P(|z| < 1) / P(|z| < 2) = 0.6827 / 0.9545.
  const double inside = w.abs().lt(stddev).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(inside, std::erf(1.0 / std::sqrt(2.0)) / mass, 0.005);
}

TEST(BertInitializer, EveryLayerIsReinitialized) {
  torch::manual_seed(12);
  BertEncoderOptions o = tiny_encoder(true);
  o.initializer_range = 0.01;
  BertEncoder encoder(o);
  for (const auto& item : encoder->named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& p = item.value();
    const bool norm = name.find("norm") != std::string::npos;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") {
      EXPECT_EQ(p.abs().max().item<double>(), 0.0) << name;
    } else if (norm) {
      EXPECT_TRUE(p.eq(1.0).all().item<bool>()) << name;
    } else {
      // The blocks' dense layers start Glorot-uniform (up to ~0.5 here).
      EXPECT_LE(p.abs().max().item<double>(), 2 * o.initializer_range) << name;
      EXPECT_GT(p.abs().max().item<double>(), 0.5 * o.initializer_range) << name;
    }
  }
}

// ---- the pretrainer ---------------------------------------------------------------------

ElectraPretrainerOptions tiny_pretrainer(bool tie) {
  ElectraPretrainerOptions o;
  o.generator = tiny_encoder(false);
  o.generator.vocab_size = 20;
  o.generator.hidden_size = 4;
  o.generator.intermediate_size = 8;
  o.generator.num_layers = 1;
  o.generator.initializer_range = 0.2;
  o.discriminator = tiny_encoder(false);
  o.discriminator.vocab_size = 20;
  o.discriminator.hidden_size = 10;
  o.discriminator.initializer_range = 0.2;
  o.num_classes = 2;
  o.num_token_predictions = 3;
  o.tie_embeddings = tie;
  ClassificationHeadOptions head;
  head.inner_dim = 5;
  head.num_classes = 3;
  head.name = "sentence_order";
  o.cls_heads.push_back(head);
  return o;
}

Batch pretrainer_inputs() {
  Batch in;
  in["input_word_ids"] = ids({{2, 19, 7, 19, 4, 0, 0}, {2, 5, 19, 8, 9, 19, 3}});
  in["input_mask"] = ids({{1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1}});
  in["input_type_ids"] = torch::zeros({2, 7}, kLong);
  in["masked_lm_positions"] = ids({{1, 3, 0}, {2, 5, 1}});
  in["masked_lm_ids"] = ids({{11, 12, 0}, {13, 14, 5}});
  return in;
}

TEST(ElectraPretrainer, OutputShapes) {
  torch::manual_seed(21);
  ElectraPretrainer model(tiny_pretrainer(true));
  Batch out = model->forward(pretrainer_inputs());
  auto shape = [&](const std::string& key) {
    EXPECT_TRUE(out.count(key)) << key;
    return out.count(key) ? out[key].sizes().vec() : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape("lm_outputs"), (std::vector<int64_t>{2, 3, 20}));
  EXPECT_EQ(shape("sentence_outputs"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(shape("disc_logits"), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(shape("disc_label"), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(shape("sampled_ids"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(shape("sentence_order"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out["disc_label"].scalar_type(), torch::kFloat);
  // Labels: at the masked positions (all distinct here), 1 where the sample
  // differs from the original; 0 elsewhere. Position 0 is never labelled.
  Batch in = pretrainer_inputs();
  at::Tensor expected = torch::zeros({2, 7});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t p = 0; p < 3; ++p) {
      const int64_t position = in["masked_lm_positions"][b][p].item<int64_t>();
      if (position == 0) continue;
      expected[b][position] =
          out["sampled_ids"][b][p].item<int64_t>() != in["masked_lm_ids"][b][p].item<int64_t>();
    }
  expect_equal(out["disc_label"], expected);
  // Gradients reach both encoders, the shared table from both sides.
  (out["lm_outputs"].logsumexp(-1).sum() + out["disc_logits"].sum()).backward();
  EXPECT_TRUE(model->generator->layers[0]->feed_forward->intermediate->weight.grad().defined());
  EXPECT_TRUE(model->discriminator->layers[1]->feed_forward->output->weight.grad().defined());
}

TEST(ElectraPretrainer, TiedEmbeddingsAreOneParameter) {
  ElectraPretrainer tied(tiny_pretrainer(true));
  EXPECT_TRUE(tied->generator->word_embeddings->weight.is_same(
      tied->discriminator->word_embeddings->weight));
  auto count = [](ElectraPretrainer& model) {
    int64_t tables = 0, numel = 0;
    std::set<const void*> distinct;
    for (const auto& item : model->named_parameters()) {
      tables += item.key().find("word_embeddings") != std::string::npos;
      numel += item.value().numel();
      EXPECT_TRUE(distinct.insert(item.value().unsafeGetTensorImpl()).second) << item.key();
    }
    return std::make_pair(tables, numel);
  };
  auto [tied_tables, tied_numel] = count(tied);
  EXPECT_EQ(tied_tables, 1);
  EXPECT_TRUE(tied->named_parameters().contains("discriminator.word_embeddings.weight"));

  ElectraPretrainer untied(tiny_pretrainer(false));
  auto [untied_tables, untied_numel] = count(untied);
  EXPECT_EQ(untied_tables, 2);
  EXPECT_EQ(untied_numel - tied_numel, 20 * 6);
  EXPECT_FALSE(untied->generator->word_embeddings->weight.is_same(
      untied->discriminator->word_embeddings->weight));

  ElectraPretrainerOptions unequal = tiny_pretrainer(true);
  unequal.generator.embedding_size = 4;
  EXPECT_NE(error_of([&] { ElectraPretrainer model(unequal); }).find("tie_embeddings"),
            std::string::npos);
}

// Model Garden's pretraining AdamW excludes from weight decay the variables
// whose names match LayerNorm, layer_norm or bias: every layer norm and bias
// of the pretrainer must be named so, and nothing else.
TEST(ElectraPretrainer, ModelGardensWeightDecayExclusionsFindEveryLayerNormAndBias) {
  ElectraPretrainerOptions options = tiny_pretrainer(true);
  options.discriminator.norm_first = true;  // adds the final layer norm
  ElectraPretrainer model(options);
  std::set<std::string> kept;  // layer norm parameters and biases, by name
  for (const auto& item : model->named_modules()) {
    const bool norm = item.value()->as<torch::nn::LayerNorm>() != nullptr;
    for (const auto& param : item.value()->named_parameters(/*recurse=*/false)) {
      const std::string name = item.key().empty() ? param.key() : item.key() + "." + param.key();
      if (norm || param.key() == "bias" || name == "mlm_bias") kept.insert(name);
    }
  }
  EXPECT_TRUE(kept.count("discriminator.final_layer_norm.weight"));
  EXPECT_TRUE(kept.count("generator.embedding_layer_norm.bias"));
  EXPECT_TRUE(kept.count("mlm_layer_norm.weight"));

  garden::config::OptimizationConfig config;
  config.optimizer.type = "adamw";
  config.optimizer.adamw.weight_decay_rate = 0.5;
  config.optimizer.adamw.exclude_from_weight_decay =
      std::vector<std::string>{"LayerNorm", "layer_norm", "bias"};
  config.learning_rate.type = "constant";
  config.learning_rate.constant.learning_rate = 0.1;
  std::vector<garden::optim::NamedParameter> parameters;
  std::map<std::string, at::Tensor> before;
  for (const auto& item : model->named_parameters()) {
    parameters.push_back({item.key(), item.value()});
    before[item.key()] = item.value().detach().clone();
    // Zero gradients: Adam moves nothing, so only the decay (1 - 0.1 * 0.5) shows.
    item.value().mutable_grad() = torch::zeros_like(item.value());
  }
  auto optimizer = garden::optim::make_optimizer(config, parameters);
  optimizer->step();
  int64_t decayed = 0;
  for (const auto& item : model->named_parameters()) {
    const at::Tensor expected =
        kept.count(item.key()) ? before[item.key()] : before[item.key()] * 0.95;
    EXPECT_TRUE(torch::allclose(item.value(), expected, 1e-6, 0)) << item.key();
    decayed += !kept.count(item.key());
  }
  EXPECT_GT(decayed, 10);
}

TEST(ElectraPretrainer, MaskedLmLogitsByHand) {
  torch::manual_seed(22);
  ElectraPretrainer model(tiny_pretrainer(true));
  model->to(torch::kDouble);
  {
    // Non-trivial norm and bias, so the hand computation uses them.
    torch::NoGradGuard no_grad;
    model->mlm_norm->weight.uniform_(0.5, 1.5);
    model->mlm_norm->bias.uniform_(-0.5, 0.5);
    model->mlm_bias.uniform_(-1.0, 1.0);
  }
  Batch in = pretrainer_inputs();
  Batch out = model->forward(in);
  torch::NoGradGuard no_grad;
  at::Tensor sequence =
      model->generator->forward(in["input_word_ids"], in["input_mask"], in["input_type_ids"]);
  const int64_t b = 1, p = 1, position = 5;  // masked_lm_positions[1][1]
  at::Tensor x =
      torch::mv(model->mlm_dense->weight, sequence[b][position]) + model->mlm_dense->bias;
  x = 0.5 * x * (1.0 + torch::erf(x / std::sqrt(2.0)));  // exact GELU
  at::Tensor mean = x.mean(), variance = (x - mean).pow(2).mean();
  x = (x - mean) / torch::sqrt(variance + 1e-12) * model->mlm_norm->weight + model->mlm_norm->bias;
  at::Tensor expected =
      torch::mv(model->discriminator->word_embeddings->weight, x) + model->mlm_bias;
  EXPECT_TRUE(torch::allclose(out["lm_outputs"][b][p], expected, 1e-10, 1e-10))
      << out["lm_outputs"][b][p] << "\n"
      << expected;
}

}  // namespace
