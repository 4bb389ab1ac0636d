// A group's health: each rank's heartbeat in the chief's store and its
// probe socket on the collectives' network, and the one line that names the
// ranks that stopped answering when a collective fails.
#include <sstream>
#include <thread>

#include "garden/base/error.h"
#include "network.h"
#include "process_group_impl.h"

namespace garden::distribute {

using detail::kHeartbeatPeriod;

void ProcessGroup::Impl::publish_probe(const Cluster& cluster,
                                       const std::vector<std::string>& addresses) {
  int port = 0;
  if (!addresses.empty()) probe_fd = detail::listen_for_probes(&port);
  std::string text = std::to_string(probe_fd >= 0 ? port : 0);
  for (const auto& address : addresses) text += " " + address;
  store->set("garden/probe/" + std::to_string(cluster.rank),
             std::vector<uint8_t>(text.begin(), text.end()));
}

void ProcessGroup::Impl::read_probes(const Cluster& cluster) {
  peer_addresses.assign(static_cast<std::size_t>(cluster.world_size), {});
  peer_ports.assign(static_cast<std::size_t>(cluster.world_size), 0);
  for (int64_t r = 0; r < cluster.world_size; ++r) {
    if (r == cluster.rank) continue;
    const auto bytes = store->get("garden/probe/" + std::to_string(r));
    std::istringstream text(std::string(bytes.begin(), bytes.end()));
    text >> peer_ports[static_cast<std::size_t>(r)];
    for (std::string address; text >> address;)
      peer_addresses[static_cast<std::size_t>(r)].push_back(address);
  }
}

std::vector<std::pair<int64_t, std::string>> ProcessGroup::Impl::unreachable_peers(
    const Cluster& cluster, std::chrono::milliseconds limit) const {
  std::vector<std::pair<std::string, int>> targets;
  std::vector<int64_t> owners;
  for (std::size_t r = 0; r < peer_ports.size(); ++r) {
    if (peer_ports[r] <= 0 || static_cast<int64_t>(r) == cluster.rank) continue;
    for (const auto& address : peer_addresses[r]) {
      targets.emplace_back(address, peer_ports[r]);
      owners.push_back(static_cast<int64_t>(r));
    }
  }
  const auto opened = detail::connects_within(targets, limit);
  std::vector<std::pair<int64_t, std::string>> lost;
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!opened[i] && (lost.empty() || lost.back().first != owners[i]))
      lost.emplace_back(owners[i], targets[i].first);
  return lost;
}

void ProcessGroup::Heartbeat::run() {
  while (!stopping) {
    try {
      store->add(key, 1);
    } catch (...) {
      break;  // the chief's store is gone: the collectives will say so
    }
    for (auto slept = std::chrono::milliseconds(0); slept < kHeartbeatPeriod && !stopping;
         slept += std::chrono::milliseconds(50))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::lock_guard<std::mutex> lock(mutex);
  done = true;
  finished.notify_all();
}

void ProcessGroup::fail(const std::string& what, const std::string& cause) const {
  // Two witnesses, so that a peer is named whichever network failed: the
  // peers whose probe on the collectives' network does not open (first,
  // while every live peer is still in its own fail()), and those whose
  // heartbeat in the chief's store does not move over a few periods.
  const auto unreachable = impl_->unreachable_peers(cluster_, std::chrono::milliseconds(1000));
  std::vector<bool> named(static_cast<std::size_t>(size()), false);
  std::string stopped;
  const auto name = [&](int64_t r, const std::string& how) {
    if (named[static_cast<std::size_t>(r)]) return;
    named[static_cast<std::size_t>(r)] = true;
    stopped += (stopped.empty() ? "" : ", ") + cluster_.describe_rank(r) + how;
  };
  bool store_gone = false;
  try {
    std::vector<int64_t> first(static_cast<std::size_t>(size()), -1);
    auto probe = detail::open_store(cluster_, /*server=*/false, std::chrono::milliseconds(3000));
    for (int64_t r = 0; r < size(); ++r)
      first[static_cast<std::size_t>(r)] = probe->add("garden/alive/" + std::to_string(r), 0);
    std::this_thread::sleep_for(kHeartbeatPeriod * 5);
    for (int64_t r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      if (probe->add("garden/alive/" + std::to_string(r), 0) == first[static_cast<std::size_t>(r)])
        name(r, "");
    }
  } catch (...) {
    store_gone = true;
  }
  if (store_gone && !is_chief()) {
    named[0] = true;
    stopped = std::string("rank 0 (the chief; its rendezvous store is gone)") +
              (stopped.empty() ? "" : ", " + stopped);
  }
  for (const auto& [r, address] : unreachable) name(r, " (unreachable at " + address + ")");
  std::string message = what + " failed on " + cluster_.describe() + ": ";
  if (!stopped.empty())
    message += stopped + " stopped answering (" + cause + ")";
  else
    message += cause;
  message += "; every worker stops: run the same command to resume from the last checkpoint";
  throw Error(message);
}

}  // namespace garden::distribute
