// `garden import`: the MarianMT fixture (tests/data/hf/marian, saved by
// transformers) becomes a run directory that `garden translate` reads and
// translates as transformers did, and that `garden export
// --format=huggingface` writes back with the file's tensors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

const fs::path kMarian = fs::path(GARDEN_SOURCE_DIR) / "tests" / "data" / "hf" / "marian";

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
  // A config that does not fit the checkpoint: nothing is written.
  expect_one_error_line(garden("import --huggingface_dir '" + kMarian.string() +
                               "' --experiment marian/demo --model_dir '" + path("b") + "'"),
                        {"config.json: d_model 32 differs from task.model.embedding_width 128"});
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

}  // namespace
