#include "garden/core/parameter_server.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/core/actions.h"

namespace garden {

using Message = distribute::ProcessGroup::Message;

std::vector<int64_t> assign_shards(const std::vector<int64_t>& sizes, int64_t num_ps) {
  if (num_ps < 1) throw Error("assign_shards needs at least one ps");
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(static_cast<std::size_t>(num_ps), 0), shard(sizes.size(), 0);
  for (const std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    shard[i] = least;
    load[static_cast<std::size_t>(least)] += sizes[i];
  }
  return shard;
}

namespace {

// How a stop reason ends a worker or a ps: "done" returns; a signal or an
// error on the chief ends this process too.
void end_with(const std::string& reason, const std::string& who) {
  if (reason == "done") return;
  if (reason == "preempted")
    throw Preempted(who + ": the chief checkpointed after a stop signal; every process stops", 15);
  throw Error(who + ": the chief stopped the run: " + reason);
}

// One ps task's state and requests.
class Server {
 public:
  Server(distribute::ProcessGroup& group, const config::OptimizationConfig& optimizer_config)
      : group_(group),
        optimizer_config_(optimizer_config),
        index_(group.rank() - 1 - group.cluster().num_workers),
        workers_(group.cluster().num_workers),
        who_("ps " + std::to_string(index_)) {}

  void run() {
    while (true) {
      int64_t from = -1;
      Message request = group_.receive(
          -1, who_ + " waiting for a request (step " + std::to_string(applied_) + ")", &from);
      const std::string op = request.meta.at("op").get<std::string>();
      if (op == "init") {
        init(request);
        // The chief schedules no step before every ps has its shard.
        group_.send(Message{}, from, who_ + " confirming its shard");
      } else if (op == "ticket") {
        tickets_.push_back(from);
        grant();
      } else if (op == "schedule") {
        limit_ = std::max(limit_, request.meta.at("step").get<int64_t>());
        grant();
      } else if (op == "pull") {
        Message reply;
        reply.meta["step"] = applied_;
        for (const auto& p : parameters_) reply.tensors.push_back(p.tensor);
        group_.send(reply, from, who_ + " sending its weights to rank " + std::to_string(from));
      } else if (op == "push") {
        apply(request);
      } else if (op == "join") {
        joins_.emplace_back(from, request.meta.at("step").get<int64_t>());
        answer_joins();
      } else if (op == "state") {
        send_state(from);
      } else if (op == "stop") {
        reason_ = request.meta.at("reason").get<std::string>();
        if (index_ != 0) break;  // ps 0 says so once every worker knows
        grant();
      } else {
        throw Error(who_ + ": unknown request '" + op + "' from rank " + std::to_string(from));
      }
      if (index_ == 0 && !reason_.empty() && told_ == workers_) {
        // Every worker has its last answer: the other ps tasks may go.
        Message stop;
        stop.meta = {{"op", "stop"}, {"reason", reason_}};
        for (int64_t k = 1; k < group_.cluster().num_ps; ++k)
          group_.send(stop, 1 + workers_ + k, who_ + " stopping ps " + std::to_string(k));
        break;
      }
    }
    end_with(reason_, who_);
  }

 private:
  void init(const Message& request) {
    const auto names = request.meta.at("names").get<std::vector<std::string>>();
    parameters_.clear();
    for (std::size_t i = 0; i < names.size(); ++i)
      parameters_.push_back({names[i], request.tensors.at(i).clone()});
    optimizer_ = optim::make_optimizer(optimizer_config_, parameters_);
    std::map<std::string, at::Tensor> slots;
    const auto slot_names = request.meta.at("slots").get<std::vector<std::string>>();
    for (std::size_t i = 0; i < slot_names.size(); ++i)
      slots[slot_names[i]] = request.tensors.at(names.size() + i).clone();
    optimizer_->load_state(slots, request.meta.at("optimizer"));
    applied_ = request.meta.at("step").get<int64_t>();
    granted_ = limit_ = applied_;
  }

  // Answers waiting step requests (ps 0): a step while the schedule allows,
  // the end once the chief stopped.
  void grant() {
    while (!tickets_.empty() && (granted_ < limit_ || !reason_.empty())) {
      Message reply;
      if (reason_.empty()) {
        reply.meta["step"] = ++granted_;
      } else {
        reply.meta["stop"] = reason_;
        ++told_;
      }
      const int64_t worker = tickets_.front();
      tickets_.erase(tickets_.begin());
      group_.send(reply, worker, who_ + " answering rank " + std::to_string(worker));
    }
  }

  void apply(const Message& request) {
    if (!optimizer_) throw Error(who_ + ": gradients arrived before the chief sent the weights");
    if (request.meta.value("skip", false)) {
      optimizer_->skip_step();
    } else {
      if (request.tensors.size() != parameters_.size())
        throw Error(who_ + ": " + std::to_string(request.tensors.size()) + " gradients for " +
                    std::to_string(parameters_.size()) + " weights");
      const auto present = request.meta.at("present").get<std::vector<bool>>();
      std::vector<at::Tensor> gradients;
      for (std::size_t i = 0; i < parameters_.size(); ++i)
        gradients.push_back(present[i] ? request.tensors[i] : at::Tensor());
      optimizer_->apply_gradients(gradients);
    }
    ++applied_;
    if (request.meta.contains("scalars")) {
      for (const auto& [key, value] : request.meta.at("scalars").items()) {
        auto& [sum, steps] = scalars_[key];
        sum += value.get<double>();
        ++steps;
      }
      examples_ += request.meta.value("examples", int64_t{0});
      signal_ = std::max(signal_, request.meta.value("signal", 0));
    }
    answer_joins();
  }

  void answer_joins() {
    for (auto it = joins_.begin(); it != joins_.end();) {
      if (applied_ < it->second) {
        ++it;
        continue;
      }
      Message reply;
      reply.meta["step"] = applied_;
      reply.meta["examples"] = examples_;
      reply.meta["signal"] = signal_;
      nlohmann::json scalars = nlohmann::json::object();
      for (const auto& [key, sum_steps] : scalars_)
        scalars[key] = {sum_steps.first, sum_steps.second};
      reply.meta["scalars"] = std::move(scalars);
      scalars_.clear();
      examples_ = 0;
      group_.send(reply, it->first, who_ + " answering the chief's join");
      it = joins_.erase(it);
    }
  }

  void send_state(int64_t to) {
    Message reply;
    reply.meta["optimizer"] = optimizer_->state_meta();
    std::vector<std::string> names;
    for (const auto& p : parameters_) {
      names.push_back(p.name);
      reply.tensors.push_back(p.tensor);
    }
    std::vector<std::string> slot_names;
    for (const auto& [name, tensor] : optimizer_->state_tensors()) {
      slot_names.push_back(name);
      reply.tensors.push_back(tensor.to(at::kFloat));
    }
    reply.meta["names"] = names;
    reply.meta["slots"] = slot_names;
    group_.send(reply, to, who_ + " sending its state to the chief");
  }

  distribute::ProcessGroup& group_;
  const config::OptimizationConfig& optimizer_config_;
  int64_t index_, workers_;
  std::string who_;
  std::vector<optim::NamedParameter> parameters_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  int64_t applied_ = 0, granted_ = 0, limit_ = 0, told_ = 0;
  std::vector<int64_t> tickets_;
  std::vector<std::pair<int64_t, int64_t>> joins_;  // (rank, step)
  std::map<std::string, std::pair<double, int64_t>> scalars_;
  int64_t examples_ = 0;
  int signal_ = 0;
  std::string reason_;
};

}  // namespace

void serve_parameters(distribute::ProcessGroup& group,
                      const config::OptimizationConfig& optimizer_config) {
  Server(group, optimizer_config).run();
}

ParameterServers::ParameterServers(distribute::ProcessGroupPtr group,
                                   std::vector<optim::NamedParameter> parameters)
    : group_(std::move(group)), parameters_(std::move(parameters)) {
  const int64_t num_ps = group_->cluster().num_ps;
  std::vector<int64_t> sizes;
  for (const auto& p : parameters_) {
    if (p.tensor.scalar_type() != at::kFloat || !p.tensor.device().is_cpu())
      throw Error("parameter_server training holds float32 weights on the CPU; '" + p.name +
                  "' is " + std::string(c10::toString(p.tensor.scalar_type())) + " on " +
                  p.tensor.device().str());
    sizes.push_back(p.tensor.numel());
  }
  shard_of_ = assign_shards(sizes, num_ps);
  members_.resize(static_cast<std::size_t>(num_ps));
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    members_[static_cast<std::size_t>(shard_of_[i])].push_back(i);
}

ParameterServers::~ParameterServers() {
  if (is_chief() && !stopped_) {
    try {
      stop("the chief ended without finishing");
    } catch (...) {
    }
  }
}

void ParameterServers::initialize(const optim::Optimizer& optimizer, int64_t global_step) {
  std::map<std::string, at::Tensor> slots;
  for (const auto& [name, tensor] : optimizer.state_tensors()) slots[name] = tensor;
  for (std::size_t k = 0; k < members_.size(); ++k) {
    Message init;
    init.meta = {{"op", "init"}, {"step", global_step}, {"optimizer", optimizer.state_meta()}};
    std::vector<std::string> names, slot_names;
    for (const std::size_t i : members_[k]) {
      names.push_back(parameters_[i].name);
      init.tensors.push_back(parameters_[i].tensor.detach());
    }
    // "<parameter>/<slot>" of this shard's parameters.
    for (const auto& [name, tensor] : slots) {
      const auto slash = name.rfind('/');
      if (slash == std::string::npos) continue;
      if (std::find(names.begin(), names.end(), name.substr(0, slash)) == names.end()) continue;
      slot_names.push_back(name);
      init.tensors.push_back(tensor.to(at::kFloat));
    }
    init.meta["names"] = names;
    init.meta["slots"] = slot_names;
    group_->send(init, ps_rank(static_cast<int64_t>(k)),
                 "sending ps " + std::to_string(k) + " its weights");
  }
  for (std::size_t k = 0; k < members_.size(); ++k)
    group_->receive(ps_rank(static_cast<int64_t>(k)),
                    "waiting for ps " + std::to_string(k) + " to take its weights");
  scheduled_ = global_step;
}

void ParameterServers::schedule(int64_t step) {
  Message message;
  message.meta = {{"op", "schedule"}, {"step", step}};
  group_->send(message, ps_rank(0), "scheduling steps up to " + std::to_string(step));
  scheduled_ = std::max(scheduled_, step);
}

ParameterServers::Progress ParameterServers::join_steps(int64_t step) {
  Progress progress;
  Message request;
  request.meta = {{"op", "join"}, {"step", step}};
  for (std::size_t k = 0; k < members_.size(); ++k)
    group_->send(request, ps_rank(static_cast<int64_t>(k)),
                 "joining step " + std::to_string(step) + " on ps " + std::to_string(k));
  for (std::size_t k = 0; k < members_.size(); ++k) {
    const Message reply =
        group_->receive(ps_rank(static_cast<int64_t>(k)),
                        "waiting for the workers to finish step " + std::to_string(step) + " (ps " +
                            std::to_string(k) + ")");
    if (k != 0) continue;
    progress.examples = reply.meta.at("examples").get<int64_t>();
    worker_signal_ = std::max(worker_signal_, reply.meta.value("signal", 0));
    for (const auto& [key, value] : reply.meta.at("scalars").items())
      progress.scalars[key] = {value.at(0).get<double>(), value.at(1).get<int64_t>()};
  }
  return progress;
}

void ParameterServers::join() { join_steps(scheduled_); }

void ParameterServers::pull_state(optim::Optimizer& optimizer) {
  Message request;
  request.meta = {{"op", "state"}};
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < parameters_.size(); ++i) index[parameters_[i].name] = i;
  std::map<std::string, at::Tensor> slots;
  nlohmann::json meta;
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < members_.size(); ++k) {
    const int64_t rank = ps_rank(static_cast<int64_t>(k));
    group_->send(request, rank, "asking ps " + std::to_string(k) + " for its state");
    const Message reply = group_->receive(rank, "receiving ps " + std::to_string(k) + "'s state");
    const auto names = reply.meta.at("names").get<std::vector<std::string>>();
    const auto slot_names = reply.meta.at("slots").get<std::vector<std::string>>();
    for (std::size_t i = 0; i < names.size(); ++i)
      parameters_[index.at(names[i])].tensor.copy_(reply.tensors.at(i));
    for (std::size_t i = 0; i < slot_names.size(); ++i)
      slots[slot_names[i]] = reply.tensors.at(names.size() + i).clone();
    if (k == 0) meta = reply.meta.at("optimizer");
  }
  optimizer.load_state(slots, meta);
}

void ParameterServers::stop(const std::string& reason) {
  if (stopped_) return;
  stopped_ = true;
  Message message;
  message.meta = {{"op", "stop"}, {"reason", reason}};
  group_->send(message, ps_rank(0), "stopping the parameter servers");
}

std::optional<int64_t> ParameterServers::next_step() {
  Message request;
  request.meta = {{"op", "ticket"}};
  group_->send(request, ps_rank(0), "asking ps 0 for a step");
  const Message reply = group_->receive(ps_rank(0), "waiting for ps 0 to give a step");
  if (reply.meta.contains("stop")) {
    end_with(reply.meta.at("stop").get<std::string>(), group_->cluster().describe());
    return std::nullopt;
  }
  return reply.meta.at("step").get<int64_t>();
}

void ParameterServers::pull() {
  Message request;
  request.meta = {{"op", "pull"}};
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < members_.size(); ++k) {
    const int64_t rank = ps_rank(static_cast<int64_t>(k));
    group_->send(request, rank, "asking ps " + std::to_string(k) + " for its weights");
    const Message reply = group_->receive(rank, "receiving ps " + std::to_string(k) + "'s weights");
    if (reply.tensors.size() != members_[k].size())
      throw Error("ps " + std::to_string(k) + " holds " + std::to_string(reply.tensors.size()) +
                  " weights but this worker's model puts " + std::to_string(members_[k].size()) +
                  " there: the processes built different models");
    for (std::size_t m = 0; m < members_[k].size(); ++m)
      parameters_[members_[k][m]].tensor.copy_(reply.tensors[m]);
  }
}

void ParameterServers::push(const std::vector<at::Tensor>& gradients,
                            const std::map<std::string, double>& scalars, int64_t examples) {
  for (std::size_t k = 0; k < members_.size(); ++k) {
    Message message;
    message.meta = {{"op", "push"}};
    if (gradients.empty()) {
      message.meta["skip"] = true;
    } else {
      std::vector<bool> present;
      for (const std::size_t i : members_[k]) {
        const at::Tensor& g = gradients.at(i);
        present.push_back(g.defined());
        message.tensors.push_back(g.defined() ? g.to(at::kFloat)
                                              : torch::zeros({0}, torch::kFloat));
      }
      message.meta["present"] = present;
    }
    if (k == 0) {
      message.meta["scalars"] = scalars;
      message.meta["examples"] = examples;
      message.meta["signal"] = StopSignals::pending();
    }
    group_->send(message, ps_rank(static_cast<int64_t>(k)),
                 "pushing gradients to ps " + std::to_string(k));
  }
}

}  // namespace garden
