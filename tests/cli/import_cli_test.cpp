// `garden import`: the MarianMT fixture (tests/data/hf/marian, saved by
// transformers) becomes a run directory that `garden translate` reads and
// translates as transformers did, and that `garden export
// --format=huggingface` writes back with the file's tensors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "cli/cli_fixture.h"
#include "safetensors_reader.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliFixture;
using garden_test::expect_one_error_line;
using garden_test::lines_of;
using garden_test::slurp;
using garden_test::spit;
using json = nlohmann::json;

const fs::path kHf = fs::path(GARDEN_SOURCE_DIR) / "tests" / "data" / "hf";
const fs::path kMarian = kHf / "marian";
const fs::path kElectra = kHf / "electra";

// marian/demo sized as the fixture.
std::string fixture_override() {
  std::string o =
      "task.model.embedding_width=32,task.model.dropout_rate=0.1,"
      "task.model.decode_max_length=48,task.model.alpha=0,"
      "task.model.beam_search=transformers";
  for (const char* stack : {"encoder", "decoder"})
    o += std::string(",task.model.") + stack + ".num_layers=2,task.model." + stack +
         ".num_attention_heads=4,task.model." + stack + ".intermediate_size=64,task.model." +
         stack + ".dropout_rate=0.1";
  return o;
}

class ImportCliTest : public CliFixture {};

TEST_F(ImportCliTest, AMarianDirectoryImportsTranslatesAsTransformersAndExportsBack) {
  const std::string run = path("opus");
  const auto imported = garden("import --huggingface_dir '" + kMarian.string() +
                               "' --experiment marian/demo --params_override '" +
                               fixture_override() + "' --model_dir '" + run + "'");
  ASSERT_EQ(imported.status, 0) << imported.err;
  EXPECT_TRUE(fs::exists(fs::path(run) / "ckpt-0"));
  EXPECT_TRUE(fs::exists(fs::path(run) / "params.yaml"));
  // The run carries its tokenizer: the fixture is not read again.
  for (const char* file : {"vocab.json", "source.spm", "target.spm"})
    EXPECT_EQ(slurp(fs::path(run) / "tokenizer" / file), slurp(kMarian / file)) << file;
  EXPECT_NE(slurp(fs::path(run) / "params.yaml").find(run + "/tokenizer"), std::string::npos);

  const json expected = json::parse(std::ifstream(kMarian / "expected.json"));
  std::string sources;
  for (const auto& s : expected.at("sources")) sources += s.get<std::string>() + "\n";
  spit(dir_ / "in.txt", sources);
  for (const auto& [beams, key] : {std::pair<int, std::string>{1, "greedy"}, {4, "beam4"}}) {
    const auto translated = garden("translate --model_dir '" + run + "' --beam_size " +
                                   std::to_string(beams) + " --input '" + path("in.txt") + "'");
    ASSERT_EQ(translated.status, 0) << translated.err;
    const auto lines = lines_of(translated.out);
    ASSERT_EQ(lines.size(), expected.at(key + "_text").size()) << translated.out;
    for (std::size_t i = 0; i < lines.size(); ++i)
      EXPECT_EQ(lines[i], expected.at(key + "_text")[i].get<std::string>()) << key << " " << i;
  }

  // A Garden export of the run serves the same translations (its assets
  // are the MarianMT tokenizer's files).
  const auto garden_export = garden("export --experiment marian/demo --model_dir '" + run +
                                    "' --export_dir '" + path("served") + "'");
  ASSERT_EQ(garden_export.status, 0) << garden_export.err;
  const auto predicted =
      garden("predict --export_dir '" + path("served") + "' --input '" + path("in.txt") + "'");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  const auto served = lines_of(predicted.out);
  ASSERT_EQ(served.size(), expected.at("beam4_text").size()) << predicted.out;
  for (std::size_t i = 0; i < served.size(); ++i)
    EXPECT_EQ(json::parse(served[i]).at("outputs"), expected.at("beam4_text")[i]) << i;

  const std::string out = path("hf");
  const auto exported = garden("export --experiment marian/demo --model_dir '" + run +
                               "' --format=huggingface --export_dir '" + out + "'");
  ASSERT_EQ(exported.status, 0) << exported.err;
  // The file's tensors, read by the tests' own safetensors reader.
  const auto original =
      garden_test::safetensors::read((kMarian / "model.safetensors").string()).tensors;
  const auto written =
      garden_test::safetensors::read((fs::path(out) / "model.safetensors").string()).tensors;
  EXPECT_EQ(written.size(), original.size());
  for (const auto& [name, tensor] : written) {
    ASSERT_TRUE(original.count(name)) << name;
    EXPECT_EQ(tensor.bytes, original.at(name).bytes) << name;
    EXPECT_EQ(tensor.shape, original.at(name).shape) << name;
  }
  for (const char* file : {"vocab.json", "source.spm", "target.spm"})
    EXPECT_EQ(slurp(fs::path(out) / file), slurp(kMarian / file)) << file;
  const json config = json::parse(std::ifstream(fs::path(out) / "config.json"));
  EXPECT_EQ(config.at("architectures"), json({"MarianMTModel"}));
}

// The last "validation_loss: X" a run printed.
double last_validation_loss(const std::string& log) {
  const auto at = log.rfind("validation_loss: ");
  EXPECT_NE(at, std::string::npos) << log;
  return at == std::string::npos ? 0.0 : std::stod(log.substr(at + 17));
}

TEST_F(ImportCliTest, TheTranslationTaskFineTunesFromTheImportOrTheDirectory) {
  const std::string run = path("opus");
  ASSERT_EQ(garden("import --huggingface_dir '" + kMarian.string() +
                   "' --experiment marian/demo --params_override '" + fixture_override() +
                   "' --model_dir '" + run + "'")
                .status,
            0);
  const std::string sample = std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv";
  const std::string data = fixture_override() + ",task.train_data.input_path=" + sample +
                           ",task.validation_data.input_path=" + sample +
                           ",trainer.train_steps=40,trainer.validation_interval=40,"
                           "trainer.checkpoint_interval=40,"
                           "trainer.optimizer_config.warmup.linear.warmup_steps=5";
  const auto before = garden("train --experiment marian/demo --mode eval --model_dir '" + run +
                             "' --params_override '" + data +
                             ",task.sentencepiece_model_path=" + run + "/tokenizer'");
  ASSERT_EQ(before.status, 0) << before.err;
  // From the import's ckpt-0, and from the Hugging Face directory itself.
  const auto from_import = garden("train --experiment marian/demo --model_dir '" + path("a") +
                                  "' --params_override '" + data + ",task.init_checkpoint=" + run +
                                  ",task.sentencepiece_model_path=" + run + "/tokenizer'");
  ASSERT_EQ(from_import.status, 0) << from_import.err;
  const auto from_directory =
      garden("train --experiment marian/demo --model_dir '" + path("b") + "' --params_override '" +
             data + ",task.init_checkpoint=" + kMarian.string() + "'");
  ASSERT_EQ(from_directory.status, 0) << from_directory.err;
  EXPECT_NE(from_directory.err.find("(MarianMTModel): 66 tensors restored"), std::string::npos)
      << from_directory.err;
  const double loss = last_validation_loss(from_import.err + from_import.out);
  EXPECT_LT(loss, last_validation_loss(before.err + before.out));
  EXPECT_EQ(loss, last_validation_loss(from_directory.err + from_directory.out));
}

TEST_F(ImportCliTest, ErrorsAreOneLineAndLeaveNothing) {
  // A Hugging Face directory of another model is named as such.
  expect_one_error_line(
      garden("import --huggingface_dir '" + (kMarian.parent_path() / "bert").string() +
             "' --experiment marian/demo --params_override '" + fixture_override() +
             "' --model_dir '" + path("d") + "'"),
      {"is a Hugging Face model without MarianMT's tokenizer (vocab.json, source.spm): not a "
       "translation model Garden reads"});
  expect_one_error_line(garden("import --huggingface_dir '" + path("none") +
                               "' --experiment marian/demo --model_dir '" + path("a") + "'"),
                        {"is not a Hugging Face model directory"});
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  // A size the user set that is not the checkpoint's: nothing is written.
  expect_one_error_line(
      garden("import --huggingface_dir '" + kMarian.string() +
             "' --experiment marian/demo --params_override task.model.embedding_width=128 "
             "--model_dir '" +
             path("b") + "'"),
      {"task.model.embedding_width 128 (set by --params_override) differs from " +
       kMarian.string() + "/config.json d_model 32"});
  EXPECT_FALSE(fs::exists(dir_ / "b"));
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".b.tmp-"), std::string::npos);
  // An existing run is never overwritten.
  fs::create_directories(dir_ / "c");
  spit(dir_ / "c" / "keep", "x");
  expect_one_error_line(garden("import --huggingface_dir '" + kMarian.string() +
                               "' --experiment marian/demo --params_override '" +
                               fixture_override() + "' --model_dir '" + path("c") + "'"),
                        {"exists and is not empty"});
  EXPECT_EQ(slurp(dir_ / "c" / "keep"), "x");
}

// A MarianMT directory needs no sizes either: the import without any
// override translates as the fully overridden one (transformers' texts).
TEST_F(ImportCliTest, AMarianDirectoryImportsWithoutItsSizes) {
  const std::string run = path("opus");
  const auto imported = garden("import --huggingface_dir '" + kMarian.string() +
                               "' --experiment marian/demo --params_override "
                               "'task.model.decode_max_length=48,task.model.alpha=0,"
                               "task.model.beam_search=transformers' --model_dir '" +
                               run + "'");
  ASSERT_EQ(imported.status, 0) << imported.err;
  const json expected = json::parse(std::ifstream(kMarian / "expected.json"));
  std::string sources;
  for (const auto& s : expected.at("sources")) sources += s.get<std::string>() + "\n";
  spit(dir_ / "in.txt", sources);
  const auto translated =
      garden("translate --model_dir '" + run + "' --beam_size 4 --input '" + path("in.txt") + "'");
  ASSERT_EQ(translated.status, 0) << translated.err;
  const auto lines = lines_of(translated.out);
  ASSERT_EQ(lines.size(), expected.at("beam4_text").size()) << translated.out;
  for (std::size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(lines[i], expected.at("beam4_text")[i].get<std::string>()) << i;
}

// bert/tagging sized as the ELECTRA fixture by hand: the nine keys issue 76
// copied one after another, the data's lengths, and the tokenizer's keys.
std::string electra_by_hand() {
  const std::string electra = kElectra.string();
  std::string o = "task.class_names=[O,B-X,I-X]";
  const std::string b = ",task.model.encoder.bert.";
  o += b + "vocab_size=40" + b + "embedding_size=16" + b + "hidden_size=32" + b + "num_layers=2" +
       b + "num_attention_heads=4" + b + "intermediate_size=64" + b + "max_position_embeddings=64";
  for (const char* data : {"train_data", "validation_data"})
    o += std::string(",task.") + data + ".seq_length=64,task." + data + ".vocab_file=" + electra +
         "/vocab.txt,task." + data + ".tokenization=WordPiece";
  return o;
}

TEST_F(ImportCliTest, AnElectraDirectoryImportsAsIfItsSizesWereCopiedByHand) {
  const std::string electra = kElectra.string();
  const auto adopted = garden("import --huggingface_dir '" + electra +
                              "' --experiment bert/tagging --params_override "
                              "'task.class_names=[O,B-X,I-X]' --model_dir '" +
                              path("adopted") + "'");
  ASSERT_EQ(adopted.status, 0) << adopted.err;
  EXPECT_NE(adopted.err.find("the experiment's task.train_data.seq_length 128 and "
                             "task.validation_data.seq_length 128 capped at " +
                             electra + "/config.json max_position_embeddings 64"),
            std::string::npos)
      << adopted.err;
  const auto by_hand =
      garden("import --huggingface_dir '" + electra + "' --experiment bert/tagging " +
             "--params_override '" + electra_by_hand() + "' --model_dir '" + path("by_hand") + "'");
  ASSERT_EQ(by_hand.status, 0) << by_hand.err;
  EXPECT_EQ(slurp(dir_ / "adopted" / "params.yaml"), slurp(dir_ / "by_hand" / "params.yaml"));
  const YAML::Node params = YAML::LoadFile(path("adopted/params.yaml"));
  EXPECT_EQ(params["task"]["model"]["encoder"]["bert"]["embedding_size"].as<int>(), 16);
  // Both runs hold the file's encoder: exported back, every encoder tensor
  // is the file's, bit for bit.
  const auto original =
      garden_test::safetensors::read((kElectra / "model.safetensors").string()).tensors;
  for (const char* run : {"adopted", "by_hand"}) {
    const std::string out = path(std::string(run) + "_hf");
    const auto exported = garden("export --experiment bert/tagging --model_dir '" + path(run) +
                                 "' --format=huggingface --export_dir '" + out + "'");
    ASSERT_EQ(exported.status, 0) << exported.err;
    const auto written =
        garden_test::safetensors::read((fs::path(out) / "model.safetensors").string()).tensors;
    std::size_t compared = 0;
    for (const auto& [name, tensor] : written) {
      if (name.rfind("electra.", 0) != 0) continue;
      ASSERT_TRUE(original.count(name)) << name;
      EXPECT_EQ(tensor.bytes, original.at(name).bytes) << run << " " << name;
      ++compared;
    }
    std::size_t encoder_tensors = 0;
    for (const auto& [name, tensor] : original) encoder_tensors += name.rfind("electra.", 0) == 0;
    EXPECT_EQ(compared, encoder_tensors) << run;
  }
}

TEST_F(ImportCliTest, OnlyASizeTheUserSetToAnotherValueIsRefused) {
  const std::string electra = kElectra.string();
  const auto import = [&](const std::string& override, const std::string& run) {
    return garden("import --huggingface_dir '" + electra +
                  "' --experiment bert/tagging --params_override 'task.class_names=[O]," +
                  override + "' --model_dir '" + path(run) + "'");
  };
  expect_one_error_line(import("task.model.encoder.bert.hidden_size=256", "a"),
                        {"task.model.encoder.bert.hidden_size 256 (set by --params_override) "
                         "differs from " +
                         electra + "/config.json hidden_size 32"});
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  const auto equal = import("task.model.encoder.bert.hidden_size=32", "b");
  EXPECT_EQ(equal.status, 0) << equal.err;
  // The user's own sequence length must fit the position table.
  expect_one_error_line(import("task.train_data.seq_length=128", "c"),
                        {"train_data.seq_length: 128 is longer than "
                         "model.encoder.bert.max_position_embeddings 64"});
}

TEST_F(ImportCliTest, ConfigPrintsTheShapesTakenFromInitCheckpoint) {
  const std::string electra = kElectra.string();
  const auto printed = garden(
      "config --experiment bert/tagging --params_override "
      "'task.init_checkpoint=" +
      electra + "'");
  ASSERT_EQ(printed.status, 0) << printed.err;
  const YAML::Node task = YAML::Load(printed.out)["task"];
  const YAML::Node bert = task["model"]["encoder"]["bert"];
  EXPECT_EQ(bert["vocab_size"].as<int>(), 40);
  EXPECT_EQ(bert["hidden_size"].as<int>(), 32);
  EXPECT_EQ(bert["embedding_size"].as<int>(), 16);
  EXPECT_EQ(bert["num_layers"].as<int>(), 2);
  EXPECT_EQ(bert["num_attention_heads"].as<int>(), 4);
  EXPECT_EQ(bert["intermediate_size"].as<int>(), 64);
  EXPECT_EQ(bert["max_position_embeddings"].as<int>(), 64);
  for (const char* data : {"train_data", "validation_data"}) {
    EXPECT_EQ(task[data]["seq_length"].as<int>(), 64) << data;
    EXPECT_EQ(task[data]["vocab_file"].as<std::string>(), electra + "/vocab.txt") << data;
  }
  EXPECT_NE(printed.err.find("capped at " + electra + "/config.json max_position_embeddings 64"),
            std::string::npos)
      << printed.err;
}

TEST_F(ImportCliTest, ATrainingConfigStartingFromADirectoryTakesItsShape) {
  const fs::path classifier = kHf / "bert_classifier";
  // SST-2's layout, in the fixture's 40 pieces, made into records with its
  // vocab.txt.
  fs::create_directories(dir_ / "glue");
  spit(dir_ / "glue" / "train.tsv",
       "sentence\tlabel\nthe cat sat\t1\nthe dog is bad\t0\na good day\t1\nhe was bad\t0\n");
  spit(dir_ / "glue" / "dev.tsv", "sentence\tlabel\nthe cat is good\t1\nthe bad dog\t0\n");
  const auto records = garden(
      "create_finetuning_data --classification_task_name=SST-2 --input_data_dir='" + path("glue") +
      "' --train_data_output_path='" + path("train.tfrecord") + "' --eval_data_output_path='" +
      path("eval.tfrecord") + "' --meta_data_file_path='" + path("meta.json") + "' --vocab_file='" +
      (classifier / "vocab.txt").string() + "' --max_seq_length=16");
  ASSERT_EQ(records.status, 0) << records.err;
  spit(dir_ / "run.yaml", "task:\n  init_checkpoint: " + classifier.string() +
                              "\n  train_data:\n    input_path: " + path("train.tfrecord") +
                              "\n    global_batch_size: 2\n    seq_length: 16\n"
                              "  validation_data:\n    input_path: " +
                              path("eval.tfrecord") +
                              "\n    global_batch_size: 2\n    seq_length: 16\n"
                              "trainer:\n  train_steps: 2\n  steps_per_loop: 1\n"
                              "  summary_interval: 1\n  checkpoint_interval: 2\n"
                              "  validation_interval: 2\n  validation_steps: 1\n");
  const auto trained = garden("train --experiment bert/sentence_prediction --config_file '" +
                              path("run.yaml") + "' --model_dir '" + path("run") + "'");
  ASSERT_EQ(trained.status, 0) << trained.err;
  EXPECT_NE(trained.err.find("(BertForSequenceClassification)"), std::string::npos) << trained.err;
  const YAML::Node task = YAML::LoadFile(path("run/params.yaml"))["task"];
  EXPECT_EQ(task["model"]["num_classes"].as<int>(), 3);  // id2label's
  EXPECT_EQ(task["model"]["encoder"]["bert"]["hidden_size"].as<int>(), 32);
  EXPECT_EQ(task["model"]["encoder"]["bert"]["num_layers"].as<int>(), 2);
  EXPECT_EQ(task["train_data"]["seq_length"].as<int>(), 16);  // the user's
  EXPECT_EQ(task["train_data"]["vocab_file"].as<std::string>(),
            (classifier / "vocab.txt").string());
}

}  // namespace
