// garden::kernels::sgemm and the library it runs on (garden/core/gemm.h).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "garden/base/error.h"
#include "garden/kernels/gemm.h"

namespace garden::kernels {
namespace {

// oneDNN where the process loaded it as a shared library (Debian's LibTorch
// does), else the BLAS; GARDEN_GEMM is unset in the tests.
TEST(GemmTest, RunsOnOneDnnWhereLibTorchLoadedIt) {
  const bool dnnl = dlsym(RTLD_DEFAULT, "dnnl_sgemm") != nullptr;
  if (dnnl)
    EXPECT_EQ(gemm_library().rfind("oneDNN ", 0), 0u) << gemm_library();
  else
    EXPECT_EQ(gemm_library(), dlsym(RTLD_DEFAULT, "sgemm_") ? "BLAS" : "none");
}

// Each of the four transpositions, row-major with padded leading dimensions
// and beta 0 and 1, against the product in double: sgemm (oneDNN here) and
// the BLAS's.
TEST(GemmTest, EveryTranspositionMatchesTheProductInDouble) {
  ASSERT_NE(gemm_library(), "none");
  for (const bool blas : {false, true}) {
    SCOPED_TRACE(blas ? "blas_sgemm" : "sgemm");
    const auto product = blas ? &blas_sgemm : &sgemm;
    torch::manual_seed(3);
    const int64_t m = 37, n = 70, k = 129, pad = 5;
    for (const char ta : {'N', 'T'}) {
      for (const char tb : {'N', 'T'}) {
        for (const float beta : {0.0f, 1.0f}) {
          // op(A) is [m, k], op(B) [k, n]; stored as the transpose where 'T'.
          const at::Tensor a_stored = torch::randn(ta == 'N' ? std::vector<int64_t>{m, k + pad}
                                                             : std::vector<int64_t>{k, m + pad});
          const at::Tensor b_stored = torch::randn(tb == 'N' ? std::vector<int64_t>{k, n + pad}
                                                             : std::vector<int64_t>{n, k + pad});
          const at::Tensor a = ta == 'N' ? a_stored.narrow(1, 0, k) : a_stored.narrow(1, 0, m).t();
          const at::Tensor b = tb == 'N' ? b_stored.narrow(1, 0, n) : b_stored.narrow(1, 0, k).t();
          at::Tensor c_stored = torch::randn({m, n + pad});
          const at::Tensor c0 = c_stored.clone();
          ASSERT_TRUE(product(ta, tb, m, n, k, 0.5f, a_stored.data_ptr<float>(), a_stored.size(1),
                              b_stored.data_ptr<float>(), b_stored.size(1), beta,
                              c_stored.data_ptr<float>(), c_stored.size(1)));
          const at::Tensor want = 0.5 * at::mm(a.to(at::kDouble), b.to(at::kDouble)) +
                                  beta * c0.narrow(1, 0, n).to(at::kDouble);
          EXPECT_LT((c_stored.narrow(1, 0, n).to(at::kDouble) - want).abs().max().item<double>(),
                    1e-4)
              << ta << tb << beta;
          // The padding columns are not written.
          EXPECT_TRUE(c_stored.narrow(1, n, pad).equal(c0.narrow(1, n, pad))) << ta << tb << beta;
        }
      }
    }
  }
}

// The recorder sees each call's layouts and sizes, from this thread and
// another, in order, and nothing before it began or after it ended; a second
// recorder is refused while one records, and allowed after.
TEST(GemmTest, RecorderSeesTheCallsMadeWhileItLives) {
  ASSERT_NE(gemm_library(), "none");
  std::vector<float> a(6 * 5, 1.0f), b(5 * 4, 1.0f), c(6 * 4, 0.0f);
  const auto call = [&](char ta, char tb, int64_t m, int64_t n, int64_t k) {
    ASSERT_TRUE(sgemm(ta, tb, m, n, k, 1.0f, a.data(), ta == 'N' ? k : m, b.data(),
                      tb == 'N' ? n : k, 0.0f, c.data(), n));
  };
  call('N', 'N', 6, 4, 5);  // before: not recorded
  std::vector<GemmCall> seen;
  {
    GemmRecorder recorder;
    EXPECT_THROW(GemmRecorder(), Error);
    call('T', 'N', 6, 4, 5);
    std::thread([&] { call('N', 'T', 3, 2, 5); }).join();
    call('T', 'T', 1, 4, 5);
    seen = recorder.calls();
  }
  call('N', 'N', 6, 4, 5);  // after: not recorded
  ASSERT_EQ(seen.size(), 3u);
  const GemmCall want[] = {{'T', 'N', 6, 4, 5}, {'N', 'T', 3, 2, 5}, {'T', 'T', 1, 4, 5}};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].trans_a, want[i].trans_a) << i;
    EXPECT_EQ(seen[i].trans_b, want[i].trans_b) << i;
    EXPECT_EQ(seen[i].m, want[i].m) << i;
    EXPECT_EQ(seen[i].n, want[i].n) << i;
    EXPECT_EQ(seen[i].k, want[i].k) << i;
  }
  GemmRecorder again;  // the first one ended
  EXPECT_TRUE(again.calls().empty());
}

}  // namespace
}  // namespace garden::kernels
