// The Prometheus metrics (/monitoring/prometheus/metrics).
#include "server_state.h"

namespace garden::serving {

std::string ModelServer::State::metrics_text() {
  std::ostringstream out;
  out << "# HELP garden_serving_responses_total Responses by HTTP status.\n"
      << "# TYPE garden_serving_responses_total counter\n";
  {
    std::lock_guard<std::mutex> lock(counts_mutex);
    for (const auto& [status, count] : responses)
      out << "garden_serving_responses_total{code=\"" << status << "\"} " << count << "\n";
  }
  out << "# HELP garden_serving_request_latency_seconds Time from request to response.\n"
      << "# TYPE garden_serving_request_latency_seconds histogram\n";
  latency.write(out, "garden_serving_request_latency_seconds");
  out << "# HELP garden_serving_batch_size Instances in each forward pass.\n"
      << "# TYPE garden_serving_batch_size histogram\n";
  batch_sizes.write(out, "garden_serving_batch_size");
  out << "# HELP garden_serving_instances_total Instances predicted.\n"
      << "# TYPE garden_serving_instances_total counter\n"
      << "garden_serving_instances_total " << instances_total.load() << "\n"
      << "# HELP garden_serving_abandoned_total Requests not computed: their client had gone.\n"
      << "# TYPE garden_serving_abandoned_total counter\n"
      << "garden_serving_abandoned_total " << abandoned_total.load() << "\n"
      << "# HELP garden_serving_rejected_total Requests refused with 503: the batching queue was "
         "full.\n"
      << "# TYPE garden_serving_rejected_total counter\n"
      << "garden_serving_rejected_total " << rejected_total.load() << "\n";
  {
    std::lock_guard<std::mutex> lock(grpc_counts_mutex);
    if (!grpc_responses.empty())
      out << "# HELP garden_serving_grpc_responses_total gRPC calls by method and status code.\n"
          << "# TYPE garden_serving_grpc_responses_total counter\n";
    for (const auto& [key, count] : grpc_responses)
      out << "garden_serving_grpc_responses_total{method=\"" << key.first << "\",code=\""
          << key.second << "\"} " << count << "\n";
  }
  const auto model = current();
  out << "# HELP garden_serving_model_version The version being served (0: none yet).\n"
      << "# TYPE garden_serving_model_version gauge\n"
      << "garden_serving_model_version " << (model ? model->version() : 0) << "\n";
  return out.str();
}

void ModelServer::State::record(int status, Clock::time_point start) {
  latency.observe(std::chrono::duration<double>(Clock::now() - start).count());
  std::lock_guard<std::mutex> lock(counts_mutex);
  ++responses[status];
}

void ModelServer::State::record_grpc(const char* method, int code, Clock::time_point start) {
  latency.observe(std::chrono::duration<double>(Clock::now() - start).count());
  std::lock_guard<std::mutex> lock(grpc_counts_mutex);
  ++grpc_responses[{method, code}];
}

}  // namespace garden::serving
