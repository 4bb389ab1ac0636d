// ModelServer's state: the units that have state of their own (the model
// versions, the batching queue, the metrics, the requests in flight) and the
// two front ends over them, REST (server_routes.cpp, on cpp-httplib) and gRPC
// (server_grpc.cpp). Private to serving.
#pragma once

#include "garden/serving/server.h"

#include <httplib.h>

#include <memory>
#include <string>
#include <utility>

#include "server_batching.h"
#include "server_metrics.h"
#include "server_request.h"
#include "server_versions.h"

namespace garden::serving {

// TF Serving's gRPC services (PredictionService, ModelService) over the
// server's units.
class GrpcFrontEnd {
 public:
  // Serves gRPC on options.grpc_port. Throws naming the address when it
  // cannot listen, or when the build has no gRPC.
  explicit GrpcFrontEnd(ModelServer::State& state);
  ~GrpcFrontEnd();
  GrpcFrontEnd(const GrpcFrontEnd&) = delete;
  GrpcFrontEnd& operator=(const GrpcFrontEnd&) = delete;

  int port() const { return port_; }
  void stop();  // cancels the calls left

 private:
  struct Services;
  std::unique_ptr<Services> services_;
  int port_ = -1;
};

struct ModelServer::State {
  State(std::string export_dir, ServerOptions server_options)
      : options(std::move(server_options)),
        versions(std::move(export_dir), options, gate),
        batching(options, versions, metrics) {}

  ServerOptions options;
  RequestGate gate;
  ServingMetrics metrics;
  ModelVersions versions;
  BatchingQueue batching;

  // The front ends.
  httplib::Server http;
  int port = 0;
  std::unique_ptr<GrpcFrontEnd> grpc;  // null without --grpc_port
  int grpc_port = -1;
};

// TF Serving's REST routes on `state.http`: status, metadata, predict,
// metrics.
void add_rest_routes(ModelServer::State& state);

}  // namespace garden::serving
