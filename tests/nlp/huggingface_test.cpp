// Hugging Face checkpoints in and out, against transformers' own outputs:
// tests/data/hf holds tiny random BERT and ELECTRA models saved by
// transformers 5.12.1 with their outputs on fixed inputs (made by
// bench/interop/make_hf_fixtures.sh; its README says how). Garden reads each
// directory into its encoder (or a fine-tuning task's model) and must give
// the same numbers within 1e-5; the names and shapes it writes back must be
// the file's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/safetensors.h"
#include "garden/core/task.h"
#include "garden/data/wordpiece.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/interop/huggingface_config.h"
#include "garden/nlp/modeling/bert_classifier.h"
#include "garden/nlp/tasks/huggingface_export.h"
#include "garden/nlp/tasks/sentence_prediction_config.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kFixtures = fs::path(GARDEN_SOURCE_DIR) / "tests" / "data" / "hf";

struct Inputs {
  at::Tensor ids, mask, types;
};

Inputs fixture_inputs() {
  const auto j = json::parse(std::ifstream(kFixtures / "inputs.json"));
  const auto tensor = [&](const char* key) {
    const auto rows = j.at(key).get<std::vector<std::vector<int64_t>>>();
    at::Tensor t = at::empty(
        {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.at(0).size())}, at::kLong);
    for (std::size_t b = 0; b < rows.size(); ++b)
      for (std::size_t s = 0; s < rows[b].size(); ++s)
        t[static_cast<int64_t>(b)][static_cast<int64_t>(s)] = rows[b][s];
    return t;
  };
  return {tensor("input_ids"), tensor("attention_mask"), tensor("token_type_ids")};
}

at::Tensor expected(const std::string& model, const std::string& name) {
  return garden::read_safetensors((kFixtures / model / "expected.safetensors").string())
      .tensors.at(name);
}

// The encoder options config.json describes (the fixtures' sizes).
garden::nlp::BertEncoderOptions fixture_options(bool electra) {
  garden::nlp::BertEncoderOptions o;
  o.vocab_size = 40;
  o.hidden_size = 32;
  o.num_layers = 2;
  o.num_attention_heads = 4;
  o.intermediate_size = 64;
  o.max_position_embeddings = 64;
  o.type_vocab_size = 2;
  if (electra) o.embedding_size = 16;
  return o;
}

class HuggingFaceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { garden::register_builtins(); }
  void SetUp() override {
    torch::manual_seed(0);
    dir_ = fs::temp_directory_path() / ("huggingface_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(HuggingFaceTest, BertAndElectraEncodersGiveTransformersOutputs) {
  const Inputs in = fixture_inputs();
  for (const std::string model : {"bert", "bert_classifier", "electra", "electra_classifier"}) {
    SCOPED_TRACE(model);
    const bool electra = model.rfind("electra", 0) == 0;
    const auto options = fixture_options(electra);
    const auto hf = garden::nlp::read_huggingface_dir((kFixtures / model).string());
    EXPECT_EQ(hf.model_type, electra ? "electra" : "bert");
    garden::nlp::check_huggingface_encoder_config(hf, options, "encoder.");
    garden::nlp::BertEncoder encoder(options);
    encoder->eval();
    const auto tensors = garden::nlp::huggingface_encoder_tensors(hf, options, "");
    // Every parameter of the encoder comes from the file.
    EXPECT_EQ(garden::nlp::load_named_tensors(*encoder, tensors, hf.dir),
              static_cast<int64_t>(encoder->parameters().size()));
    torch::NoGradGuard no_grad;
    const at::Tensor out = encoder->forward(in.ids, in.mask, in.types);
    EXPECT_LT(garden_test::max_abs_difference(out, expected(model, "last_hidden_state")), 1e-5);
  }
}

TEST_F(HuggingFaceTest, WritingBackGivesTheFilesNamesShapesAndValues) {
  for (const std::string model : {"bert", "electra"}) {
    SCOPED_TRACE(model);
    const bool electra = model == "electra";
    const auto options = fixture_options(electra);
    const auto hf = garden::nlp::read_huggingface_dir((kFixtures / model).string());
    garden::nlp::BertEncoder encoder(options);
    garden::nlp::load_named_tensors(
        *encoder, garden::nlp::huggingface_encoder_tensors(hf, options, ""), hf.dir);
    const std::string prefix = electra ? "electra." : "";
    const auto written = garden::nlp::garden_encoder_to_huggingface(*encoder, options, "", prefix);
    std::size_t encoder_tensors = 0;
    for (const auto& [name, tensor] : hf.tensors)
      if (name.find("pooler") == std::string::npos &&
          name.find("discriminator_predictions") == std::string::npos)
        ++encoder_tensors;
    EXPECT_EQ(written.size(), encoder_tensors);
    for (const auto& [name, tensor] : written) {
      ASSERT_TRUE(hf.tensors.count(name)) << name;
      EXPECT_TRUE(at::equal(tensor, hf.tensors.at(name))) << name;
    }
    const auto config = garden::nlp::huggingface_encoder_config(options, hf.model_type);
    for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "hidden_act", "max_position_embeddings",
                            "type_vocab_size", "layer_norm_eps", "model_type"})
      EXPECT_EQ(config.at(key), hf.config.at(key)) << key;
    if (electra) {
      EXPECT_EQ(config.at("embedding_size"), 16);
    }
  }
  EXPECT_NE(garden_test::error_of([] {
              garden::nlp::huggingface_encoder_config(fixture_options(true), "bert");
            }).find("export it as electra"),
            std::string::npos);
  auto alibi = fixture_options(true);
  alibi.alibi_slope = 0.5;
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::huggingface_encoder_config(alibi, "electra");
            }).find("alibi_slope 0.500000 has no Hugging Face BERT or ELECTRA equivalent"),
            std::string::npos);
}

// bert/sentence_prediction sized as the fixture, from its directory.
std::shared_ptr<garden::config::ExperimentConfig> classifier_experiment(const std::string& dir,
                                                                        const std::string& more) {
  auto experiment = garden::config::get_experiment_config("bert/sentence_prediction");
  garden::config::apply_override(
      *experiment,
      "task.model.encoder.bert.vocab_size=40,task.model.encoder.bert.hidden_size=32,"
      "task.model.encoder.bert.num_layers=2,task.model.encoder.bert.num_attention_heads=4,"
      "task.model.encoder.bert.intermediate_size=64,"
      "task.model.encoder.bert.max_position_embeddings=64,task.train_data.seq_length=64,"
      "task.validation_data.seq_length=64,task.init_checkpoint=" +
          dir);
  garden::config::apply_override(*experiment, more.substr(1));
  garden::config::validate_config(*experiment);
  return experiment;
}

TEST_F(HuggingFaceTest, ASequenceClassifierFineTunesFromItsDirectoryWithTheSameLogits) {
  const Inputs in = fixture_inputs();
  // BertForSequenceClassification: pooler -> the head's dense layer,
  // classifier -> its output layer, with init_checkpoint_modules [all].
  auto experiment =
      classifier_experiment((kFixtures / "bert_classifier").string(),
                            ",task.model.num_classes=3,task.init_checkpoint_modules=[all]");
  auto task = garden::get_task(experiment->task, "");
  auto model = task->build_model();
  task->initialize(*model);
  model->eval();
  torch::NoGradGuard no_grad;
  auto logits =
      task->call_model(
              *model,
              {{"input_word_ids", in.ids}, {"input_mask", in.mask}, {"input_type_ids", in.types}},
              false)
          .at("logits");
  EXPECT_LT(garden_test::max_abs_difference(logits, expected("bert_classifier", "logits")), 1e-5);
  // Exported back (garden export --format=huggingface): the file's own
  // names, shapes and values, so transformers loads it unchanged.
  const auto exported = garden::nlp::huggingface_export(*task, *model);
  const auto original = garden::nlp::read_huggingface_dir((kFixtures / "bert_classifier").string());
  EXPECT_EQ(exported.tensors.size(), original.tensors.size());
  for (const auto& [name, tensor] : exported.tensors) {
    ASSERT_TRUE(original.tensors.count(name)) << name;
    EXPECT_TRUE(at::equal(tensor, original.tensors.at(name))) << name;
  }
  EXPECT_EQ(exported.config.at("architectures"), json({"BertForSequenceClassification"}));
  EXPECT_EQ(exported.config.at("id2label").size(), 3u);
  const fs::path out = dir_ / "export";
  garden::nlp::write_huggingface_dir(exported, {}, out.string());
  EXPECT_EQ(garden::nlp::read_huggingface_dir(out.string()).tensors.size(),
            original.tensors.size());
  // The tokenizer's casing travels with it: BertTokenizer would otherwise
  // lower-case a cased model's text (its default do_lower_case is true).
  const auto& sentence =
      static_cast<const garden::nlp::SentencePredictionConfig&>(*experiment->task);
  const json settings = json::parse(std::ifstream(out / "tokenizer_config.json"));
  EXPECT_EQ(settings.at("do_lower_case"), sentence.train_data.lower_case);
  for (const bool lower_case : {false, true}) {
    auto cased = exported;
    garden::nlp::add_huggingface_tokenizer_config(cased, "WordPiece", lower_case);
    const fs::path again = dir_ / ("export_" + std::to_string(lower_case));
    garden::nlp::write_huggingface_dir(
        cased, {{"vocab.txt", (kFixtures / "bert" / "vocab.txt").string()}}, again.string());
    const auto read_back = garden::nlp::huggingface_wordpiece(again.string());
    ASSERT_TRUE(read_back.has_value());
    EXPECT_EQ(read_back->lower_case, lower_case);
    EXPECT_EQ(json::parse(std::ifstream(again / "tokenizer_config.json")).at("tokenizer_class"),
              "BertTokenizer");
  }
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::write_huggingface_dir(exported, {}, out.string());
            }).find("exists"),
            std::string::npos);

  // The default ([encoder]) leaves the head as initialized; init_cls_pooler
  // adds the pooler, which a checkpoint without one cannot give.
  experiment = classifier_experiment((kFixtures / "bert").string(),
                                     ",task.model.num_classes=2,task.init_cls_pooler=true");
  task = garden::get_task(experiment->task, "");
  model = task->build_model();
  task->initialize(*model);
  auto* classifier = model->as<garden::nlp::BertClassifierImpl>();
  ASSERT_NE(classifier, nullptr);
  const auto hf = garden::nlp::read_huggingface_dir((kFixtures / "bert").string());
  EXPECT_TRUE(
      at::equal(classifier->classifier->dense->weight, hf.tensors.at("pooler.dense.weight")));
  experiment = classifier_experiment((kFixtures / "electra").string(),
                                     ",task.model.num_classes=2,task.init_cls_pooler=true,"
                                     "task.model.encoder.bert.embedding_size=16");
  task = garden::get_task(experiment->task, "");
  model = task->build_model();
  const std::string no_pooler = garden_test::error_of([&] { task->initialize(*model); });
  EXPECT_NE(no_pooler.find("has no tensor 'electra.pooler.dense.bias'"), std::string::npos)
      << no_pooler;
}

// Weights copied without their config.json: named as such, not "holds no
// checkpoint".
TEST_F(HuggingFaceTest, WeightsWithoutTheirConfigJsonAreNamedAsSuch) {
  const fs::path bare = dir_ / "weights_only";
  fs::create_directories(bare);
  fs::copy_file(kFixtures / "bert" / "model.safetensors", bare / "model.safetensors");
  torch::nn::Linear model(2, 2);
  EXPECT_EQ(
      garden_test::error_of([&] { garden::initialize_from_checkpoint(*model, bare.string(), {}); }),
      "task.init_checkpoint '" + bare.string() +
          "' holds model.safetensors but no config.json: a Hugging Face model directory "
          "needs the config.json saved with it");
}

TEST_F(HuggingFaceTest, MismatchesAreOneLineNamingTheKeyOrTensor) {
  // A config key that differs from the task's encoder.
  auto experiment = classifier_experiment((kFixtures / "bert").string(),
                                          ",task.model.num_classes=2,"
                                          "task.model.encoder.bert.intermediate_size=128");
  auto task = garden::get_task(experiment->task, "");
  auto model = task->build_model();
  EXPECT_NE(garden_test::error_of([&] { task->initialize(*model); })
                .find("bert/config.json: intermediate_size 64 differs from "
                      "task.model.encoder.bert.intermediate_size 128"),
            std::string::npos);
  auto options = fixture_options(false);
  options.hidden_activation = "relu";
  const auto hf = garden::nlp::read_huggingface_dir((kFixtures / "bert").string());
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::check_huggingface_encoder_config(hf, options, "x.");
            }).find("hidden_act 'gelu' differs from x.hidden_activation 'relu'"),
            std::string::npos);
  options = fixture_options(false);
  options.alibi_slope = 1.0;
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::check_huggingface_encoder_config(hf, options, "x.");
            }).find("BERT and ELECTRA have no attention biases; x.alibi_slope 1.000000 differs"),
            std::string::npos);
  // A tensor of the wrong shape names it, the shape found and the one
  // expected.
  garden::nlp::BertEncoder encoder(fixture_options(false));
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::load_named_tensors(
                  *encoder, {{"type_embeddings.weight", at::zeros({3, 32})}}, "here");
            }).find("here: type_embeddings.weight is [3, 32], expected [2, 32]"),
            std::string::npos);
  // A directory with only the pickle format, and one of another model.
  fs::create_directories(dir_ / "pickle");
  std::ofstream(dir_ / "pickle" / "config.json") << R"({"model_type": "bert"})";
  std::ofstream(dir_ / "pickle" / "pytorch_model.bin") << "PK";
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::read_huggingface_dir((dir_ / "pickle").string());
            }).find("pytorch_model.bin: LibTorch cannot unpickle it ("),
            std::string::npos);
  fs::create_directories(dir_ / "gpt");
  std::ofstream(dir_ / "gpt" / "config.json") << R"({"model_type": "gpt2"})";
  fs::copy_file(kFixtures / "bert" / "model.safetensors", dir_ / "gpt" / "model.safetensors");
  const auto gpt = garden::nlp::read_huggingface_dir((dir_ / "gpt").string());
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::check_huggingface_encoder_config(gpt, fixture_options(false), "x.");
            }).find("model_type 'gpt2' is not an encoder Garden reads"),
            std::string::npos);
  // ElectraForSequenceClassification's head (gelu) is not Garden's (tanh):
  // "all" is refused rather than the head dropped.
  experiment = classifier_experiment((kFixtures / "electra_classifier").string(),
                                     ",task.model.num_classes=2,task.init_checkpoint_modules=[all],"
                                     "task.model.encoder.bert.embedding_size=16");
  task = garden::get_task(experiment->task, "");
  model = task->build_model();
  EXPECT_NE(garden_test::error_of([&] { task->initialize(*model); })
                .find("classifier.dense.bias (ElectraForSequenceClassification's head) has no "
                      "place in this task's model"),
            std::string::npos);
  // A classifier of the mean of the tokens' outputs: BertForSequenceClassification
  // classifies [CLS], so the export is refused, not written wrong.
  experiment = classifier_experiment((kFixtures / "bert").string(),
                                     ",task.model.num_classes=2,task.model.pooling=mean");
  task = garden::get_task(experiment->task, "");
  model = task->build_model();
  EXPECT_NE(garden_test::error_of([&] { garden::nlp::huggingface_export(*task, *model); })
                .find("task.model.pooling is 'mean', but BertForSequenceClassification "
                      "classifies the [CLS] output"),
            std::string::npos);
  // A module the directory does not hold for the task.
  experiment = classifier_experiment((kFixtures / "bert").string(),
                                     ",task.model.num_classes=2,"
                                     "task.init_checkpoint_modules=[encoder,decoder]");
  task = garden::get_task(experiment->task, "");
  model = task->build_model();
  EXPECT_NE(
      garden_test::error_of([&] { task->initialize(*model); }).find("'decoder' is not something"),
      std::string::npos);
}

TEST_F(HuggingFaceTest, TokenizerJsonIsReadAsItsWordPieceVocabulary) {
  // tokenizer.json written by transformers' BertTokenizer over the fixture's
  // vocab.txt, with its ids for four sentences
  // (bench/interop/make_tokenizer_json.py).
  const fs::path bert = kFixtures / "bert";
  const auto from_json =
      garden::data::WordPieceTokenizer::from_vocab_file((bert / "tokenizer.json").string());
  const auto from_txt =
      garden::data::WordPieceTokenizer::from_vocab_file((bert / "vocab.txt").string());
  EXPECT_EQ(from_json.vocab_size(), 40);
  const auto expected_ids = json::parse(std::ifstream(bert / "tokenizer_ids.json"));
  for (std::size_t i = 0; i < expected_ids.at("sentences").size(); ++i) {
    const auto text = expected_ids.at("sentences")[i].get<std::string>();
    EXPECT_EQ(from_json.encode(text), expected_ids.at("ids")[i].get<std::vector<int64_t>>())
        << text;
    EXPECT_EQ(from_json.encode(text), from_txt.encode(text)) << text;
  }
  // A normalizer that lowercases, read for a cased task; another model type.
  EXPECT_NE(garden_test::error_of([&] {
              garden::data::WordPieceTokenizer::from_vocab_file((bert / "tokenizer.json").string(),
                                                                false);
            }).find("tokenizer.json: normalizer.lowercase true differs from do_lower_case false"),
            std::string::npos);
  std::ofstream(dir_ / "bpe.json") << R"({"model": {"type": "BPE", "vocab": {}}})";
  EXPECT_NE(garden_test::error_of([&] {
              garden::data::WordPieceTokenizer::from_vocab_file((dir_ / "bpe.json").string());
            }).find("bpe.json: model.type is not WordPiece"),
            std::string::npos);
}

}  // namespace
