// The serving version: loaded at start, replaced by a newer one when it appears
// (--file_system_poll_wait_seconds).
#include "server_versions.h"

#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>

#include "garden/base/logging.h"
#include "garden/serving/export.h"

namespace garden::serving {

namespace fs = std::filesystem;

ModelVersions::ModelVersions(std::string export_dir, const ServerOptions& options,
                             const RequestGate& gate)
    : export_dir_(std::move(export_dir)), options_(options), gate_(gate) {}

void ModelVersions::start() {
  loader_ = std::thread([this] {
    try {
      auto first = load(export_dir_);
      first->apply_runtime();
      set(first);
      log_info() << "serving version " << first->version() << " of '" << export_dir_ << "' as '"
                 << options_.model_name << "'";
    } catch (const std::exception& e) {
      fail(e.what());  // ModelServer::run() stops listening and throws it
      return;
    }
    std::error_code ec;
    const bool single_version = fs::exists(fs::path(export_dir_) / kSignatureFile, ec);
    if (options_.file_system_poll_wait_seconds > 0 && !single_version)
      poller_ = std::thread([this] { poll(); });
  });
}

void ModelVersions::join() {
  // The loader starts the poller: joined first.
  for (auto* thread : {&loader_, &poller_})
    if (thread->joinable()) thread->join();
}

std::shared_ptr<const Predictor> ModelVersions::current() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return predictor_;
}

std::shared_ptr<const Predictor> ModelVersions::available() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (load_ == Load::kFailed) throw HttpError(503, "the model failed to load: " + load_error_);
  if (!predictor_) throw HttpError(503, "the model is loading");
  return predictor_;
}

ModelVersions::Status ModelVersions::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {load_, predictor_ ? predictor_->version() : 0, load_error_};
}

bool ModelVersions::wait_until_loaded() const {
  std::unique_lock<std::mutex> lock(mutex_);
  loaded_.wait(lock, [this] { return load_ != Load::kLoading; });
  return load_ == Load::kAvailable;
}

void ModelVersions::set(std::shared_ptr<const Predictor> next) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    predictor_ = std::move(next);
    load_ = Load::kAvailable;
  }
  loaded_.notify_all();
}

void ModelVersions::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load_ = Load::kFailed;
    load_error_ = message;
  }
  loaded_.notify_all();
}

std::shared_ptr<const Predictor> ModelVersions::load(const std::string& dir) const {
  auto predictor = std::make_shared<Predictor>(dir, options_.device);
  if (options_.int8) predictor->use_int8();
  return predictor;
}

void ModelVersions::poll() {
  int64_t failed_version = -1;
  while (gate_.sleep_unless_stopped(options_.file_system_poll_wait_seconds)) {
    const auto serving = current();
    if (!serving) continue;
    const auto versions = export_versions(export_dir_);
    if (versions.empty() || versions.back() <= serving->version() ||
        versions.back() == failed_version)
      continue;
    const std::string dir = (fs::path(export_dir_) / std::to_string(versions.back())).string();
    try {
      auto next = load(dir);
      set(next);
      log_info() << "serving version " << next->version() << " of '" << export_dir_ << "'";
    } catch (const std::exception& e) {
      failed_version = versions.back();
      log_warning() << "version " << versions.back() << " of '" << export_dir_
                    << "' did not load, still serving " << serving->version() << ": " << e.what();
    }
  }
}

}  // namespace garden::serving
