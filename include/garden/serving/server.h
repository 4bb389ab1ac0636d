// `garden serve`: TF Serving's REST API over an export directory, on
// cpp-httplib (Debian's libcpp-httplib: a maintained, thread-pooled HTTP/1.1
// server with keep-alive and body limits, and a client for the tests), and
// its gRPC API (PredictionService/Predict and GetModelMetadata,
// ModelService/GetModelStatus) on Debian's gRPC, from the same model and
// batching queue.
//
//   GET  /v1/models/NAME                   status and version
//   GET  /v1/models/NAME/metadata          the signature
//   POST /v1/models/NAME[/versions/V]:predict
//        {"instances": [...]} -> {"predictions": [...]}   (row format)
//        {"inputs": {...}}    -> {"outputs": {...}}       (columnar format)
//   GET  /metrics                          Prometheus text
//
// Errors are {"error": "..."}: 400 for malformed JSON or wrong inputs, 404
// for an unknown model, route or version, 413 for a body over the limit, 503
// with Retry-After while loading, shutting down or when the batching queue is
// full. With batching, concurrent requests are merged into one forward pass
// of up to max_batch_size instances, waiting at most batch_timeout_micros
// after the first, with at most max_enqueued_batches batches waiting (TF
// Serving's names). A request whose client has closed its connection is not
// computed. Answers are sent without Nagle's delay (TCP_NODELAY), so a
// kept-alive connection is answered as fast as a fresh one. A newer version
// in the export directory is loaded beside the serving one and swapped in;
// requests in flight finish on the old one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace garden::serving {

// A :predict request's body, parsed: one JSON value per instance, from the
// row form {"instances": [...]} (rows) or the columnar {"inputs": ...}.
// `input_names` are the signature's inputs: a model with one input also
// takes {"inputs": [...]}, the list of its values.
// Throws InputError (HTTP 400) naming what is wrong: malformed JSON (or
// nested deeper than 64), not an object, an unknown signature_name, neither
// or both forms, columns of different lengths, no instance. Instances are
// checked against the signature later (Predictor::normalize_instance).
struct PredictRequest {
  std::vector<nlohmann::json> instances;
  bool rows = true;  // answer {"predictions"} (true) or {"outputs"}
};
PredictRequest parse_predict_request(const std::string& body,
                                     const std::vector<std::string>& input_names);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8501;  // 0: any free port (see ModelServer::port)
  // TF Serving's gRPC API on this port (0: any free one; -1: none). `garden
  // serve` defaults to TF Serving's 8500 where the build has gRPC.
  int grpc_port = -1;
  std::string model_name = "default";
  std::string device = "cpu";
  bool int8 = false;  // int8 inference (Predictor::use_int8), every version
  bool enable_batching = false;
  int64_t max_batch_size = 32;
  int64_t batch_timeout_micros = 2000;
  int64_t max_enqueued_batches = 10;  // batches of max_batch_size waiting; more get 503
  int64_t max_body_bytes = 16 << 20;
  double file_system_poll_wait_seconds = 1.0;  // 0: never look for new versions
  int threads = 64;                            // connections served at once
  int read_timeout_seconds = 10;  // a client that sends less than it announced is dropped
};

class ModelServer {
 public:
  ModelServer(std::string export_dir, ServerOptions options);
  ~ModelServer();
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  // Binds the sockets (throws naming host and port), then loads the export
  // in the background: requests get 503 (gRPC: UNAVAILABLE) until it is
  // loaded. Returns the REST port (the one chosen when options.port is 0).
  int start();
  int port() const;
  int grpc_port() const;  // -1 without gRPC
  // Serves until shutdown(); rethrows a failure to load the first version.
  void run();
  // Graceful: new requests get 503, requests in flight finish (up to
  // `grace_seconds`), then run() returns. Safe from any thread.
  void shutdown(double grace_seconds = 30.0);
  // Blocks until the first version is loaded or failed; true when loaded.
  bool wait_until_loaded() const;

  struct State;  // private to the serving layer

 private:
  std::unique_ptr<State> state_;
};

// Whether this build serves gRPC (it found libgrpc++ when configured).
bool grpc_compiled_in();

}  // namespace garden::serving
