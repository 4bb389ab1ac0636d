// Requests' instances run on the serving version: at once on the request's
// thread, or with --enable_batching merged by a thread of its own into one
// forward pass of up to --max_batch_size instances, waiting at most
// --batch_timeout_micros after the first, with at most
// --max_enqueued_batches batches waiting. Private to serving.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "garden/serving/predictor.h"
#include "garden/serving/server.h"
#include "server_metrics.h"
#include "server_request.h"
#include "server_versions.h"

namespace garden::serving {

class BatchingQueue {
 public:
  // `options`, `versions` and `metrics` outlive this.
  BatchingQueue(const ServerOptions& options, const ModelVersions& versions,
                ServingMetrics& metrics);

  void start();  // the batching thread, when batching
  // No job is taken from now on (HttpError 503); the batching thread ends
  // once it has run those waiting.
  void close();
  void join();

  // The model's outputs for `instances`, through the queue when batching;
  // not computed when the client at `socket` (-1: none known) has gone
  // (HttpError 499). A full queue is HttpError 503.
  std::vector<json> predict(const Predictor& model, std::vector<json> instances, int socket);

 private:
  struct Job {
    std::vector<json> instances;
    std::promise<std::vector<json>> result;
    int socket = -1;  // the client's connection; -1 where none is known
  };

  // Runs jobs on the serving predictor, merged up to max_batch_size.
  void run_batches();
  // The queue's first job, with queued_instances_ kept; mutex_ held.
  std::shared_ptr<Job> take_front();
  void run_jobs(const std::vector<std::shared_ptr<Job>>& jobs, std::size_t total);
  void run_one(const Predictor& model, Job& job);

  const ServerOptions& options_;
  const ModelVersions& versions_;
  ServingMetrics& metrics_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::size_t queued_instances_ = 0;  // in queue_, bounded by max_enqueued_batches batches
  bool closed_ = false;
  std::thread batcher_;
};

}  // namespace garden::serving
