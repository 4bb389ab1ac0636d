// TF Serving's REST routes: status, metadata, predict, metrics.
#include "server_state.h"

#include <c10/util/Exception.h>

#include <exception>
#include <utility>
#include <vector>

#include "garden/base/error.h"

namespace garden::serving {

namespace {

void check_model_name(const ModelServer::State& s, const std::string& name) {
  if (name != s.options.model_name)
    throw HttpError(404, "Servable not found for request: Latest(" + name + ")");
}

json status_body(const ModelServer::State& s, const std::string& name) {
  check_model_name(s, name);
  using Load = ModelVersions::Load;
  const ModelVersions::Status status = s.versions.status();
  const char* state = status.load == Load::kAvailable ? "AVAILABLE"
                      : status.load == Load::kFailed  ? "END"
                                                      : "LOADING";
  return {{"model_version_status",
           {{{"version", std::to_string(status.version)},
             {"state", state},
             {"status",
              {{"error_code", status.load == Load::kFailed ? "UNKNOWN" : "OK"},
               {"error_message", status.load == Load::kFailed ? status.error : ""}}}}}}};
}

json metadata_body(const ModelServer::State& s, const std::string& name) {
  check_model_name(s, name);
  const auto model = s.versions.available();
  return json{{"model_spec",
               {{"name", s.options.model_name},
                {"signature_name", ""},
                {"version", std::to_string(model->version())}}},
              {"metadata", {{"signature_def", model->signature_def()}}}};
}

json predict_body(ModelServer::State& s, const std::string& name, const std::string& version,
                  const std::string& body, int socket) {
  if (s.gate.draining()) throw HttpError(503, "the server is shutting down");
  check_model_name(s, name);
  const auto model = s.versions.available();
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
  const std::vector<json> results = s.batching.predict(*model, std::move(instances), socket);
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

// Runs `make_body`, answering its JSON, or {"error": ...} with a status.
template <class F>
void answer(ModelServer::State& s, httplib::Response& response, F&& make_body) {
  const auto start = Clock::now();
  const InFlight request(s.gate);
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
  } catch (const c10::Error& e) {
    // LibTorch's message without its C++ stack trace.
    status = 500;
    body = {{"error", e.what_without_backtrace()}};
  } catch (const std::exception& e) {
    status = 500;
    body = {{"error", e.what()}};
  }
  response.status = status;
  // Loading, shutting down or a full queue pass: a client may try again.
  if (status == 503) response.set_header("Retry-After", "1");
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                       "application/json");
  s.metrics.record(status, start);
}

}  // namespace

void add_rest_routes(ModelServer::State& s) {
  // Regular expressions. cpp-httplib 0.14 and later read a pattern holding
  // "/:" as one with path parameters ("/users/:id"), so the model name's
  // class is written [^:/], never [^/:].
  s.http.Get("/v1/models/([^:/]+)",
             [&s](const httplib::Request& request, httplib::Response& response) {
               answer(s, response, [&] { return status_body(s, request.matches[1]); });
             });
  s.http.Get("/v1/models/([^:/]+)/metadata",
             [&s](const httplib::Request& request, httplib::Response& response) {
               answer(s, response, [&] { return metadata_body(s, request.matches[1]); });
             });
  // The body is read here, whatever its Content-Type: `curl -d` sends
  // application/x-www-form-urlencoded, whose bodies cpp-httplib would
  // otherwise cap at 8 KB (a compiled-in limit) before --max_body_bytes.
  s.http.Post("/v1/models/([^:/]+)(?:/versions/([0-9]+))?:predict",
              [&s](const httplib::Request& request, httplib::Response& response,
                   const httplib::ContentReader& read) {
                std::string body;
                const bool whole = read([&body](const char* data, std::size_t length) {
                  body.append(data, length);
                  return true;
                });
                if (!whole) {
                  // Over the limit (413, set by the reader) or cut short;
                  // the error handler answers it as JSON.
                  if (response.status < 400) response.status = 400;
                  return;
                }
                answer(s, response, [&] {
                  // Only a request that waits in the batching queue may
                  // outlive its client.
                  return predict_body(s, request.matches[1], request.matches[2], body,
                                      s.options.enable_batching ? client_socket(request) : -1);
                });
              });
  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& response) {
    const auto model = s.versions.current();
    response.set_content(s.metrics.text(model ? model->version() : 0), "text/plain; version=0.0.4");
  });
  // Anything else that fails (no route: 404; a body over the limit: 413)
  // still answers JSON.
  s.http.set_error_handler([&s](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    std::string message = "no such route";
    if (response.status == 413)
      message = "the request body is larger than the limit";
    else if (response.status != 404)
      message = "HTTP status " + std::to_string(response.status);
    response.set_content(json{{"error", message}}.dump(), "application/json");
    s.metrics.count(response.status);
  });
}

}  // namespace garden::serving
