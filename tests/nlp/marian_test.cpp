// MarianMT in and out, against transformers' own outputs: tests/data/hf/marian
// is a tiny MarianMTModel as OPUS-MT ships them (source.spm, target.spm,
// one vocab.json, <pad> last), trained briefly and saved by transformers
// 5.12.1 with its outputs on six held-out sentences
// (bench/interop/make_marian_fixture.py; tests/data/hf/README.md). Garden
// reads it as the translation task's task.init_checkpoint and must give the
// same encoder outputs and logits within 1e-5, the same greedy and beam-4
// tokens, and write back the file's tensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/safetensors.h"
#include "garden/core/serving_module.h"
#include "garden/core/task.h"
#include "garden/data/sentencepiece.h"
#include "garden/nlp/data/marian_tokenizer.h"
#include "garden/nlp/interop/marian.h"
#include "garden/nlp/modeling/decoding.h"
#include "garden/nlp/tasks/huggingface_export.h"
#include "garden/nlp/tasks/translation_task.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using garden::nlp::MarianTokenizer;

const fs::path kMarian = fs::path(GARDEN_SOURCE_DIR) / "tests" / "data" / "hf" / "marian";

json expected_json() { return json::parse(std::ifstream(kMarian / "expected.json")); }
at::Tensor expected(const std::string& name) {
  return garden::read_safetensors((kMarian / "expected.safetensors").string()).tensors.at(name);
}
std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// marian/demo sized as the fixture, from its directory.
std::shared_ptr<garden::config::ExperimentConfig> marian_experiment(const std::string& more = "") {
  auto experiment = garden::config::get_experiment_config("marian/demo");
  std::string override =
      "task.model.embedding_width=32,task.model.dropout_rate=0.1,task.model.decode_max_length=48,"
      "task.model.beam_search=transformers,"
      "task.init_checkpoint=" +
      kMarian.string();
  for (const char* stack : {"encoder", "decoder"})
    override += std::string(",task.model.") + stack + ".num_layers=2,task.model." + stack +
                ".num_attention_heads=4,task.model." + stack + ".intermediate_size=64,task.model." +
                stack + ".dropout_rate=0.1";
  garden::config::apply_override(*experiment, override);
  if (!more.empty()) garden::config::apply_override(*experiment, more.substr(1));
  garden::config::validate_config(*experiment);
  return experiment;
}

struct Loaded {
  garden::TaskPtr task;
  garden::ModelPtr model;
  garden::nlp::TranslationTask& translation() {
    return dynamic_cast<garden::nlp::TranslationTask&>(*task);
  }
  garden::nlp::Seq2SeqTransformerImpl& transformer() {
    return *model->as<garden::nlp::Seq2SeqTransformerImpl>();
  }
  const MarianTokenizer& tokenizer() {
    return dynamic_cast<const MarianTokenizer&>(translation().tokenizer());
  }
};

Loaded load(const std::string& more = "") {
  Loaded l;
  l.task = garden::get_task(marian_experiment(more)->task, "");
  l.model = l.task->build_model();
  l.task->initialize(*l.model);
  l.model->eval();
  return l;
}

// The file's ids as Garden's (<pad> at 0).
at::Tensor to_garden(const at::Tensor& ids, const MarianTokenizer& t) {
  return (ids - t.marian_pad_id()).remainder(t.vocab_size());
}

class MarianTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { garden::register_builtins(); }
  void SetUp() override {
    torch::manual_seed(0);
    dir_ = fs::temp_directory_path() / ("marian_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(MarianTest, TheTokenizerGivesMarianTokenizersIds) {
  const auto t = MarianTokenizer::load(kMarian.string());
  const json e = expected_json();
  const int64_t pad = t.marian_pad_id();
  EXPECT_EQ(pad, t.vocab_size() - 1);  // OPUS-MT's layout
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.to_marian(t.eos_id()), 0);
  EXPECT_EQ(t.eos_id(), 1);
  const auto marian_ids = [&](std::vector<int64_t> ids) {
    ids.push_back(t.eos_id());
    for (auto& id : ids) id = t.to_marian(id);
    return ids;
  };
  for (std::size_t i = 0; i < e.at("sources").size(); ++i) {
    const auto source = e.at("sources")[i].get<std::string>();
    const auto target = e.at("references")[i].get<std::string>();
    EXPECT_EQ(marian_ids(t.encode(source)), e.at("source_ids")[i].get<std::vector<int64_t>>())
        << source;
    EXPECT_EQ(marian_ids(t.encode_target(target)),
              e.at("target_ids")[i].get<std::vector<int64_t>>())
        << target;
  }
  // Decoding drops <pad>, </s> and <unk>, as skip_special_tokens does.
  const auto greedy = e.at("greedy_ids")[0].get<std::vector<int64_t>>();
  std::vector<int64_t> ids;
  for (const int64_t id : greedy) ids.push_back(t.to_garden(id));
  ids.push_back(t.unk_id());
  ids.push_back(t.eos_id());
  EXPECT_EQ(t.decode(ids), e.at("greedy_text")[0].get<std::string>());
}

// transformers' MarianTokenizer.decode, read by hand: the pieces joined,
// "▁" (U+2581) read as a space wherever it is, the ends stripped, the special
// tokens skipped. vocab.json is the union of both models' pieces; a piece
// only source.spm knows must decode as one target.spm knows does, not as
// "▁bytes" (issue 76).
std::string transformers_text(const std::vector<std::string>& pieces) {
  std::string text;
  for (const auto& piece : pieces) text += piece;
  const std::string boundary = "\xE2\x96\x81";
  for (auto at = text.find(boundary); at != std::string::npos; at = text.find(boundary, at + 1))
    text.replace(at, boundary.size(), " ");
  const auto first = text.find_first_not_of(' ');
  return first == std::string::npos ? ""
                                    : text.substr(first, text.find_last_not_of(' ') - first + 1);
}

TEST_F(MarianTest, EveryPieceOfEitherModelDecodesAsTransformersDecodesIt) {
  const auto t = MarianTokenizer::load(kMarian.string());
  const auto source = garden::data::SentencePieceTokenizer::load((kMarian / "source.spm").string());
  const auto target = garden::data::SentencePieceTokenizer::load((kMarian / "target.spm").string());
  const auto known = [](const garden::data::SentencePieceTokenizer& spm, const std::string& p) {
    return spm.piece_to_id(p) != spm.unk_id();
  };
  // Word-starting pieces of one model only, each side.
  std::vector<int64_t> source_only, target_only;
  for (int64_t id = 0; id < t.vocab_size(); ++id) {
    const std::string piece = t.id_to_piece(id);
    if (piece.rfind("\xE2\x96\x81", 0) != 0 || piece.size() <= 3) continue;
    if (known(source, piece) && !known(target, piece)) source_only.push_back(id);
    if (known(target, piece) && !known(source, piece)) target_only.push_back(id);
  }
  ASSERT_GE(source_only.size(), 2u);
  ASSERT_GE(target_only.size(), 2u);
  const auto pieces = [&](const std::vector<int64_t>& ids) {
    std::vector<std::string> out;
    for (const int64_t id : ids) out.push_back(t.id_to_piece(id));
    return out;
  };
  // A source piece twice ("▁bytes▁bytes" as Garden printed it
  // before): "bytes bytes".
  const std::vector<int64_t> twice = {source_only[0], source_only[0]};
  const std::string word = t.id_to_piece(source_only[0]).substr(3);
  EXPECT_EQ(t.decode(twice), word + " " + word);
  // Mixed with target pieces, with specials skipped wherever they are.
  const std::vector<int64_t> mixed = {target_only[0], source_only[1], t.unk_id(), target_only[1],
                                      source_only[0], t.eos_id(),     t.pad_id()};
  std::vector<int64_t> plain;
  for (const int64_t id : mixed)
    if (id != t.unk_id() && id != t.eos_id() && id != t.pad_id()) plain.push_back(id);
  EXPECT_EQ(t.decode(mixed), transformers_text(pieces(plain)));
  EXPECT_EQ(t.decode(mixed).find("\xE2\x96\x81"), std::string::npos);
  EXPECT_EQ(t.decode({t.eos_id(), t.pad_id()}), "");
}

TEST_F(MarianTest, EncoderOutputsAndLogitsAreTransformers) {
  Loaded l = load();
  const auto& t = l.tokenizer();
  const at::Tensor source = to_garden(expected("input_ids"), t);
  const at::Tensor decoder_in = to_garden(expected("decoder_input_ids"), t);
  torch::NoGradGuard no_grad;
  const auto encoded = l.transformer().encode(source);
  EXPECT_LT(garden_test::max_abs_difference(encoded.outputs, expected("encoder_last_hidden_state")),
            1e-5);
  const at::Tensor logits = l.transformer().forward(source, decoder_in);
  // Garden's logit g is the file's (g + pad) mod V.
  const at::Tensor reference = at::roll(expected("logits"), {-t.marian_pad_id()}, {2});
  EXPECT_LT(garden_test::max_abs_difference(logits, reference), 1e-5);
}

TEST_F(MarianTest, GreedyAndBeamSearchGiveTransformersTokens) {
  Loaded l = load();
  const auto& t = l.tokenizer();
  const json e = expected_json();
  const auto sources = e.at("sources").get<std::vector<std::string>>();
  std::vector<std::vector<int64_t>> rows;
  int64_t longest = 0;
  for (const auto& s : sources) {
    rows.push_back(l.translation().encode_source(s, 512));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(rows.back().size()));
  }
  at::Tensor batch = at::zeros({static_cast<int64_t>(rows.size()), longest}, at::kLong);
  for (std::size_t b = 0; b < rows.size(); ++b)
    for (std::size_t s = 0; s < rows[b].size(); ++s)
      batch[static_cast<int64_t>(b)][static_cast<int64_t>(s)] = rows[b][s];
  for (const auto& [beams, key] : {std::pair<int64_t, std::string>{1, "greedy"}, {4, "beam4"}}) {
    SCOPED_TRACE(key);
    garden::nlp::DecodeOptions options;
    options.beam_size = beams;
    options.alpha = 0.0;  // transformers' length_penalty 0
    options.rules = garden::nlp::BeamSearchRules::kTransformers;
    options.decode_max_length = e.at("max_new_tokens").get<int64_t>();
    const auto outputs = garden::nlp::translate_ids(l.transformer(), batch, t.eos_id(), options);
    ASSERT_EQ(outputs.size(), sources.size());
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      std::vector<int64_t> marian;
      for (const int64_t id : outputs[i]) marian.push_back(t.to_marian(id));
      EXPECT_EQ(marian, e.at(key + "_ids")[i].get<std::vector<int64_t>>()) << sources[i];
      EXPECT_EQ(t.decode(outputs[i]), e.at(key + "_text")[i].get<std::string>()) << sources[i];
    }
  }
}

TEST_F(MarianTest, TransformersRulesEndWithEosAtTheLimit) {
  // MarianMT's forced_eos_token_id: at decode_max_length the last token is
  // EOS, so an output that reaches the limit keeps limit - 1 tokens: the
  // greedy one is the unlimited one cut there.
  Loaded l = load();
  const at::Tensor source =
      at::tensor(
          l.translation().encode_source(expected_json().at("sources")[1].get<std::string>(), 512))
          .unsqueeze(0);
  garden::nlp::DecodeOptions options;
  options.rules = garden::nlp::BeamSearchRules::kTransformers;
  options.alpha = 0.0;
  options.beam_size = 1;
  options.decode_max_length = 48;
  const auto whole =
      garden::nlp::translate_ids(l.transformer(), source, l.tokenizer().eos_id(), options)[0];
  ASSERT_GT(whole.size(), 6u);
  options.decode_max_length = 6;
  const auto cut =
      garden::nlp::translate_ids(l.transformer(), source, l.tokenizer().eos_id(), options)[0];
  EXPECT_EQ(cut, std::vector<int64_t>(whole.begin(), whole.begin() + 5));
  options.beam_size = 4;
  EXPECT_LE(garden::nlp::translate_ids(l.transformer(), source, l.tokenizer().eos_id(), options)[0]
                .size(),
            5u);
  // The tensor state (a GPU's search) does not run these rules: one line.
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::sequence_beam_search(
                  [](const at::Tensor& ids, int64_t, garden::nlp::Cache&) {
                    return at::zeros({ids.size(0), 4});
                  },
                  at::zeros({1}, at::kLong), {}, 4, 2, 0.0, at::full({1}, 3, at::kLong), 1,
                  garden::nlp::BeamSearchState::kTensors,
                  garden::nlp::BeamSearchRules::kTransformers);
            })
                .find("transformers' rules (task.model.beam_search: transformers) run with the "
                      "search's state on the host"),
            std::string::npos);
  // Model Garden's rules stop at the limit without an EOS: all 6 tokens.
  options.beam_size = 1;
  options.rules = garden::nlp::BeamSearchRules::kModelGarden;
  EXPECT_EQ(garden::nlp::translate_ids(l.transformer(), source, l.tokenizer().eos_id(), options)[0],
            std::vector<int64_t>(whole.begin(), whole.begin() + 6));
}

TEST_F(MarianTest, ExportWritesTheFilesTensorsAndTokenizer) {
  Loaded l = load();
  const auto exported = garden::nlp::huggingface_export(*l.task, *l.model);
  const auto original = garden::nlp::read_huggingface_dir(kMarian.string());
  std::size_t compared = 0;
  for (const auto& [name, tensor] : exported.tensors) {
    ASSERT_TRUE(original.tensors.count(name)) << name;
    EXPECT_TRUE(at::equal(tensor, original.tensors.at(name))) << name;
    ++compared;
  }
  // Every tensor the file has but the tied lm_head and the sinusoids.
  std::size_t stored = 0;
  for (const auto& [name, tensor] : original.tensors)
    stored += name != "lm_head.weight" && name.find("embed_positions") == std::string::npos &&
              name.find("embed_tokens") == std::string::npos;
  EXPECT_EQ(compared, stored);
  for (const char* key :
       {"model_type", "vocab_size", "d_model", "encoder_layers", "decoder_layers",
        "encoder_attention_heads", "encoder_ffn_dim", "activation_function", "pad_token_id",
        "decoder_start_token_id", "eos_token_id", "scale_embedding"})
    EXPECT_EQ(exported.config.at(key), original.config.at(key)) << key;
  // MarianTokenizer's files, as they were.
  for (const char* file : {"vocab.json", "source.spm", "target.spm"})
    EXPECT_EQ(exported.files.at(file), slurp(kMarian / file)) << file;
  const auto generation = json::parse(exported.files.at("generation_config.json"));
  EXPECT_EQ(generation.at("decoder_start_token_id"), original.config.at("pad_token_id"));
  const fs::path out = dir_ / "export";
  garden::nlp::write_huggingface_dir(exported, garden::get_serving_module(*l.task)->assets(),
                                     out.string());
  EXPECT_TRUE(MarianTokenizer::is_marian_dir(out.string()));
  EXPECT_FALSE(fs::exists(out / "sentencepiece.model"));
  EXPECT_EQ(garden::nlp::read_huggingface_dir(out.string()).tensors.size(), compared);
}

TEST_F(MarianTest, AGardenSentencePieceModelBecomesAMarianVocabulary) {
  // A Garden-trained joint model (pad 0, </s> 1, <unk> 2): vocab.json puts
  // </s> at 0 and <pad> last, and MarianTokenizer reads back Garden's ids.
  std::vector<std::string> texts;
  {
    std::ifstream tsv(fs::path(GARDEN_SOURCE_DIR) / "data" / "testdata" / "en_de_sample.tsv");
    std::ofstream text(dir_ / "spm.txt");
    std::string line;
    while (std::getline(tsv, line) && texts.size() < 40) {
      text << line.substr(0, line.find('\t')) << '\n' << line.substr(line.find('\t') + 1) << '\n';
      texts.push_back(line.substr(0, line.find('\t')));
    }
  }
  garden::data::SentencePieceTrainOptions options;
  options.input = {(dir_ / "spm.txt").string()};
  options.model_prefix = (dir_ / "spm").string();
  options.vocab_size = 120;
  options.pad_id = 0;
  options.eos_id = 1;
  options.unk_id = 2;
  options.bos_id = -1;
  garden::data::train_sentencepiece(options);
  const auto spm = garden::data::SentencePieceTokenizer::load((dir_ / "spm.model").string());
  const json vocab = json::parse(garden::nlp::marian_vocab_json(spm));
  EXPECT_EQ(vocab.size(), 120u);
  EXPECT_EQ(vocab.at("</s>"), 0);
  EXPECT_EQ(vocab.at("<unk>"), 1);
  EXPECT_EQ(vocab.at("<pad>"), 119);
  fs::create_directories(dir_ / "tok");
  std::ofstream(dir_ / "tok" / "vocab.json") << vocab.dump();
  fs::copy_file(dir_ / "spm.model", dir_ / "tok" / "source.spm");
  const auto marian = MarianTokenizer::load((dir_ / "tok").string());
  EXPECT_EQ(marian.eos_id(), spm.eos_id());
  EXPECT_EQ(marian.unk_id(), spm.unk_id());
  ASSERT_FALSE(texts.empty());
  for (const auto& text : texts) {
    EXPECT_EQ(marian.encode(text), spm.encode(text)) << text;
    EXPECT_EQ(marian.decode(spm.encode(text)), spm.decode(spm.encode(text))) << text;
  }
}

TEST_F(MarianTest, PytorchModelBinIsReadWhenLibTorchUnpicklesIt) {
  // torch.save of a dict of three of the model's tensors, and of the same as
  // an OrderedDict (what save_pretrained writes), as pytorch_model.bin.
  const auto original = garden::nlp::read_huggingface_dir(kMarian.string());
  for (const char* file : {"state_dict.bin", "ordered_state_dict.bin"}) {
    const fs::path dir = dir_ / file;
    fs::create_directories(dir);
    fs::copy_file(kMarian / "config.json", dir / "config.json");
    fs::copy_file(kMarian / file, dir / "pytorch_model.bin");
    if (std::string(file) == "state_dict.bin") {
      const auto hf = garden::nlp::read_huggingface_dir(dir.string());
      ASSERT_EQ(hf.tensors.size(), 3u);
      for (const auto& [name, tensor] : hf.tensors)
        EXPECT_TRUE(at::equal(tensor, original.tensors.at(name))) << name;
    } else {
      EXPECT_NE(garden_test::error_of([&] {
                  garden::nlp::read_huggingface_dir(dir.string());
                }).find("pytorch_model.bin: LibTorch cannot unpickle it ("),
                std::string::npos);
    }
  }
}

TEST_F(MarianTest, MismatchesAreOneLineNamingTheKey) {
  const auto refused = [&](const std::string& more) {
    Loaded l;
    l.task = garden::get_task(marian_experiment(more)->task, "");
    l.model = l.task->build_model();
    return garden_test::error_of([&] { l.task->initialize(*l.model); });
  };
  EXPECT_NE(refused(",task.model.embedding_width=64")
                .find("marian/config.json: d_model 32 differs from task.model.embedding_width 64"),
            std::string::npos);
  EXPECT_NE(refused(",task.model.encoder.activation=relu,task.model.decoder.activation=relu")
                .find("activation_function \"swish\" differs from task.model.encoder.activation "
                      "'relu'"),
            std::string::npos);
  EXPECT_NE(refused(",task.model.position_encoding=model_garden")
                .find("task.model.position_encoding must be marian"),
            std::string::npos);
  EXPECT_NE(refused(",task.model.encoder.norm_first=true,task.model.decoder.norm_first=true")
                .find("post-layer-norm"),
            std::string::npos);
  EXPECT_NE(refused(",task.model.dropout_rate=0.0")
                .find("dropout 0.1 differs from task.model.dropout_rate 0"),
            std::string::npos);
  EXPECT_NE(refused(",task.model.zero_pad_embedding=true")
                .find("task.model.zero_pad_embedding true would read it as zero"),
            std::string::npos);
  EXPECT_NE(refused(",task.init_checkpoint_modules=[encoder]")
                .find("restores the whole model (all), not 'encoder'"),
            std::string::npos);

  // A tensor of the wrong shape, a vocabulary that does not load.
  fs::copy(kMarian, dir_ / "m", fs::copy_options::recursive);
  auto hf = garden::nlp::read_huggingface_dir((dir_ / "m").string());
  const auto t = MarianTokenizer::load((dir_ / "m").string());
  auto model = load().transformer().options();
  hf.tensors.erase("model.decoder.layers.1.fc2.bias");
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::marian_to_garden(hf, model, t.marian_pad_id());
            }).find("has no tensor 'model.decoder.layers.1.fc2.bias'"),
            std::string::npos);
  std::ofstream(dir_ / "m" / "vocab.json") << R"({"</s>": 0, "<unk>": 0})";
  EXPECT_NE(garden_test::error_of([&] {
              MarianTokenizer::load((dir_ / "m").string());
            }).find("vocab.json: id 0 is given to two pieces"),
            std::string::npos);
  std::ofstream(dir_ / "m" / "vocab.json") << R"({"</s>": 0, "<unk>": 1})";
  EXPECT_NE(garden_test::error_of([&] {
              MarianTokenizer::load((dir_ / "m").string());
            }).find("vocab.json has no '<pad>'"),
            std::string::npos);
  std::ofstream(dir_ / "m" / "target_vocab.json") << "{}";
  EXPECT_NE(garden_test::error_of([&] {
              MarianTokenizer::load((dir_ / "m").string());
            }).find("separate source and target vocabularies are not supported"),
            std::string::npos);
}

TEST_F(MarianTest, ModelGardenBlocksAreRefusedOnExport) {
  garden::nlp::Seq2SeqTransformerOptions o;
  o.vocab_size = 8;
  o.hidden_size = 16;
  o.num_layers = 1;
  o.num_heads = 4;
  o.intermediate_size = 16;
  garden::nlp::Seq2SeqTransformer pre_ln(o);
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::garden_to_marian(*pre_ln, 7);
            }).find("MarianMT is post-layer-norm"),
            std::string::npos);
  o.norm_first = false;
  garden::nlp::Seq2SeqTransformer model_garden_positions(o);
  EXPECT_NE(garden_test::error_of([&] {
              garden::nlp::garden_to_marian(*model_garden_positions, 7);
            }).find("trained with task.model.position_encoding model_garden"),
            std::string::npos);
  // Without biases (Model Garden's use_bias false): MarianMT's are zeros.
  o.position_encoding = garden::nlp::PositionEncoding::kMarian;
  o.use_bias = false;
  garden::nlp::Seq2SeqTransformer no_bias(o);
  for (const auto& [name, tensor] : garden::nlp::garden_to_marian(*no_bias, 7)) {
    if (name.size() > 5 && name.substr(name.size() - 5) == ".bias" &&
        name.find("layer_norm") == std::string::npos) {
      EXPECT_EQ(tensor.abs().max().item<double>(), 0.0) << name;
    }
  }
}

TEST_F(MarianTest, MarianSinusoidsAreTransformersFormula) {
  // transformers: row p, column j < D/2: sin(p / 10000^(2j / D)); column
  // D/2 + j: cos of the same.
  const int64_t d = 8;
  const at::Tensor pe =
      garden::nlp::position_encoding(garden::nlp::PositionEncoding::kMarian, 5, d, 2, at::kDouble);
  for (int64_t p = 0; p < 5; ++p)
    for (int64_t j = 0; j < d / 2; ++j) {
      const double angle = static_cast<double>(p + 2) / std::pow(10000.0, 2.0 * j / d);
      EXPECT_NEAR(pe[p][j].item<double>(), std::sin(angle), 1e-15);
      EXPECT_NEAR(pe[p][d / 2 + j].item<double>(), std::cos(angle), 1e-15);
    }
}

}  // namespace
