// The HTTP server: TF Serving's REST API (status, metadata, both request
// formats), bad requests, batching of concurrent requests, new versions
// without a restart, and a shutdown that finishes what is in flight.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/data/sentencepiece.h"
#include "garden/nlp/modeling/electra_pretrainer.h"
#include "garden/nlp/tasks/translation_task.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "garden/serving/server.h"
#include "safetensors_reader.h"
#include "test_util.h"

#include "serving/serving_fixture.h"
#include "test_util.h"

namespace fs = std::filesystem;
using garden_test::error_of;
using json = nlohmann::json;

namespace {

using namespace serving_fixture;  // NOLINT

class ServerTest : public ServingTest {
 protected:
  void start(const std::string& export_dir, garden::serving::ServerOptions options = {}) {
    options.port = 0;
    options.model_name = "iris";
    server_ = std::make_unique<garden::serving::ModelServer>(export_dir, options);
    port_ = server_->start();
    runner_ = std::thread([this] { server_->run(); });
    ASSERT_TRUE(server_->wait_until_loaded());
  }
  void TearDown() override {
    if (server_) server_->shutdown(5);
    if (runner_.joinable()) runner_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30);
    return c;
  }
  static json instance(double a, double b, double c, double d) {
    return {{"sepal_length", a}, {"sepal_width", b}, {"petal_length", c}, {"petal_width", d}};
  }
  // A plain TCP connection to the server, as any client library opens one.
  int connect_raw() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    return fd;
  }
  // The value of a counter in /metrics.
  uint64_t metric(const std::string& name) const {
    auto metrics = client().Get("/metrics");
    if (!metrics) return 0;
    const auto at = metrics->body.find("\n" + name + " ");
    if (at == std::string::npos) return 0;
    return std::stoull(metrics->body.substr(at + name.size() + 2));
  }

  std::unique_ptr<garden::serving::ModelServer> server_;
  std::thread runner_;
  int port_ = 0;
};

TEST_F(ServerTest, StatusMetadataAndBothRequestFormats) {
  start(iris_export_);
  auto c = client();
  const std::string version = fs::path(iris_export_).filename().string();
  auto status = c.Get("/v1/models/iris");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  const json s = json::parse(status->body);
  EXPECT_EQ(s["model_version_status"][0]["version"], version);
  EXPECT_EQ(s["model_version_status"][0]["state"], "AVAILABLE");
  auto metadata = c.Get("/v1/models/iris/metadata");
  ASSERT_TRUE(metadata);
  const json m = json::parse(metadata->body);
  EXPECT_EQ(m["model_spec"]["version"], version);
  EXPECT_EQ(m["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"].size(),
            4u);

  garden::serving::Predictor predictor(iris_export_);
  const auto expected =
      predictor.predict({instance(5.1, 3.5, 1.4, 0.2), instance(6.2, 2.9, 4.3, 1.3)});
  const json rows = {{"instances", {instance(5.1, 3.5, 1.4, 0.2), instance(6.2, 2.9, 4.3, 1.3)}}};
  auto answer = c.Post("/v1/models/iris:predict", rows.dump(), "application/json");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const json predictions = json::parse(answer->body).at("predictions");
  ASSERT_EQ(predictions.size(), 2u);
  EXPECT_EQ(predictions[0], expected[0]);
  EXPECT_EQ(predictions[1], expected[1]);
  // Columnar in, columnar out; the version may be named.
  const json columns = {{"inputs",
                         {{"sepal_length", {5.1, 6.2}},
                          {"sepal_width", {3.5, 2.9}},
                          {"petal_length", {1.4, 4.3}},
                          {"petal_width", {0.2, 1.3}}}}};
  answer = c.Post("/v1/models/iris/versions/" + version + ":predict", columns.dump(),
                  "application/json");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const json outputs = json::parse(answer->body).at("outputs");
  EXPECT_EQ(outputs.at("classes"), json({expected[0]["classes"], expected[1]["classes"]}));
  EXPECT_EQ(outputs.at("probabilities")[1], expected[1]["probabilities"]);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("garden_serving_responses_total{code=\"200\"} 4"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("garden_serving_instances_total 4"), std::string::npos);
}

// `curl -d`, as the docs show, sends application/x-www-form-urlencoded:
// such a body is read up to --max_body_bytes like any other (cpp-httplib
// alone refuses a form over 8 KB with 413).
TEST_F(ServerTest, ABodySentAsAFormIsReadUpToTheLimit) {
  start(iris_export_, garden::serving::ServerOptions());
  auto c = client();
  json many = {{"instances", json::array()}};
  while (many.dump().size() < 20000) many["instances"].push_back(instance(5.1, 3.5, 1.4, 0.2));
  auto answer = c.Post("/v1/models/iris:predict", many.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body.substr(0, 200);
  EXPECT_EQ(json::parse(answer->body).at("predictions").size(), many["instances"].size());
}

TEST_F(ServerTest, MalformedRequestsGet4xxAndTheServerStillAnswers) {
  garden::serving::ServerOptions options;
  options.max_body_bytes = 4096;
  options.read_timeout_seconds = 1;
  start(iris_export_, options);
  auto c = client();
  const json good = {{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}};
  const std::string path = "/v1/models/iris:predict";
  struct Case {
    std::string body;
    int status;
    std::string error;
  };
  const std::vector<Case> cases = {
      {good.dump().substr(0, 20), 400, "malformed JSON body"},
      {"", 400, "malformed JSON body"},
      {"[1, 2]", 400, "must be a JSON object"},
      {"{\"instances\": 3}", 400, "'instances' must be a list"},
      {"{\"instances\": []}", 400, "holds no instance"},
      {"{}", 400, "exactly one of 'instances' and 'inputs'"},
      {"{\"instances\": [{\"sepal_length\": \"x\", \"sepal_width\": 1, \"petal_length\": 1, "
       "\"petal_width\": 1}]}",
       400, "must be a number, not string"},
      {"{\"instances\": [{\"sepal_length\": 1e999, \"sepal_width\": 1, \"petal_length\": 1, "
       "\"petal_width\": 1}]}",
       400, ""},
      {"{\"instances\": [[1, 2, 3, 1e39]]}", 400, "out of float range"},
      {"{\"instances\": [[1, 2, 3, 123456789012345678901234567890]]}", 200, ""},  // 1.2e29 fits
      {std::string(10000, '['), 413, "larger than the limit"},
      {std::string(1000, '[') + std::string(1000, ']'), 400, "nests deeper than"},
      {"{\"inputs\": {\"sepal_length\": [1, 2], \"sepal_width\": [1]}}", 400, "differ in length"},
      {"{\"signature_name\": \"other\", \"instances\": []}", 400, "unknown signature_name"},
  };
  for (const auto& test : cases) {
    auto answer = c.Post(path, test.body, "application/json");
    ASSERT_TRUE(answer) << test.body.substr(0, 80);
    EXPECT_EQ(answer->status, test.status) << test.body.substr(0, 80) << " -> " << answer->body;
    const json body = json::parse(answer->body);
    if (test.status == 200) continue;
    EXPECT_NE(body.value("error", "(none)").find(test.error), std::string::npos) << answer->body;
  }
  // A body over the limit sent as a form (`curl -d`) is refused as one sent
  // as JSON.
  auto form_too_long = c.Post(path, std::string(5000, ' '), "application/x-www-form-urlencoded");
  ASSERT_TRUE(form_too_long);
  EXPECT_EQ(form_too_long->status, 413) << form_too_long->body;
  auto unknown = c.Post("/v1/models/roses:predict", good.dump(), "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto old_version = c.Post("/v1/models/iris/versions/1:predict", good.dump(), "application/json");
  ASSERT_TRUE(old_version);
  EXPECT_EQ(old_version->status, 404);
  auto no_route = c.Get("/v2/anything");
  ASSERT_TRUE(no_route);
  EXPECT_EQ(no_route->status, 404);
  EXPECT_TRUE(json::parse(no_route->body).contains("error"));

  // A Content-Length that promises more than is sent: the server stops
  // waiting after its read timeout (1 s here), answers 400 or closes, and
  // goes on serving.
  {
    const int fd = connect_raw();
    ASSERT_GE(fd, 0);
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: 500\r\n\r\n{\"instances\"";
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    pollfd wait{fd, POLLIN, 0};
    const auto started = std::chrono::steady_clock::now();
    ASSERT_EQ(::poll(&wait, 1, 10'000), 1) << "the server neither answered nor closed";
    char buffer[512] = {};
    const ssize_t got = ::recv(fd, buffer, sizeof buffer - 1, 0);
    if (got > 0) {
      EXPECT_EQ(std::string(buffer).rfind("HTTP/1.1 4", 0), 0u) << buffer;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    ::close(fd);
  }
  auto after = c.Post(path, good.dump(), "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200) << after->body;
}

TEST_F(ServerTest, BatchingMergesConcurrentRequestsAndAnswersEachItsOwnRows) {
  garden::serving::ServerOptions options;
  options.enable_batching = true;
  options.max_batch_size = 64;
  options.batch_timeout_micros = 300'000;
  start(iris_export_, options);
  garden::serving::Predictor predictor(iris_export_);
  constexpr int kClients = 8;
  std::vector<json> sent(kClients), got(kClients);
  std::vector<int> status(kClients, 0);
  std::atomic<int> waiting{kClients};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    sent[i] = instance(4.5 + 0.4 * i, 3.0, 1.0 + 0.7 * i, 0.1 + 0.3 * i);
    clients.emplace_back([&, i] {
      auto c = client();
      --waiting;
      while (waiting > 0) std::this_thread::yield();
      auto answer = c.Post("/v1/models/iris:predict", json{{"instances", {sent[i]}}}.dump(),
                           "application/json");
      if (!answer) return;
      status[i] = answer->status;
      got[i] = json::parse(answer->body);
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(status[i], 200) << got[i];
    // Alone or merged, the same answer (up to the float rounding of another
    // batch size's kernels).
    const json alone = predictor.predict({sent[i]})[0];
    const json& merged = got[i]["predictions"][0];
    EXPECT_EQ(merged["classes"], alone["classes"]) << i;
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(merged["logits"][c].get<double>(), alone["logits"][c].get<double>(), 1e-5) << i;
  }
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  const std::string key = "garden_serving_batch_size_count ";
  const auto at = metrics->body.find(key);
  ASSERT_NE(at, std::string::npos);
  const int passes = std::stoi(metrics->body.substr(at + key.size()));
  EXPECT_LT(passes, kClients) << "no request was merged:\n" << metrics->body;
  EXPECT_GE(passes, 1);
}

TEST_F(ServerTest, ANewVersionIsServedWithoutARestart) {
  const fs::path base = root_ / "rolling";
  fs::remove_all(base);
  fs::create_directories(base);
  fs::copy(iris_export_, base / "1", fs::copy_options::recursive);
  garden::serving::ServerOptions options;
  options.file_system_poll_wait_seconds = 0.05;
  start(base.string(), options);
  auto c = client();
  auto version = [&] {
    auto status = c.Get("/v1/models/iris");
    return status
               ? json::parse(status->body)["model_version_status"][0]["version"].get<std::string>()
               : std::string("?");
  };
  EXPECT_EQ(version(), "1");
  // A damaged version 2 is refused and 1 goes on serving; a good 3 replaces it.
  fs::create_directories(base / "2");
  write_text(base / "2" / "signature.json", "{");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(version(), "1");
  fs::copy(iris_export_, base / ".staging", fs::copy_options::recursive);
  fs::rename(base / ".staging", base / "3");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (version() != "3" && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(version(), "3");
  auto answer =
      c.Post("/v1/models/iris:predict", json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump(),
             "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
}

TEST_F(ServerTest, ShutdownFinishesTheRequestInFlightAndRefusesNewOnes) {
  garden::serving::ServerOptions options;
  options.enable_batching = true;
  options.batch_timeout_micros = 1'500'000;  // holds the first request in the batcher
  start(iris_export_, options);
  const std::string body = json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump();
  int in_flight_status = 0;
  std::thread first([&] {
    auto answer = client().Post("/v1/models/iris:predict", body, "application/json");
    if (answer) in_flight_status = answer->status;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread stopper([&] { server_->shutdown(10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto late = client().Post("/v1/models/iris:predict", body, "application/json");
  if (late) {  // or no connection at all
    EXPECT_EQ(late->status, 503) << late->body;
  }
  first.join();
  stopper.join();
  runner_.join();
  EXPECT_EQ(in_flight_status, 200);
}

// One request sent whole on `fd`, its answer read whole (headers and a
// Content-Length body); the status, or -1 when the connection failed.
int round_trip(int fd, const std::string& request) {
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return -1;
  std::string answer;
  char buffer[4096];
  for (;;) {
    const auto end = answer.find("\r\n\r\n");
    if (end != std::string::npos) {
      const auto length_at = answer.find("Content-Length: ");
      const std::size_t length =
          length_at < end ? std::stoul(answer.substr(length_at + 16)) : std::size_t{0};
      if (answer.size() >= end + 4 + length) return std::stoi(answer.substr(9, 3));
    }
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) return -1;
    answer.append(buffer, static_cast<std::size_t>(got));
  }
}

TEST_F(ServerTest, AKeptAliveConnectionIsAnsweredWithoutWaitingForTheClientsAck) {
  // Each answer leaves in one go: with Nagle's algorithm its body would wait
  // for the client's delayed ACK of the headers, 40 ms on Linux, every time.
  // Counted, not timed tightly: of 40 requests on one connection, none may
  // take as long as that stall (two slow ones are allowed for a busy machine).
  start(iris_export_);
  const int fd = connect_raw();
  const std::string body = json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump();
  const std::string requests[] = {
      "GET /v1/models/iris HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /v1/models/iris:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body};
  int stalled = 0;
  for (int i = 0; i < 40; ++i) {
    const auto started = std::chrono::steady_clock::now();
    ASSERT_EQ(round_trip(fd, requests[i % 2]), 200) << "request " << i;
    if (std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(35)) ++stalled;
  }
  ::close(fd);
  EXPECT_LE(stalled, 2) << stalled << " of 40 kept-alive requests took 35 ms or more";
}

TEST_F(ServerTest, AFullBatchingQueueAnswers503WithRetryAfterAndTheServerGoesOn) {
  garden::serving::ServerOptions options;
  options.enable_batching = true;
  options.max_batch_size = 1;
  options.max_enqueued_batches = 1;
  options.batch_timeout_micros = 0;
  options.max_body_bytes = 64 << 20;
  start(iris_export_, options);
  // A: a request of 100,000 instances, which keeps the model busy.
  json many = json::array();
  for (int i = 0; i < 100'000; ++i) many.push_back(instance(5.0 + (i % 10) * 0.1, 3.0, 1.5, 0.2));
  int a_status = 0;
  std::thread a([&] {
    auto answer = client().Post("/v1/models/iris:predict", json{{"instances", many}}.dump(),
                                "application/json");
    if (answer) a_status = answer->status;
  });
  auto wait_for_instances = [&](uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (metric("garden_serving_instances_total") < count &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  wait_for_instances(100'000);  // A is enqueued, and taken at once
  // B waits in the queue, which then holds one batch: C is refused.
  const std::string one = json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump();
  int b_status = 0;
  std::thread b([&] {
    auto answer = client().Post("/v1/models/iris:predict", one, "application/json");
    if (answer) b_status = answer->status;
  });
  wait_for_instances(100'001);
  auto c = client().Post("/v1/models/iris:predict", one, "application/json");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 503) << c->body;
  EXPECT_EQ(c->get_header_value("Retry-After"), "1");
  EXPECT_NE(json::parse(c->body)["error"].get<std::string>().find("the batching queue is full"),
            std::string::npos)
      << c->body;
  a.join();
  b.join();
  EXPECT_EQ(a_status, 200);
  EXPECT_EQ(b_status, 200);
  EXPECT_EQ(metric("garden_serving_rejected_total"), 1u);
  auto after = client().Post("/v1/models/iris:predict", one, "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

TEST_F(ServerTest, ARequestWhoseClientHasGoneIsNotComputed) {
  // The batcher holds the first request of a pass up to batch_timeout_micros;
  // its client closes the connection meanwhile.
  garden::serving::ServerOptions options;
  options.enable_batching = true;
  options.max_batch_size = 8;
  options.batch_timeout_micros = 800'000;
  start(iris_export_, options);
  const std::string body = json{{"instances", {instance(5.1, 3.5, 1.4, 0.2)}}}.dump();
  const int fd = connect_raw();
  const std::string request =
      "POST /v1/models/iris:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (metric("garden_serving_abandoned_total") < 1 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(metric("garden_serving_abandoned_total"), 1u);
  // No forward pass ran; the next client is answered.
  EXPECT_EQ(metric("garden_serving_batch_size_count"), 0u);
  auto next = client().Post("/v1/models/iris:predict", body, "application/json");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(metric("garden_serving_batch_size_count"), 1u);
}

}  // namespace
