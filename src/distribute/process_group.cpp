// Joining a cluster over c10d (the chief's TCPStore, Gloo's devices or
// NCCL) and the collectives and messages on it; the heartbeats, probes and
// failure lines are in health.cpp, the sockets in network.cpp.
#include "garden/distribute/process_group.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/base/torch_features.h"
#include "network.h"
#include "process_group_impl.h"

namespace garden::distribute {

using detail::Clock;
using detail::first_line;
using detail::message_of;
using detail::open_store;

namespace {
struct WorkHolder {
  c10::intrusive_ptr<c10d::Work> work;
};
}  // namespace

ProcessGroup::ProcessGroup(const Cluster& cluster, std::chrono::milliseconds timeout)
    : cluster_(cluster), timeout_(timeout), impl_(std::make_unique<Impl>()) {}

namespace {

// USE_LIBUV=1 (torchrun's variable) asks for the store's libuv server.
bool libuv_requested() {
  const char* libuv = std::getenv("USE_LIBUV");
  return libuv && std::string(libuv) == "1";
}

std::string address(const Cluster& cluster) {
  return cluster.master_addr + ":" + std::to_string(cluster.master_port);
}

// How long joining may wait for the others. A group restarted by a
// launcher (torchrun's TORCHELASTIC_RESTART_COUNT above 0) starts on one
// host seconds before another: the survivors there see the failure only at
// their next collective (up to `timeout`), then name who stopped and end
// (a few seconds) before their launcher restarts them.
std::chrono::milliseconds join_timeout(std::chrono::milliseconds timeout) {
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (!restarts || std::atol(restarts) <= 0) return timeout;
  return 2 * timeout + std::chrono::seconds(10);
}

std::string seconds(std::chrono::milliseconds duration) {
  return std::to_string(duration.count() / 1000) + " s";
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
    if (const std::string address = detail::numeric_address(cluster.own_host); !address.empty())
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
      if (const std::string address = detail::interface_address(name); !address.empty())
        network.addresses.push_back(address);
    }
    if (!network.devices.empty()) return network;
  }
  const std::string local = detail::local_address_towards(cluster.master_addr, cluster.master_port);
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

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> detail::open_store(const Cluster& cluster, bool server,
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

ProcessGroupPtr ProcessGroup::connect(const Cluster& cluster, const std::string& device,
                                      std::chrono::milliseconds timeout) {
  if (!cluster.distributed()) throw Error("a ProcessGroup needs more than one process");
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(cluster, timeout));
  Impl& impl = *group->impl_;
  impl.device = c10::Device(device);
  group->device_ = impl.device;
  const std::chrono::milliseconds joining = join_timeout(timeout);
  const auto deadline = Clock::now() + joining;
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
      throw Error("no chief answered at " + address(cluster) + " within " + seconds(joining) +
                  " (" + why + "); start the chief (rank 0), or check MASTER_ADDR / MASTER_PORT");
    }
  }
  try {
    // Every process arrives before Gloo's rendezvous, which waits only
    // `timeout` for the others.
    const std::string arrived = "garden_join/arrived";
    impl.store->add(arrived, 1);
    for (int64_t count = 1;; std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
      count = impl.store->add(arrived, 0);
      if (count >= cluster.world_size) break;
      if (Clock::now() >= deadline)
        throw Error("joining the " + std::to_string(cluster.world_size) + " processes at " +
                    address(cluster) + " failed for " + cluster.describe() + ": " +
                    std::to_string(count) + " of them arrived within " + seconds(joining) +
                    "; start the others with the same cluster (MASTER_ADDR, MASTER_PORT, "
                    "WORLD_SIZE or TF_CONFIG)");
    }
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

bool ProcessGroup::can_sum(at::ScalarType type) {
  std::vector<at::Tensor> one = {torch::zeros({1}, torch::dtype(type).device(impl_->device))};
  try {
    impl_->allreduce(one, ReduceOp::kSum)->wait(timeout_);
    return true;
  } catch (const c10::Error& e) {
    // The backend's type switch refuses before anything crosses the wire.
    if (message_of(e).find("Invalid scalar type") != std::string::npos) return false;
    fail("a " + std::string(c10::toString(type)) + " all-reduce", first_line(message_of(e)));
  }
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
