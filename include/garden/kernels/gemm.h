// The GEMM router: Garden's own float32 matrix products on the CPU (the dense
// layers and the vocabulary projections, forward and backward; see
// kernels::linear) go to oneDNN's sgemm when the LibTorch in the process
// loaded oneDNN as a shared library (Debian's does: libdnnl), else to the
// BLAS LibTorch loaded (platform/blas.h binds both, and GARDEN_GEMM chooses).
// LibTorch 1.13 runs its own float32 products on the BLAS only; oneDNN's
// sgemm is the faster of the two for these shapes (docs/performance.md).
// Both libraries divide a product over the calling thread's OpenMP threads,
// which at::set_num_threads sets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "garden/platform/blas.h"

namespace garden::kernels {

// Row-major C[m, n] = alpha * op(A) op(B) + beta * C, op by 'N' or 'T', with
// leading dimensions lda, ldb, ldc (elements between rows as stored). Returns
// false, computing nothing, when no library is available.
bool sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product on the BLAS LibTorch loaded (its Fortran sgemm_), which
// sgemm uses without oneDNN; false without a BLAS or past int's range.
bool blas_sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);

// One sgemm call as it was made: the layouts and sizes it took.
struct GemmCall {
  char trans_a = 'N', trans_b = 'N';
  int64_t m = 0, n = 0, k = 0;
};

// While one lives, every sgemm call, from any thread, is recorded (its
// layouts and sizes, in the order the calls began): what the step
// benchmarks' --replay runs again to time a step's products alone. One at
// a time: constructing a second while one lives throws garden::Error.
// Outside a recording sgemm pays one relaxed atomic load.
class GemmRecorder {
 public:
  GemmRecorder();
  ~GemmRecorder();
  GemmRecorder(const GemmRecorder&) = delete;
  GemmRecorder& operator=(const GemmRecorder&) = delete;

  // The calls recorded so far.
  std::vector<GemmCall> calls() const;
};

}  // namespace garden::kernels
