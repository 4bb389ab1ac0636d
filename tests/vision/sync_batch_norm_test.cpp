// The synchronized batch norm (use_sync_bn) against one process's batch norm
// on the whole batch: over a real two-rank Gloo group (two threads on
// loopback) with batches of different sizes, and over two identical
// replicas; outputs, input and weight gradients, and moving averages.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <future>

#include "cli/distributed_util.h"
#include "garden/distribute/process_group.h"
#include "garden/vision/modeling/sync_batch_norm.h"

namespace gd = garden::distribute;
using garden::vision::Replicas;
using garden::vision::ReplicasPtr;
using garden::vision::sync_batch_norm;

namespace {

torch::nn::BatchNorm2d make_norm() {
  torch::nn::BatchNorm2d norm(torch::nn::BatchNorm2dOptions(4).momentum(0.1).eps(1e-3));
  torch::NoGradGuard no_grad;
  norm->weight.copy_(torch::tensor({0.5f, 1.5f, -1.0f, 2.0f}));
  norm->bias.copy_(torch::tensor({0.1f, -0.2f, 0.3f, 0.0f}));
  norm->running_mean.fill_(0.25);
  norm->running_var.fill_(2.0);
  return norm;
}

// The sums over a process group, as the task's are over its workers'.
class GroupReplicas final : public Replicas {
 public:
  explicit GroupReplicas(gd::ProcessGroupPtr group) : group_(std::move(group)) {}
  int64_t count() const override { return group_->size(); }
  void sum(std::vector<at::Tensor>& tensors) const override {
    group_->all_reduce(tensors, gd::ReduceOp::kSum, "the test's statistics");
  }

 private:
  gd::ProcessGroupPtr group_;
};

// Two replicas holding the same batch: every sum doubles.
class TwinReplicas final : public Replicas {
 public:
  int64_t count() const override { return 2; }
  void sum(std::vector<at::Tensor>& tensors) const override {
    for (auto& tensor : tensors) tensor.mul_(2);
  }
};

// This process alone.
class LoneReplica final : public Replicas {
 public:
  int64_t count() const override { return 1; }
  void sum(std::vector<at::Tensor>&) const override { ADD_FAILURE() << "summed over one replica"; }
};

// A batch far from zero mean (a stem's activations), channels last.
at::Tensor inputs(int64_t batch, uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randn({batch, 4, 3, 5}) * 3 + 7).contiguous(at::MemoryFormat::ChannelsLast);
}
at::Tensor upstream(int64_t batch, uint64_t seed) {
  torch::manual_seed(seed + 100);
  return torch::randn({batch, 4, 3, 5});
}

struct Result {
  at::Tensor output, input_grad, weight_grad, bias_grad, running_mean, running_var;
};

Result run(torch::nn::BatchNorm2d& norm, const at::Tensor& x, const at::Tensor& dy,
           const ReplicasPtr& replicas) {
  norm->train();
  const at::Tensor input = x.clone().requires_grad_(true);
  const at::Tensor output = sync_batch_norm(*norm, input, replicas);
  (output * dy).sum().backward();
  return {output.detach(),
          input.grad(),
          norm->weight.grad().clone(),
          norm->bias.grad().clone(),
          norm->running_mean.clone(),
          norm->running_var.clone()};
}

void expect_close(const at::Tensor& a, const at::Tensor& b, const char* what) {
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5))
      << what << ": largest difference " << (a - b).abs().max().item<double>();
}

}  // namespace

TEST(SyncBatchNormTest, TwoRanksWithUnevenBatchesNormalizeAsOneProcessWithBoth) {
  const int port = garden_test::free_port();
  // Made here: the generator is the process's, which the ranks' threads share.
  const std::vector<at::Tensor> x = {inputs(3, 0), inputs(5, 1)};
  const std::vector<at::Tensor> dy = {upstream(3, 0), upstream(5, 1)};
  const auto rank = [port, &x, &dy](int64_t r) {
    const auto group = gd::ProcessGroup::connect(garden_test::loopback_cluster(r, 2, port), "cpu",
                                                 std::chrono::seconds(30));
    auto norm = make_norm();
    const auto i = static_cast<std::size_t>(r);
    Result result = run(norm, x[i], dy[i], std::make_shared<GroupReplicas>(group));
    EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 1);
    return result;
  };
  auto first = std::async(std::launch::async, rank, 0);
  auto second = std::async(std::launch::async, rank, 1);
  const Result r0 = first.get(), r1 = second.get();

  auto whole = make_norm();
  const Result one = run(whole, torch::cat(x), torch::cat(dy), nullptr);
  expect_close(torch::cat({r0.output, r1.output}), one.output, "output");
  expect_close(torch::cat({r0.input_grad, r1.input_grad}), one.input_grad, "input gradient");
  // Each rank's weight gradient is its share; the gradient all-reduce adds them.
  expect_close(r0.weight_grad + r1.weight_grad, one.weight_grad, "weight gradient");
  expect_close(r0.bias_grad + r1.bias_grad, one.bias_grad, "bias gradient");
  for (const Result* r : {&r0, &r1}) {
    expect_close(r->running_mean, one.running_mean, "moving mean");
    expect_close(r->running_var, one.running_var, "moving variance");
  }
  // Not what each rank's batch alone gives.
  auto alone = make_norm();
  const Result local = run(alone, x[0], dy[0], nullptr);
  EXPECT_GT((local.output - r0.output).abs().max().item<double>(), 1e-2);
}

TEST(SyncBatchNormTest, TwinReplicasNormalizeAsTheBatchTwiceIn1dAnd2d) {
  auto norm = make_norm();
  const Result twin = run(norm, inputs(2, 5), upstream(2, 5), std::make_shared<TwinReplicas>());
  auto whole = make_norm();
  const Result one = run(whole, torch::cat({inputs(2, 5), inputs(2, 5)}),
                         torch::cat({upstream(2, 5), upstream(2, 5)}), nullptr);
  expect_close(twin.output, one.output.narrow(0, 0, 2), "output");
  expect_close(twin.input_grad, one.input_grad.narrow(0, 0, 2), "input gradient");
  expect_close(twin.weight_grad * 2, one.weight_grad, "weight gradient");
  expect_close(twin.running_var, one.running_var, "moving variance");

  // [B, C]: the head's batch norm.
  torch::nn::BatchNorm1d head(torch::nn::BatchNorm1dOptions(3).momentum(0.01));
  torch::nn::BatchNorm1d head_whole(torch::nn::BatchNorm1dOptions(3).momentum(0.01));
  const at::Tensor x = torch::tensor({{1.0f, 2.0f, -3.0f}, {4.0f, 0.5f, 3.0f}, {0.0f, 1.0f, 9.0f}});
  const at::Tensor y = sync_batch_norm(*head, x, std::make_shared<TwinReplicas>());
  const at::Tensor y_whole = head_whole->forward(torch::cat({x, x}));
  expect_close(y, y_whole.narrow(0, 0, 3), "1-d output");
  expect_close(head->running_var, head_whole->running_var, "1-d moving variance");
}

TEST(SyncBatchNormTest, OneReplicaOrEvaluationIsThePlainBatchNormBitwise) {
  for (const bool training : {true, false}) {
    auto a = make_norm();
    auto b = make_norm();
    a->train(training);
    b->train(training);
    const at::Tensor x = inputs(4, 9);
    // Training alone, or evaluating (the moving averages) among twins.
    const ReplicasPtr replicas = training ? ReplicasPtr(std::make_shared<LoneReplica>())
                                          : ReplicasPtr(std::make_shared<TwinReplicas>());
    EXPECT_TRUE(torch::equal(sync_batch_norm(*a, x, replicas), b->forward(x))) << training;
    EXPECT_TRUE(torch::equal(a->running_mean, b->running_mean)) << training;
  }
}

TEST(SyncBatchNormTest, TooFewValuesPerChannelIsOneError) {
  auto norm = make_norm();
  norm->train();
  const at::Tensor x = torch::randn({1, 4});
  torch::nn::BatchNorm1d head(torch::nn::BatchNorm1dOptions(4));
  head->train();
  // One value per channel on each of the twins is two in all: allowed.
  EXPECT_NO_THROW(sync_batch_norm(*head, x, std::make_shared<TwinReplicas>()));
  try {
    sync_batch_norm(*norm, torch::randn({2, 3, 1, 1}), std::make_shared<TwinReplicas>());
    FAIL() << "a batch with 3 channels went into a batch norm of 4";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("sync batch norm: expects [batch, 4, ...]"),
              std::string::npos)
        << e.what();
  }
}
