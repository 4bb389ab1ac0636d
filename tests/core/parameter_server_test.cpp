// How parameters are spread over ps tasks: balanced by size, the same in
// every process.
#include <gtest/gtest.h>

#include <algorithm>

#include "garden/base/error.h"
#include "garden/core/parameter_server.h"

TEST(ParameterServerTest, ShardsAreBalancedBySizeLargestFirst) {
  // Largest first onto the lightest ps: 100 -> 0, 60 -> 1, 50 -> 1, 40 -> 0,
  // 10 -> 1 (0 holds 140, 1 holds 110 before it), 1 -> 1.
  const std::vector<int64_t> sizes = {10, 100, 1, 60, 40, 50};
  const auto shards = garden::assign_shards(sizes, 2);
  EXPECT_EQ(shards, (std::vector<int64_t>{1, 0, 1, 1, 0, 1}));
  int64_t load[2] = {0, 0};
  for (std::size_t i = 0; i < sizes.size(); ++i) load[shards[i]] += sizes[i];
  EXPECT_EQ(load[0], 140);
  EXPECT_EQ(load[1], 121);
  // One ps holds everything; more ps than parameters leaves some empty.
  EXPECT_EQ(garden::assign_shards(sizes, 1), std::vector<int64_t>(6, 0));
  const auto many = garden::assign_shards({5, 5}, 4);
  EXPECT_EQ(many, (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(garden::assign_shards(sizes, 0), garden::Error);
}
