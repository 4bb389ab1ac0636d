// The training processes of one cluster, connected over PyTorch's c10d: a
// TCPStore served by the chief (rank 0) for the rendezvous, and
// ProcessGroupGloo for the collectives (ProcessGroupNCCL when the device is
// CUDA and LibTorch was built with it).
//
//   auto group = ProcessGroup::connect(cluster, "cpu", std::chrono::seconds(300));
//   group->broadcast(weights);               // from the chief
//   group->all_reduce(gradients);            // sums, in place
//
// Every collective is called by every rank in the same order. When one
// fails (a peer died, or no answer within the timeout) it throws
// garden::Error naming the ranks that stopped answering, found from the
// heartbeats each rank keeps in the store.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "garden/distribute/cluster.h"

namespace garden::distribute {

enum class ReduceOp { kSum, kMax, kMin };

class ProcessGroup {
 public:
  // Joins the cluster: the chief serves the store at
  // master_addr:master_port (retrying a port still held by a previous run),
  // the others retry until it answers; both give up after `timeout` with a
  // line saying what they waited for. `device` is runtime.device: cpu uses
  // Gloo, cuda NCCL.
  static std::shared_ptr<ProcessGroup> connect(const Cluster& cluster, const std::string& device,
                                               std::chrono::milliseconds timeout);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const { return cluster_.rank; }
  int64_t size() const { return cluster_.world_size; }
  bool is_chief() const { return cluster_.rank == 0; }
  const Cluster& cluster() const { return cluster_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Where the collectives' tensors must live: the CPU for Gloo, the CUDA
  // device for NCCL.
  const c10::Device& device() const { return device_; }

  // Reduces `tensors` over every rank, in place (each tensor separately).
  // `what` names the collective in an error ("gradients at step 12").
  void all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op, const std::string& what);
  // Sums of the ranks' values, element by element (float64).
  std::vector<double> sum(const std::vector<double>& values, const std::string& what);
  // Whether the backend can sum tensors of `type` (a collective: every rank
  // asks alike). Debian's LibTorch 2.14 builds Gloo's all-reduce without
  // float16 and bfloat16; 1.13's sums float16.
  bool can_sum(at::ScalarType type);

  // An all-reduce (sum) started now and finished by wait(), so that
  // communication overlaps computation.
  class Pending {
   public:
    Pending() = default;
    // Waits; returns the seconds spent waiting.
    double wait();
    bool started() const { return work_ != nullptr; }

   private:
    friend class ProcessGroup;
    std::shared_ptr<void> work_;
    const ProcessGroup* group_ = nullptr;
    std::string what_;
  };
  Pending all_reduce_async(at::Tensor tensor, const std::string& what);

  // Copies the root's tensors into every rank's, in place.
  void broadcast(std::vector<at::Tensor>& tensors, int64_t root, const std::string& what);
  // Every rank's text, in rank order.
  std::vector<std::string> all_gather(const std::string& text, const std::string& what);
  void barrier(const std::string& what);

  // Point-to-point messages between two ranks (parameter servers' requests
  // and replies; Gloo only): a JSON header and float32 tensors of any shape.
  // Messages between two ranks arrive in the order they were sent.
  struct Message {
    nlohmann::json meta = nlohmann::json::object();
    std::vector<at::Tensor> tensors;
  };
  void send(const Message& message, int64_t to, const std::string& what);
  // From rank `from`, or from whichever rank sends first when `from` is -1
  // (then *sender says which).
  Message receive(int64_t from, const std::string& what, int64_t* sender = nullptr);

  // Turns a failed collective into one line naming the ranks that stopped
  // answering (from their heartbeats), and throws it.
  [[noreturn]] void fail(const std::string& what, const std::string& cause) const;

 private:
  struct Impl;
  // The heartbeat thread's own state: it may be left blocked in a read from
  // a chief that vanished (a host cut off), so it owns what it uses and the
  // group does not wait for it past a bound.
  struct Heartbeat;
  ProcessGroup(const Cluster& cluster, std::chrono::milliseconds timeout);

  Cluster cluster_;
  std::chrono::milliseconds timeout_;
  c10::Device device_{c10::kCPU};
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<Heartbeat> heartbeat_state_;
  std::thread heartbeat_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace garden::distribute
