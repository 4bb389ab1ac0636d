// TF Serving's gRPC API of `garden serve`, called through stubs generated
// from the served .proto files: Predict gives what REST's :predict gives for
// every exported task, metadata and status as TF Serving reports them, and
// malformed calls get TF Serving's status codes while the server goes on.
#include <gtest/gtest.h>

#if __has_include("tensorflow_serving/apis/prediction_service.grpc.pb.h")

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "garden/base/error.h"
#include "garden/serving/server.h"
#include "serving/serving_fixture.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace {

using namespace serving_fixture;  // NOLINT
namespace tfs = tensorflow::serving;
using tensorflow::TensorProto;

class GrpcTest : public ServingTest {
 protected:
  void start(const std::string& export_dir, const std::string& name) {
    garden::serving::ServerOptions options;
    options.port = 0;
    options.grpc_port = 0;
    options.model_name = name;
    server_ = std::make_unique<garden::serving::ModelServer>(export_dir, options);
    port_ = server_->start();
    runner_ = std::thread([this] { server_->run(); });
    ASSERT_TRUE(server_->wait_until_loaded());
    ASSERT_GT(server_->grpc_port(), 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                       grpc::InsecureChannelCredentials());
    prediction_ = tfs::PredictionService::NewStub(channel);
    models_ = tfs::ModelService::NewStub(channel);
  }
  void TearDown() override {
    if (server_) server_->shutdown(5);
    if (runner_.joinable()) runner_.join();
  }
  // REST's :predict for the same instances, in the row form.
  json rest_predict(const std::string& name, const json& instances) const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(60);
    auto answer = client.Post("/v1/models/" + name + ":predict",
                              json{{"instances", instances}}.dump(), "application/json");
    EXPECT_TRUE(answer);
    if (!answer) return {};
    EXPECT_EQ(answer->status, 200) << answer->body;
    return json::parse(answer->body)["predictions"];
  }
  grpc::Status predict(const tfs::PredictRequest& request, tfs::PredictResponse& response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return prediction_->Predict(&context, request, &response);
  }

  std::unique_ptr<garden::serving::ModelServer> server_;
  std::thread runner_;
  int port_ = 0;
  std::unique_ptr<tfs::PredictionService::Stub> prediction_;
  std::unique_ptr<tfs::ModelService::Stub> models_;
};

TensorProto float_tensor(const std::vector<float>& values, std::vector<int64_t> dims) {
  TensorProto t;
  t.set_dtype(tensorflow::DT_FLOAT);
  for (int64_t d : dims) t.mutable_tensor_shape()->add_dim()->set_size(d);
  for (float v : values) t.add_float_val(v);
  return t;
}

TensorProto string_tensor(const std::vector<std::string>& values) {
  TensorProto t;
  t.set_dtype(tensorflow::DT_STRING);
  t.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(values.size()));
  for (const auto& v : values) t.add_string_val(v);
  return t;
}

TensorProto int32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> dims) {
  TensorProto t;
  t.set_dtype(tensorflow::DT_INT32);
  for (int64_t d : dims) t.mutable_tensor_shape()->add_dim()->set_size(d);
  for (int32_t v : values) t.add_int_val(v);
  return t;
}

// An export version directory's number.
int64_t version_of(const std::string& version_dir) {
  return std::stoll(fs::path(version_dir).filename().string());
}

std::vector<int64_t> dims_of(const TensorProto& t) {
  std::vector<int64_t> dims;
  for (const auto& d : t.tensor_shape().dim()) dims.push_back(d.size());
  return dims;
}

// A REST prediction's value of `output` for every instance, flattened in
// row-major order.
std::vector<json> flatten_rest(const json& predictions, const std::string& output, bool single) {
  std::vector<json> flat;
  std::function<void(const json&)> walk = [&](const json& v) {
    if (v.is_array())
      for (const auto& item : v) walk(item);
    else
      flat.push_back(v);
  };
  for (const auto& row : predictions) walk(single ? row : row.at(output));
  return flat;
}

TEST_F(GrpcTest, IrisPredictEqualsRestForOneAndSeveralInstances) {
  start(iris_export_, "iris");
  const std::vector<std::vector<float>> rows = {
      {5.1f, 3.5f, 1.4f, 0.2f}, {6.7f, 3.0f, 5.2f, 2.3f}, {5.9f, 3.0f, 4.2f, 1.5f}};
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("iris");
  request.mutable_model_spec()->set_signature_name("serving_default");
  json instances = json::array();
  for (std::size_t c = 0; c < kIrisColumns.size(); ++c) {
    std::vector<float> column;
    for (const auto& row : rows) column.push_back(row[c]);
    (*request.mutable_inputs())[kIrisColumns[c]] = float_tensor(column, {3});
  }
  for (const auto& row : rows) {
    json instance;
    for (std::size_t c = 0; c < kIrisColumns.size(); ++c) instance[kIrisColumns[c]] = row[c];
    instances.push_back(instance);
  }
  tfs::PredictResponse response;
  const grpc::Status status = predict(request, response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const json rest = rest_predict("iris", instances);
  ASSERT_EQ(response.outputs().size(), 4u);
  const TensorProto& logits = response.outputs().at("logits");
  EXPECT_EQ(logits.dtype(), tensorflow::DT_FLOAT);
  EXPECT_EQ(dims_of(logits), (std::vector<int64_t>{3, 3}));
  const auto rest_logits = flatten_rest(rest, "logits", false);
  ASSERT_EQ(logits.float_val_size(), 9);
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(logits.float_val(i), rest_logits[static_cast<std::size_t>(i)].get<float>()) << i;
  const TensorProto& probabilities = response.outputs().at("probabilities");
  const auto rest_probabilities = flatten_rest(rest, "probabilities", false);
  ASSERT_EQ(probabilities.float_val_size(), 9);
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(probabilities.float_val(i),
              rest_probabilities[static_cast<std::size_t>(i)].get<float>());
  const TensorProto& ids = response.outputs().at("class_ids");
  EXPECT_EQ(ids.dtype(), tensorflow::DT_INT64);
  EXPECT_EQ(dims_of(ids), (std::vector<int64_t>{3}));
  const TensorProto& classes = response.outputs().at("classes");
  EXPECT_EQ(classes.dtype(), tensorflow::DT_STRING);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ids.int64_val(i), rest[i]["class_ids"].get<int64_t>());
    EXPECT_EQ(classes.string_val(i), rest[i]["classes"].get<std::string>());
  }
  EXPECT_EQ(response.model_spec().name(), "iris");
  EXPECT_EQ(response.model_spec().version().value(), version_of(iris_export_));

  // output_filter answers only the named outputs; a scalar tensor is one
  // instance; tensor_content carries the same values as the typed list.
  tfs::PredictRequest one;
  one.mutable_model_spec()->set_name("iris");
  one.add_output_filter("classes");
  for (std::size_t c = 0; c < kIrisColumns.size(); ++c) {
    TensorProto t;
    t.set_dtype(tensorflow::DT_FLOAT);
    if (c % 2 == 0) {
      t.add_float_val(rows[1][c]);
    } else {
      t.mutable_tensor_shape()->add_dim()->set_size(1);
      t.set_tensor_content(std::string(reinterpret_cast<const char*>(&rows[1][c]), sizeof(float)));
    }
    (*one.mutable_inputs())[kIrisColumns[c]] = t;
  }
  tfs::PredictResponse filtered;
  ASSERT_TRUE(predict(one, filtered).ok());
  ASSERT_EQ(filtered.outputs().size(), 1u);
  EXPECT_EQ(filtered.outputs().at("classes").string_val(0), rest[1]["classes"].get<std::string>());
}

TEST_F(GrpcTest, TranslationPredictEqualsRest) {
  start(translation_export_, "translation");
  const std::vector<std::string> sentences(sources_.begin(), sources_.begin() + 3);
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("translation");
  (*request.mutable_inputs())["inputs"] = string_tensor(sentences);
  tfs::PredictResponse response;
  const grpc::Status status = predict(request, response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const json rest = rest_predict("translation", json(sentences));
  const TensorProto& outputs = response.outputs().at("outputs");
  EXPECT_EQ(outputs.dtype(), tensorflow::DT_STRING);
  ASSERT_EQ(outputs.string_val_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(outputs.string_val(i), rest[i].get<std::string>());
}

TEST_F(GrpcTest, ElectraPredictEqualsRestPerToken) {
  start(electra_export(), "electra");
  const std::vector<int32_t> ids = {2, 7, 9, 3, 5, 2, 11, 12, 13, 3};
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("electra");
  (*request.mutable_inputs())["input_word_ids"] = int32_tensor(ids, {2, 5});
  (*request.mutable_inputs())["input_type_ids"] =
      int32_tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5});
  tfs::PredictResponse response;
  const grpc::Status status = predict(request, response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const json rest = rest_predict(
      "electra",
      json::array({{{"input_word_ids", {2, 7, 9, 3, 5}}, {"input_type_ids", {0, 0, 0, 1, 1}}},
                   {{"input_word_ids", {2, 11, 12, 13, 3}}, {"input_type_ids", {0, 0, 0, 0, 0}}}}));
  const TensorProto& sequence = response.outputs().at("sequence_output");
  EXPECT_EQ(dims_of(sequence), (std::vector<int64_t>{2, 5, 8}));
  const auto rest_sequence = flatten_rest(rest, "sequence_output", false);
  ASSERT_EQ(sequence.float_val_size(), 80);
  for (int i = 0; i < 80; ++i)
    EXPECT_EQ(sequence.float_val(i), rest_sequence[static_cast<std::size_t>(i)].get<float>());
  const TensorProto& probabilities = response.outputs().at("disc_probabilities");
  EXPECT_EQ(dims_of(probabilities), (std::vector<int64_t>{2, 5}));
  const auto rest_probabilities = flatten_rest(rest, "disc_probabilities", false);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(probabilities.float_val(i),
              rest_probabilities[static_cast<std::size_t>(i)].get<float>());
}

TEST_F(GrpcTest, TensorFxPredictEqualsRestForCsvLinesAndSerializedBytes) {
  // A TensorFX job trained and exported by the garden command, as a user does.
  const std::string sample = std::string(GARDEN_SOURCE_DIR) + "/data/fx/iris/";
  const fs::path job = root_ / "fx_job", exported = root_ / "fx_export";
  const std::string train =
      std::string("'") + GARDEN_CLI_PATH +
      "' fx train --model feedforward_classification --output '" + job.string() +
      "' --data-train " + sample + "train.csv --data-eval " + sample + "eval.csv --data-schema " +
      sample + "schema.yaml --data-metadata " + sample + "metadata.json --data-features " + sample +
      "features.yaml --batch-size 5 --max-steps 50 --seed 1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(train.c_str()), 0);
  const std::string export_command = std::string("'") + GARDEN_CLI_PATH + "' export --model_dir '" +
                                     job.string() + "' --export_dir '" + exported.string() +
                                     "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(export_command.c_str()), 0);
  start(exported.string(), "fx");
  std::ifstream eval(sample + "eval.csv");
  std::vector<std::string> lines;
  for (std::string line; lines.size() < 4 && std::getline(eval, line);) lines.push_back(line);
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("fx");
  (*request.mutable_inputs())["inputs"] = string_tensor(lines);
  tfs::PredictResponse response;
  const grpc::Status status = predict(request, response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const json rest = rest_predict("fx", json(lines));
  const TensorProto& labels = response.outputs().at("label");
  const TensorProto& scores = response.outputs().at("scores");
  ASSERT_EQ(labels.string_val_size(), 4);
  const auto rest_scores = flatten_rest(rest, "scores", false);
  ASSERT_EQ(static_cast<std::size_t>(scores.float_val_size()), rest_scores.size());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(labels.string_val(i), rest[i]["label"].get<std::string>());
  for (int i = 0; i < scores.float_val_size(); ++i)
    EXPECT_EQ(scores.float_val(i), rest_scores[static_cast<std::size_t>(i)].get<float>()) << i;
}

TEST_F(GrpcTest, MetadataAndStatusAreTfServings) {
  start(iris_export_, "iris");
  tfs::GetModelMetadataRequest request;
  request.mutable_model_spec()->set_name("iris");
  request.add_metadata_field("signature_def");
  tfs::GetModelMetadataResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(prediction_->GetModelMetadata(&context, request, &response).ok());
  EXPECT_EQ(response.model_spec().version().value(), version_of(iris_export_));
  const auto& any = response.metadata().at("signature_def");
  EXPECT_EQ(any.type_url(), "type.googleapis.com/tensorflow.serving.SignatureDefMap");
  tfs::SignatureDefMap signatures;
  ASSERT_TRUE(any.UnpackTo(&signatures));
  const auto& def = signatures.signature_def().at("serving_default");
  EXPECT_EQ(def.method_name(), "tensorflow/serving/predict");
  ASSERT_EQ(def.inputs().size(), 4u);
  const auto& sepal = def.inputs().at("sepal_length");
  EXPECT_EQ(sepal.dtype(), tensorflow::DT_FLOAT);
  EXPECT_EQ(sepal.name(), "serving_default_sepal_length:0");
  ASSERT_EQ(sepal.tensor_shape().dim_size(), 1);
  EXPECT_EQ(sepal.tensor_shape().dim(0).size(), -1);
  EXPECT_EQ(def.outputs().at("logits").tensor_shape().dim(1).size(), 3);
  EXPECT_EQ(def.outputs().at("classes").dtype(), tensorflow::DT_STRING);

  tfs::GetModelStatusRequest status_request;
  status_request.mutable_model_spec()->set_name("iris");
  tfs::GetModelStatusResponse status_response;
  grpc::ClientContext status_context;
  ASSERT_TRUE(models_->GetModelStatus(&status_context, status_request, &status_response).ok());
  ASSERT_EQ(status_response.model_version_status_size(), 1);
  EXPECT_EQ(status_response.model_version_status(0).version(), version_of(iris_export_));
  EXPECT_EQ(status_response.model_version_status(0).state(), tfs::ModelVersionStatus::AVAILABLE);
  EXPECT_EQ(status_response.model_version_status(0).status().error_code(), 0);
}

TEST_F(GrpcTest, AGrpcPortInUseIsOneErrorNamingIt) {
  start(iris_export_, "iris");
  garden::serving::ServerOptions options;
  options.port = 0;
  options.grpc_port = server_->grpc_port();
  garden::serving::ModelServer second(iris_export_, options);
  try {
    second.start();
    FAIL() << "a second server started on gRPC port " << options.grpc_port;
  } catch (const garden::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "cannot listen on 127.0.0.1:" + std::to_string(options.grpc_port) + " for gRPC"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(GrpcTest, MalformedCallsGetTfServingsCodesAndTheServerGoesOn) {
  start(iris_export_, "iris");
  auto good = [] {
    tfs::PredictRequest r;
    r.mutable_model_spec()->set_name("iris");
    for (const auto& column : kIrisColumns)
      (*r.mutable_inputs())[column] = float_tensor({5.0f}, {1});
    return r;
  };
  struct Case {
    std::string what;
    std::function<void(tfs::PredictRequest&)> spoil;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown model", [](auto& r) { r.mutable_model_spec()->set_name("nope"); },
       grpc::StatusCode::NOT_FOUND, "Servable not found for request: Latest(nope)"},
      {"other version", [](auto& r) { r.mutable_model_spec()->mutable_version()->set_value(7); },
       grpc::StatusCode::NOT_FOUND, "Specific(iris, 7)"},
      {"version label", [](auto& r) { r.mutable_model_spec()->set_version_label("stable"); },
       grpc::StatusCode::NOT_FOUND, "stable"},
      {"unknown signature", [](auto& r) { r.mutable_model_spec()->set_signature_name("classify"); },
       grpc::StatusCode::INVALID_ARGUMENT, "classify"},
      {"unknown input",
       [](auto& r) { (*r.mutable_inputs())["petal_colour"] = float_tensor({1.0f}, {1}); },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown input 'petal_colour'"},
      {"missing input", [](auto& r) { r.mutable_inputs()->erase("petal_width"); },
       grpc::StatusCode::INVALID_ARGUMENT, "petal_width"},
      {"values and shape disagree",
       [](auto& r) {
         (*r.mutable_inputs())["sepal_width"] = float_tensor({1.0f, 2.0f}, {3});
       },
       grpc::StatusCode::INVALID_ARGUMENT, "the shape holds 3 values but the tensor has 2"},
      {"batch sizes differ",
       [](auto& r) {
         (*r.mutable_inputs())["sepal_width"] = float_tensor({1.0f, 2.0f}, {2});
       },
       grpc::StatusCode::INVALID_ARGUMENT, "differ in their first (batch) dimension"},
      {"unsupported dtype",
       [](auto& r) {
         TensorProto t;
         t.set_dtype(tensorflow::DT_COMPLEX64);
         t.mutable_tensor_shape()->add_dim()->set_size(1);
         t.add_scomplex_val(1);
         t.add_scomplex_val(0);
         (*r.mutable_inputs())["sepal_width"] = t;
       },
       grpc::StatusCode::INVALID_ARGUMENT, "dtype DT_COMPLEX64 is not supported"},
      {"ragged tensor_content",
       [](auto& r) {
         TensorProto t;
         t.set_dtype(tensorflow::DT_FLOAT);
         t.mutable_tensor_shape()->add_dim()->set_size(1);
         t.set_tensor_content("abc");
         (*r.mutable_inputs())["sepal_width"] = t;
       },
       grpc::StatusCode::INVALID_ARGUMENT, "not a whole number of 4-byte values"},
      {"a string for a number",
       [](auto& r) { (*r.mutable_inputs())["sepal_width"] = string_tensor({"wide"}); },
       grpc::StatusCode::INVALID_ARGUMENT, "sepal_width"},
      {"unknown output_filter", [](auto& r) { r.add_output_filter("colour"); },
       grpc::StatusCode::INVALID_ARGUMENT, "output_filter names 'colour'"},
      {"no inputs", [](auto& r) { r.mutable_inputs()->clear(); },
       grpc::StatusCode::INVALID_ARGUMENT, "no instance"},
  };
  for (const auto& c : cases) {
    tfs::PredictRequest request = good();
    c.spoil(request);
    tfs::PredictResponse response;
    const grpc::Status status = predict(request, response);
    EXPECT_EQ(status.error_code(), c.code) << c.what << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message), std::string::npos)
        << c.what << ": " << status.error_message();
  }
  // Metadata needs its field, and only signature_def is known.
  for (const std::vector<std::string>& fields :
       {std::vector<std::string>{}, std::vector<std::string>{"signature_def", "graph_def"}}) {
    tfs::GetModelMetadataRequest request;
    request.mutable_model_spec()->set_name("iris");
    for (const auto& f : fields) request.add_metadata_field(f);
    tfs::GetModelMetadataResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(prediction_->GetModelMetadata(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  tfs::GetModelStatusRequest status_request;
  status_request.mutable_model_spec()->set_name("nope");
  tfs::GetModelStatusResponse status_response;
  grpc::ClientContext status_context;
  EXPECT_EQ(models_->GetModelStatus(&status_context, status_request, &status_response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Still serving, and /metrics counted the calls by code.
  tfs::PredictResponse response;
  EXPECT_TRUE(predict(good(), response).ok());
  httplib::Client client("127.0.0.1", port_);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(
      metrics->body.find("garden_serving_grpc_responses_total{method=\"Predict\",code=\"3\"} "),
      std::string::npos)
      << metrics->body;
}

}  // namespace

#endif
