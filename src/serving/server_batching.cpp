// Requests run on the serving predictor, merged into batches up to
// --max_batch_size (--enable_batching).
#include "server_batching.h"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "garden/base/error.h"

namespace garden::serving {

BatchingQueue::BatchingQueue(const ServerOptions& options, const ModelVersions& versions,
                             ServingMetrics& metrics)
    : options_(options), versions_(versions), metrics_(metrics) {}

void BatchingQueue::start() {
  if (options_.enable_batching) batcher_ = std::thread([this] { run_batches(); });
}

void BatchingQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

void BatchingQueue::join() {
  if (batcher_.joinable()) batcher_.join();
}

void BatchingQueue::run_batches() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> jobs;
    std::size_t total = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return;
      jobs.push_back(take_front());
      total = jobs.back()->instances.size();
      const auto deadline = Clock::now() + std::chrono::microseconds(options_.batch_timeout_micros);
      while (total < static_cast<std::size_t>(options_.max_batch_size)) {
        if (queue_.empty() &&
            !changed_.wait_until(lock, deadline, [this] { return closed_ || !queue_.empty(); }))
          break;
        if (queue_.empty()) break;
        const std::size_t next = queue_.front()->instances.size();
        if (total + next > static_cast<std::size_t>(options_.max_batch_size)) break;
        jobs.push_back(take_front());
        total += next;
      }
    }
    // Requests whose client went away while they waited are not computed.
    std::size_t live = 0;
    for (auto& job : jobs) {
      if (client_gone(job->socket)) {
        metrics_.add_abandoned();
        total -= job->instances.size();
        job->result.set_exception(
            std::make_exception_ptr(HttpError(499, "the client closed the connection")));
        continue;
      }
      jobs[live++] = std::move(job);
    }
    jobs.resize(live);
    if (!jobs.empty()) run_jobs(jobs, total);
  }
}

std::shared_ptr<BatchingQueue::Job> BatchingQueue::take_front() {
  auto job = std::move(queue_.front());
  queue_.pop_front();
  queued_instances_ -= job->instances.size();
  return job;
}

void BatchingQueue::run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, std::size_t total) {
  const auto model = versions_.current();
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
    metrics_.observe_batch(merged.size());
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

void BatchingQueue::run_one(const Predictor& model, Job& job) {
  try {
    auto outputs = model.predict(job.instances);
    metrics_.observe_batch(job.instances.size());
    job.result.set_value(std::move(outputs));
  } catch (...) {
    job.result.set_exception(std::current_exception());
  }
}

std::vector<json> BatchingQueue::predict(const Predictor& model, std::vector<json> instances,
                                         int socket) {
  if (!options_.enable_batching) {
    metrics_.add_instances(instances.size());
    auto outputs = model.predict(instances);
    metrics_.observe_batch(instances.size());
    return outputs;
  }
  auto job = std::make_shared<Job>();
  job->instances = std::move(instances);
  job->socket = socket;
  auto future = job->result.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) throw HttpError(503, "the server is shutting down");
    // TF Serving's bound: max_enqueued_batches full batches may wait. A
    // request larger than a batch is taken when the queue is empty.
    const auto limit =
        static_cast<std::size_t>(options_.max_enqueued_batches * options_.max_batch_size);
    if (!queue_.empty() && queued_instances_ + job->instances.size() > limit) {
      metrics_.add_rejected();
      throw HttpError(503, "the batching queue is full (" + std::to_string(queued_instances_) +
                               " instances waiting, --max_enqueued_batches=" +
                               std::to_string(options_.max_enqueued_batches) + ")");
    }
    queued_instances_ += job->instances.size();
    metrics_.add_instances(job->instances.size());
    queue_.push_back(job);
  }
  changed_.notify_one();
  return future.get();
}

}  // namespace garden::serving
