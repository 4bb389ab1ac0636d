// garden launch's plan, without starting a process: each process's
// environment read back by resolve_cluster (the reader every launched
// process uses), the ports of each restart round, the share of the cores,
// TF_CONFIG written and parsed back, and every refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "garden/base/error.h"
#include "garden/distribute/cluster.h"
#include "garden/distribute/launch_plan.h"

namespace gd = garden::distribute;
using garden::config::RuntimeConfig;

namespace {

RuntimeConfig strategy(const std::string& name) {
  RuntimeConfig r;
  r.distribution_strategy = name;
  return r;
}

// What a launched process would see: garden launch's own environment
// (`inherited`) less the plan's unset names, then the plan's values.
gd::Environment environment_of(const gd::LaunchProcess& process, gd::Environment inherited = {}) {
  for (const auto& name : process.unset) inherited.erase(name);
  for (const auto& [key, value] : process.env) inherited[key] = value;
  return inherited;
}

std::string value_of(const gd::LaunchProcess& process, const std::string& key) {
  std::string found;
  for (const auto& [name, value] : process.env)
    if (name == key) found = value;
  return found;
}

std::string refusal(const gd::LaunchOptions& options, const std::vector<std::string>& command) {
  try {
    gd::check_launch(options, command);
  } catch (const garden::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LaunchPlanTest, MirroredWorkersOfTheSecondNodeGetTorchrunsVariablesAndTheirRanks) {
  gd::LaunchOptions options;
  options.nproc_per_node = 2;
  options.nnodes = 2;
  options.node_rank = 1;
  options.master_addr = "10.0.0.1";
  options.master_port = 29600;
  const auto plan = gd::launch_plan(options, 0, {{"OMP_NUM_THREADS", "4"}});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].name, "rank 2");
  EXPECT_EQ(plan[1].prefix, "[rank 3] ");
  EXPECT_EQ(plan[0].env.front(), (std::pair<std::string, std::string>{"OMP_NUM_THREADS", "4"}));
  for (int64_t local = 0; local < 2; ++local) {
    // A TF_CONFIG garden launch itself inherited must not win over the plan.
    const auto env = environment_of(plan[static_cast<std::size_t>(local)],
                                    {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}})"},
                                     {"SLURM_PROCID", "5"},
                                     {"PATH", "/bin"}});
    EXPECT_EQ(env.count("TF_CONFIG"), 0u);
    EXPECT_EQ(env.count("SLURM_PROCID"), 0u);
    EXPECT_EQ(env.at("PATH"), "/bin");
    const auto cluster = gd::resolve_cluster(env, strategy("multi_worker_mirrored"));
    EXPECT_EQ(cluster.source, "torchrun");
    EXPECT_EQ(cluster.rank, 2 + local);
    EXPECT_EQ(cluster.world_size, 4);
    EXPECT_EQ(cluster.local_rank, local);
    EXPECT_EQ(cluster.master_addr, "10.0.0.1");
    EXPECT_EQ(cluster.master_port, 29600);
  }
}

TEST(LaunchPlanTest, EachRestartRoundRendezvousesOnePortHigherAndSaysItsRound) {
  gd::LaunchOptions options;
  options.nproc_per_node = 2;
  options.max_restarts = 3;
  for (int64_t round = 0; round <= 3; ++round) {
    const auto plan = gd::launch_plan(options, round, {});
    for (const auto& process : plan) {
      EXPECT_EQ(value_of(process, "MASTER_PORT"), std::to_string(29500 + round));
      EXPECT_EQ(value_of(process, "TORCHELASTIC_RESTART_COUNT"), std::to_string(round));
      EXPECT_EQ(value_of(process, "TORCHELASTIC_MAX_RESTARTS"), "3");
    }
  }
}

TEST(LaunchPlanTest, ParameterServersGetOneTfConfigClusterAndDistinctRanks) {
  gd::LaunchOptions options;
  options.nproc_per_node = 2;
  options.ps = 2;
  options.evaluator = true;
  options.master_port = 31000;
  const auto plan = gd::launch_plan(options, 1, {});
  std::vector<std::string> names;
  for (const auto& process : plan) names.push_back(process.name);
  EXPECT_EQ(names, (std::vector<std::string>{"the chief", "worker 0", "worker 1", "ps 0", "ps 1",
                                             "the evaluator"}));
  std::set<int64_t> ranks;
  for (const auto& process : plan) {
    // torchrun's variables from garden launch's own environment are dropped.
    const auto env = environment_of(process, {{"RANK", "7"}, {"MASTER_PORT", "1"}});
    EXPECT_EQ(env.count("RANK"), 0u);
    const auto tf = gd::parse_tf_config(env.at("TF_CONFIG"));
    EXPECT_EQ(tf.jobs.at("chief").size(), 1u);
    EXPECT_EQ(tf.jobs.at("worker").size(), 2u);
    EXPECT_EQ(tf.jobs.at("ps").size(), 2u);
    EXPECT_EQ(tf.jobs.at("evaluator").size(), 1u);
    EXPECT_EQ(tf.jobs.at("ps")[1], "127.0.0.1:31001");  // round 1: one port higher
    const auto cluster = gd::resolve_cluster(env, strategy("parameter_server"));
    EXPECT_EQ(cluster.source, "TF_CONFIG");
    EXPECT_EQ(cluster.master_port, 31001);
    if (process.name == "the evaluator") {
      EXPECT_TRUE(cluster.is_evaluator());
      continue;
    }
    EXPECT_EQ(cluster.world_size, 5);
    ranks.insert(cluster.rank);
    EXPECT_EQ(cluster.is_chief(), process.name == "the chief");
    EXPECT_EQ(cluster.is_ps(), process.name.rfind("ps ", 0) == 0);
  }
  EXPECT_EQ(ranks, (std::set<int64_t>{0, 1, 2, 3, 4}));
}

TEST(LaunchPlanTest, AnEvaluatorBesideMirroredWorkersIsOnTheChiefsMachineOnly) {
  gd::LaunchOptions options;
  options.nproc_per_node = 2;
  options.nnodes = 2;
  options.evaluator = true;
  auto plan = gd::launch_plan(options, 0, {});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan.back().name, "the evaluator");
  const auto env = environment_of(plan.back(), {{"RANK", "0"}, {"WORLD_SIZE", "4"}});
  const auto cluster = gd::resolve_cluster(env, strategy("multi_worker_mirrored"));
  EXPECT_TRUE(cluster.is_evaluator());
  EXPECT_EQ(cluster.master_port, 29500);
  options.node_rank = 1;
  plan = gd::launch_plan(options, 0, {});
  EXPECT_EQ(plan.size(), 2u);
}

TEST(LaunchPlanTest, TheCoresAreSharedByTheProcessesThatTrainUnlessTheUserChose) {
  gd::LaunchOptions options;
  options.nproc_per_node = 2;
  EXPECT_EQ(gd::thread_environment(options, 16, false),
            (gd::EnvironmentList{{"OMP_NUM_THREADS", "8"}, {"OPENBLAS_NUM_THREADS", "8"}}));
  options.evaluator = true;  // on the chief's machine: a third process
  EXPECT_EQ(gd::busy_processes(options), 3);
  EXPECT_EQ(gd::thread_environment(options, 16, false)[0].second, "5");
  options.nproc_per_node = 4;  // more processes than cores: one thread each
  EXPECT_EQ(gd::thread_environment(options, 2, false)[1].second, "1");
  EXPECT_TRUE(gd::thread_environment(options, 16, true).empty());
  options.node_rank = 1;
  options.nnodes = 2;
  EXPECT_EQ(gd::busy_processes(options), 4);
}

TEST(LaunchPlanTest, TfConfigIsWrittenInTheOrderGivenAndReadsBack) {
  const std::string text =
      gd::write_tf_config({{"chief", {"h0:1"}}, {"worker", {"h1:1", "h2:1"}}}, "worker", 1);
  EXPECT_EQ(text, R"({"cluster":{"chief":["h0:1"],"worker":["h1:1","h2:1"]},)"
                  R"("task":{"type":"worker","index":1}})");
  const auto tf = gd::parse_tf_config(text);
  EXPECT_TRUE(tf.has_task);
  EXPECT_EQ(tf.task_type, "worker");
  EXPECT_EQ(tf.task_index, 1);
  EXPECT_EQ(tf.jobs.at("worker"), (std::vector<std::string>{"h1:1", "h2:1"}));
  // A host with a quote in it stays one string.
  EXPECT_EQ(gd::parse_tf_config(gd::write_tf_config({{"chief", {"a\"b:1"}}}, "chief", 0))
                .jobs.at("chief")[0],
            "a\"b:1");
}

TEST(LaunchPlanTest, WhatCannotBeLaunchedIsOneLine) {
  gd::LaunchOptions options;
  EXPECT_EQ(refusal(options, {"train"}), "");
  EXPECT_EQ(refusal(options, {}), "no command after '--' (e.g. -- train --experiment=...)");
  EXPECT_EQ(refusal(options, {"launch", "--", "train"}),
            "the command after '--' cannot be launch itself");
  options.nnodes = 2;
  options.node_rank = 2;
  EXPECT_EQ(refusal(options, {"train"}), "--node_rank 2 is not below --nnodes 2");
  options.node_rank = 0;
  options.ps = 1;
  EXPECT_NE(refusal(options, {"train"})
                .find("--ps starts a parameter-server cluster on one "
                      "machine"),
            std::string::npos);
  options = {};
  options.master_port = 65535;
  options.max_restarts = 1;
  EXPECT_EQ(refusal(options, {"train"}),
            "--master_port 65535 + --max_restarts 1 is above 65535 (each restart rendezvouses one "
            "port higher)");
}
