// The server's Prometheus metrics (GET /metrics): responses by HTTP status,
// latency and batch-size histograms, instances predicted, requests abandoned
// or refused, gRPC calls by method and code. Private to serving.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "server_request.h"

namespace garden::serving {

// A cumulative histogram in Prometheus's form.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double value);
  void write(std::ostringstream& out, const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
  mutable std::mutex mutex_;
};

class ServingMetrics {
 public:
  // A REST answer of `status` to a request that came at `start`.
  void record(int status, Clock::time_point start);
  // A REST answer no route made (no such route, a body over the limit):
  // counted, not timed.
  void count(int status);
  // A gRPC call's answer: its method and status code.
  void record_grpc(const char* method, int code, Clock::time_point start);
  // `instances` in one forward pass.
  void observe_batch(std::size_t instances) {
    batch_sizes_.observe(static_cast<double>(instances));
  }
  void add_instances(std::size_t instances) { instances_ += instances; }
  void add_abandoned() { ++abandoned_; }  // a request not computed: its client went away
  void add_rejected() { ++rejected_; }    // a request refused: the batching queue was full

  // Prometheus's text format; `model_version` is the one being served (0:
  // none yet).
  std::string text(int64_t model_version) const;

 private:
  mutable std::mutex responses_mutex_;
  std::map<int, uint64_t> responses_;  // status -> count
  Histogram latency_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram batch_sizes_{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
  std::atomic<uint64_t> instances_{0};
  std::atomic<uint64_t> abandoned_{0};
  std::atomic<uint64_t> rejected_{0};
  mutable std::mutex grpc_mutex_;
  std::map<std::pair<std::string, int>, uint64_t> grpc_responses_;  // (method, code) -> count
};

}  // namespace garden::serving
