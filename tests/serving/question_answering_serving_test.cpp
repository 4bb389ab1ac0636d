// Question answering served from raw text: tiny SQuAD v1.1 and v2.0 runs on
// generated "which fruit?" paragraphs (longer than one window), exported,
// then asked the evaluation's own questions through the Predictor, REST
// (with batching), gRPC and `garden predict`: every answer is the one the
// evaluation wrote to predictions.json, placed at its characters in the
// context; v2.0 answers nothing by the null-score rule; bad instances are
// refused with one line.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/nlp/data/squad_data.h"
#include "garden/nlp/tasks/question_answering_config.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "garden/serving/server.h"
#include "nlp/squad_fixture.h"
#include "test_util.h"

#if __has_include("tensorflow_serving/apis/prediction_service.grpc.pb.h")
#include <grpcpp/grpcpp.h>

#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"
#define GARDEN_QA_TEST_GRPC 1
#endif

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Windows of 16 tokens: "which fruit?" is 3 pieces, leaving 10 for the
// paragraph, whose 10 to 17 words then take two or three windows 4 apart.
constexpr const char* kQaWindows =
    "task.model.encoder.bert.vocab_size=30,task.model.encoder.bert.hidden_size=32,"
    "task.model.encoder.bert.num_layers=2,task.model.encoder.bert.num_attention_heads=2,"
    "task.model.encoder.bert.intermediate_size=64,"
    "task.model.encoder.bert.max_position_embeddings=16,"
    "task.train_data.seq_length=16,task.validation_data.seq_length=16,"
    "task.validation_data.query_length=4,task.validation_data.doc_stride=4,"
    "task.train_data.global_batch_size=16,task.validation_data.global_batch_size=16,"
    "trainer.train_steps=200,trainer.steps_per_loop=200,trainer.summary_interval=200,"
    "trainer.checkpoint_interval=200,trainer.validation_interval=200,trainer.validation_steps=-1,"
    "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=0.003,"
    "trainer.optimizer_config.learning_rate.polynomial.decay_steps=200,"
    "trainer.optimizer_config.warmup.polynomial.warmup_steps=10,"
    "runtime.distribution_strategy=one_device,runtime.seed=5";

// A run trained and evaluated once for the suite, then exported.
struct QaRun {
  std::string export_dir;
  json dev;                                        // the evaluation's SQuAD JSON
  std::map<std::string, std::string> predictions;  // its predictions.json
};

class QuestionAnsweringServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    garden::register_builtins();
    garden::set_quiet(true);
    dir_ = fs::path(::testing::TempDir()) / ("garden_qa_serving_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    vocab_ = garden_test::write_text_file(dir_ / "vocab.txt", squad_fixture::squad_vocab_text());
    v1_ = train_and_export("v1", 0);
    v2_ = train_and_export("v2", 4);  // every fourth question has no fruit
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
    garden::set_quiet(false);
  }

  static QaRun train_and_export(const std::string& name, int no_fruit_every) {
    const fs::path root = dir_ / name;
    fs::create_directories(root);
    QaRun run;
    run.dev = squad_fixture::fruit_questions(40, 2, no_fruit_every);
    const std::string train = garden_test::write_text_file(
        root / "train.json", squad_fixture::fruit_questions(300, 1, no_fruit_every).dump());
    const std::string dev = garden_test::write_text_file(root / "dev.json", run.dev.dump());
    const bool v2 = no_fruit_every > 0;
    garden::nlp::FinetuningDataOptions o;
    o.fine_tuning_task_type = "squad";
    o.squad_data_file = train;
    o.train_data_output_path = (root / "train.tfrecord").string();
    o.meta_data_file_path = (root / "meta.json").string();
    o.vocab_file = vocab_;
    o.version_2_with_negative = v2;
    o.max_seq_length = 16;
    o.max_query_length = 4;
    o.doc_stride = 4;
    garden::nlp::create_finetuning_data(o);
    auto experiment = garden::config::get_experiment_config("bert/squad");
    garden::config::apply_override(*experiment, kQaWindows);
    auto& task = static_cast<garden::nlp::QuestionAnsweringConfig&>(*experiment->task);
    task.train_data.input_path = o.train_data_output_path;
    task.validation_data.input_path = dev;
    task.train_data.vocab_file = vocab_;
    task.train_data.version_2_with_negative = task.validation_data.version_2_with_negative = v2;
    garden::config::validate_config(*experiment);
    garden::finalize_config(*experiment);
    garden::RunOptions options;
    options.model_dir = (root / "run").string();
    options.mode = "train_and_eval";
    garden::run_experiment(experiment, options);
    run.predictions = json::parse(std::ifstream(root / "run" / "predictions.json"))
                          .get<std::map<std::string, std::string>>();
    garden::serving::ExportOptions export_options;
    export_options.experiment = "bert/squad";
    export_options.model_dir = options.model_dir;
    export_options.export_dir = (root / "export").string();
    run.export_dir = garden::serving::export_model(export_options).directory;
    // Serving needs the export alone: not the run, its vocab_file or its data.
    fs::remove_all(root / "run");
    return run;
  }

  // The dev set's questions as served instances, with their ids and first
  // ground truths ("" for v2.0's unanswerable ones).
  struct Asked {
    std::vector<json> instances;
    std::vector<std::string> ids, truths;
  };
  static Asked asked(const QaRun& run) {
    Asked out;
    for (const auto& article : run.dev.at("data")) {
      const auto& paragraph = article.at("paragraphs")[0];
      const auto& qa = paragraph.at("qas")[0];
      out.instances.push_back(
          {{"question", qa.at("question")}, {"context", paragraph.at("context")}});
      out.ids.push_back(qa.at("id"));
      out.truths.push_back(qa.at("answers").empty() ? "" : qa.at("answers")[0].at("text"));
    }
    return out;
  }

  // Characters [start, end) of `text`.
  static std::string characters(const std::string& text, int64_t start, int64_t end) {
    std::string out;
    const auto chars = garden::unicode::decode_utf8(text);
    for (int64_t i = start; i < end && i < static_cast<int64_t>(chars.size()); ++i)
      garden::unicode::append_utf8(chars[static_cast<std::size_t>(i)], out);
    return out;
  }

  inline static fs::path dir_;
  inline static std::string vocab_;
  inline static QaRun v1_, v2_;
};

TEST_F(QuestionAnsweringServingTest, AnExportAnswersEachQuestionAsPredictionsJsonDoes) {
  EXPECT_TRUE(fs::is_regular_file(fs::path(v1_.export_dir) / "assets" / "vocab.txt"));
  garden::serving::Predictor predictor(v1_.export_dir);
  const auto& signature = predictor.signature();
  ASSERT_EQ(signature.inputs.size(), 2u);
  EXPECT_EQ(signature.inputs[0].first, "question");
  EXPECT_EQ(signature.inputs[1].first, "context");
  ASSERT_EQ(signature.outputs.size(), 4u);
  EXPECT_EQ(signature.outputs[0].first, "answer");
  EXPECT_EQ(signature.outputs[3].first, "score");

  const Asked dev = asked(v1_);
  ASSERT_EQ(v1_.predictions.size(), dev.instances.size());
  // All 40 questions in one call: their windows go through the model
  // together and come back to their own question.
  const auto rows = predictor.predict(dev.instances);
  ASSERT_EQ(rows.size(), dev.instances.size());
  int right = 0, past_the_first_window = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string answer = rows[i].at("answer");
    EXPECT_EQ(answer, v1_.predictions.at(dev.ids[i])) << dev.instances[i];
    const std::string context = dev.instances[i].at("context");
    EXPECT_EQ(
        characters(context, rows[i].at("start").get<int64_t>(), rows[i].at("end").get<int64_t>()),
        answer);
    EXPECT_GT(rows[i].at("score").get<double>(), 0.0);
    EXPECT_LE(rows[i].at("score").get<double>(), 1.0);
    right += answer == dev.truths[i];
    // The first window holds the paragraph's first 10 words: a fruit after
    // them is found only by merging the later windows.
    const std::string before = context.substr(0, context.find(dev.truths[i]));
    const auto words_before = std::count(before.begin(), before.end(), ' ');
    if (words_before >= 10 && answer == dev.truths[i]) ++past_the_first_window;
  }
  EXPECT_GE(right, 36) << "the tiny model did not learn to answer";
  EXPECT_GE(past_the_first_window, 1);
  // One at a time, the same answers.
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(predictor.predict({dev.instances[i]})[0].at("answer"), rows[i].at("answer"));
}

TEST_F(QuestionAnsweringServingTest, AVersion2ModelAnswersNothingByTheNullScoreRule) {
  garden::serving::Predictor predictor(v2_.export_dir);
  const Asked dev = asked(v2_);
  const auto rows = predictor.predict(dev.instances);
  ASSERT_EQ(rows.size(), dev.instances.size());
  int nothing = 0, nothing_right = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string answer = rows[i].at("answer");
    EXPECT_EQ(answer, v2_.predictions.at(dev.ids[i])) << dev.instances[i];
    if (!answer.empty()) {
      EXPECT_EQ(characters(dev.instances[i].at("context").get<std::string>(),
                           rows[i].at("start").get<int64_t>(), rows[i].at("end").get<int64_t>()),
                answer);
      continue;
    }
    ++nothing;
    nothing_right += dev.truths[i].empty();
    EXPECT_EQ(rows[i].at("start"), 0);
    EXPECT_EQ(rows[i].at("end"), 0);
  }
  // 10 of the 40 paragraphs have no fruit.
  EXPECT_GE(nothing_right, 8) << "the v2.0 model did not learn to answer nothing";
  EXPECT_LE(nothing, 12);
  // A v1.1 model always answers a span.
  garden::serving::Predictor v1(v1_.export_dir);
  for (const auto& row : v1.predict(dev.instances)) EXPECT_NE(row.at("answer"), "");
}

TEST_F(QuestionAnsweringServingTest, BadInstancesAreRefusedInOneLine) {
  garden::serving::Predictor predictor(v1_.export_dir);
  const json good = {{"question", "which fruit?"}, {"context", "the cat sat on a fig"}};
  const auto refused = [&](const json& bad) {
    try {
      predictor.predict({good, bad});
    } catch (const garden::InputError& e) {
      return std::string(e.what());
    }
    return std::string("(not refused)");
  };
  EXPECT_EQ(refused({{"context", "a fig"}}), "instance 1 has no input 'question'");
  EXPECT_EQ(refused({{"question", "which?"}}), "instance 1 has no input 'context'");
  EXPECT_EQ(refused({{"question", "which?"}, {"context", 5}}),
            "instance 1: input 'context' must be a string, not number");
  EXPECT_EQ(refused({{"question", {"which"}}, {"context", "a fig"}}),
            "instance 1: input 'question' must be a string, not array");
  EXPECT_EQ(refused({{"question", "which?"}, {"context", " \t "}}),
            "instance 1: input 'context' is empty");
  EXPECT_EQ(refused({{"question", "which?"}, {"context", "a fig"}, {"answer", "fig"}}),
            "instance 1 has an unknown input 'answer'");
  EXPECT_EQ(refused("which fruit?"),
            "instance 1 is a string; with several inputs an instance is an object of them or a "
            "list");
  // The list form, in signature order: question, then context.
  EXPECT_EQ(predictor.predict({json{"which fruit?", "the cat sat on a fig"}})[0],
            predictor.predict({good})[0]);
}

TEST_F(QuestionAnsweringServingTest, RestAndGrpcWithBatchingAnswerAsThePredictorDoes) {
  garden::serving::ServerOptions options;
  options.port = 0;
  options.grpc_port = 0;
#ifndef GARDEN_QA_TEST_GRPC
  options.grpc_port = -1;
#endif
  options.model_name = "qa";
  options.enable_batching = true;
  options.max_batch_size = 8;
  options.batch_timeout_micros = 300'000;
  garden::serving::ModelServer server(v1_.export_dir, options);
  const int port = server.start();
  std::thread runner([&] { server.run(); });
  ASSERT_TRUE(server.wait_until_loaded());
  garden::serving::Predictor predictor(v1_.export_dir);
  const Asked dev = asked(v1_);

  // Four clients at once, two questions each: merged into passes of up to
  // 8 instances (their windows, more rows), each client gets its own.
  constexpr int kClients = 4;
  std::vector<json> got(kClients);
  std::vector<int> status(kClients, 0);
  std::atomic<int> waiting{kClients};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(60);
      --waiting;
      while (waiting > 0) std::this_thread::yield();
      const json body = {
          {"instances", json::array({dev.instances[2 * c], dev.instances[2 * c + 1]})}};
      auto answer = client.Post("/v1/models/qa:predict", body.dump(), "application/json");
      if (!answer) return;
      status[c] = answer->status;
      got[c] = json::parse(answer->body);
    });
  for (auto& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) {
    ASSERT_EQ(status[c], 200) << got[c];
    for (int k = 0; k < 2; ++k) {
      const std::size_t i = 2 * c + k;
      const json& row = got[c]["predictions"][k];
      EXPECT_EQ(row.at("answer"), v1_.predictions.at(dev.ids[i]));
      const json alone = predictor.predict({dev.instances[i]})[0];
      EXPECT_EQ(row.at("start"), alone.at("start"));
      EXPECT_EQ(row.at("end"), alone.at("end"));
      EXPECT_NEAR(row.at("score").get<double>(), alone.at("score").get<double>(), 1e-4);
    }
  }
  // A bad instance: 400, one line naming it.
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60);
  auto bad =
      client.Post("/v1/models/qa:predict",
                  json{{"instances", {{{"question", "which fruit?"}}}}}.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body).at("error"), "instance 0 has no input 'context'");

#ifdef GARDEN_QA_TEST_GRPC
  namespace tfs = tensorflow::serving;
  ASSERT_GT(server.grpc_port(), 0);
  auto stub = tfs::PredictionService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server.grpc_port()), grpc::InsecureChannelCredentials()));
  const auto strings = [](const std::vector<std::string>& values) {
    tensorflow::TensorProto t;
    t.set_dtype(tensorflow::DT_STRING);
    t.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(values.size()));
    for (const auto& v : values) t.add_string_val(v);
    return t;
  };
  std::vector<std::string> questions, contexts;
  for (std::size_t i = 10; i < 16; ++i) {
    questions.push_back(dev.instances[i].at("question"));
    contexts.push_back(dev.instances[i].at("context"));
  }
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("qa");
  (*request.mutable_inputs())["question"] = strings(questions);
  (*request.mutable_inputs())["context"] = strings(contexts);
  tfs::PredictResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status = stub->Predict(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const auto& outputs = response.outputs();
  ASSERT_EQ(outputs.at("answer").string_val_size(), 6);
  for (int k = 0; k < 6; ++k) {
    const std::size_t i = 10 + static_cast<std::size_t>(k);
    EXPECT_EQ(outputs.at("answer").string_val(k), v1_.predictions.at(dev.ids[i]));
    const json alone = predictor.predict({dev.instances[i]})[0];
    EXPECT_EQ(outputs.at("start").int64_val(k), alone.at("start").get<int64_t>());
    EXPECT_EQ(outputs.at("end").int64_val(k), alone.at("end").get<int64_t>());
    EXPECT_NEAR(outputs.at("score").float_val(k), alone.at("score").get<double>(), 1e-4);
  }
  // A context given as numbers: INVALID_ARGUMENT, one line naming it.
  tensorflow::TensorProto numbers;
  numbers.set_dtype(tensorflow::DT_FLOAT);
  numbers.mutable_tensor_shape()->add_dim()->set_size(1);
  numbers.add_float_val(1.5f);
  (*request.mutable_inputs())["question"] = strings({"which fruit?"});
  (*request.mutable_inputs())["context"] = numbers;
  grpc::ClientContext context;
  const grpc::Status refusal = stub->Predict(&context, request, &response);
  EXPECT_EQ(refusal.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refusal.error_message(), "instance 0: input 'context' must be a string, not number");
#endif
  server.shutdown(5);
  runner.join();
}

TEST_F(QuestionAnsweringServingTest, GardenPredictAnswersJsonLinesAsThePredictorDoes) {
  cli_run::TempDir scratch;
  garden::serving::Predictor predictor(v1_.export_dir);
  const Asked dev = asked(v1_);
  std::string lines;
  for (std::size_t i = 0; i < 5; ++i) lines += dev.instances[i].dump() + "\n";
  cli_run::write_file(scratch / "in.jsonl", lines);
  const auto result = cli_run::run_garden(
      {"predict", "--export_dir=" + v1_.export_dir, "--input=" + (scratch / "in.jsonl").string()},
      scratch.path());
  ASSERT_EQ(result.status, 0) << result;
  const auto out = garden_test::lines_of(result.out);
  ASSERT_EQ(out.size(), 5u) << result;
  for (std::size_t i = 0; i < 5; ++i) {
    const json row = json::parse(out[i]);
    EXPECT_EQ(row.at("answer"), v1_.predictions.at(dev.ids[i]));
    const json alone = predictor.predict({dev.instances[i]})[0];
    EXPECT_EQ(row.at("start"), alone.at("start"));
    EXPECT_EQ(row.at("end"), alone.at("end"));
  }
  // A bad line: one error line naming it, nothing on stdout.
  cli_run::write_file(
      scratch / "bad.jsonl",
      lines.substr(0, lines.find('\n') + 1) + "{\"question\": \"which fruit?\", \"context\": 7}\n");
  cli_run::expect_one_line_error(
      cli_run::run_garden({"predict", "--export_dir=" + v1_.export_dir,
                           "--input=" + (scratch / "bad.jsonl").string()},
                          scratch.path()),
      {"--input line 2: input 'context' must be a string, not number"});
}

}  // namespace
