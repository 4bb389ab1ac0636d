// What the process group's units share (private to src/distribute): the
// group's c10d objects and probe state, the heartbeat thread's state, and
// the helpers that turn a library's exception into one line.
// process_group.cpp connects and runs the collectives; health.cpp keeps the
// heartbeats and probes and names the ranks that stopped answering.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef GARDEN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "garden/distribute/process_group.h"

namespace garden::distribute {

namespace detail {
using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(500);

inline std::string message_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

// One line of a library message: the first line, without Gloo's
// "[file.cc:123] " prefix.
inline std::string first_line(std::string text) {
  text = text.substr(0, text.find('\n'));
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find("] ");
    if (close != std::string::npos) text = text.substr(close + 2);
  }
  return text;
}

inline c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    default:
      return c10d::ReduceOp::SUM;
  }
}

// A client (or, with `server`, the chief's server) of the cluster's store.
c10::intrusive_ptr<c10d::TCPStore> open_store(const Cluster& cluster, bool server,
                                              std::chrono::milliseconds timeout);
}  // namespace detail

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#ifdef GARDEN_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  c10::Device device{c10::kCPU};
  // This process's probe: a listening socket that is never accepted from
  // (the kernel completes a peer's connect), so a peer that can open a
  // connection to it knows the network between them works. Each rank's
  // data-network addresses and probe port, by rank.
  int probe_fd = -1;
  std::vector<std::vector<std::string>> peer_addresses;
  std::vector<int> peer_ports;

  ~Impl() {
    if (probe_fd >= 0) ::close(probe_fd);
  }
  // Opens the probe and writes "port address..." under garden/probe/<rank>.
  void publish_probe(const Cluster& cluster, const std::vector<std::string>& addresses);
  void read_probes(const Cluster& cluster);
  // The ranks (other than this one) whose probe cannot be opened within
  // `limit`, each with the address that failed.
  std::vector<std::pair<int64_t, std::string>> unreachable_peers(
      const Cluster& cluster, std::chrono::milliseconds limit) const;

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
    c10d::AllreduceOptions options;
    options.reduceOp = detail::to_c10d(op);
#ifdef GARDEN_WITH_NCCL
    if (nccl) return nccl->allreduce(tensors, options);
#endif
    return gloo->allreduce(tensors, options);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, int64_t root) {
    c10d::BroadcastOptions options;
    options.rootRank = root;
#ifdef GARDEN_WITH_NCCL
    if (nccl) return nccl->broadcast(tensors, options);
#endif
    return gloo->broadcast(tensors, options);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out,
                                           std::vector<at::Tensor>& in) {
#ifdef GARDEN_WITH_NCCL
    if (nccl) return nccl->allgather(out, in);
#endif
    return gloo->allgather(out, in);
  }
  c10::intrusive_ptr<c10d::Work> barrier() {
#ifdef GARDEN_WITH_NCCL
    if (nccl) return nccl->barrier();
#endif
    return gloo->barrier();
  }
};

struct ProcessGroup::Heartbeat {
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::string key;

  // Adds 1 to its key every kHeartbeatPeriod until stopping; then done.
  void run();
};

}  // namespace garden::distribute
