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

namespace {

// An answer other than 200, with its status.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

constexpr int kMaxJsonDepth = 64;

}  // namespace

PredictRequest parse_predict_request(const std::string& body,
                                     const std::vector<std::string>& input_names) {
  json request;
  try {
    request = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw InputError("the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw InputError(std::string("malformed JSON body: ") + e.what());
  }
  if (!request.is_object()) throw InputError("the request body must be a JSON object");
  if (request.contains("signature_name")) {
    const json& signature = request.at("signature_name");
    if (!signature.is_string() || (signature.get<std::string>() != "serving_default" &&
                                   !signature.get<std::string>().empty()))
      throw InputError("unknown signature_name " +
                       signature.dump(-1, ' ', false, json::error_handler_t::replace) +
                       "; this model has serving_default");
  }
  PredictRequest parsed;
  parsed.rows = request.contains("instances");
  if (parsed.rows == request.contains("inputs"))
    throw InputError("the request must hold exactly one of 'instances' and 'inputs'");
  std::vector<json>& instances = parsed.instances;
  if (parsed.rows) {
    const json& list = request.at("instances");
    if (!list.is_array()) throw InputError("'instances' must be a list");
    instances.assign(list.begin(), list.end());
  } else {
    const json& columns = request.at("inputs");
    const bool one_unnamed =
        input_names.size() == 1 && columns.is_object() && !columns.contains(input_names[0]);
    if (columns.is_object() && !one_unnamed) {
      std::size_t rows_count = 0;
      bool first = true;
      for (const auto& [key, value] : columns.items()) {
        if (!value.is_array()) throw InputError("input '" + key + "' in 'inputs' must be a list");
        if (!first && value.size() != rows_count)
          throw InputError("the lists in 'inputs' differ in length");
        rows_count = value.size();
        first = false;
      }
      instances.assign(rows_count, json::object());
      for (const auto& [key, value] : columns.items())
        for (std::size_t i = 0; i < rows_count; ++i) instances[i][key] = value[i];
    } else if (columns.is_array() && input_names.size() == 1) {
      instances.assign(columns.begin(), columns.end());
    } else {
      throw InputError("'inputs' must be an object of lists, one per input");
    }
  }
  if (instances.empty()) throw InputError("the request holds no instance");
  return parsed;
}

namespace {

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

}  // namespace

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
  };
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool queue_closed = false;

  // Metrics.
  std::mutex counts_mutex;
  std::map<int, uint64_t> responses;  // status -> count
  Histogram latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram batch_sizes{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
  std::atomic<uint64_t> instances_total{0};

  std::thread loader, poller, batcher;

  std::shared_ptr<const Predictor> current() const {
    std::lock_guard<std::mutex> lock(model_mutex);
    return predictor;
  }

  void set_predictor(std::shared_ptr<const Predictor> next) {
    {
      std::lock_guard<std::mutex> lock(model_mutex);
      predictor = std::move(next);
      load = Load::kAvailable;
    }
    loaded.notify_all();
  }

  void fail_load(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(model_mutex);
      load = Load::kFailed;
      load_error = message;
    }
    loaded.notify_all();
  }

  // Sleeps up to `seconds` unless the server stops; false when it stops.
  bool sleep_unless_stopped(double seconds) {
    std::unique_lock<std::mutex> lock(stop_mutex);
    return !stop_cv.wait_for(lock, std::chrono::duration<double>(seconds),
                             [this] { return stopping; });
  }

  // A version as the options say: on their device, int8 when asked.
  std::shared_ptr<const Predictor> load_version(const std::string& dir) const {
    auto predictor = std::make_shared<Predictor>(dir, options.device);
    if (options.int8) predictor->use_int8();
    return predictor;
  }

  void poll_versions() {
    int64_t failed_version = -1;
    while (sleep_unless_stopped(options.file_system_poll_wait_seconds)) {
      const auto serving = current();
      if (!serving) continue;
      const auto versions = export_versions(export_dir);
      if (versions.empty() || versions.back() <= serving->version() ||
          versions.back() == failed_version)
        continue;
      const std::string dir = (fs::path(export_dir) / std::to_string(versions.back())).string();
      try {
        auto next = load_version(dir);
        set_predictor(next);
        log_info() << "serving version " << next->version() << " of '" << export_dir << "'";
      } catch (const std::exception& e) {
        failed_version = versions.back();
        log_warning() << "version " << versions.back() << " of '" << export_dir
                      << "' did not load, still serving " << serving->version() << ": " << e.what();
      }
    }
  }

  // Runs jobs on the serving predictor, merged up to max_batch_size.
  void run_batches() {
    for (;;) {
      std::vector<std::shared_ptr<Job>> jobs;
      std::size_t total = 0;
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        queue_cv.wait(lock, [this] { return queue_closed || !queue.empty(); });
        if (queue.empty()) return;
        jobs.push_back(queue.front());
        queue.pop_front();
        total = jobs.back()->instances.size();
        const auto deadline =
            Clock::now() + std::chrono::microseconds(options.batch_timeout_micros);
        while (total < static_cast<std::size_t>(options.max_batch_size)) {
          if (queue.empty() && !queue_cv.wait_until(lock, deadline, [this] {
                return queue_closed || !queue.empty();
              }))
            break;
          if (queue.empty()) break;
          const std::size_t next = queue.front()->instances.size();
          if (total + next > static_cast<std::size_t>(options.max_batch_size)) break;
          jobs.push_back(queue.front());
          queue.pop_front();
          total += next;
        }
      }
      run_jobs(jobs, total);
    }
  }

  void run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, std::size_t total) {
    const auto model = current();
    if (jobs.size() == 1) {
      run_one(*model, *jobs[0]);
      return;
    }
    std::vector<json> merged;
    merged.reserve(total);
    for (const auto& job : jobs)
      merged.insert(merged.end(), job->instances.begin(), job->instances.end());
    std::vector<json> outputs;
    try {
      outputs = model->predict(merged);
      batch_sizes.observe(static_cast<double>(merged.size()));
    } catch (const InputError&) {
      // One request's bad instance: answer each on its own, so each gets its
      // own result or error.
      for (const auto& job : jobs) run_one(*model, *job);
      return;
    } catch (...) {
      for (const auto& job : jobs) job->result.set_exception(std::current_exception());
      return;
    }
    std::size_t offset = 0;
    for (const auto& job : jobs) {
      const std::size_t n = job->instances.size();
      job->result.set_value(
          std::vector<json>(outputs.begin() + static_cast<std::ptrdiff_t>(offset),
                            outputs.begin() + static_cast<std::ptrdiff_t>(offset + n)));
      offset += n;
    }
  }

  void run_one(const Predictor& model, Job& job) {
    try {
      auto outputs = model.predict(job.instances);
      batch_sizes.observe(static_cast<double>(job.instances.size()));
      job.result.set_value(std::move(outputs));
    } catch (...) {
      job.result.set_exception(std::current_exception());
    }
  }

  std::vector<json> predict(const Predictor& model, std::vector<json> instances) {
    instances_total += instances.size();
    if (!options.enable_batching) {
      auto outputs = model.predict(instances);
      batch_sizes.observe(static_cast<double>(instances.size()));
      return outputs;
    }
    auto job = std::make_shared<Job>();
    job->instances = std::move(instances);
    auto future = job->result.get_future();
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (queue_closed) throw HttpError(503, "the server is shutting down");
      queue.push_back(job);
    }
    queue_cv.notify_one();
    return future.get();
  }

  // ---- routes
  std::shared_ptr<const Predictor> serving_model(const std::string& name) {
    if (name != options.model_name)
      throw HttpError(404, "Servable not found for request: Latest(" + name + ")");
    std::lock_guard<std::mutex> lock(model_mutex);
    if (load == Load::kFailed) throw HttpError(503, "the model failed to load: " + load_error);
    if (!predictor) throw HttpError(503, "the model is loading");
    return predictor;
  }

  json status_body(const std::string& name) {
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

  json predict_body(const std::string& name, const std::string& version, const std::string& body) {
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
    const std::vector<json> results = predict(*model, std::move(instances));
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

  std::string metrics_text() {
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
        << "garden_serving_instances_total " << instances_total.load() << "\n";
    const auto model = current();
    out << "# HELP garden_serving_model_version The version being served (0: none yet).\n"
        << "# TYPE garden_serving_model_version gauge\n"
        << "garden_serving_model_version " << (model ? model->version() : 0) << "\n";
    return out.str();
  }

  void record(int status, Clock::time_point start) {
    latency.observe(std::chrono::duration<double>(Clock::now() - start).count());
    std::lock_guard<std::mutex> lock(counts_mutex);
    ++responses[status];
  }

  // Runs `make_body`, answering its JSON, or {"error": ...} with a status.
  template <class F>
  void answer(httplib::Response& response, F&& make_body) {
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
    response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                         "application/json");
    record(status, start);
    if (--in_flight == 0) {
      std::lock_guard<std::mutex> lock(stop_mutex);  // no lost wake-up for shutdown()
      stop_cv.notify_all();
    }
  }

  void add_routes() {
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
                  return predict_body(request.matches[1], request.matches[2], request.body);
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
};

ModelServer::ModelServer(std::string export_dir, ServerOptions options)
    : state_(std::make_unique<State>()) {
  if (options.max_batch_size < 1) throw Error("--max_batch_size must be >= 1");
  if (options.batch_timeout_micros < 0) throw Error("--batch_timeout_micros must be >= 0");
  if (options.max_body_bytes < 1) throw Error("--max_body_bytes must be >= 1");
  if (options.threads < 1) throw Error("--threads must be >= 1");
  if (options.model_name.empty() || options.model_name.find_first_of("/:") != std::string::npos)
    throw Error("--model_name '" + options.model_name + "' must be non-empty, without / or :");
  std::error_code ec;
  if (!fs::is_directory(export_dir, ec))
    throw Error("--export_dir '" + export_dir + "' is not a directory");
  state_->export_dir = std::move(export_dir);
  state_->options = std::move(options);
  const int threads = state_->options.threads;
  state_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  state_->http.set_payload_max_length(static_cast<std::size_t>(state_->options.max_body_bytes));
  if (state_->options.read_timeout_seconds < 1) throw Error("read_timeout_seconds must be >= 1");
  state_->http.set_read_timeout(state_->options.read_timeout_seconds);
  state_->add_routes();
}

ModelServer::~ModelServer() {
  shutdown(0);
  for (auto* thread : {&state_->loader, &state_->poller, &state_->batcher})
    if (thread->joinable()) thread->join();
}

int ModelServer::start() {
  State& s = *state_;
  if (s.options.port == 0) {
    s.port = s.http.bind_to_any_port(s.options.host);
    if (s.port < 0) throw Error("cannot listen on " + s.options.host + " (any port)");
  } else {
    if (!s.http.bind_to_port(s.options.host, s.options.port))
      throw Error("cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                  " (in use, or not an address of this machine)");
    s.port = s.options.port;
  }
  if (s.options.enable_batching) s.batcher = std::thread([&s] { s.run_batches(); });
  s.loader = std::thread([&s] {
    try {
      auto first = s.load_version(s.export_dir);
      first->apply_runtime();
      s.set_predictor(first);
      log_info() << "serving version " << first->version() << " of '" << s.export_dir << "' as '"
                 << s.options.model_name << "'";
    } catch (const std::exception& e) {
      s.fail_load(e.what());  // run() stops listening and throws it
      return;
    }
    std::error_code ec;
    const bool single_version = fs::exists(fs::path(s.export_dir) / kSignatureFile, ec);
    if (s.options.file_system_poll_wait_seconds > 0 && !single_version)
      s.poller = std::thread([&s] { s.poll_versions(); });
  });
  return s.port;
}

int ModelServer::port() const { return state_->port; }

bool ModelServer::wait_until_loaded() const {
  std::unique_lock<std::mutex> lock(state_->model_mutex);
  state_->loaded.wait(lock, [this] { return state_->load != State::Load::kLoading; });
  return state_->load == State::Load::kAvailable;
}

void ModelServer::run() {
  State& s = *state_;
  // httplib's stop() does nothing before the listen loop runs, so a stop
  // asked for early (a SIGTERM at once, a first version that fails to load
  // in milliseconds) is carried out by this guard once the loop is running.
  std::atomic<bool> listening_done{false};
  std::thread guard([&s, &listening_done] {
    while (!listening_done) {
      bool stop_now = false;
      {
        std::lock_guard<std::mutex> lock(s.model_mutex);
        stop_now = s.load == State::Load::kFailed;
      }
      {
        std::lock_guard<std::mutex> lock(s.stop_mutex);
        stop_now = stop_now || s.stopping;
      }
      if (stop_now && s.http.is_running()) {
        s.http.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  s.http.listen_after_bind();
  listening_done = true;
  guard.join();
  std::lock_guard<std::mutex> lock(s.model_mutex);
  if (s.load == State::Load::kFailed) throw Error(s.load_error);
}

void ModelServer::shutdown(double grace_seconds) {
  State& s = *state_;
  s.draining = true;
  {
    std::unique_lock<std::mutex> lock(s.stop_mutex);
    s.stop_cv.wait_for(lock, std::chrono::duration<double>(grace_seconds),
                       [&s] { return s.in_flight == 0; });
    s.stopping = true;
  }
  s.stop_cv.notify_all();
  {
    std::lock_guard<std::mutex> lock(s.queue_mutex);
    s.queue_closed = true;
  }
  s.queue_cv.notify_all();
  s.http.stop();
}

}  // namespace garden::serving
