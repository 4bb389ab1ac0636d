// The process set-up `garden` starts with, as a user sees it: the OpenMP,
// OpenBLAS and malloc settings a computing command restarts with (and keeps
// where the user chose), and what `garden env` reports (docs/runtime.md).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_run.h"
#include "garden/kernels/gemm.h"
#include "garden/platform/blas.h"
#include "garden/platform/cpu_share.h"
#include "garden/platform/threads.h"

namespace {

using namespace cli_run;  // NOLINT

TEST(CliTrain, StartsWithPassiveOpenMpAndAKeptHeapUnlessTheUserChose) {
  // garden train restarts itself with OMP_WAIT_POLICY=PASSIVE (libgomp reads
  // it only at load) and OPENBLAS_THREAD_TIMEOUT=14 (OpenBLAS reads it at
  // load), sets malloc to keep freed memory, and logs what it runs with; what
  // the user set is kept.
  const std::vector<std::string> names = {
      "OMP_WAIT_POLICY",  "GOMP_SPINCOUNT",          "GARDEN_SET_GOMP_SPINCOUNT",
      "GARDEN_GEMM",      "OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT",
      "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_",  "OPENBLAS_CORETYPE"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const auto& name : names) {
    const char* value = std::getenv(name.c_str());
    saved[name] = value ? std::optional<std::string>(value) : std::nullopt;
    unsetenv(name.c_str());
  }
  struct Case {
    std::vector<std::pair<std::string, std::string>> environment;
    std::vector<std::string> expected;
    std::string threads = "1";  // runtime.intra_op_parallelism_threads
  };
  // Under AddressSanitizer (scripts/sanitize.sh) malloc is the sanitizer's,
  // which glibc's settings do not reach: garden then logs glibc's default.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kSanitizedMalloc = true;
#elif defined(__has_feature)
  constexpr bool kSanitizedMalloc = __has_feature(address_sanitizer);
#else
  constexpr bool kSanitizedMalloc = false;
#endif
  // OPENBLAS_THREAD_TIMEOUT is set only where the BLAS is OpenBLAS, and
  // GOMP_SPINCOUNT only where Garden's products run on oneDNN (libgomp's
  // threads) and the user chose no wait policy.
  const bool openblas = garden::loaded_blas_library().find("openblas") != std::string::npos;
  const bool onednn = garden::gemm_library().rfind("oneDNN", 0) == 0;
  const std::string timeout = std::string("OPENBLAS_THREAD_TIMEOUT=") + (openblas ? "14" : "unset");
  std::vector<Case> cases = {
      {{},
       {"threads: 1 LibTorch intra-op (Garden's kernels on 1), OMP_WAIT_POLICY=PASSIVE, " +
            std::string(onednn ? "GOMP_SPINCOUNT=100000 (set by garden: Garden's products run on "
                                 "oneDNN), "
                               : "") +
            timeout + ", ",
        kSanitizedMalloc ? "malloc: glibc's default" : "malloc: heap only, freed memory kept"}},
      // The user's count is kept; passive waits chosen by the user, or
      // products on the BLAS, get none.
      {{{"GOMP_SPINCOUNT", "5000"}}, {"OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=5000, " + timeout}},
      {{{"OMP_WAIT_POLICY", "PASSIVE"}}, {"OMP_WAIT_POLICY=PASSIVE, " + timeout}},
      {{{"GARDEN_GEMM", "blas"}}, {"OMP_WAIT_POLICY=PASSIVE, " + timeout}},
      {{{"OMP_WAIT_POLICY", "ACTIVE"},
        {"OPENBLAS_THREAD_TIMEOUT", "20"},
        {"MALLOC_MMAP_MAX_", "65536"}},
       {"OMP_WAIT_POLICY=ACTIVE, OPENBLAS_THREAD_TIMEOUT=20, ",
        "malloc: as the user set (MALLOC_MMAP_MAX_=65536)"}},
      // OpenBLAS's older name for it is the user's choice too.
      {{{"GOTO_THREAD_TIMEOUT", "20"}}, {"OPENBLAS_THREAD_TIMEOUT=unset, "}},
  };
  // 0 is every core, but one thread where libgomp's threads spin.
  if (garden::usable_cores() > 1)
    cases.push_back(
        {{{"OMP_WAIT_POLICY", "ACTIVE"}},
         {"threads: 1 LibTorch intra-op (Garden's kernels on 1) "
          "(runtime.intra_op_parallelism_threads "
          "0 is every core only with OMP_WAIT_POLICY=PASSIVE, which garden's commands set), "
          "OMP_WAIT_POLICY=ACTIVE"},
         "0"});
  // OpenBLAS's generic kernels run on every x86-64 CPU: chosen by the user,
  // they are kept and named (which kernels garden picks is CliEnv's test).
  if (openblas) {
    cases.push_back({{{"OPENBLAS_CORETYPE", "Prescott"}},
                     {"OpenBLAS: Prescott kernels (OPENBLAS_CORETYPE=Prescott as the user set)"}});
    cases.front().expected.push_back(", OpenBLAS: ");
  }
  TempDir dir;
  int index = 0;
  for (const Case& c : cases) {
    for (const auto& [name, value] : c.environment) setenv(name.c_str(), value.c_str(), 1);
    const fs::path model_dir = dir / ("model" + std::to_string(index++));
    const Result r = run_garden(
        {"train", "--experiment=tabular/iris", "--mode=train",
         "--params_override=trainer.train_steps=10,runtime.intra_op_parallelism_threads=" +
             c.threads,
         "--model_dir=" + model_dir.string()},
        dir.path());
    for (const auto& setting : c.environment) unsetenv(setting.first.c_str());
    ASSERT_EQ(r.status, 0) << r;
    const std::string log = read_file(model_dir / "train.log");
    for (const auto& part : c.expected) EXPECT_TRUE(contains(log, part)) << part << "\n" << r;
  }
  for (const auto& [name, value] : saved)
    if (value) setenv(name.c_str(), value->c_str(), 1);
}

TEST(CliEnv, OpenBlasGetsTheWidestKernelsTheCpuRunsOnlyWhereItChoseOlderOnes) {
  // `garden env` starts as the computing commands do and reports what is in
  // effect. The kernels OpenBLAS chooses on its own are this test process's,
  // when the user set no OPENBLAS_CORETYPE for it either.
  if (garden::loaded_blas_library().find("openblas") == std::string::npos)
    GTEST_SKIP() << "the BLAS is not OpenBLAS: " << garden::loaded_blas_library();
  const char* preset = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> saved =
      preset ? std::optional<std::string>(preset) : std::nullopt;
  TempDir dir;
  if (!saved) {
    const std::string own = garden::openblas_kernels();
    const std::string forced =
        garden::openblas_kernels_to_force(own, garden::best_openblas_kernels_for_cpu());
    const Result r = run_garden({"env"}, dir.path());
    ASSERT_EQ(r.status, 0) << r;
    if (forced.empty()) {
      EXPECT_FALSE(contains(r.out, "OPENBLAS_CORETYPE")) << r;
      EXPECT_TRUE(contains(r.out, "# OpenBLAS: " + own + " kernels\n")) << r;
    } else {
      // OpenBLAS honoured the kernels garden set: the products ran with them.
      EXPECT_TRUE(contains(r.out, "export OPENBLAS_CORETYPE=" + forced + "\n")) << r;
      EXPECT_TRUE(contains(r.out, "# OpenBLAS: " + forced +
                                      " kernels (OPENBLAS_CORETYPE set by garden: OpenBLAS chose " +
                                      own + " for this CPU)\n"))
          << r;
    }
  }
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  const Result user = run_garden({"env"}, dir.path());
  if (saved)
    setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  ASSERT_EQ(user.status, 0) << user;
  EXPECT_TRUE(contains(user.out, "export OPENBLAS_CORETYPE=Prescott\n")) << user;
  EXPECT_TRUE(contains(
      user.out, "# OpenBLAS: Prescott kernels (OPENBLAS_CORETYPE=Prescott as the user set)\n"))
      << user;
}

// `garden env` names the library of Garden's own float32 products;
// GARDEN_GEMM=blas keeps LibTorch's BLAS, and another value is one line.
TEST(CliEnv, NamesTheLibraryOfGardensProductsAndRefusesAnUnknownOne) {
  TempDir dir;
  const Result r = run_garden({"env"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(contains(r.out, "# matrix products of Garden's layers: " + garden::gemm_library() +
                                  " (GARDEN_GEMM=onednn|blas)\n"))
      << r;
  setenv("GARDEN_GEMM", "blas", 1);
  const Result blas = run_garden({"env"}, dir.path());
  setenv("GARDEN_GEMM", "mkl", 1);
  const Result bad = run_garden({"env"}, dir.path());
  const Result bad_train = run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                                       "--model_dir=" + (dir / "model").string()},
                                      dir.path());
  unsetenv("GARDEN_GEMM");
  ASSERT_EQ(blas.status, 0) << blas;
  EXPECT_TRUE(contains(blas.out, "# matrix products of Garden's layers: BLAS (")) << blas;
  for (const Result* failed : {&bad, &bad_train}) {
    EXPECT_NE(failed->status, 0) << *failed;
    EXPECT_TRUE(contains(failed->err, "GARDEN_GEMM=mkl: must be onednn or blas")) << *failed;
  }
}

// `garden env` says whether the thread count follows what other processes
// leave free, and on how many cores (docs/runtime.md, Threads).
TEST(CliEnv, SaysWhetherTheThreadsShareTheCores) {
  TempDir dir;
  const int cores = garden::available_cores();
  const Result r = run_garden({"env"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  const int affinity = garden::usable_cores();
  const int cgroup = garden::process_cgroup_cpu_limit();
  const std::string where = std::to_string(cores) + " cores: affinity " + std::to_string(affinity) +
                            ", cgroup " +
                            (cgroup > 0 ? std::to_string(cgroup) : std::string("none"));
  EXPECT_TRUE(
      contains(r.out, std::string("# cpu share: ") + (cores > 1 ? "on (" : "off (") + where + ")"))
      << r;
  setenv("GARDEN_CPU_SHARE", "0", 1);
  const Result off = run_garden({"env"}, dir.path());
  unsetenv("GARDEN_CPU_SHARE");
  ASSERT_EQ(off.status, 0) << off;
  if (cores > 1) {
    EXPECT_TRUE(contains(off.out, "# cpu share: off (GARDEN_CPU_SHARE=0; " + where + ")")) << off;
  }
}

}  // namespace
