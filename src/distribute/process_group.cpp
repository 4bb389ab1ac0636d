#include "garden/distribute/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef GARDEN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/base/torch_features.h"

namespace garden::distribute {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(500);

std::string message_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

// One line of a library message: the first line, without Gloo's
// "[file.cc:123] " prefix.
std::string first_line(std::string text) {
  text = text.substr(0, text.find('\n'));
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find("] ");
    if (close != std::string::npos) text = text.substr(close + 2);
  }
  return text;
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    default:
      return c10d::ReduceOp::SUM;
  }
}

struct WorkHolder {
  c10::intrusive_ptr<c10d::Work> work;
};
}  // namespace

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
    options.reduceOp = to_c10d(op);
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

ProcessGroup::ProcessGroup(const Cluster& cluster, std::chrono::milliseconds timeout)
    : cluster_(cluster), timeout_(timeout), impl_(std::make_unique<Impl>()) {}

namespace {

// USE_LIBUV=1 (torchrun's variable) asks for the store's libuv server.
bool libuv_requested() {
  const char* libuv = std::getenv("USE_LIBUV");
  return libuv && std::string(libuv) == "1";
}

c10::intrusive_ptr<c10d::TCPStore> open_store(const Cluster& cluster, bool server,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(cluster.master_port);
  options.isServer = server;
  options.numWorkers = static_cast<std::size_t>(cluster.world_size);
  options.waitWorkers = false;
  options.timeout = timeout;
#if GARDEN_HAS_TCPSTORE_LIBUV
  // The store's libuv server only where asked for: LibTorch 2.4 and later
  // default to it, and a LibTorch built without libuv then refuses to start
  // the store at all. The classic server is the one 1.13 has.
  options.useLibUV = libuv_requested();
#endif
  return c10::make_intrusive<c10d::TCPStore>(cluster.master_addr, options);
}

std::string address(const Cluster& cluster) {
  return cluster.master_addr + ":" + std::to_string(cluster.master_port);
}

// This host's address on the route to `host`: a UDP socket connected there
// (which sends nothing) and its local name. "" when there is no route.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return "";
  std::string result;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0) {
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text))) result = text;
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return result;
}

// The first IPv4 address (else IPv6) of interface `name`; "" when none.
std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (const ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || name != entry->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (entry->ifa_addr->sa_family == AF_INET && v4.empty()) {
      if (inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr,
                    text, sizeof(text)))
        v4 = text;
    } else if (entry->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      if (inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr,
                    text, sizeof(text)))
        v6 = text;
    }
  }
  ::freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

// `host` as a numeric address, as Gloo binds it (a peer need not resolve
// this host's names); "" when it does not resolve.
std::string numeric_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found) return "";
  char text[NI_MAXHOST] = {};
  const bool ok = getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof(text), nullptr, 0,
                              NI_NUMERICHOST) == 0;
  freeaddrinfo(found);
  return ok ? text : "";
}

// Where this process's collectives travel: Gloo's devices and, for every
// transport, the addresses its peers reach it at (for the probes).
struct DataNetwork {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  std::vector<std::string> addresses;
};

// As PyTorch chooses Gloo's devices: the host's own address when the
// cluster names it, else GLOO_SOCKET_IFNAME (a comma-separated list: one
// device each), else the address on the route to the chief (a host's name
// may resolve to 127.0.0.1, which the other hosts cannot reach), else
// Gloo's default. `gloo` false (NCCL) chooses the addresses alone.
DataNetwork data_network(const Cluster& cluster, bool gloo) {
  DataNetwork network;
  if (!cluster.own_host.empty()) {
    if (gloo)
      network.devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(cluster.own_host));
    if (const std::string address = numeric_address(cluster.own_host); !address.empty())
      network.addresses.push_back(address);
    return network;
  }
  const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME");
  if (gloo && interfaces && *interfaces) {
    std::istringstream names(interfaces);
    for (std::string name; std::getline(names, name, ',');) {
      if (name.empty()) continue;
      try {
        network.devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      } catch (const std::exception& e) {
        throw Error("GLOO_SOCKET_IFNAME names '" + name +
                    "', which Gloo cannot use on this host (" + first_line(message_of(e)) + ")");
      }
      if (const std::string address = interface_address(name); !address.empty())
        network.addresses.push_back(address);
    }
    if (!network.devices.empty()) return network;
  }
  const std::string local = local_address_towards(cluster.master_addr, cluster.master_port);
  if (!local.empty()) {
    if (gloo && cluster.is_chief())
      log_info() << "Gloo binds " << local << ", this host's address on the route to "
                 << cluster.master_addr << " (set GLOO_SOCKET_IFNAME to choose an interface)";
    if (gloo) network.devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
    network.addresses.push_back(local);
    return network;
  }
  // No address to publish: this rank is then named by its heartbeats only.
  if (gloo) network.devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return network;
}

// A socket listening on every address of this host at a port of the
// kernel's choice; -1 (and no probes of this rank) when it cannot be made.
int listen_for_probes(int* port) {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool v6 = fd >= 0;
  const int sock = v6 ? fd : ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  sockaddr_storage address{};
  socklen_t length = 0;
  if (v6) {
    const int off = 0;  // IPv4 peers too
    ::setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_any;
    length = sizeof(sockaddr_in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&address);
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(INADDR_ANY);
    length = sizeof(sockaddr_in);
  }
  if (::bind(sock, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(sock, SOMAXCONN) != 0 ||
      ::getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(sock);
    return -1;
  }
  *port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  return sock;
}

// Opens a connection to every (address, port) at once and says, for each,
// whether it opened within `limit`.
std::vector<bool> connects_within(const std::vector<std::pair<std::string, int>>& targets,
                                  std::chrono::milliseconds limit) {
  std::vector<bool> opened(targets.size(), false);
  std::vector<int> fds(targets.size(), -1);
  std::vector<pollfd> waiting;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(targets[i].first.c_str(), std::to_string(targets[i].second).c_str(), &hints,
                    &found) != 0 ||
        !found)
      continue;
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      fds[i] = fd;
      if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        opened[i] = true;
      } else if (errno == EINPROGRESS) {
        waiting.push_back({fd, POLLOUT, 0});
        which.push_back(i);
      }
    }
    freeaddrinfo(found);
  }
  const auto deadline = Clock::now() + limit;
  std::size_t left = waiting.size();
  while (left > 0) {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (remaining <= 0) break;
    const int ready = ::poll(waiting.data(), waiting.size(), static_cast<int>(remaining));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    for (std::size_t k = 0; k < waiting.size(); ++k) {
      if (waiting[k].fd < 0 || !waiting[k].revents) continue;
      int error = 0;
      socklen_t length = sizeof(error);
      ::getsockopt(waiting[k].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      opened[which[k]] = error == 0;
      waiting[k].fd = -1;  // poll skips it from now on
      --left;
    }
  }
  for (const int fd : fds)
    if (fd >= 0) ::close(fd);
  return opened;
}

}  // namespace

void ProcessGroup::Impl::publish_probe(const Cluster& cluster,
                                       const std::vector<std::string>& addresses) {
  int port = 0;
  if (!addresses.empty()) probe_fd = listen_for_probes(&port);
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
  const auto opened = connects_within(targets, limit);
  std::vector<std::pair<int64_t, std::string>> lost;
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!opened[i] && (lost.empty() || lost.back().first != owners[i]))
      lost.emplace_back(owners[i], targets[i].first);
  return lost;
}

struct ProcessGroup::Heartbeat {
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::string key;

  void run() {
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
};

ProcessGroupPtr ProcessGroup::connect(const Cluster& cluster, const std::string& device,
                                      std::chrono::milliseconds timeout) {
  if (!cluster.distributed()) throw Error("a ProcessGroup needs more than one process");
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(cluster, timeout));
  Impl& impl = *group->impl_;
  impl.device = c10::Device(device);
  group->device_ = impl.device;
  const auto deadline = Clock::now() + timeout;
#if !GARDEN_HAS_TCPSTORE_LIBUV
  if (libuv_requested())
    log_warning() << "USE_LIBUV=1 is ignored: LibTorch " TORCH_VERSION
                     "'s TCPStore has only its classic server";
#endif
  // The chief serves the store; a port still held by a run that is ending
  // is retried until the deadline.
  for (int attempt = 0;; ++attempt) {
    try {
      impl.store = open_store(cluster, cluster.is_chief(), timeout);
      break;
    } catch (const std::exception& e) {
      const std::string why = first_line(message_of(e));
      // Not a port to wait for: this LibTorch has no libuv server.
      if (libuv_requested() && why.find("libuv") != std::string::npos)
        throw Error("USE_LIBUV=1 but this LibTorch cannot serve its TCPStore with libuv (" + why +
                    "); unset USE_LIBUV");
      if (Clock::now() + std::chrono::seconds(1) < deadline) {
        if (attempt == 0)
          log_warning() << (cluster.is_chief() ? "cannot serve the rendezvous at "
                                               : "waiting for the chief at ")
                        << address(cluster) << " (" << why << "); retrying";
        std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;
      }
      if (cluster.is_chief())
        throw Error("the chief cannot serve the rendezvous at " + address(cluster) + ": " + why +
                    " (is another run still using the port? set MASTER_PORT or the chief's "
                    "TF_CONFIG port to a free one)");
      throw Error("no chief answered at " + address(cluster) + " within " +
                  std::to_string(timeout.count() / 1000) + " s (" + why +
                  "); start the chief (rank 0), or check MASTER_ADDR / MASTER_PORT");
    }
  }
  try {
    // Gloo's rendezvous keys under their own prefix, apart from the
    // heartbeats.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("garden", impl.store);
#ifdef GARDEN_WITH_NCCL
    if (impl.device.is_cuda()) {
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      impl.nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          prefixed, static_cast<int>(cluster.rank), static_cast<int>(cluster.world_size), options);
    }
    if (!impl.nccl) {
#else
    if (impl.device.is_cuda())
      throw Error("runtime.device is '" + device +
                  "' but this Garden was built without NCCL; multi-worker CUDA training needs a "
                  "LibTorch with CUDA (see docs/gpu.md)");
    {
#endif
      auto options = c10d::ProcessGroupGloo::Options::create();
      options->timeout = timeout;
      DataNetwork network = data_network(cluster, /*gloo=*/true);
      options->devices = std::move(network.devices);
      impl.publish_probe(cluster, network.addresses);
      impl.gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
          prefixed, static_cast<int>(cluster.rank), static_cast<int>(cluster.world_size), options);
    }
#ifdef GARDEN_WITH_NCCL
    else {
      impl.publish_probe(cluster, data_network(cluster, /*gloo=*/false).addresses);
    }
#endif
    // Every rank published its probe before it joined the collectives, so
    // all are there now; they are read once, while the chief's store
    // answers.
    impl.read_probes(cluster);
    // Short: a heartbeat to a chief that hangs must not keep this process
    // from exiting.
    group->heartbeat_state_ = std::make_shared<Heartbeat>();
    group->heartbeat_state_->store =
        open_store(cluster, /*server=*/false, std::min(timeout, std::chrono::milliseconds(5000)));
    group->heartbeat_state_->key = "garden/alive/" + std::to_string(cluster.rank);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("joining the " + std::to_string(cluster.world_size) + " processes at " +
                address(cluster) + " failed for " + cluster.describe() + ": " +
                first_line(message_of(e)));
  }
  group->heartbeat_ = std::thread([state = group->heartbeat_state_] { state->run(); });
  return group;
}

ProcessGroup::~ProcessGroup() {
  if (!heartbeat_.joinable()) return;
  heartbeat_state_->stopping = true;
  // A heartbeat blocked in a read from a chief that is cut off (LibTorch
  // 1.13's store bounds its connect, not its reads) would hold the exit
  // forever: it is left to end with the process, owning its store.
  std::unique_lock<std::mutex> lock(heartbeat_state_->mutex);
  const bool done = heartbeat_state_->finished.wait_for(lock, std::chrono::seconds(2),
                                                        [&] { return heartbeat_state_->done; });
  lock.unlock();
  if (done)
    heartbeat_.join();
  else
    heartbeat_.detach();
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
    auto probe = open_store(cluster_, /*server=*/false, std::chrono::milliseconds(3000));
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

namespace {
template <class Fn>
auto guarded(const ProcessGroup& group, const std::string& what, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    group.fail(what, first_line(message_of(e)));
  }
}
}  // namespace

void ProcessGroup::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op,
                              const std::string& what) {
  guarded(*this, what, [&] {
    for (auto& tensor : tensors) {
      std::vector<at::Tensor> one = {tensor};
      impl_->allreduce(one, op)->wait(timeout_);
    }
    return 0;
  });
}

std::vector<double> ProcessGroup::sum(const std::vector<double>& values, const std::string& what) {
  if (values.empty()) return {};
  at::Tensor tensor = torch::tensor(values, torch::kFloat64).to(impl_->device);
  std::vector<at::Tensor> tensors = {tensor};
  all_reduce(tensors, ReduceOp::kSum, what);
  tensor = tensors[0].cpu().contiguous();
  const double* data = tensor.data_ptr<double>();
  return std::vector<double>(data, data + tensor.numel());
}

ProcessGroup::Pending ProcessGroup::all_reduce_async(at::Tensor tensor, const std::string& what) {
  Pending pending;
  pending.group_ = this;
  pending.what_ = what;
  auto holder = std::make_shared<WorkHolder>();
  guarded(*this, what, [&] {
    std::vector<at::Tensor> one = {std::move(tensor)};
    holder->work = impl_->allreduce(one, ReduceOp::kSum);
    return 0;
  });
  pending.work_ = holder;
  return pending;
}

double ProcessGroup::Pending::wait() {
  if (!work_) return 0.0;
  const auto start = Clock::now();
  auto* holder = static_cast<WorkHolder*>(work_.get());
  guarded(*group_, what_, [&] {
    holder->work->wait(group_->timeout_);
    return 0;
  });
  work_.reset();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int64_t root,
                             const std::string& what) {
  guarded(*this, what, [&] {
    for (auto& tensor : tensors) {
      std::vector<at::Tensor> one = {tensor};
      impl_->broadcast(one, root)->wait(timeout_);
    }
    return 0;
  });
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& text,
                                                  const std::string& what) {
  // Lengths first, then every text padded to the longest.
  const auto lengths = sum(
      [&] {
        std::vector<double> mine(static_cast<std::size_t>(size()), 0.0);
        mine[static_cast<std::size_t>(rank())] = static_cast<double>(text.size());
        return mine;
      }(),
      what);
  int64_t longest = 1;
  for (double length : lengths) longest = std::max(longest, static_cast<int64_t>(length));
  at::Tensor mine = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(mine.data_ptr<uint8_t>(), text.data(), text.size());
  mine = mine.to(impl_->device);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t r = 0; r < size(); ++r) out[0].push_back(torch::empty_like(mine));
  std::vector<at::Tensor> in = {mine};
  guarded(*this, what, [&] {
    impl_->allgather(out, in)->wait(timeout_);
    return 0;
  });
  std::vector<std::string> texts;
  for (int64_t r = 0; r < size(); ++r) {
    const at::Tensor bytes = out[0][static_cast<std::size_t>(r)].cpu();
    texts.emplace_back(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                       static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
  }
  return texts;
}

void ProcessGroup::barrier(const std::string& what) {
  guarded(*this, what, [&] {
    impl_->barrier()->wait(timeout_);
    return 0;
  });
}

namespace {
// Tags of a message's three parts: sizes, JSON text, tensor data.
constexpr int kTagSizes = 0;
constexpr int kTagText = 1;
constexpr int kTagData = 2;
}  // namespace

void ProcessGroup::send(const Message& message, int64_t to, const std::string& what) {
  if (!impl_->gloo) throw Error(what + ": point-to-point messages need Gloo (runtime.device cpu)");
  nlohmann::json meta = message.meta;
  nlohmann::json shapes = nlohmann::json::array();
  std::vector<at::Tensor> parts;
  int64_t total = 0;
  for (const auto& tensor : message.tensors) {
    if (tensor.scalar_type() != at::kFloat)
      throw Error(what + ": a message carries float32 tensors, not " +
                  std::string(c10::toString(tensor.scalar_type())));
    shapes.push_back(tensor.sizes().vec());
    parts.push_back(tensor.detach().to(torch::kCPU).reshape({-1}));
    total += tensor.numel();
  }
  meta["_shapes"] = std::move(shapes);
  const std::string text = meta.dump();
  at::Tensor sizes = torch::tensor({static_cast<int64_t>(text.size()), total}, torch::kLong);
  at::Tensor bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  guarded(*this, what, [&] {
    std::vector<at::Tensor> one = {sizes};
    impl_->gloo->send(one, static_cast<int>(to), kTagSizes)->wait(timeout_);
    one = {bytes};
    impl_->gloo->send(one, static_cast<int>(to), kTagText)->wait(timeout_);
    if (total > 0) {
      one = {torch::cat(parts).contiguous()};
      impl_->gloo->send(one, static_cast<int>(to), kTagData)->wait(timeout_);
    }
    return 0;
  });
}

ProcessGroup::Message ProcessGroup::receive(int64_t from, const std::string& what,
                                            int64_t* sender) {
  if (!impl_->gloo) throw Error(what + ": point-to-point messages need Gloo (runtime.device cpu)");
  at::Tensor sizes = torch::empty({2}, torch::kLong);
  int64_t source = from;
  guarded(*this, what, [&] {
    std::vector<at::Tensor> one = {sizes};
    if (from < 0) {
      auto work = impl_->gloo->recvAnysource(one, kTagSizes);
      work->wait(timeout_);
      source = work->sourceRank();
    } else {
      impl_->gloo->recv(one, static_cast<int>(from), kTagSizes)->wait(timeout_);
    }
    return 0;
  });
  if (sender) *sender = source;
  const int64_t text_size = sizes[0].item<int64_t>(), total = sizes[1].item<int64_t>();
  at::Tensor bytes = torch::empty({text_size}, torch::kUInt8);
  at::Tensor data = torch::empty({total}, torch::kFloat);
  guarded(*this, what, [&] {
    std::vector<at::Tensor> one = {bytes};
    impl_->gloo->recv(one, static_cast<int>(source), kTagText)->wait(timeout_);
    if (total > 0) {
      one = {data};
      impl_->gloo->recv(one, static_cast<int>(source), kTagData)->wait(timeout_);
    }
    return 0;
  });
  Message message;
  message.meta =
      nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                        static_cast<std::size_t>(text_size)));
  int64_t offset = 0;
  for (const auto& shape : message.meta.at("_shapes")) {
    const auto dims = shape.get<std::vector<int64_t>>();
    int64_t numel = 1;
    for (const int64_t d : dims) numel *= d;
    message.tensors.push_back(data.narrow(0, offset, numel).view(dims));
    offset += numel;
  }
  message.meta.erase("_shapes");
  return message;
}

}  // namespace garden::distribute
