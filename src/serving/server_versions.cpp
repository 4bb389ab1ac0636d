// The serving version: loaded at start, replaced by a newer one when it appears
// (--file_system_poll_wait_seconds).
#include "server_state.h"

namespace garden::serving {

std::shared_ptr<const Predictor> ModelServer::State::current() const {
  std::lock_guard<std::mutex> lock(model_mutex);
  return predictor;
}

void ModelServer::State::set_predictor(std::shared_ptr<const Predictor> next) {
  {
    std::lock_guard<std::mutex> lock(model_mutex);
    predictor = std::move(next);
    load = Load::kAvailable;
  }
  loaded.notify_all();
}

void ModelServer::State::fail_load(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(model_mutex);
    load = Load::kFailed;
    load_error = message;
  }
  loaded.notify_all();
}

bool ModelServer::State::sleep_unless_stopped(double seconds) {
  std::unique_lock<std::mutex> lock(stop_mutex);
  return !stop_cv.wait_for(lock, std::chrono::duration<double>(seconds),
                           [this] { return stopping; });
}

std::shared_ptr<const Predictor> ModelServer::State::load_version(const std::string& dir) const {
  auto predictor = std::make_shared<Predictor>(dir, options.device);
  if (options.int8) predictor->use_int8();
  return predictor;
}

void ModelServer::State::poll_versions() {
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

}  // namespace garden::serving
