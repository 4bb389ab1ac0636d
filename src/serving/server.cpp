#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

#include "garden/base/error.h"
#include "server_state.h"

namespace garden::serving {

namespace {

constexpr int kMaxJsonDepth = 64;

// The peer of `socket` as (address, port); ("", -1) for anything else.
std::pair<std::string, int> peer_of(int socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(socket, reinterpret_cast<sockaddr*>(&address), &length) != 0) return {"", -1};
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    return {text, ntohs(v4.sin_port)};
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    return {text, ntohs(v6.sin6_port)};
  }
  return {"", -1};
}

}  // namespace

int client_socket(const httplib::Request& request) {
  // One pool thread serves a connection from accept to close, so the socket
  // found for its first request is checked, not searched, for the next ones.
  thread_local int cached = -1;
  const std::pair<std::string, int> wanted{request.remote_addr, request.remote_port};
  if (cached >= 0 && peer_of(cached) == wanted) return cached;
  cached = -1;
  DIR* fds = ::opendir("/proc/self/fd");
  if (!fds) return -1;
  while (const dirent* entry = ::readdir(fds)) {
    const int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9' || fd == ::dirfd(fds)) continue;
    if (peer_of(fd) == wanted) {
      cached = fd;
      break;
    }
  }
  ::closedir(fds);
  return cached;
}

bool client_gone(int socket) {
  if (socket < 0) return false;
  pollfd watch{socket, POLLIN | POLLRDHUP, 0};
  if (::poll(&watch, 1, 0) <= 0) return false;
  if (watch.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (!(watch.revents & (POLLIN | POLLRDHUP))) return false;
  // Readable: a next request, or the end of the stream.
  char byte;
  const ssize_t n = ::recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

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
    // One input's bare value: {"b64": ...} is the only object that is one.
    const bool one_unnamed = input_names.size() == 1 && columns.is_object() &&
                             columns.size() == 1 && columns.contains("b64");
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

ModelServer::ModelServer(std::string export_dir, ServerOptions options) {
  if (options.max_batch_size < 1) throw Error("--max_batch_size must be >= 1");
  if (options.batch_timeout_micros < 0) throw Error("--batch_timeout_micros must be >= 0");
  if (options.max_enqueued_batches < 1) throw Error("--max_enqueued_batches must be >= 1");
  if (options.max_body_bytes < 1) throw Error("--max_body_bytes must be >= 1");
  if (options.threads < 1) throw Error("--threads must be >= 1");
  if (options.grpc_port < -1 || options.grpc_port > 65535)
    throw Error("--grpc_port " + std::to_string(options.grpc_port) +
                " must be a port (0: any free one)");
  if (options.model_name.empty() || options.model_name.find_first_of("/:") != std::string::npos)
    throw Error("--model_name '" + options.model_name + "' must be non-empty, without / or :");
  std::error_code ec;
  if (!std::filesystem::is_directory(export_dir, ec))
    throw Error("--export_dir '" + export_dir + "' is not a directory");
  if (options.read_timeout_seconds < 1) throw Error("read_timeout_seconds must be >= 1");
  state_ = std::make_unique<State>(std::move(export_dir), std::move(options));
  httplib::Server& http = state_->http;
  const int threads = state_->options.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(static_cast<std::size_t>(state_->options.max_body_bytes));
  // cpp-httplib writes a response's headers and body in separate sends; with
  // Nagle's algorithm the body then waits for the client's delayed ACK of the
  // headers (40 ms on Linux) on every kept-alive request.
  http.set_tcp_nodelay(true);
  // cpp-httplib closes a kept-alive connection after 5 requests by default;
  // a client then pays a new connection every 5 calls.
  http.set_keep_alive_max_count(1'000'000);
  http.set_read_timeout(state_->options.read_timeout_seconds);
  add_rest_routes(*state_);
}

ModelServer::~ModelServer() {
  shutdown(0);
  state_->versions.join();
  state_->batching.join();
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
  if (s.options.grpc_port >= 0) {
    s.grpc = std::make_unique<GrpcFrontEnd>(s);
    s.grpc_port = s.grpc->port();
  }
  s.batching.start();
  s.versions.start();
  return s.port;
}

int ModelServer::port() const { return state_->port; }

int ModelServer::grpc_port() const { return state_->grpc_port; }

bool ModelServer::wait_until_loaded() const { return state_->versions.wait_until_loaded(); }

void ModelServer::run() {
  State& s = *state_;
  // httplib's stop() does nothing before the listen loop runs, so a stop
  // asked for early (a SIGTERM at once, a first version that fails to load
  // in milliseconds) is carried out by this guard once the loop is running.
  std::atomic<bool> listening_done{false};
  std::thread guard([&s, &listening_done] {
    while (!listening_done) {
      const bool stop_now =
          s.versions.status().load == ModelVersions::Load::kFailed || s.gate.stopping();
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
  const ModelVersions::Status status = s.versions.status();
  if (status.load == ModelVersions::Load::kFailed) throw Error(status.error);
}

void ModelServer::shutdown(double grace_seconds) {
  State& s = *state_;
  s.gate.drain(grace_seconds);
  s.batching.close();
  if (s.grpc) s.grpc->stop();
  s.http.stop();
}

}  // namespace garden::serving
