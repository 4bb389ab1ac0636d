// Several hosts, simulated: scripts/netns_hosts.sh makes each host a Linux
// network namespace with its own address on a private bridge (10.231.0.x,
// inside the test's namespaces only), and `garden launch --nnodes=2` runs in
// each, talking real TCP between separate network stacks. Training equals
// one process, only the chief writes, a lost worker or host stops the
// others within the collective timeout with one line naming it, and an
// unreachable chief is one line naming its address. Skipped where network
// namespaces cannot be made (not root, no iproute2).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "cli/cli_fixture.h"
#include "cli/distributed_util.h"

namespace {

namespace fs = std::filesystem;
using garden_test::CliFixture;
using garden_test::CliRun;
using garden_test::kIris;

const std::string kNetns = std::string(GARDEN_SOURCE_DIR) + "/scripts/netns_hosts.sh";

bool namespaces_work() {
  if (::geteuid() != 0) return false;
  return std::system(("'" + kNetns + "' with 2 -- true >/dev/null 2>&1").c_str()) == 0;
}

class MultiHostCliTest : public CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    static const bool works = namespaces_work();
    if (!works) GTEST_SKIP() << "network namespaces cannot be made here (needs root and iproute2)";
  }

  // Runs `body` under `netns_hosts.sh with 2`: $H0 $H1 are the hosts, $A0
  // $A1 their addresses, $NETNS the script, $PORT a free port, and
  // node K OVERRIDES MODEL_DIR [ENV...] starts `garden launch` on host K in
  // the background (pid in $pidK, stderr in errK).
  CliRun on_two_hosts(const std::string& body, int seconds = 200, int networks = 1) const {
    const std::string script =
        "set -u\nexport NETNS='" + kNetns + "'\n" + "cat > '" + path("hosts.sh") + "' <<'EOF'\n" +
        "set -u\nread -r H0 H1 <<<\"$NETNS_HOSTS\"\nread -r A0 A1 <<<\"$NETNS_ADDRS\"\n"
        "PORT=" +
        std::to_string(garden_test::free_port()) +
        "\nnode() {\n"
        "  local k=$1 overrides=$2 dir=$3; shift 3\n"
        "  local ns=$H0; [ \"$k\" = 1 ] && ns=$H1\n"
        "  \"$NETNS\" run \"$ns\" env OMP_NUM_THREADS=1 \"$@\" \"$GARDEN\" launch --nnodes=2 "
        "--node_rank=$k --nproc_per_node=1 --stop_grace_seconds=2 ${LAUNCH:-} "
        "--master_addr=${MASTER:-$A0} "
        "--master_port=$PORT -- train --experiment=tabular/iris --mode=train --model_dir=\"$dir\" "
        "--params_override=\"$overrides,runtime.distribution_strategy=multi_worker_mirrored\" "
        "> '" +
        path("out") + "'$k 2> '" + path("err") +
        "'$k &\n"
        "  eval pid$k=$!\n}\n"
        // The garden train process under host K's launcher.
        "train_pid() {\n"
        "  local ns=$H0; [ \"$1\" = 1 ] && ns=$H1\n"
        "  for p in $(ip netns pids \"$ns\"); do\n"
        "    [ \"$(tr '\\0' ' ' < /proc/$p/cmdline | awk '{print $2}')\" = train ] && echo $p\n"
        "  done | head -1\n}\n"
        // Seconds until PID ends, at most LIMIT (then it is killed: a hang).
        "seconds_until_exit() {\n"
        "  local pid=$1 limit=$2 start=$SECONDS\n"
        "  while kill -0 $pid 2>/dev/null; do\n"
        "    [ $((SECONDS - start)) -ge $limit ] && { kill -KILL $pid; echo hung; return; }\n"
        "    sleep 0.2\n  done\n  echo $((SECONDS - start))\n}\n" +
        body + "\nEOF\n\"$NETNS\" with 2 --nets=" + std::to_string(networks) + " -- bash '" +
        path("hosts.sh") + "'\n";
    return garden_test::run_shell(dir_, script, seconds);
  }
};

TEST_F(MultiHostCliTest, TwoHostsTrainAsOneProcessAndOnlyTheChiefWrites) {
  const CliRun one = garden("train --experiment=tabular/iris --mode=train --model_dir='" +
                            path("one") + "' --params_override='" + kIris + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  // No GLOO_SOCKET_IFNAME: each host binds its address on the route to the
  // chief (its name resolves to 127.0.0.1 here, which the other cannot reach).
  const CliRun run = on_two_hosts("node 0 '" + kIris + "' '" + path("chief") + "'\nnode 1 '" +
                                  kIris + "' '" + path("worker") +
                                  "'\nwait $pid0; s0=$?; wait $pid1; s1=$?\n"
                                  "cat '" +
                                  path("err0") + "' '" + path("err1") + "' >&2\nexit $((s0 + s1))");
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("Gloo binds 10.231.0.10, this host's address on the route to 10.231.0.10"),
            std::string::npos)
      << run.err;
  garden_test::expect_same_weights(path("chief"), path("one"), 1e-5);

  // The same cluster described by TF_CONFIG, naming the two hosts.
  const CliRun tf = on_two_hosts(
      "tf() {\n"
      "  local type=$1 ns=$2\n"
      "  \"$NETNS\" run $ns env OMP_NUM_THREADS=1 TF_CONFIG=\"{\\\"cluster\\\": {\\\"chief\\\": "
      "[\\\"$A0:$PORT\\\"], \\\"worker\\\": [\\\"$A1:$PORT\\\"]}, \\\"task\\\": {\\\"type\\\": "
      "\\\"$type\\\", \\\"index\\\": 0}}\" \"$GARDEN\" train --experiment=tabular/iris "
      "--mode=train --model_dir=\"" +
      path("tf") + "_$type\" --params_override='" + kIris +
      ",runtime.distribution_strategy=multi_worker_mirrored' 2> \"" + path("tf") +
      "_$type.err\" &\n"
      "}\n"
      "tf chief $H0; p0=$!; tf worker $H1; p1=$!\n"
      "wait $p0; s0=$?; wait $p1; s1=$?\nexit $((s0 + s1))");
  ASSERT_EQ(tf.status, 0) << garden_test::slurp(dir_ / "tf_chief.err")
                          << garden_test::slurp(dir_ / "tf_worker.err");
  EXPECT_NE(garden_test::slurp(dir_ / "tf_worker.err")
                .find("rank 1 (worker 0) of 2 (from TF_CONFIG), rendezvous at 10.231.0.10"),
            std::string::npos)
      << garden_test::slurp(dir_ / "tf_worker.err");
  garden_test::expect_same_weights(path("tf_chief"), path("one"), 1e-5);
  // The worker's model_dir holds no checkpoint and no summaries.
  if (fs::exists(dir_ / "worker"))
    for (const auto& entry : fs::recursive_directory_iterator(dir_ / "worker")) {
      const std::string name = entry.path().filename().string();
      EXPECT_EQ(name.rfind("ckpt-", 0), std::string::npos) << entry.path();
      EXPECT_EQ(name.find("tfevents"), std::string::npos) << entry.path();
    }
}

TEST_F(MultiHostCliTest, OnMultiHomedHostsGlooBindsTheNetworkOfTheChief) {
  // Two networks (10.231.0.x and 10.231.1.x); the chief is named by its
  // address on the second: both hosts bind their address there, with no
  // GLOO_SOCKET_IFNAME, and train as one process.
  const CliRun one = garden("train --experiment=tabular/iris --mode=train --model_dir='" +
                            path("one") + "' --params_override='" + kIris + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const CliRun run =
      on_two_hosts("export MASTER=10.231.1.10\nnode 0 '" + kIris + "' '" + path("chief") +
                       "'\nnode 1 '" + kIris + "' '" + path("worker") +
                       "'\nwait $pid0; s0=$?; wait $pid1; s1=$?\n"
                       "cat '" +
                       path("err0") + "' >&2\nexit $((s0 + s1))",
                   200, 2);
  ASSERT_EQ(run.status, 0) << run.out << run.err << garden_test::slurp(dir_ / "err1");
  EXPECT_NE(run.err.find("Gloo binds 10.231.1.10, this host's address on the route to 10.231.1.10"),
            std::string::npos)
      << run.err;
  garden_test::expect_same_weights(path("chief"), path("one"), 1e-5);
}

// A run that goes on until stopped, checkpointing every 20 steps, with a
// 5 s collective timeout.
const std::string kLongIris =
    "runtime.seed=7,trainer.train_steps=100000000,trainer.steps_per_loop=10,"
    "trainer.checkpoint_interval=20,runtime.collective_timeout_seconds=5";

TEST_F(MultiHostCliTest, AKilledWorkerOrACutHostStopsTheOthersWithinTheTimeoutNamingIt) {
  // SIGKILL to host 1's worker: the chief stops with one line naming rank 1.
  const std::string wait_for_checkpoint =
      "for i in $(seq 600); do [ -e '" + path("a") + "/ckpt-20' ] && break; sleep 0.1; done\n";
  CliRun run = on_two_hosts("node 0 '" + kLongIris + "' '" + path("a") + "'\nnode 1 '" + kLongIris +
                            "' '" + path("a1") + "'\n" + wait_for_checkpoint +
                            "kill -KILL $(train_pid 1)\n"
                            "echo chief $(seconds_until_exit $pid0 30)\n"
                            "echo worker $(seconds_until_exit $pid1 30)\n");
  ASSERT_NE(run.out.find("chief "), std::string::npos) << run.out << run.err;
  std::cout << "killed worker, seconds to exit:\n" << run.out;
  EXPECT_EQ(run.out.find("hung"), std::string::npos)
      << run.out << garden_test::slurp(dir_ / "err0");
  const std::string chief = garden_test::slurp(dir_ / "err0");
  EXPECT_NE(chief.find("rank 1 stopped answering"), std::string::npos) << chief;

  // Host 1 cut off (its link down): both stop within the timeout and a few
  // seconds, each naming the other.
  run = on_two_hosts("node 0 '" + kLongIris + "' '" + path("b") + "'\nnode 1 '" + kLongIris +
                     "' '" + path("b1") + "'\n" + "for i in $(seq 600); do [ -e '" + path("b") +
                     "/ckpt-20' ] && break; sleep 0.1; done\n"
                     "\"$NETNS\" cut $H1 >/dev/null\n"
                     "echo chief $(seconds_until_exit $pid0 40)\n"
                     "echo worker $(seconds_until_exit $pid1 40)\n");
  EXPECT_NE(run.out.find("chief "), std::string::npos) << run.out << run.err;
  std::cout << "cut host, seconds to exit:\n" << run.out;
  EXPECT_EQ(run.out.find("hung"), std::string::npos)
      << run.out << garden_test::slurp(dir_ / "err0") << garden_test::slurp(dir_ / "err1");
  EXPECT_NE(garden_test::slurp(dir_ / "err0").find("rank 1 stopped answering"), std::string::npos)
      << garden_test::slurp(dir_ / "err0");
  const std::string worker = garden_test::slurp(dir_ / "err1");
  EXPECT_NE(worker.find("rank 0 (the chief"), std::string::npos) << worker;
}

TEST_F(MultiHostCliTest, WhenOnlyTheCollectivesNetworkIsCutEachSideNamesTheOther) {
  // Multi-homed hosts: the rendezvous store on the first network, Gloo on
  // the second (GLOO_SOCKET_IFNAME=gd1). Host 1's gd1 goes down: the
  // heartbeats still arrive over gd0, so it is each rank's probe on gd1
  // that names the other.
  const CliRun run =
      on_two_hosts("node 0 '" + kLongIris + "' '" + path("c") +
                       "' GLOO_SOCKET_IFNAME=gd1\nnode 1 '" + kLongIris + "' '" + path("c1") +
                       "' GLOO_SOCKET_IFNAME=gd1\n" + "for i in $(seq 600); do [ -e '" + path("c") +
                       "/ckpt-20' ] && break; sleep 0.1; done\n"
                       "\"$NETNS\" cut $H1 gd1 >/dev/null\n"
                       "echo chief $(seconds_until_exit $pid0 40)\n"
                       "echo worker $(seconds_until_exit $pid1 40)\n",
                   200, 2);
  const std::string chief = garden_test::slurp(dir_ / "err0");
  const std::string worker = garden_test::slurp(dir_ / "err1");
  EXPECT_NE(run.out.find("chief "), std::string::npos) << run.out << run.err;
  std::cout << "collectives' network cut, seconds to exit:\n" << run.out;
  EXPECT_EQ(run.out.find("hung"), std::string::npos) << run.out << chief << worker;
  EXPECT_NE(chief.find("rank 1 (unreachable at 10.231.1.11) stopped answering"), std::string::npos)
      << chief;
  EXPECT_NE(worker.find("rank 0 (unreachable at 10.231.1.10) stopped answering"), std::string::npos)
      << worker;
}

TEST_F(MultiHostCliTest, MaxRestartsSurvivesAWorkerKilledAtARandomMomentAndEndsBitwiseEqual) {
  // 600 steps, a checkpoint every 50, on a model_dir both hosts share (as
  // a cluster's shared storage); seeds and data as the uninterrupted run.
  const std::string steps =
      "runtime.seed=7,trainer.train_steps=600,trainer.steps_per_loop=10,"
      "trainer.checkpoint_interval=50,runtime.collective_timeout_seconds=5";
  const CliRun reference = on_two_hosts(
      "node 0 '" + steps + "' '" + path("uninterrupted") + "'\nnode 1 '" + steps + "' '" +
      path("uninterrupted") + "'\nwait $pid0; s0=$?; wait $pid1; s1=$?\nexit $((s0 + s1))");
  ASSERT_EQ(reference.status, 0) << garden_test::slurp(dir_ / "err0");
  // A random host's worker is killed at a random moment after ckpt-100;
  // both launchers restart their group, from the latest checkpoint.
  const CliRun run =
      on_two_hosts("export LAUNCH=--max_restarts=2\nnode 0 '" + steps + "' '" + path("restarted") +
                       "'\nnode 1 '" + steps + "' '" + path("restarted") +
                       "'\nfor i in $(seq 600); do [ -e '" + path("restarted") +
                       "/ckpt-100' ] && break; sleep 0.1; done\n"
                       "victim=$((RANDOM % 2)); sleep 0.$((RANDOM % 10))\n"
                       "echo victim $victim; kill -KILL $(train_pid $victim)\n"
                       "wait $pid0; s0=$?; wait $pid1; s1=$?\nexit $((s0 + s1))",
                   300);
  const std::string err0 = garden_test::slurp(dir_ / "err0");
  const std::string err1 = garden_test::slurp(dir_ / "err1");
  ASSERT_EQ(run.status, 0) << run.out << err0 << err1;
  std::cout << run.out;
  EXPECT_NE((err0 + err1).find("restarting the group (1 of 2) from the latest checkpoint"),
            std::string::npos)
      << err0 << err1;
  EXPECT_NE(err0.find("restored "), std::string::npos) << err0;
  garden_test::expect_same_weights(path("restarted"), path("uninterrupted"), 0.0);
}

TEST_F(MultiHostCliTest, AnUnreachableChiefIsOneLineNamingItsAddressWithinTheTimeout) {
  // The chief's host is cut off before the worker starts.
  const CliRun run = on_two_hosts("\"$NETNS\" cut $H0 >/dev/null\nnode 1 '" + kIris +
                                  ",runtime.collective_timeout_seconds=3' '" + path("w") +
                                  "'\necho worker $(seconds_until_exit $pid1 30)\n"
                                  "wait $pid1; echo status $?\necho port $PORT\n");
  const std::string err = garden_test::slurp(dir_ / "err1");
  EXPECT_EQ(run.out.find("hung"), std::string::npos) << run.out << err;
  EXPECT_EQ(run.out.find("status 0"), std::string::npos) << run.out;
  const auto port = run.out.substr(run.out.find("port ") + 5);
  EXPECT_NE(err.find("no chief answered at 10.231.0.10:" + port.substr(0, port.find('\n')) +
                     " within 3 s"),
            std::string::npos)
      << err;
}

}  // namespace
