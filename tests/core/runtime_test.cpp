// Runtime set-up: the BLAS check, seeds recorded in the config, threads, and
// the progress formatting users read.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <c10/core/Allocator.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "garden/base/error.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/precision.h"
#include "garden/core/progress.h"
#include "garden/core/runtime.h"
#include "garden/platform/allocator.h"
#include "garden/platform/blas.h"
#include "garden/platform/threads.h"

namespace {

TEST(RuntimeTest, TheLoadedBlasIsFound) {
  // A matrix product makes sure the BLAS library is loaded.
  const auto product = torch::mm(torch::ones({64, 64}), torch::ones({64, 64}));
  EXPECT_EQ(product[0][0].item<float>(), 64.0f);
  EXPECT_FALSE(garden::loaded_blas_library().empty());
}

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(RuntimeTest, AKeptHeapServesARepeatedLargeTensorWithItsOwnFreedPages) {
  // The pattern of a decoding loop or `probs = softmax(logits)`: the next
  // tensor is made before the last one is freed. (ctest runs each test in a
  // process of its own, so the heap setting stays in this one.)
  garden::keep_freed_memory_in_the_heap();
  if (garden::malloc_setting() != "heap only, freed memory kept")
    GTEST_SKIP() << "malloc runs " << garden::malloc_setting();
  constexpr int64_t kFloats = 16 << 20;  // 64 MiB: 16,384 pages
  at::Tensor last = torch::ones({kFloats});
  for (int i = 0; i < 3; ++i) last = torch::ones({kFloats});
  const long before = minor_faults();
  for (int i = 0; i < 8; ++i) {
    at::Tensor next = torch::full({kFloats}, static_cast<float>(i));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(next.data_ptr()) % 64, 0u);
    last = next;
  }
  // With posix_memalign every pass took 16,384 fresh pages (131,072 in all)
  // and the heap grew by 64 MiB a pass.
  EXPECT_LT(minor_faults() - before, 4096);
  EXPECT_EQ(last[kFloats - 1].item<float>(), 7.0f);
  // A zero-size tensor is fine to free, and LibTorch's raw allocations
  // (kernels' scratch buffers) come back through the data pointer alone.
  EXPECT_EQ(torch::empty({0}).numel(), 0);
  c10::Allocator* cpu = c10::GetAllocator(c10::DeviceType::CPU);
  void* raw = cpu->raw_allocate(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(raw) % 64, 0u);
  std::memset(raw, 1, 1000);
  cpu->raw_deallocate(raw);
  const at::Tensor x = torch::randn({64, 256});
  EXPECT_TRUE(
      torch::allclose(at::gelu(x), 0.5 * x * (1 + torch::erf(x / std::sqrt(2.0))), 1e-5, 1e-6));
}

TEST(RuntimeTest, TheReferenceBlasAndOnlyItGetsTheSlowBlasWarning) {
  const auto reference =
      garden::slow_blas_warning("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0");
  ASSERT_EQ(reference.size(), 4u);
  EXPECT_NE(reference[1].find("SLOW BLAS: /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"),
            std::string::npos);
  EXPECT_NE(reference[2].find("libopenblas0-pthread"), std::string::npos);
  for (const char* fast : {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                           "/opt/intel/mkl/lib/libmkl_rt.so", "/usr/lib/libblis.so.4", ""})
    EXPECT_TRUE(garden::slow_blas_warning(fast).empty()) << fast;
}

TEST(RuntimeTest, OpenBlasKernelsAreForcedOnlyUpToWhatTheCpuRuns) {
  // OpenBLAS's generic fallback for a CPU model it does not know, and its
  // older families, give way to the widest kernels the CPU runs.
  EXPECT_EQ(garden::openblas_kernels_to_force("Prescott", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(garden::openblas_kernels_to_force("PRESCOTT", "Haswell"), "Haswell");
  EXPECT_EQ(garden::openblas_kernels_to_force("Sandybridge", "Haswell"), "Haswell");
  EXPECT_EQ(garden::openblas_kernels_to_force("Haswell", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(garden::openblas_kernels_to_force("Zen", "SkylakeX"), "SkylakeX");
  // Never sideways or down, never past what the CPU runs.
  for (const char* loaded : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    EXPECT_EQ(garden::openblas_kernels_to_force(loaded, "SkylakeX"), "") << loaded;
  EXPECT_EQ(garden::openblas_kernels_to_force("Haswell", "Haswell"), "");
  EXPECT_EQ(garden::openblas_kernels_to_force("SkylakeX", "Haswell"), "");
  EXPECT_EQ(garden::openblas_kernels_to_force("Prescott", ""), "") << "a CPU without AVX2";
  // Names it does not know (another architecture, a newer family, no OpenBLAS).
  for (const char* loaded : {"NEOVERSEN1", "EmeraldRapids", ""})
    EXPECT_EQ(garden::openblas_kernels_to_force(loaded, "SkylakeX"), "") << loaded;

  // The CPU's own answer is one of the three, and names kernels it can run:
  // a product with them forced is tested through `garden env` (cli tests).
  const std::string best = garden::best_openblas_kernels_for_cpu();
  EXPECT_TRUE(best.empty() || best == "Haswell" || best == "SkylakeX") << best;
#if defined(__x86_64__)
  if (best == "SkylakeX") {
    EXPECT_TRUE(__builtin_cpu_supports("avx512bw"));
  }
  if (!best.empty()) {
    EXPECT_TRUE(__builtin_cpu_supports("avx2"));
  }
#else
  EXPECT_EQ(best, "");
#endif
  // Debian's OpenBLAS is loaded here (TheLoadedBlasIsFound) and names its kernels.
  torch::mm(torch::ones({8, 8}), torch::ones({8, 8}));
  if (garden::loaded_blas_library().find("openblas") != std::string::npos) {
    EXPECT_FALSE(garden::openblas_kernels().empty());
  }
}

TEST(RuntimeTest, FinalizeRecordsSeedsValidatesAndLocks) {
  auto params = garden::config::get_experiment_config("tabular/classification");
  params->task->train_data_config().input_path = "x.csv";
  ASSERT_FALSE(params->runtime.seed.has_value());
  garden::finalize_config(*params);
  ASSERT_TRUE(params->runtime.seed.has_value());
  EXPECT_EQ(params->task->train_data_config().seed, *params->runtime.seed);
  EXPECT_EQ(params->task->validation_data_config().seed, *params->runtime.seed + 1);
  EXPECT_TRUE(params->locked());
  EXPECT_THROW(garden::config::apply_override(*params, "trainer.train_steps=1"),
               garden::config::ConfigError);

  auto invalid = garden::config::get_experiment_config("tabular/iris");
  garden::config::apply_override(*invalid, "trainer.steps_per_loop=0");
  EXPECT_THROW(garden::finalize_config(*invalid), garden::config::ConfigError);
  EXPECT_FALSE(invalid->locked());
}

TEST(RuntimeTest, ThreadsAndSeedAreApplied) {
  garden::config::RuntimeConfig runtime;
  runtime.intra_op_parallelism_threads = 1;
  runtime.seed = 123;
  garden::apply_runtime(runtime);
  EXPECT_EQ(at::get_num_threads(), 1);
  const auto a = torch::rand({4});
  garden::apply_runtime(runtime);
  EXPECT_TRUE(torch::equal(a, torch::rand({4})));
  runtime.device = "cuda:0";
  if (!torch::cuda::is_available()) {
    EXPECT_THROW(garden::apply_runtime(runtime), garden::Error);
  }
}

// 0 intra-op threads is TensorFlow's 0: every core the process may run on,
// unless OMP_NUM_THREADS gives the process its share (torchrun, garden
// launch), which LibTorch's own setting then keeps.
// Every core needs libgomp's passive waits, which garden's commands start
// with: under its default, spinning, 0 stays one thread.
TEST(RuntimeTest, ZeroIntraOpThreadsIsEveryUsableCoreUnlessOmpNumThreadsIsSet) {
  const int saved = at::get_num_threads();
  std::map<std::string, std::optional<std::string>> saved_env;
  for (const char* name : {"OMP_NUM_THREADS", "OMP_WAIT_POLICY"}) {
    const char* value = std::getenv(name);
    saved_env[name] = value ? std::optional<std::string>(value) : std::nullopt;
  }
  garden::config::RuntimeConfig runtime;
  runtime.intra_op_parallelism_threads = 0;
  unsetenv("OMP_NUM_THREADS");
  setenv("OMP_WAIT_POLICY", "passive", 1);
  at::set_num_threads(1);
  garden::apply_runtime(runtime);
  EXPECT_EQ(at::get_num_threads(), garden::usable_cores());
  unsetenv("OMP_WAIT_POLICY");
  garden::apply_runtime(runtime);
  EXPECT_EQ(at::get_num_threads(), 1);
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(garden::usable_cores(), CPU_COUNT(&set));
  setenv("OMP_NUM_THREADS", "1", 1);
  at::set_num_threads(3);
  garden::apply_runtime(runtime);
  EXPECT_EQ(at::get_num_threads(), 3);  // left as it was
  for (const auto& [name, value] : saved_env) {
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  at::set_num_threads(saved);
}

// LibTorch's at::parallel_for is inline: in code compiled without OpenMP it
// runs on the calling thread whatever at::set_num_threads says. Until
// 2026-11-27 Garden compiled so, and its kernels (attention, layer norm,
// GELU, dropout, the loss) ran on one thread at any setting, which also made
// their same-bits-for-any-thread-count tests compare one thread with one.
TEST(RuntimeTest, GardensKernelsRunOnLibTorchsIntraOpThreads) {
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  EXPECT_EQ(garden::parallel_for_threads(), 1);
  at::set_num_threads(3);
  const int three = garden::parallel_for_threads();
  at::set_num_threads(saved);
  if (GARDEN_KERNELS_OPENMP)
    EXPECT_EQ(three, 3);
  else  // clang's sanitizer and fuzzing builds (CMakeLists.txt, GARDEN_OPENMP)
    EXPECT_EQ(three, 1);
}

TEST(ProgressTest, DurationsReadAsHoursMinutesSeconds) {
  EXPECT_EQ(garden::Progress::format_duration(0), "0:00:00");
  EXPECT_EQ(garden::Progress::format_duration(61.4), "0:01:01");
  EXPECT_EQ(garden::Progress::format_duration(3 * 3600 + 7 * 60 + 9), "3:07:09");
  EXPECT_EQ(garden::Progress::format_duration(-1), "?");
  garden::Progress progress(0, 100, /*interactive=*/false);
  EXPECT_LT(progress.eta_seconds(0), 0) << "no rate yet, so no ETA";
}

TEST(PrecisionTest, Bfloat16AutocastAppliesOnlyInsideTheGuard) {
  const auto a = torch::ones({4, 4});
  {
    garden::AutocastGuard guard(std::string("bfloat16"), torch::kCPU);
    EXPECT_TRUE(guard.active());
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
  garden::AutocastGuard none(std::nullopt, torch::kCPU);
  EXPECT_FALSE(none.active());
  garden::AutocastGuard float32(std::string("float32"), torch::kCPU);
  EXPECT_FALSE(float32.active());
  EXPECT_THROW(garden::AutocastGuard(std::string("int8"), torch::kCPU), garden::Error);
}

}  // namespace
