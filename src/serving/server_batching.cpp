// Requests run on the serving predictor, merged into batches up to
// --max_batch_size (--enable_batching).
#include "server_state.h"

namespace garden::serving {

void ModelServer::State::run_batches() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> jobs;
    std::size_t total = 0;
    {
      std::unique_lock<std::mutex> lock(queue_mutex);
      queue_cv.wait(lock, [this] { return queue_closed || !queue.empty(); });
      if (queue.empty()) return;
      jobs.push_back(take_front());
      total = jobs.back()->instances.size();
      const auto deadline = Clock::now() + std::chrono::microseconds(options.batch_timeout_micros);
      while (total < static_cast<std::size_t>(options.max_batch_size)) {
        if (queue.empty() &&
            !queue_cv.wait_until(lock, deadline, [this] { return queue_closed || !queue.empty(); }))
          break;
        if (queue.empty()) break;
        const std::size_t next = queue.front()->instances.size();
        if (total + next > static_cast<std::size_t>(options.max_batch_size)) break;
        jobs.push_back(take_front());
        total += next;
      }
    }
    // Requests whose client went away while they waited are not computed.
    std::size_t live = 0;
    for (auto& job : jobs) {
      if (client_gone(job->socket)) {
        ++abandoned_total;
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

std::shared_ptr<ModelServer::State::Job> ModelServer::State::take_front() {
  auto job = std::move(queue.front());
  queue.pop_front();
  queued_instances -= job->instances.size();
  return job;
}

void ModelServer::State::run_jobs(const std::vector<std::shared_ptr<Job>>& jobs,
                                  std::size_t total) {
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

void ModelServer::State::run_one(const Predictor& model, Job& job) {
  try {
    auto outputs = model.predict(job.instances);
    batch_sizes.observe(static_cast<double>(job.instances.size()));
    job.result.set_value(std::move(outputs));
  } catch (...) {
    job.result.set_exception(std::current_exception());
  }
}

std::vector<json> ModelServer::State::predict(const Predictor& model, std::vector<json> instances,
                                              int socket) {
  if (!options.enable_batching) {
    instances_total += instances.size();
    auto outputs = model.predict(instances);
    batch_sizes.observe(static_cast<double>(instances.size()));
    return outputs;
  }
  auto job = std::make_shared<Job>();
  job->instances = std::move(instances);
  job->socket = socket;
  auto future = job->result.get_future();
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    if (queue_closed) throw HttpError(503, "the server is shutting down");
    // TF Serving's bound: max_enqueued_batches full batches may wait. A
    // request larger than a batch is taken when the queue is empty.
    const auto limit =
        static_cast<std::size_t>(options.max_enqueued_batches * options.max_batch_size);
    if (!queue.empty() && queued_instances + job->instances.size() > limit) {
      ++rejected_total;
      throw HttpError(503, "the batching queue is full (" + std::to_string(queued_instances) +
                               " instances waiting, --max_enqueued_batches=" +
                               std::to_string(options.max_enqueued_batches) + ")");
    }
    queued_instances += job->instances.size();
    instances_total += job->instances.size();
    queue.push_back(job);
  }
  queue_cv.notify_one();
  return future.get();
}

}  // namespace garden::serving
