// `garden export`, `garden predict` and `garden serve` as a user runs them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_fixture.h"
#include "garden/kernels/int8.h"
#include "garden/serving/server.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliFixture;
using garden_test::CliRun;
using garden_test::expect_one_error_line;
using garden_test::slurp;
using garden_test::spit;
using json = nlohmann::json;

using garden_test::lines_of;

class ServingCliTest : public CliFixture {
 protected:
  // An iris run and a tiny translation run for the suite, trained by the CLI.
  static void SetUpTestSuite() {
    suite_ = fs::path(::testing::TempDir()) / ("garden_serving_cli_" + std::to_string(::getpid()));
    fs::remove_all(suite_);
    fs::create_directories(suite_);
    std::ifstream sample(std::string(GARDEN_SOURCE_DIR) + "/data/testdata/en_de_sample.tsv");
    std::ofstream pairs(suite_ / "pairs.tsv");
    std::string line;
    for (int i = 0; i < 12 && std::getline(sample, line); ++i) {
      pairs << line << '\n';
      sources_.push_back(line.substr(0, line.find('\t')));
    }
    pairs.close();
    const std::string data = (suite_ / "pairs.tsv").string();
    const std::string cli = std::string("'") + GARDEN_CLI_PATH + "' ";
    const std::string iris =
        cli + "train --experiment tabular/iris --mode train --model_dir '" +
        (suite_ / "iris").string() +
        "' --params_override trainer.train_steps=60,trainer.steps_per_loop=30,"
        "trainer.summary_interval=30,trainer.checkpoint_interval=30,runtime.seed=1";
    const std::string translation =
        cli + "train --experiment wmt_transformer/demo --mode train --model_dir '" +
        (suite_ / "translation").string() +
        "' --params_override task.sentencepiece_vocab_size=100,task.model.embedding_width=32,"
        "task.model.encoder.num_layers=1,task.model.decoder.num_layers=1,"
        "task.model.beam_size=2,task.train_data.input_path=" +
        data + ",task.validation_data.input_path=" + data +
        ",task.train_data.global_batch_size=256,trainer.train_steps=20,trainer.steps_per_loop=10,"
        "trainer.summary_interval=10,trainer.checkpoint_interval=10";
    const std::string log = " >>'" + (suite_ / "train.log").string() + "' 2>&1";
    train_status_ = std::system((iris + log).c_str());
    if (train_status_ == 0) train_status_ = std::system((translation + log).c_str());
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(suite_, ignored);
  }
  void SetUp() override {
    CliFixture::SetUp();
    ASSERT_EQ(train_status_, 0) << slurp(suite_ / "train.log");
  }
  static std::string run(const std::string& name) { return (suite_ / name).string(); }
  void expect_predict_translates_as_translate(const std::string& flags);

  static fs::path suite_;
  static int train_status_;
  static std::vector<std::string> sources_;
};

fs::path ServingCliTest::suite_;
int ServingCliTest::train_status_ = -1;
std::vector<std::string> ServingCliTest::sources_;

TEST_F(ServingCliTest, ExportThenPredictJsonLinesWithBlankLinesKept) {
  const CliRun exported = garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                                 "' --export_dir '" + path("out") + "'");
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_NE(exported.out.find("export:     " + path("out") + "/"), std::string::npos)
      << exported.out;
  EXPECT_NE(exported.out.find("(step 60)"), std::string::npos) << exported.out;
  spit(
      dir_ / "in.jsonl",
      "{\"sepal_length\": 5.1, \"sepal_width\": 3.5, \"petal_length\": 1.4, \"petal_width\": 0.2}\n"
      "\n"
      "[7.7, 3.0, 6.1, 2.3]\n");
  const CliRun predicted = garden("predict --export_dir '" + path("out") + "' --input '" +
                                  path("in.jsonl") + "' --output '" + path("out.jsonl") + "'");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  const auto lines = lines_of(slurp(dir_ / "out.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "");
  const json first = json::parse(lines[0]), third = json::parse(lines[2]);
  EXPECT_EQ(first.at("probabilities").size(), 3u);
  EXPECT_TRUE(first.at("classes").is_string());
  EXPECT_EQ(first.at("classes"), "setosa");
  EXPECT_NE(predicted.err.find("predicted 2 instances (3 lines)"), std::string::npos)
      << predicted.err;
  // Standard input, standard output: the same answers.
  const CliRun piped =
      garden("predict --export_dir '" + path("out") + "' <'" + path("in.jsonl") + "'");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out, slurp(dir_ / "out.jsonl"));
}

TEST_F(ServingCliTest, ABadLineIsOneErrorNamingItAndWritesNothing) {
  ASSERT_EQ(garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                   "' --export_dir '" + path("out") + "'")
                .status,
            0);
  spit(dir_ / "in.jsonl", "[1, 2, 3, 4]\n{\"sepal_length\": 1}\n");
  expect_one_error_line(garden("predict --export_dir '" + path("out") + "' --input '" +
                               path("in.jsonl") + "' --output '" + path("o.jsonl") + "'"),
                        {"--input line 2", "has no input"});
  EXPECT_FALSE(fs::exists(dir_ / "o.jsonl"));
  // Images for an export that takes no image; a model_dir that is not one.
  spit(dir_ / "x.png", "\x89PNG");
  expect_one_error_line(
      garden("predict --export_dir '" + path("out") + "' --images '" + path("x.png") + "'"),
      {"--images: the export at '" + path("out") +
       "' takes sepal_length, sepal_width, petal_length, petal_width, not an encoded image"});
  expect_one_error_line(
      garden("export --model_dir '" + path("typo") + "' --export_dir '" + path("e") + "'"),
      {"--model_dir '" + path("typo") + "' does not exist"});
  spit(dir_ / "in.jsonl", "[1, 2, 3, 4]\n[1, 2, 3, 4]\n{\"colour\": 1}\n");
  expect_one_error_line(
      garden("predict --export_dir '" + path("out") + "' --input '" + path("in.jsonl") + "'"),
      {"--input line 3: has an unknown input 'colour'"});
  spit(dir_ / "in.jsonl", "[1, 2, 3, 4]\nnot json\n");
  expect_one_error_line(
      garden("predict --export_dir '" + path("out") + "' --input '" + path("in.jsonl") + "'"),
      {"garden: error: --input line 2 is not JSON"});
  // Not UTF-8 (here Latin-1) is refused whatever the model reads.
  spit(dir_ / "in.jsonl", "[1, 2, 3, 4]\n{\"caf\xe9\": 1}\n");
  expect_one_error_line(
      garden("predict --export_dir '" + path("out") + "' --input '" + path("in.jsonl") + "'"),
      {"--input line 2: invalid UTF-8 byte 0xE9 at offset 5"});
  expect_one_error_line(garden("predict --export_dir '" + path("none") + "'"),
                        {"export '" + path("none") + "' does not exist"});
  expect_one_error_line(garden("export --experiment wmt_transformer/demo --model_dir '" +
                               run("iris") + "' --export_dir '" + path("x") + "'"),
                        {"params.yaml", "wmt_transformer/demo"});
  expect_one_error_line(garden("export --experiment tabular/iris --model_dir '" + path("none") +
                               "' --export_dir '" + path("x") + "'"),
                        {"has no params.yaml"});
  // --format: an unknown one, and a task with no Hugging Face architecture.
  expect_one_error_line(garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                               "' --export_dir '" + path("x") + "' --format=onnx"),
                        {"--format 'onnx' is not one of garden, huggingface"});
  expect_one_error_line(garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                               "' --export_dir '" + path("x") + "' --format=huggingface"),
                        {"--format=huggingface: task", "has no Hugging Face architecture"});
  EXPECT_FALSE(fs::exists(dir_ / "x"));
}

// Exports the translation run, then translates six lines with garden
// translate and garden predict, both with `flags`: the same translations.
void ServingCliTest::expect_predict_translates_as_translate(const std::string& flags) {
  ASSERT_EQ(garden("export --experiment wmt_transformer/demo --model_dir '" + run("translation") +
                   "' --export_dir '" + path("out") + "'")
                .status,
            0);
  std::string text;
  for (int i = 0; i < 6; ++i) text += sources_[i] + "\n";
  spit(dir_ / "in.txt", text);
  const CliRun translated = garden("translate " + flags + " --model_dir '" + run("translation") +
                                   "' --input '" + path("in.txt") + "'");
  ASSERT_EQ(translated.status, 0) << translated.err;
  if (flags.find("--int8") != std::string::npos) {
    EXPECT_NE(translated.err.find(", int8 (" + garden::kernels::int8_kernel() + "),"),
              std::string::npos)
        << translated.err;
  }
  const CliRun predicted = garden("predict " + flags + " --export_dir '" + path("out") +
                                  "' --input '" + path("in.txt") + "'");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  const auto expected = lines_of(translated.out);
  const auto got = lines_of(predicted.out);
  ASSERT_EQ(got.size(), 6u);
  ASSERT_EQ(expected.size(), 6u);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(json::parse(got[i]).at("outputs").get<std::string>(), expected[i]) << sources_[i];
}

TEST_F(ServingCliTest, PredictOnTextLinesTranslatesAsGardenTranslateDoes) {
  expect_predict_translates_as_translate("");
  // A line meant as an object that does not parse is refused, not translated
  // as text; plain text that merely holds braces is still text.
  spit(dir_ / "broken.jsonl", sources_[0] + "\n {\"inputs\": \"Open file\"\n");
  expect_one_error_line(
      garden("predict --export_dir '" + path("out") + "' --input '" + path("broken.jsonl") + "'"),
      {"garden: error: --input line 2 is not JSON"});
  spit(dir_ / "braces.txt", "Open {file}\n");
  const CliRun run =
      garden("predict --export_dir '" + path("out") + "' --input '" + path("braces.txt") + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(lines_of(run.out).size(), 1u);
}

// --int8 is the same decoding through garden predict as through garden
// translate; a task without int8 inference refuses it in one line.
TEST_F(ServingCliTest, Int8PredictTranslatesAsInt8TranslateAndIrisRefusesIt) {
  expect_predict_translates_as_translate("--int8");

  ASSERT_EQ(garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                   "' --export_dir '" + path("iris") + "'")
                .status,
            0);
  spit(dir_ / "rows.txt", "[5.1, 3.5, 1.4, 0.2]\n");
  expect_one_error_line(garden("predict --int8 --export_dir '" + path("iris") + "' --input '" +
                               path("rows.txt") + "'"),
                        {"--int8", "has no int8 inference"});
}

TEST_F(ServingCliTest, ServeAnswersThenStopsCleanlyOnSigterm) {
  ASSERT_EQ(garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                   "' --export_dir '" + path("out") + "'")
                .status,
            0);
  const std::string err = path("serve.err");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (std::freopen(err.c_str(), "w", stderr) == nullptr ||
        std::freopen("/dev/null", "w", stdout) == nullptr)
      _exit(126);
    const std::string dir = path("out");
    execl(GARDEN_CLI_PATH, GARDEN_CLI_PATH, "serve", "--export_dir", dir.c_str(), "--port", "0",
          "--grpc_port", "0", "--model_name", "iris", static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (port == 0 && std::chrono::steady_clock::now() < deadline) {
    const std::string text = slurp(err);
    const auto at = text.find("http://127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(text.c_str() + at + 17);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << slurp(err);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(30);
  int status_code = 0;
  std::string body;
  for (int i = 0; i < 200 && status_code != 200; ++i) {
    auto answer = client.Post("/v1/models/iris:predict", "{\"instances\": [[5.1, 3.5, 1.4, 0.2]]}",
                              "application/json");
    if (answer) {
      status_code = answer->status;
      body = answer->body;
    }
    if (status_code != 200)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // 503 while loading
  }
  EXPECT_EQ(status_code, 200) << body;
  if (status_code == 200) {
    EXPECT_EQ(json::parse(body)["predictions"][0]["classes"], "setosa");
  }
  // TF Serving's gRPC API beside it, called by Python's grpcio as the
  // tensorflow-serving-api examples call it (tests/serving/grpc_client.py).
  if (garden::serving::grpc_compiled_in()) {
    const std::string text = slurp(err);
    const auto at = text.find(" and gRPC 127.0.0.1:");
    ASSERT_NE(at, std::string::npos) << text;
    const int grpc_port = std::atoi(text.c_str() + at + 20);
    ASSERT_GT(grpc_port, 0) << text;
    const CliRun client = run_command("/usr/bin/python3 '" + std::string(GARDEN_SOURCE_DIR) +
                                      "/tests/serving/grpc_client.py' " + std::to_string(port) +
                                      " " + std::to_string(grpc_port));
    EXPECT_EQ(client.status, 0) << client.out << client.err;
    EXPECT_NE(client.out.find("grpc_client.py: ok"), std::string::npos) << client.out << client.err;
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(err);
  EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("SIGTERM: finishing the requests in flight"), std::string::npos);
  EXPECT_NE(slurp(err).find("server stopped"), std::string::npos);
}

TEST_F(ServingCliTest, ATensorFxJobExportsAndPredictsAsGardenFxPredictDoes) {
  const std::string sample = std::string(GARDEN_SOURCE_DIR) + "/data/fx/iris/";
  const CliRun trained = garden(
      "fx train --model feedforward_classification --output '" + path("job") + "' --data-train " +
      sample + "train.csv --data-eval " + sample + "eval.csv --data-schema " + sample +
      "schema.yaml --data-metadata " + sample + "metadata.json --data-features " + sample +
      "features.yaml --batch-size 5 --max-steps 200 --hidden-layers:1 10 --seed 1");
  ASSERT_EQ(trained.status, 0) << trained.err;
  const CliRun exported =
      garden("export --model_dir '" + path("job") + "' --export_dir '" + path("out") + "'");
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_EQ(exported.out.find("(step"), std::string::npos) << exported.out;
  const auto eval = lines_of(slurp(sample + "eval.csv"));
  std::string csv, jsonl;
  for (int i = 0; i < 5; ++i) {
    csv += eval[i] + "\n";
    jsonl += json(eval[i]).dump() + "\n";
  }
  // The last line again, as TF Serving's {"b64": ...} (how tf.Examples travel).
  jsonl += "{\"b64\": \"" + garden_test::base64(eval[4]) + "\"}\n";
  spit(dir_ / "in.csv", csv);
  spit(dir_ / "in.jsonl", jsonl);
  const CliRun reference =
      garden("fx predict --model '" + path("job") + "/model' --input '" + path("in.csv") + "'");
  ASSERT_EQ(reference.status, 0) << reference.err;
  const CliRun predicted =
      garden("predict --export_dir '" + path("out") + "' --input '" + path("in.jsonl") + "'");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  const auto expected = lines_of(reference.out);
  const auto got = lines_of(predicted.out);
  ASSERT_EQ(expected.size(), 5u);
  ASSERT_EQ(got.size(), 6u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const json want = json::parse(expected[std::min<std::size_t>(i, 4)]);
    const json have = json::parse(got[i]);
    EXPECT_EQ(have.at("label"), want.at("label")) << i;
    ASSERT_EQ(have.at("scores").size(), want.at("scores").size());
    for (std::size_t c = 0; c < have.at("scores").size(); ++c)  // fx predict prints 5 decimals
      EXPECT_NEAR(have["scores"][c].get<double>(), want["scores"][c].get<double>(), 5.1e-6);
  }
  spit(dir_ / "bad.jsonl", "\"5.0,3.6,1.4,0.2\"\n\"5.0,abc,1.4,0.2\"\n");
  expect_one_error_line(
      garden("predict --export_dir '" + path("out") + "' --input '" + path("bad.jsonl") + "'"),
      {"--input line 2"});
}

// A run directory knows its experiment: params.yaml records it, export
// takes it when --experiment is left out, and refuses another in one line.
TEST_F(ServingCliTest, ExportReadsTheExperimentFromTheRunsParamsYaml) {
  const std::string params = slurp(fs::path(run("iris")) / "params.yaml");
  EXPECT_EQ(lines_of(params).at(1), "# experiment: tabular/iris") << params;
  const CliRun exported =
      garden("export --model_dir '" + run("iris") + "' --export_dir '" + path("out") + "'");
  ASSERT_EQ(exported.status, 0) << exported.err;
  const fs::path version = *fs::directory_iterator(dir_ / "out");
  EXPECT_EQ(json::parse(slurp(version / "signature.json")).at("experiment"), "tabular/iris");
  EXPECT_EQ(lines_of(slurp(version / "params.yaml")).at(1), "# experiment: tabular/iris");
  // The same export as with the flag: the same answers.
  spit(dir_ / "in.jsonl", "[5.1, 3.5, 1.4, 0.2]\n[7.7, 3.0, 6.1, 2.3]\n");
  const CliRun predicted =
      garden("predict --export_dir '" + path("out") + "' --input '" + path("in.jsonl") + "'");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  ASSERT_EQ(garden("export --experiment tabular/iris --model_dir '" + run("iris") +
                   "' --export_dir '" + path("flagged") + "'")
                .status,
            0);
  EXPECT_EQ(
      garden("predict --export_dir '" + path("flagged") + "' --input '" + path("in.jsonl") + "'")
          .out,
      predicted.out);

  expect_one_error_line(
      garden("export --experiment wmt_transformer/demo --model_dir '" + run("iris") +
             "' --export_dir '" + path("other") + "'"),
      {"--experiment 'wmt_transformer/demo' differs from 'tabular/iris', the experiment " +
       run("iris") + "/params.yaml records"});
  // A params.yaml that records none (edited by hand: its two comment lines
  // deleted) needs the flag.
  fs::create_directories(dir_ / "copy");
  for (const auto& entry : fs::directory_iterator(run("iris")))
    if (entry.is_regular_file())
      fs::copy_file(entry.path(), dir_ / "copy" / entry.path().filename());
  spit(dir_ / "copy" / "params.yaml", params.substr(params.find('\n', params.find('\n') + 1) + 1));
  expect_one_error_line(
      garden("export --model_dir '" + path("copy") + "' --export_dir '" + path("other") + "'"),
      {"--experiment is needed: " + path("copy") + "/params.yaml does not record its experiment"});
  ASSERT_EQ(garden("export --experiment tabular/iris --model_dir '" + path("copy") +
                   "' --export_dir '" + path("other") + "'")
                .status,
            0);
  // predict's output may not be any of the export's files.
  for (const auto& entry : fs::recursive_directory_iterator(version)) {
    if (!entry.is_regular_file()) continue;
    const std::string before = slurp(entry.path());
    expect_one_error_line(
        garden("predict --export_dir '" + path("out") + "' --input '" + path("in.jsonl") +
               "' --output '" + entry.path().string() + "'"),
        {"--output '" + entry.path().string() + "' is the same file as --export_dir's file"});
    EXPECT_EQ(slurp(entry.path()), before) << entry.path();
  }
}

TEST_F(ServingCliTest, AnExportThatDoesNotLoadIsOneErrorLine) {
  std::filesystem::create_directories(dir_ / "bad" / "7");
  spit(dir_ / "bad" / "7" / "signature.json", "{\"experiment\": \"tabular/iris\"}");
  expect_one_error_line(garden("serve --export_dir '" + path("bad") + "' --port 0"),
                        {"params.yaml"});
  expect_one_error_line(garden("serve --export_dir '" + path("none") + "' --port 0"),
                        {"--export_dir '" + path("none") + "' is not a directory"});
}

}  // namespace
