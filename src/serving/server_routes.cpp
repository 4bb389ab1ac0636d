// TF Serving's REST routes: status, metadata, predict, metrics.
#include "server_state.h"

namespace garden::serving {

std::shared_ptr<const Predictor> ModelServer::State::serving_model(const std::string& name) {
  if (name != options.model_name)
    throw HttpError(404, "Servable not found for request: Latest(" + name + ")");
  std::lock_guard<std::mutex> lock(model_mutex);
  if (load == Load::kFailed) throw HttpError(503, "the model failed to load: " + load_error);
  if (!predictor) throw HttpError(503, "the model is loading");
  return predictor;
}

json ModelServer::State::status_body(const std::string& name) {
  if (name != options.model_name)
    throw HttpError(404, "Servable not found for request: Latest(" + name + ")");
  std::lock_guard<std::mutex> lock(model_mutex);
  const char* state = load == Load::kAvailable ? "AVAILABLE"
                      : load == Load::kFailed  ? "END"
                                               : "LOADING";
  return {{"model_version_status",
           {{{"version", predictor ? std::to_string(predictor->version()) : std::string("0")},
             {"state", state},
             {"status",
              {{"error_code", load == Load::kFailed ? "UNKNOWN" : "OK"},
               {"error_message", load == Load::kFailed ? load_error : ""}}}}}}};
}

json ModelServer::State::predict_body(const std::string& name, const std::string& version,
                                      const std::string& body, int socket) {
  if (draining) throw HttpError(503, "the server is shutting down");
  const auto model = serving_model(name);
  if (!version.empty() && version != std::to_string(model->version()))
    throw HttpError(404, "Servable not found for request: Specific(" + name + ", " + version +
                             "); serving version " + std::to_string(model->version()));
  std::vector<std::string> input_names;
  for (const auto& input : model->signature().inputs) input_names.push_back(input.first);
  const auto& outputs = model->signature().outputs;
  PredictRequest request = parse_predict_request(body, input_names);
  const bool rows = request.rows;
  std::vector<json> instances = std::move(request.instances);
  for (std::size_t i = 0; i < instances.size(); ++i)
    instances[i] = model->normalize_instance(instances[i], i);
  const std::vector<json> results = predict(*model, std::move(instances), socket);
  if (rows) {
    json predictions = json::array();
    for (const auto& row : results)
      predictions.push_back(outputs.size() == 1 ? row.at(outputs[0].first) : row);
    return {{"predictions", std::move(predictions)}};
  }
  if (outputs.size() == 1) {
    json values = json::array();
    for (const auto& row : results) values.push_back(row.at(outputs[0].first));
    return {{"outputs", std::move(values)}};
  }
  json columns_out = json::object();
  for (const auto& output : outputs) {
    json values = json::array();
    for (const auto& row : results) values.push_back(row.at(output.first));
    columns_out[output.first] = std::move(values);
  }
  return {{"outputs", std::move(columns_out)}};
}

template <class F>
void ModelServer::State::answer(httplib::Response& response, F&& make_body) {
  const auto start = Clock::now();
  ++in_flight;
  int status = 200;
  json body;
  try {
    body = make_body();
  } catch (const HttpError& e) {
    status = e.status;
    body = {{"error", e.what()}};
  } catch (const InputError& e) {
    status = 400;
    body = {{"error", e.what()}};
  } catch (const std::exception& e) {
    status = 500;
    body = {{"error", e.what()}};
  }
  response.status = status;
  // Loading, shutting down or a full queue pass: a client may try again.
  if (status == 503) response.set_header("Retry-After", "1");
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                       "application/json");
  record(status, start);
  if (--in_flight == 0) {
    std::lock_guard<std::mutex> lock(stop_mutex);  // no lost wake-up for shutdown()
    stop_cv.notify_all();
  }
}

void ModelServer::State::add_routes() {
  // Regular expressions. cpp-httplib 0.14 and later read a pattern holding
  // "/:" as one with path parameters ("/users/:id"), so the model name's
  // class is written [^:/], never [^/:].
  http.Get("/v1/models/([^:/]+)",
           [this](const httplib::Request& request, httplib::Response& response) {
             answer(response, [&] { return status_body(request.matches[1]); });
           });
  http.Get("/v1/models/([^:/]+)/metadata",
           [this](const httplib::Request& request, httplib::Response& response) {
             answer(response, [&] {
               const auto model = serving_model(request.matches[1]);
               return json{{"model_spec",
                            {{"name", options.model_name},
                             {"signature_name", ""},
                             {"version", std::to_string(model->version())}}},
                           {"metadata", {{"signature_def", model->signature_def()}}}};
             });
           });
  http.Post("/v1/models/([^:/]+)(?:/versions/([0-9]+))?:predict",
            [this](const httplib::Request& request, httplib::Response& response) {
              answer(response, [&] {
                // Only a request that waits in the batching queue may
                // outlive its client.
                return predict_body(request.matches[1], request.matches[2], request.body,
                                    options.enable_batching ? client_socket(request) : -1);
              });
            });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  // Anything else that fails (no route: 404; a body over the limit: 413)
  // still answers JSON.
  http.set_error_handler([this](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    std::string message = "no such route";
    if (response.status == 413)
      message = "the request body is larger than the limit";
    else if (response.status != 404)
      message = "HTTP status " + std::to_string(response.status);
    response.set_content(json{{"error", message}}.dump(), "application/json");
    std::lock_guard<std::mutex> lock(counts_mutex);
    ++responses[response.status];
  });
}

}  // namespace garden::serving
