// The Prometheus metrics (/monitoring/prometheus/metrics).
#include "server_metrics.h"

namespace garden::serving {

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::write(std::ostringstream& out, const std::string& name) const {
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

std::string ServingMetrics::text(int64_t model_version) const {
  std::ostringstream out;
  out << "# HELP garden_serving_responses_total Responses by HTTP status.\n"
      << "# TYPE garden_serving_responses_total counter\n";
  {
    std::lock_guard<std::mutex> lock(responses_mutex_);
    for (const auto& [status, count] : responses_)
      out << "garden_serving_responses_total{code=\"" << status << "\"} " << count << "\n";
  }
  out << "# HELP garden_serving_request_latency_seconds Time from request to response.\n"
      << "# TYPE garden_serving_request_latency_seconds histogram\n";
  latency_.write(out, "garden_serving_request_latency_seconds");
  out << "# HELP garden_serving_batch_size Instances in each forward pass.\n"
      << "# TYPE garden_serving_batch_size histogram\n";
  batch_sizes_.write(out, "garden_serving_batch_size");
  out << "# HELP garden_serving_instances_total Instances predicted.\n"
      << "# TYPE garden_serving_instances_total counter\n"
      << "garden_serving_instances_total " << instances_.load() << "\n"
      << "# HELP garden_serving_abandoned_total Requests not computed: their client had gone.\n"
      << "# TYPE garden_serving_abandoned_total counter\n"
      << "garden_serving_abandoned_total " << abandoned_.load() << "\n"
      << "# HELP garden_serving_rejected_total Requests refused with 503: the batching queue was "
         "full.\n"
      << "# TYPE garden_serving_rejected_total counter\n"
      << "garden_serving_rejected_total " << rejected_.load() << "\n";
  {
    std::lock_guard<std::mutex> lock(grpc_mutex_);
    if (!grpc_responses_.empty())
      out << "# HELP garden_serving_grpc_responses_total gRPC calls by method and status code.\n"
          << "# TYPE garden_serving_grpc_responses_total counter\n";
    for (const auto& [key, count] : grpc_responses_)
      out << "garden_serving_grpc_responses_total{method=\"" << key.first << "\",code=\""
          << key.second << "\"} " << count << "\n";
  }
  out << "# HELP garden_serving_model_version The version being served (0: none yet).\n"
      << "# TYPE garden_serving_model_version gauge\n"
      << "garden_serving_model_version " << model_version << "\n";
  return out.str();
}

void ServingMetrics::record(int status, Clock::time_point start) {
  latency_.observe(std::chrono::duration<double>(Clock::now() - start).count());
  count(status);
}

void ServingMetrics::count(int status) {
  std::lock_guard<std::mutex> lock(responses_mutex_);
  ++responses_[status];
}

void ServingMetrics::record_grpc(const char* method, int code, Clock::time_point start) {
  latency_.observe(std::chrono::duration<double>(Clock::now() - start).count());
  std::lock_guard<std::mutex> lock(grpc_mutex_);
  ++grpc_responses_[{method, code}];
}

}  // namespace garden::serving
