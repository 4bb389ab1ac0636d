// The versions of an export a server serves: the first loaded in the
// background at start, then a newer one, when it appears
// (--file_system_poll_wait_seconds), loaded beside the serving one and
// swapped in; requests in flight finish on the old one. Private to serving.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "garden/serving/predictor.h"
#include "garden/serving/server.h"
#include "server_request.h"

namespace garden::serving {

class ModelVersions {
 public:
  enum class Load { kLoading, kAvailable, kFailed };
  struct Status {
    Load load = Load::kLoading;
    int64_t version = 0;  // 0: none yet
    std::string error;    // why the first version failed to load
  };

  // `options` and `gate` outlive this.
  ModelVersions(std::string export_dir, const ServerOptions& options, const RequestGate& gate);

  // Loads the first version on a thread of its own, then polls for newer
  // ones until the server stops (an export that is one version itself is
  // not polled).
  void start();
  void join();  // the loading and polling threads, once the server stops

  // The serving version; null while the first loads.
  std::shared_ptr<const Predictor> current() const;
  // The serving version; HttpError 503 while the first loads or when it
  // failed to load.
  std::shared_ptr<const Predictor> available() const;
  Status status() const;
  // Blocks until the first version is loaded or failed; true when loaded.
  bool wait_until_loaded() const;

 private:
  void set(std::shared_ptr<const Predictor> next);
  void fail(const std::string& message);
  // A version as the options say: on their device, int8 when asked.
  std::shared_ptr<const Predictor> load(const std::string& dir) const;
  void poll();

  const std::string export_dir_;
  const ServerOptions& options_;
  const RequestGate& gate_;

  mutable std::mutex mutex_;
  std::shared_ptr<const Predictor> predictor_;  // replaced whole when a newer one loads
  Load load_ = Load::kLoading;
  std::string load_error_;
  mutable std::condition_variable loaded_;

  std::thread loader_, poller_;
};

}  // namespace garden::serving
