// resolve_cluster: every form of cluster description a user may give, and
// one clear line for each malformed or contradictory one.
#include <gtest/gtest.h>

#include "garden/base/error.h"
#include "garden/distribute/cluster.h"

namespace gd = garden::distribute;
using garden::config::RuntimeConfig;

namespace {

RuntimeConfig runtime(const std::string& strategy = "mirrored") {
  RuntimeConfig r;
  r.distribution_strategy = strategy;
  return r;
}

// The message of the Error resolve_cluster throws ("" when it does not).
std::string error_of(const gd::Environment& env, const RuntimeConfig& r = runtime()) {
  try {
    gd::resolve_cluster(env, r);
  } catch (const garden::Error& e) {
    return e.what();
  }
  return "";
}

const char* kTfConfig = R"({"cluster": {"chief": ["10.0.0.1:2222"],
  "worker": ["10.0.0.2:2222", "10.0.0.3:2223"], "evaluator": ["10.0.0.9:2222"]},
  "task": {"type": "worker", "index": 1}})";

}  // namespace

TEST(ClusterTest, NoDescriptionIsOneProcess) {
  const auto c = gd::resolve_cluster({{"PATH", "/bin"}}, runtime());
  EXPECT_EQ(c.source, "none");
  EXPECT_FALSE(c.distributed());
  EXPECT_TRUE(c.is_chief());
  EXPECT_EQ(c.strategy, "one_device");
  // multi_worker_mirrored with no cluster is one worker, as in Model Garden.
  EXPECT_FALSE(gd::resolve_cluster({}, runtime("multi_worker_mirrored")).distributed());
}

TEST(ClusterTest, TfConfigChiefIsRankZeroAndWorkersFollow) {
  const auto c = gd::resolve_cluster({{"TF_CONFIG", kTfConfig}}, runtime("multi_worker_mirrored"));
  EXPECT_EQ(c.source, "TF_CONFIG");
  EXPECT_EQ(c.strategy, "multi_worker_mirrored");
  EXPECT_EQ(c.task_type, "worker");
  EXPECT_EQ(c.task_index, 1);
  EXPECT_EQ(c.rank, 2);  // chief 0, worker 0 -> 1, worker 1 -> 2
  EXPECT_EQ(c.world_size, 3);
  EXPECT_EQ(c.master_addr, "10.0.0.1");
  EXPECT_EQ(c.master_port, 2222);
  EXPECT_EQ(c.own_host, "10.0.0.3");
  EXPECT_EQ(c.describe(), "rank 2 (worker 1)");
  EXPECT_EQ(c.describe_rank(1), "rank 1 (worker 0)");
  EXPECT_EQ(c.describe_rank(0), "rank 0 (chief 0)");
}

TEST(ClusterTest, TfConfigWithoutChiefMakesWorkerZeroTheChiefAndMasterIsChief) {
  auto c = gd::resolve_cluster(
      {{"TF_CONFIG",
        R"({"cluster": {"worker": ["127.0.0.2:3000", "127.0.0.3:3001"]}, "task": {"type": "worker", "index": 0}})"}},
      runtime());
  EXPECT_TRUE(c.is_chief());
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.master_addr, "127.0.0.2");
  EXPECT_EQ(c.master_port, 3000);
  EXPECT_EQ(c.strategy, "multi_worker_mirrored");  // mirrored over processes
  EXPECT_EQ(c.describe_rank(1), "rank 1 (worker 1)");
  c = gd::resolve_cluster(
      {{"TF_CONFIG",
        R"({"cluster": {"master": ["h:1"], "worker": ["w:2"]}, "task": {"type": "master", "index": 0}})"}},
      runtime());
  EXPECT_EQ(c.task_type, "chief");
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 2);
}

TEST(ClusterTest, TfConfigEvaluatorIsNotAReplica) {
  const auto c = gd::resolve_cluster(
      {{"TF_CONFIG",
        R"({"cluster": {"chief": ["h:1"], "worker": ["w:2"]}, "task": {"type": "evaluator", "index": 0}})"}},
      runtime());
  EXPECT_TRUE(c.is_evaluator());
  EXPECT_FALSE(c.distributed());
  EXPECT_FALSE(c.is_chief());
  EXPECT_EQ(c.describe(), "the evaluator");
}

TEST(ClusterTest, MalformedTfConfigNamesWhatIsWrong) {
  EXPECT_NE(error_of({{"TF_CONFIG", "{cluster"}}).find("TF_CONFIG is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}})"}}).find("no 'task'"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG",
                       R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})"}})
                .find("TF_CONFIG task is worker 3 but cluster.worker has 1 host(s)"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG",
                       R"({"cluster": {"worker": ["a:1", "b"]}, "task": {"type": "worker", "index": 0}})"}})
                .find("TF_CONFIG cluster.worker[1] 'b' is not host:port"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG",
                       R"({"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}})"}})
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG",
                       R"({"cluster": {"chiefs": ["a:1"]}, "task": {"type": "chief", "index": 0}})"}})
                .find("job 'chiefs'"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG",
                       R"({"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "worker", "index": 0}})"}},
                     runtime("parameter_server"))
                .find("TF_CONFIG cluster has ps tasks but no chief"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG",
                       R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})"}})
                .find("task.index must be a whole number >= 0"),
            std::string::npos);
}

TEST(ClusterTest, TorchrunVariables) {
  const auto c = gd::resolve_cluster({{"RANK", "3"},
                                      {"WORLD_SIZE", "4"},
                                      {"LOCAL_RANK", "1"},
                                      {"MASTER_ADDR", "node7"},
                                      {"MASTER_PORT", "29400"}},
                                     runtime());
  EXPECT_EQ(c.source, "torchrun");
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.master_addr, "node7");
  EXPECT_EQ(c.master_port, 29400);
  EXPECT_EQ(c.own_host, "");  // the machine's host name
  EXPECT_EQ(c.describe_rank(2), "rank 2");
  const auto local = gd::resolve_cluster(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}, runtime());
  EXPECT_EQ(local.own_host, "127.0.0.1");
  EXPECT_EQ(local.master_port, 29500);  // torchrun's default
}

TEST(ClusterTest, BadTorchrunVariablesNameTheVariable) {
  EXPECT_EQ(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
            "RANK=2 is not below WORLD_SIZE=2");
  EXPECT_EQ(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
            "RANK='x' is not a whole number");
  EXPECT_EQ(error_of({{"RANK", "0"}}), "RANK is set but WORLD_SIZE is not");
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}}),
            "MASTER_PORT=0 is out of range; must be in [1, 65535]");
}

TEST(ClusterTest, SlurmTakesTheFirstHostOfTheNodeList) {
  const auto c = gd::resolve_cluster({{"SLURM_PROCID", "5"},
                                      {"SLURM_NTASKS", "8"},
                                      {"SLURM_LOCALID", "1"},
                                      {"SLURM_NODELIST", "gpu[012-015,020],cpu1"}},
                                     runtime());
  EXPECT_EQ(c.source, "SLURM");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.master_addr, "gpu012");
  // runtime.device=cuda: this process's GPU is its local rank's.
  EXPECT_EQ(gd::process_device(c, "cuda"), "cuda:1");
  EXPECT_EQ(gd::process_device(c, "cuda:3"), "cuda:3");
  EXPECT_EQ(gd::process_device(c, "cpu"), "cpu");
  EXPECT_EQ(gd::process_device(gd::resolve_cluster({}, runtime()), "cuda"), "cuda");
  EXPECT_EQ(gd::first_slurm_host("a1,b2"), "a1");
  EXPECT_EQ(gd::first_slurm_host("node[7]"), "node7");
  EXPECT_EQ(gd::first_slurm_host("rack[1-2]-n[01-04]"), "rack1-n[01-04]");
  EXPECT_THROW(gd::first_slurm_host("node[01-04"), garden::Error);
  // MASTER_ADDR, when set, wins over the node list.
  EXPECT_EQ(gd::resolve_cluster({{"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "2"},
                                 {"SLURM_NODELIST", "n[1-2]"},
                                 {"MASTER_ADDR", "10.1.1.1"}},
                                runtime())
                .master_addr,
            "10.1.1.1");
}

TEST(ClusterTest, OpenMpiOnOneNodeNeedsNoMasterAddress) {
  const auto c = gd::resolve_cluster({{"OMPI_COMM_WORLD_RANK", "1"},
                                      {"OMPI_COMM_WORLD_SIZE", "2"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                                     runtime());
  EXPECT_EQ(c.source, "OpenMPI");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                .find("MASTER_ADDR is not set"),
            std::string::npos);
}

TEST(ClusterTest, ModelGardenWorkerHostsAndTaskIndex) {
  RuntimeConfig r = runtime("multi_worker_mirrored");
  r.worker_hosts = "127.0.0.2:4000, 127.0.0.3:4001";
  r.task_index = 1;
  const auto c = gd::resolve_cluster({}, r);
  EXPECT_EQ(c.source, "runtime.worker_hosts");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.master_addr, "127.0.0.2");
  EXPECT_EQ(c.master_port, 4000);
  EXPECT_EQ(c.own_host, "127.0.0.3");
  r.task_index = -1;
  EXPECT_NE(error_of({}, r).find("runtime.task_index is not set"), std::string::npos);
  r.task_index = 2;
  EXPECT_NE(error_of({}, r).find("is not below the number of runtime.worker_hosts (2)"),
            std::string::npos);
}

TEST(ClusterTest, ContradictionsAreRefused) {
  // TF_CONFIG and torchrun disagree on the size.
  EXPECT_NE(error_of({{"TF_CONFIG", kTfConfig}, {"WORLD_SIZE", "2"}, {"RANK", "2"}})
                .find("TF_CONFIG describes 3 training processes but WORLD_SIZE=2"),
            std::string::npos);
  // worker_hosts and torchrun disagree on the rank.
  RuntimeConfig r = runtime();
  r.worker_hosts = "a:1,b:2";
  r.task_index = 0;
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}, r)
                .find("give the cluster once"),
            std::string::npos);
  // Several processes with a one-process strategy.
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, runtime("one_device")),
            "torchrun describes 2 training processes but runtime.distribution_strategy is "
            "'one_device' (one process); use multi_worker_mirrored");
  EXPECT_EQ(error_of({}, runtime("parameter_server")),
            "runtime.distribution_strategy is parameter_server but no cluster is described: "
            "parameter_server needs TF_CONFIG with chief, worker and ps tasks (garden launch "
            "--ps=K writes it)");
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
                     runtime("parameter_server"))
                .find("but torchrun describes no ps task"),
            std::string::npos);
}

TEST(ClusterTest, TfConfigPsTasksMakeAParameterServerCluster) {
  // chief 0, workers 1..2, ps 3..4.
  const std::string cluster = R"("cluster": {"chief": ["c:5000"], "worker": ["w:1", "w:2"],
      "ps": ["p:1", "p:2"], "evaluator": ["e:1"]})";
  const auto at = [&](const std::string& type, int index) {
    return gd::resolve_cluster(
        {{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": ")" + type + R"(", "index": )" +
                           std::to_string(index) + "}}"}},
        runtime("parameter_server"));
  };
  const auto ps = at("ps", 1);
  EXPECT_EQ(ps.strategy, "parameter_server");
  EXPECT_TRUE(ps.is_ps());
  EXPECT_EQ(ps.rank, 4);
  EXPECT_EQ(ps.world_size, 5);
  EXPECT_EQ(ps.num_workers, 2);
  EXPECT_EQ(ps.num_ps, 2);
  EXPECT_EQ(ps.master_addr, "c");
  EXPECT_EQ(ps.master_port, 5000);
  EXPECT_EQ(ps.own_host, "p");
  EXPECT_EQ(ps.describe(), "rank 4 (ps 1)");
  // Every other rank is named by its task too (in a lost peer's line).
  EXPECT_EQ(ps.describe_rank(0), "rank 0 (chief 0)");
  EXPECT_EQ(ps.describe_rank(2), "rank 2 (worker 1)");
  EXPECT_EQ(ps.describe_rank(3), "rank 3 (ps 0)");
  EXPECT_EQ(ps.describe_rank(4), ps.describe());
  EXPECT_EQ(at("chief", 0).rank, 0);
  EXPECT_EQ(at("worker", 1).rank, 2);
  EXPECT_FALSE(at("worker", 1).is_ps());
  EXPECT_TRUE(at("evaluator", 0).is_evaluator());
  EXPECT_EQ(at("evaluator", 0).world_size, 1);
  // ps tasks ask for parameter_server, and a worker to compute.
  EXPECT_EQ(error_of({{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "ps", "index": 0}})"}},
                     runtime("multi_worker_mirrored")),
            "TF_CONFIG has ps tasks but runtime.distribution_strategy is 'multi_worker_mirrored'; "
            "set it to parameter_server, or remove the ps tasks");
  EXPECT_NE(error_of({{"TF_CONFIG", R"({"cluster": {"chief": ["c:1"], "ps": ["p:1"]},
                                       "task": {"type": "ps", "index": 0}})"}},
                     runtime("parameter_server"))
                .find("ps tasks but no worker"),
            std::string::npos);
  EXPECT_NE(error_of({{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "ps", "index": 2}})"}},
                     runtime("parameter_server"))
                .find("task is ps 2 but cluster.ps has 2 host(s)"),
            std::string::npos);
}
