// The reason stop signals never reach a thread of Garden's: oneDNN's JIT
// matrix products (Debian's libdnnl 2.6; oneDNN issue 4845, fixed in 3.11.1)
// point the stack register into a heap workspace while they run, and a
// signal handler entered there writes its signal frame over the heap. On
// this project's machine a run whose products were on oneDNN, sent no-op
// SIGUSR1s (a handler, no SA_RESTART or with it) every few milliseconds,
// aborted with "corrupted size vs. prev_size" in every try; with the
// products on OpenBLAS it did not. Here SIGTERMs storm the process while
// garden::kernels::sgemm runs on every thread: with the signals left to the signal
// thread the products stay bitwise what they were and the heap intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "garden/platform/stop_signals.h"
#include "garden/kernels/gemm.h"

namespace {

constexpr int64_t kSize = 384;

std::vector<float> pattern(int64_t n, int seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] =
        static_cast<float>((i * 7919 + static_cast<std::size_t>(seed) * 104729) % 2003) / 1000.0f -
        1.0f;
  return v;
}

// The product of `a` and `b`, as garden::kernels::sgemm computes it.
std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(static_cast<std::size_t>(kSize * kSize), 0.0f);
  EXPECT_TRUE(garden::kernels::sgemm('N', 'N', kSize, kSize, kSize, 1.0f, a.data(), kSize, b.data(), kSize,
                            0.0f, c.data(), kSize));
  return c;
}

TEST(SignalStormTest, ProductsAndHeapSurviveAStormOfStopSignals) {
  if (garden::gemm_library().rfind("oneDNN", 0) != 0)
    GTEST_SKIP() << "products on " << garden::gemm_library() << ", not oneDNN";
  garden::GracefulStop graceful;
  const auto a = pattern(kSize * kSize, 1), b = pattern(kSize * kSize, 2);
  const auto expected = product(a, b);
  // Blocks whose contents say whether anything wrote over them.
  std::vector<std::vector<uint64_t>> canaries;
  for (int i = 0; i < 2000; ++i)
    canaries.emplace_back(static_cast<std::size_t>(16 + i % 200), 0x5a5a5a5a00000000ull + i);

  const pid_t target = ::getpid();
  const pid_t storm = ::fork();
  if (storm == 0) {
    // Only async-signal-safe calls in the child of a threaded process.
    const timespec pause{0, 200 * 1000};
    for (int i = 0; i < 100000; ++i) {
      if (::kill(target, SIGTERM) != 0) ::_exit(0);
      ::nanosleep(&pause, nullptr);
    }
    ::_exit(0);
  }
  ASSERT_GT(storm, 0);
  std::atomic<int> mismatches{0};
  int products = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) {
    // Products on the calling thread and on OpenMP's workers at once.
    at::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
      const auto c = product(a, b);
      if (std::memcmp(c.data(), expected.data(), c.size() * sizeof(float)) != 0) ++mismatches;
    });
    products += 2;
    // Churn the heap a workspace sits in.
    std::vector<std::vector<float>> churn;
    for (int i = 0; i < 64; ++i) churn.emplace_back(static_cast<std::size_t>(1000 + 37 * i), 1.0f);
  }
  ::kill(storm, SIGKILL);
  ::waitpid(storm, nullptr, 0);
  EXPECT_EQ(garden::StopSignals::pending(), SIGTERM);
  EXPECT_GT(products, 0);
  EXPECT_EQ(mismatches.load(), 0);
  for (std::size_t i = 0; i < canaries.size(); ++i)
    for (const uint64_t word : canaries[i])
      ASSERT_EQ(word, 0x5a5a5a5a00000000ull + i) << "block " << i << " was written over";
}

}  // namespace
