// A task's validation outputs (host-side lists in the logs): appended step
// by step, and gathered from two workers (two threads of this process on a
// real Gloo group) in rank order, values bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <limits>

#include "cli/distributed_util.h"
#include "garden/base/error.h"
#include "garden/base/types.h"
#include "garden/core/strategy.h"
#include "garden/distribute/process_group.h"

namespace gd = garden::distribute;
using garden::IdRows;
using garden::Logs;
using garden::ValueRows;

namespace {

// Rank r's outputs of one evaluation.
Logs outputs_of(int64_t rank) {
  if (rank == 0)
    return {{"ids", IdRows{{7}, {8}}},
            {"logits",
             ValueRows{{1.0 / 3.0, -0.0}, {std::numeric_limits<double>::quiet_NaN(), 5e-324}}},
            {"texts", std::vector<std::string>{"a"}}};
  return {{"ids", IdRows{{9}}},
          {"logits", ValueRows{{-std::numeric_limits<double>::infinity(), 2.5}}},
          {"texts", std::vector<std::string>{"b", "c"}}};
}

Logs gather_on_rank(int64_t rank, int port) {
  const gd::Cluster cluster = garden_test::loopback_cluster(rank, 2, port);
  const auto strategy = garden::mirrored_strategy(
      gd::ProcessGroup::connect(cluster, "cpu", std::chrono::seconds(30)));
  return strategy->gather_aggregated_logs(outputs_of(rank));
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(HostListsTest, EachStepsListsAreAppendedAndScalarsLeftOut) {
  Logs state;
  garden::append_host_lists(state, outputs_of(0));
  garden::append_host_lists(state, {{"loss", 1.5}});
  garden::append_host_lists(state, outputs_of(1));
  EXPECT_EQ(state.count("loss"), 0u);
  EXPECT_EQ(std::get<IdRows>(state.at("ids")), (IdRows{{7}, {8}, {9}}));
  EXPECT_EQ(std::get<std::vector<std::string>>(state.at("texts")),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(std::get<ValueRows>(state.at("logits")).size(), 3u);
  EXPECT_TRUE(garden::is_host_list(state.at("ids")));
  EXPECT_FALSE(garden::is_host_list(garden::LogValue(1.0)));
  // A key whose kind of list changes is one line naming it.
  try {
    garden::append_host_lists(state, {{"ids", ValueRows{{1.0}}}});
    FAIL() << "no error";
  } catch (const garden::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the validation log 'ids' changed its kind of list between steps");
  }
}

TEST(HostListsTest, TwoWorkersListsArriveInRankOrderAndValuesBitForBit) {
  const int port = garden_test::free_port();
  auto first = std::async(std::launch::async, gather_on_rank, 0, port);
  auto second = std::async(std::launch::async, gather_on_rank, 1, port);
  const Logs gathered[2] = {first.get(), second.get()};
  Logs expected;
  garden::append_host_lists(expected, outputs_of(0));
  garden::append_host_lists(expected, outputs_of(1));
  for (const Logs& logs : gathered) {
    EXPECT_EQ(std::get<IdRows>(logs.at("ids")), std::get<IdRows>(expected.at("ids")));
    EXPECT_EQ(std::get<std::vector<std::string>>(logs.at("texts")),
              std::get<std::vector<std::string>>(expected.at("texts")));
    const auto& values = std::get<ValueRows>(logs.at("logits"));
    const auto& want = std::get<ValueRows>(expected.at("logits"));
    ASSERT_EQ(values.size(), want.size());
    for (std::size_t r = 0; r < want.size(); ++r) {
      ASSERT_EQ(values[r].size(), want[r].size());
      for (std::size_t c = 0; c < want[r].size(); ++c)
        EXPECT_TRUE(same_bits(values[r][c], want[r][c])) << r << "," << c << ": " << values[r][c];
    }
  }
  EXPECT_TRUE(std::isnan(std::get<ValueRows>(gathered[1].at("logits"))[1][0]));
}
