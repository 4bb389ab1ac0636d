// What the server's units (versions, batching, metrics) and its front ends
// (REST, gRPC) share about a request: an answer other than 200, the client's
// connection, and the count of requests in flight that shutdown waits for.
// Private to serving.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace httplib {
struct Request;
}

namespace garden::serving {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// An answer other than 200, with its status (gRPC maps it to a code).
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

// The requests in flight and the server's stop. drain() turns new requests
// away (draining()), waits for those in flight up to a grace period, then
// stops the server's threads (stopping()).
class RequestGate {
 public:
  bool draining() const { return draining_; }
  bool stopping() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stopping_;
  }
  void enter() { ++in_flight_; }
  void leave() {
    if (--in_flight_ == 0) {
      std::lock_guard<std::mutex> lock(mutex_);  // no lost wake-up for drain()
      changed_.notify_all();
    }
  }
  void drain(double grace_seconds) {
    draining_ = true;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait_for(lock, std::chrono::duration<double>(grace_seconds),
                        [this] { return in_flight_ == 0; });
      stopping_ = true;
    }
    changed_.notify_all();
  }
  // Sleeps up to `seconds` unless the server stops; false when it stops.
  bool sleep_unless_stopped(double seconds) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return !changed_.wait_for(lock, std::chrono::duration<double>(seconds),
                              [this] { return stopping_; });
  }

 private:
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
};

// One request in flight while it lives.
class InFlight {
 public:
  explicit InFlight(RequestGate& gate) : gate_(gate) { gate_.enter(); }
  ~InFlight() { gate_.leave(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  RequestGate& gate_;
};

}  // namespace garden::serving
