// ModelServer's state and the units that work on it (server_versions.cpp,
// server_batching.cpp, server_metrics.cpp, server_routes.cpp): private to
// serving.
#pragma once

#include "garden/serving/server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"

namespace garden::serving {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// An answer other than 200, with its status.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

// The socket of the connection `request` came on (-1 when not found): the
// one whose peer is the request's remote address and port. Lets a request ask
// whether its client is still connected before its model runs.
int client_socket(const httplib::Request& request);

// True when the client at `socket` has closed or reset its connection
// (end of stream or an error pending, nothing left to read): its answer would
// go nowhere. A client that sent another request on the same connection
// (pipelining) is still there.
bool client_gone(int socket);

constexpr int kMaxJsonDepth = 64;

// A cumulative histogram in Prometheus's form.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double value) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += value;
    ++count_;
  }
  void write(std::ostringstream& out, const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      out << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
    }
    out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n"
        << name << "_sum " << sum_ << "\n"
        << name << "_count " << count_ << "\n";
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
  mutable std::mutex mutex_;
};

struct ModelServer::State {
  std::string export_dir;
  ServerOptions options;
  httplib::Server http;
  int port = 0;

  // The serving version; replaced whole when a newer one loads.
  mutable std::mutex model_mutex;
  std::shared_ptr<const Predictor> predictor;
  enum class Load { kLoading, kAvailable, kFailed } load = Load::kLoading;
  std::string load_error;
  mutable std::condition_variable loaded;

  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};
  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool stopping = false;

  // Dynamic batching.
  struct Job {
    std::vector<json> instances;
    std::promise<std::vector<json>> result;
    int socket = -1;  // the client's connection; -1 where none is known
  };
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Job>> queue;
  std::size_t queued_instances = 0;  // in `queue`, bounded by max_enqueued_batches batches
  bool queue_closed = false;

  // Metrics.
  std::mutex counts_mutex;
  std::map<int, uint64_t> responses;  // status -> count
  Histogram latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram batch_sizes{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
  std::atomic<uint64_t> instances_total{0};
  std::atomic<uint64_t> abandoned_total{0};  // requests not computed: their client went away
  std::atomic<uint64_t> rejected_total{0};   // requests refused: the batching queue was full

  std::mutex grpc_counts_mutex;
  std::map<std::pair<std::string, int>, uint64_t> grpc_responses;  // (method, code) -> count

  std::thread loader, poller, batcher;

  // gRPC (server_grpc.cpp): the services and their server.
  struct Grpc;
  std::shared_ptr<Grpc> grpc_;
  int grpc_port = -1;
  // Starts serving gRPC on options.grpc_port; returns the port. Throws
  // naming the address when it cannot listen, or when the build has no gRPC.
  int start_grpc();
  void stop_grpc();  // cancels what is left; after the grace period
  void record_grpc(const char* method, int code, Clock::time_point start);

  std::shared_ptr<const Predictor> current() const;

  void set_predictor(std::shared_ptr<const Predictor> next);

  void fail_load(const std::string& message);

  // Sleeps up to `seconds` unless the server stops; false when it stops.
  bool sleep_unless_stopped(double seconds);

  // A version as the options say: on their device, int8 when asked.
  std::shared_ptr<const Predictor> load_version(const std::string& dir) const;

  void poll_versions();

  // Runs jobs on the serving predictor, merged up to max_batch_size.
  void run_batches();

  // The queue's first job, with queued_instances kept; queue_mutex held.
  std::shared_ptr<Job> take_front();

  void run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, std::size_t total);

  void run_one(const Predictor& model, Job& job);

  // The model's outputs for `instances`, through the batching queue when
  // batching; not computed when the client at `socket` (-1: none known) has
  // gone.
  std::vector<json> predict(const Predictor& model, std::vector<json> instances, int socket);

  // ---- routes
  std::shared_ptr<const Predictor> serving_model(const std::string& name);

  json status_body(const std::string& name);

  json predict_body(const std::string& name, const std::string& version, const std::string& body,
                    int socket);

  std::string metrics_text();

  void record(int status, Clock::time_point start);

  // Runs `make_body`, answering its JSON, or {"error": ...} with a status.
  template <class F>
  void answer(httplib::Response& response, F&& make_body);

  void add_routes();
};

}  // namespace garden::serving
