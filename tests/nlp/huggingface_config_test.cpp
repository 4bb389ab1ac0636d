// A task config taking its shape from the Hugging Face directory that
// task.init_checkpoint names (tests/data/hf, saved by transformers): every
// key the user did not set comes from config.json and the tokenizer's
// files, a key the user set to another value is one line naming both, and
// the model built from the adopted config gives transformers' outputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/cli/builtins.h"
#include "garden/cli/cli.h"
#include "garden/config/yaml_io.h"
#include "garden/core/safetensors.h"
#include "garden/core/task.h"
#include "garden/nlp/tasks/huggingface_export.h"
#include "garden/nlp/tasks/question_answering_config.h"
#include "garden/nlp/tasks/sentence_prediction_config.h"
#include "garden/nlp/tasks/tagging_config.h"
#include "garden/nlp/tasks/translation_config.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using garden::config::ExperimentConfig;

const fs::path kHfDir = fs::path(GARDEN_SOURCE_DIR) / "tests" / "data" / "hf";

std::shared_ptr<ExperimentConfig> resolve_hf(const std::string& experiment,
                                             const std::string& override,
                                             const std::vector<std::string>& files = {}) {
  return garden::resolve_experiment(experiment, files, override);
}

template <class Config>
Config& adopted_task(const std::shared_ptr<ExperimentConfig>& params) {
  return dynamic_cast<Config&>(*params->task);
}

// The largest difference between the logits of the sentence prediction
// model `params` builds and initializes and those transformers computed
// with bert_classifier on the fixture's inputs.
double classifier_difference(const std::shared_ptr<ExperimentConfig>& params) {
  auto task = garden::get_task(params->task, "");
  auto model = task->build_model();
  task->initialize(*model);
  model->eval();
  const auto inputs = json::parse(std::ifstream(kHfDir / "inputs.json"));
  const auto tensor = [&](const char* key) {
    const auto rows = inputs.at(key).get<std::vector<std::vector<int64_t>>>();
    at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), 8}, at::kLong);
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t c = 0; c < 8; ++c)
        t[static_cast<int64_t>(r)][static_cast<int64_t>(c)] = rows[r].at(c);
    return t;
  };
  torch::NoGradGuard no_grad;
  const at::Tensor logits = task->call_model(*model,
                                             {{"input_word_ids", tensor("input_ids")},
                                              {"input_mask", tensor("attention_mask")},
                                              {"input_type_ids", tensor("token_type_ids")}},
                                             false)
                                .at("logits");
  const at::Tensor expected =
      garden::read_safetensors((kHfDir / "bert_classifier" / "expected.safetensors").string())
          .tensors.at("logits");
  return garden_test::max_abs_difference(logits, expected);
}

class HuggingFaceConfigTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { garden::register_builtins(); }
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("huggingface_config_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A copy of the fixture `name` with config.json's `changes` applied.
  fs::path changed_copy(const std::string& name, const json& changes) {
    const fs::path copy = dir_ / (name + "_changed");
    fs::create_directories(copy);
    for (const auto& entry : fs::directory_iterator(kHfDir / name))
      fs::copy_file(entry.path(), copy / entry.path().filename(),
                    fs::copy_options::overwrite_existing);
    json config = json::parse(std::ifstream(kHfDir / name / "config.json"));
    config.merge_patch(changes);
    std::ofstream(copy / "config.json") << config.dump(2);
    return copy;
  }
  fs::path dir_;
};

TEST_F(HuggingFaceConfigTest, AnElectraDirectoryGivesTheSizesCopiedByHand) {
  const std::string electra = (kHfDir / "electra").string();
  // The issue's nine keys and the data's lengths, copied from config.json by
  // hand, and the tokenizer's settings from the directory's files.
  std::string by_hand = "task.init_checkpoint=" + electra + ",task.class_names=[O,B-X,I-X]";
  const std::string b = ",task.model.encoder.bert.";
  by_hand += b + "vocab_size=40" + b + "embedding_size=16" + b + "hidden_size=32" + b +
             "num_layers=2" + b + "num_attention_heads=4" + b + "intermediate_size=64" + b +
             "max_position_embeddings=64";
  for (const char* data : {"train_data", "validation_data"})
    by_hand += std::string(",task.") + data + ".seq_length=64,task." + data +
               ".vocab_file=" + electra + "/vocab.txt,task." + data + ".tokenization=WordPiece";
  const auto copied = resolve_hf("bert/tagging", by_hand);
  const auto adopted = resolve_hf(
      "bert/tagging", "task.init_checkpoint=" + electra + ",task.class_names=[O,B-X,I-X]");
  EXPECT_EQ(garden::config::to_yaml_string(*adopted), garden::config::to_yaml_string(*copied));
  const auto& encoder = adopted_task<garden::nlp::TaggingConfig>(adopted).model.encoder.bert;
  EXPECT_EQ(encoder.hidden_size, 32);
  EXPECT_EQ(encoder.embedding_size, std::optional<int64_t>(16));
  EXPECT_EQ(encoder.num_layers, 2);
  EXPECT_EQ(adopted_task<garden::nlp::TaggingConfig>(adopted).train_data.seq_length, 64);
}

TEST_F(HuggingFaceConfigTest, AClassifierDirectoryAloneGivesTransformersLogits) {
  // BertForSequenceClassification: its sizes and its three labels; nothing
  // copied by hand. [all]: the head is the file's too.
  const auto params = resolve_hf("bert/sentence_prediction",
                                 "task.init_checkpoint=" + (kHfDir / "bert_classifier").string() +
                                     ",task.init_checkpoint_modules=[all]");
  auto& config = adopted_task<garden::nlp::SentencePredictionConfig>(params);
  EXPECT_EQ(config.model.num_classes, 3);
  EXPECT_EQ(config.model.encoder.bert.embedding_size, std::nullopt);
  EXPECT_LT(classifier_difference(params), 1e-5);
}

// bert/sentence_prediction_tiny ships attention biases and a head on the
// tokens' mean (for a start from electra/tiny): a Hugging Face BERT has
// neither, so the directory's replace them and the model still gives
// transformers' logits; the user's own values are refused where the
// directory's weights would compute something else.
TEST_F(HuggingFaceConfigTest, TheTinyExperimentsBiasesAndMeanHeadGiveWayToTheDirectorysBert) {
  const std::string classifier = (kHfDir / "bert_classifier").string();
  const std::string init =
      "task.init_checkpoint=" + classifier + ",task.init_checkpoint_modules=[all]";
  const auto params = resolve_hf("bert/sentence_prediction_tiny", init);
  auto& config = adopted_task<garden::nlp::SentencePredictionConfig>(params);
  EXPECT_EQ(config.model.encoder.bert.alibi_slope, 0.0);
  EXPECT_EQ(config.model.pooling, "cls");
  EXPECT_LT(classifier_difference(params), 1e-5);

  // The user's biases, or the mean under a trained classifier's head: one
  // line naming both values.
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("bert/sentence_prediction_tiny",
                         init + ",task.model.encoder.bert.alibi_slope=0.5");
            }),
            "task.model.encoder.bert.alibi_slope 0.5 (set by --params_override) differs from " +
                classifier + "/config.json's bert computes no attention biases: 0");
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("bert/sentence_prediction_tiny", init + ",task.model.pooling=mean");
            }),
            "task.model.pooling 'mean' (set by --params_override) differs from " + classifier +
                "'s bert pools the [CLS] output: 'cls'");
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("bert/tagging", "task.init_checkpoint=" + classifier +
                                             ",task.class_names=[O],"
                                             "task.model.encoder.bert.norm_first=true");
            }),
            "task.model.encoder.bert.norm_first true (set by --params_override) differs from " +
                classifier + "/config.json's bert computes post-layer-norm blocks: false");
  // A bare encoder's pooler (BertModel's) may classify the mean, as the
  // user says; left alone, it reads [CLS] as in transformers.
  const std::string bare = "task.init_checkpoint=" + (kHfDir / "bert").string();
  EXPECT_EQ(adopted_task<garden::nlp::SentencePredictionConfig>(
                resolve_hf("bert/sentence_prediction_tiny", bare))
                .model.pooling,
            "cls");
  EXPECT_EQ(adopted_task<garden::nlp::SentencePredictionConfig>(
                resolve_hf("bert/sentence_prediction_tiny", bare + ",task.model.pooling=mean"))
                .model.pooling,
            "mean");
}

// A *ForTokenClassification or *ForQuestionAnswering directory: [all]
// restores its head into Garden's (it was dropped, or refused, before), and
// the default [encoder] starts a fresh head whose labels are the data's, so
// the model fine-tunes on another label set.
TEST_F(HuggingFaceConfigTest, AHeadedDirectoryRestoresItsHeadWithAllAndLeavesTheLabelsOtherwise) {
  const std::string bert = (kHfDir / "bert").string();
  const auto head_of = [](garden::Task& task, garden::Model& model, const std::string& name) {
    (void)task;
    for (const auto& item : model.named_parameters())
      if (item.key() == name) return item.value().detach().clone();
    throw std::runtime_error("no parameter " + name);
  };
  struct Case {
    std::string experiment, extra, head, file_head;
  };
  for (const Case& c : {Case{"bert/tagging", ",task.class_names=[O,B-X,I-X]", "classifier.weight",
                             "classifier.weight"},
                        Case{"bert/squad", ",task.validation_data.query_length=16",
                             "span_labeling.weight", "qa_outputs.weight"}}) {
    SCOPED_TRACE(c.experiment);
    // Garden's model from the bare encoder, its head set to known values,
    // exported as Hugging Face's architecture with a head.
    auto source = resolve_hf(c.experiment, "task.init_checkpoint=" + bert + c.extra);
    auto task = garden::get_task(source->task, "");
    auto model = task->build_model();
    task->initialize(*model);
    {
      torch::NoGradGuard no_grad;
      for (auto& item : model->named_parameters())
        if (item.key() == c.head)
          item.value().copy_(torch::arange(item.value().numel()).reshape(item.value().sizes()));
    }
    const fs::path headed = dir_ / (c.experiment.substr(5) + "_hf");
    garden::nlp::write_huggingface_dir(garden::nlp::huggingface_export(*task, *model),
                                       {{"vocab.txt", bert + "/vocab.txt"}}, headed.string());
    const at::Tensor expected = head_of(*task, *model, c.head);
    EXPECT_TRUE(garden::read_safetensors((headed / "model.safetensors").string())
                    .tensors.count(c.file_head));
    // [all]: the head is the file's.
    auto all = resolve_hf(c.experiment, "task.init_checkpoint=" + headed.string() +
                                            ",task.init_checkpoint_modules=[all]" + c.extra);
    auto restored_task = garden::get_task(all->task, "");
    auto restored = restored_task->build_model();
    restored_task->initialize(*restored);
    EXPECT_TRUE(torch::equal(head_of(*restored_task, *restored, c.head), expected));
  }
  // Tagging on another label set from a token classifier: the default
  // [encoder] takes the user's (or the meta data's) labels, not id2label.
  const std::string tagger = (dir_ / "tagging_hf").string();
  auto other = resolve_hf("bert/tagging",
                          "task.init_checkpoint=" + tagger + ",task.class_names=[O,B-GENE,I-GENE]");
  EXPECT_EQ(adopted_task<garden::nlp::TaggingConfig>(other).class_names,
            (std::vector<std::string>{"O", "B-GENE", "I-GENE"}));
  auto unset = resolve_hf("bert/tagging", "task.init_checkpoint=" + tagger);
  EXPECT_TRUE(adopted_task<garden::nlp::TaggingConfig>(unset).class_names.empty());
  // With its head restored the labels must be the head's.
  auto with_head = resolve_hf(
      "bert/tagging", "task.init_checkpoint=" + tagger + ",task.init_checkpoint_modules=[all]");
  EXPECT_EQ(adopted_task<garden::nlp::TaggingConfig>(with_head).class_names,
            (std::vector<std::string>{"O", "B-X", "I-X"}));
}

TEST_F(HuggingFaceConfigTest, AKeyTheUserSetToAnotherValueIsOneLineNamingBoth) {
  const std::string bert = (kHfDir / "bert").string();
  const std::string base = "task.init_checkpoint=" + bert + ",task.class_names=[O]";
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("bert/tagging", base + ",task.model.encoder.bert.hidden_size=256");
            }),
            "task.model.encoder.bert.hidden_size 256 (set by --params_override) differs from " +
                bert + "/config.json hidden_size 32");
  // The same from a config file names the file.
  const fs::path file = dir_ / "mine.yaml";
  std::ofstream(file) << "task:\n  model:\n    encoder:\n      bert:\n        num_layers: 3\n";
  EXPECT_EQ(garden_test::error_of([&] { resolve_hf("bert/tagging", base, {file.string()}); }),
            "task.model.encoder.bert.num_layers 3 (set by --config_file " + file.string() +
                ") differs from " + bert + "/config.json num_hidden_layers 2");
  // A value equal to the directory's is accepted; so is the user's null
  // embedding_size for a BERT model (no projection).
  const auto params = resolve_hf("bert/tagging", base +
                                                     ",task.model.encoder.bert.hidden_size=32,"
                                                     "task.model.encoder.bert.embedding_size=null");
  EXPECT_EQ(adopted_task<garden::nlp::TaggingConfig>(params).model.encoder.bert.vocab_size, 40);
  // A BERT model has no projection: an explicit width of its own is refused,
  // one of hidden_size accepted.
  EXPECT_NE(
      garden_test::error_of(
          [&] { resolve_hf("bert/tagging", base + ",task.model.encoder.bert.embedding_size=16"); })
          .find("task.model.encoder.bert.embedding_size 16 (set by --params_override) differs "
                "from " +
                bert + "/config.json model_type bert (no embedding projection): null"),
      std::string::npos);
  resolve_hf("bert/tagging", base + ",task.model.encoder.bert.embedding_size=32");
  // What Garden cannot compute stays refused.
  const fs::path relative = changed_copy("bert", {{"position_embedding_type", "relative_key"}});
  EXPECT_NE(garden_test::error_of([&] {
              resolve_hf("bert/tagging", "task.init_checkpoint=" + relative.string());
            }).find("position_embedding_type 'relative_key' is not supported"),
            std::string::npos);
  const fs::path gelu_new = changed_copy("bert", {{"hidden_act", "gelu_new"}});
  EXPECT_EQ(garden_test::error_of(
                [&] { resolve_hf("bert/tagging", "task.init_checkpoint=" + gelu_new.string()); }),
            gelu_new.string() +
                "/config.json: hidden_act 'gelu_new' is not computed by Garden "
                "(gelu, the exact erf form, and relu)");
}

TEST_F(HuggingFaceConfigTest, SequencesAreCutToThePositionTableUnlessTheUserSetThem) {
  const std::string bert = "task.init_checkpoint=" + (kHfDir / "bert").string();
  // bert/squad's 384 is the experiment's: cut to max_position_embeddings 64.
  const auto params = resolve_hf("bert/squad", bert + ",task.validation_data.query_length=16");
  const auto& qa = adopted_task<garden::nlp::QuestionAnsweringConfig>(params);
  EXPECT_EQ(qa.train_data.seq_length, 64);
  EXPECT_EQ(qa.validation_data.seq_length, 64);
  // The user's own length is not changed, and is refused as too long.
  EXPECT_NE(garden_test::error_of([&] {
              resolve_hf("bert/squad", bert +
                                           ",task.validation_data.query_length=16,"
                                           "task.train_data.seq_length=128");
            })
                .find("train_data.seq_length: 128 is longer than "
                      "model.encoder.bert.max_position_embeddings 64"),
            std::string::npos);
  const auto shorter = resolve_hf("bert/squad", bert +
                                                    ",task.validation_data.query_length=16,"
                                                    "task.train_data.seq_length=32");
  EXPECT_EQ(adopted_task<garden::nlp::QuestionAnsweringConfig>(shorter).train_data.seq_length, 32);
}

TEST_F(HuggingFaceConfigTest, TheTokenizerSettingsComeFromTheTokenizerFiles) {
  // sentence_prediction_tiny is SentencePiece, cased: the directory's
  // vocab.txt is WordPiece, and its tokenizer.json lower-cases.
  const fs::path bert = kHfDir / "bert";
  auto params =
      resolve_hf("bert/sentence_prediction_tiny", "task.init_checkpoint=" + bert.string());
  auto* config = &adopted_task<garden::nlp::SentencePredictionConfig>(params);
  for (const auto* data : {&config->train_data, &config->validation_data}) {
    EXPECT_EQ(data->vocab_file, (bert / "vocab.txt").string());
    EXPECT_EQ(data->tokenization, "WordPiece");
    EXPECT_TRUE(data->lower_case);
  }
  // tiny's embedding_size 128 was the experiment's: BERT has no projection.
  EXPECT_EQ(config->model.encoder.bert.embedding_size, std::nullopt);
  // tokenizer_config.json's do_lower_case decides first.
  const fs::path cased = changed_copy("bert", json::object());
  std::ofstream(cased / "tokenizer_config.json") << R"({"do_lower_case": false})";
  params = resolve_hf("bert/sentence_prediction", "task.init_checkpoint=" + cased.string());
  config = &adopted_task<garden::nlp::SentencePredictionConfig>(params);
  EXPECT_FALSE(config->train_data.lower_case);
  EXPECT_FALSE(config->validation_data.lower_case);
  // The user's lower-casing against the tokenizer's: one line naming both.
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("bert/sentence_prediction", "task.init_checkpoint=" + bert.string() +
                                                         ",task.train_data.lower_case=false");
            }),
            "task.train_data.lower_case false (set by --params_override) differs from " +
                (bert / "tokenizer.json").string() + " normalizer.lowercase true");
  // A vocabulary of the user's own is kept (with its tokenization).
  params = resolve_hf("bert/sentence_prediction_tiny", "task.init_checkpoint=" + bert.string() +
                                                           ",task.train_data.vocab_file=my.model");
  config = &adopted_task<garden::nlp::SentencePredictionConfig>(params);
  EXPECT_EQ(config->train_data.vocab_file, "my.model");
  EXPECT_EQ(config->train_data.tokenization, "SentencePiece");
  EXPECT_EQ(config->validation_data.vocab_file, "");
}

TEST_F(HuggingFaceConfigTest, AMarianDirectoryGivesTheTranslationModelItsShape) {
  const std::string marian = (kHfDir / "marian").string();
  // wmt_transformer/demo is Model Garden's pre-layer-norm Transformer: the
  // directory makes it MarianMT's.
  const auto params = resolve_hf("wmt_transformer/demo", "task.init_checkpoint=" + marian);
  const auto& model = adopted_task<garden::nlp::TranslationConfig>(params).model;
  EXPECT_EQ(model.embedding_width, 32);
  EXPECT_EQ(model.position_encoding, "marian");
  EXPECT_TRUE(model.output_bias);
  EXPECT_FALSE(model.zero_pad_embedding);
  for (const auto* stack : {&model.encoder, &model.decoder}) {
    EXPECT_EQ(stack->num_layers, 2);
    EXPECT_EQ(stack->num_attention_heads, 4);
    EXPECT_EQ(stack->intermediate_size, 64);
    EXPECT_EQ(stack->activation, "swish");
    EXPECT_FALSE(stack->norm_first);
    EXPECT_TRUE(stack->use_bias);
    EXPECT_DOUBLE_EQ(stack->norm_epsilon, 1e-5);
    EXPECT_DOUBLE_EQ(stack->attention_dropout_rate, 0.0);
  }
  // The model built from it is the file's: the task's own check passes.
  auto task = garden::get_task(params->task, "");
  auto built = task->build_model();
  task->initialize(*built);
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("marian/demo",
                         "task.init_checkpoint=" + marian + ",task.model.encoder.norm_first=true");
            }),
            "task.model.encoder.norm_first true (set by --params_override) differs from " + marian +
                "/config.json's MarianMT computes post-layer-norm blocks: false");
  EXPECT_EQ(garden_test::error_of([&] {
              resolve_hf("marian/demo",
                         "task.init_checkpoint=" + marian + ",task.model.decoder.num_layers=3");
            }),
            "task.model.decoder.num_layers 3 (set by --params_override) differs from " + marian +
                "/config.json decoder_layers 2");
}

}  // namespace
