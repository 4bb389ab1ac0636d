// GradientSync over a real two-rank Gloo group (two threads of this
// process on loopback): the gradients become the sums over the ranks, as
// float32 or, with Wire::kFloat16, rounded to float16 as Gloo sums them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <future>

#include "cli/distributed_util.h"
#include "garden/distribute/gradient_sync.h"
#include "garden/distribute/process_group.h"

namespace gd = garden::distribute;

namespace {

// Rank r's gradients: `a` always, `b` only on rank 0 (rank 1's backward
// does not reach it, so it counts as zero there).
at::Tensor gradient_a(int64_t rank) {
  return rank == 0 ? torch::tensor({1.0f / 3, 0.1f, -2.7f, 1e-4f, 1000.3f})
                   : torch::tensor({2.0f / 7, 0.2f, 1.3f, 3.14159e-3f, -0.05f});
}
at::Tensor gradient_b() { return torch::tensor({0.7f, -1e-3f / 3}); }

// One rank: its backward, then finish(); returns the gradients of a and b.
std::vector<at::Tensor> sync_on_rank(int64_t rank, int port, gd::GradientSync::Wire wire) {
  const gd::Cluster cluster = garden_test::loopback_cluster(rank, 2, port);
  const auto group = gd::ProcessGroup::connect(cluster, "cpu", std::chrono::seconds(30));
  // can_sum is a collective; the group goes on working after it.
  EXPECT_TRUE(group->can_sum(at::kFloat));
  EXPECT_TRUE(group->can_sum(at::kDouble));
  // Debian's LibTorch 2.14 builds Gloo without float16 sums (1.13 has them);
  // Garden refuses gradient_compression fp16 there (distributed_cli_test).
  if (wire == gd::GradientSync::Wire::kFloat16 && !group->can_sum(at::kHalf)) return {};
  at::Tensor a = torch::zeros({5}, torch::requires_grad());
  at::Tensor b = torch::zeros({2}, torch::requires_grad());
  gd::GradientSync sync(group, {a, b}, int64_t{1} << 20, wire);
  sync.begin_backward(true);
  at::Tensor loss = (a * gradient_a(rank)).sum();
  if (rank == 0) loss = loss + (b * gradient_b()).sum();
  loss.backward();
  std::vector<at::Tensor> gradients = {a.grad(), b.grad()};
  sync.finish(gradients, "the test's gradients");
  EXPECT_EQ(sync.num_buckets(), 1);
  return gradients;
}

std::vector<std::vector<at::Tensor>> sync_on_two_ranks(gd::GradientSync::Wire wire) {
  const int port = garden_test::free_port();
  auto first = std::async(std::launch::async, sync_on_rank, 0, port, wire);
  auto second = std::async(std::launch::async, sync_on_rank, 1, port, wire);
  return {first.get(), second.get()};
}

at::Tensor to_half_and_back(const at::Tensor& t) { return t.to(at::kHalf).to(at::kFloat); }

}  // namespace

TEST(GradientSyncTest, GradientsBecomeTheirSumsOverTheRanks) {
  const auto ranks = sync_on_two_ranks(gd::GradientSync::Wire::kAsIs);
  const at::Tensor sum_a = gradient_a(0) + gradient_a(1);
  for (const auto& gradients : ranks) {
    ASSERT_EQ(gradients.size(), 2u);
    EXPECT_TRUE(torch::equal(gradients[0], sum_a)) << gradients[0];
    ASSERT_TRUE(gradients[1].defined());
    EXPECT_TRUE(torch::equal(gradients[1], gradient_b())) << gradients[1];
  }
}

TEST(GradientSyncTest, Float16OnTheWireRoundsEachRanksGradientsAndTheirSum) {
  const auto ranks = sync_on_two_ranks(gd::GradientSync::Wire::kFloat16);
  if (ranks[0].empty() && ranks[1].empty())
    GTEST_SKIP() << "this LibTorch's Gloo cannot sum float16 tensors";
  ASSERT_FALSE(ranks[0].empty() || ranks[1].empty()) << "the ranks disagree on float16 sums";
  // Each rank's gradients become float16, and Gloo adds two float16 values
  // in float32 and rounds the sum to float16.
  const at::Tensor expected_a =
      to_half_and_back(to_half_and_back(gradient_a(0)) + to_half_and_back(gradient_a(1)));
  const at::Tensor expected_b = to_half_and_back(gradient_b());
  for (const auto& gradients : ranks) {
    EXPECT_EQ(gradients[0].scalar_type(), at::kFloat);
    EXPECT_TRUE(torch::equal(gradients[0], expected_a)) << gradients[0] << expected_a;
    EXPECT_TRUE(torch::equal(gradients[1], expected_b)) << gradients[1] << expected_b;
  }
  // Not what float32 gives: the values above are not float16 numbers.
  EXPECT_FALSE(torch::equal(ranks[0][0], gradient_a(0) + gradient_a(1)));
  EXPECT_GT((ranks[0][0] - (gradient_a(0) + gradient_a(1))).abs().max().item<float>(), 0.01f);
}
