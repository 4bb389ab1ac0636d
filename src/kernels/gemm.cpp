#include "garden/kernels/gemm.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "garden/base/error.h"
#include "garden/platform/blas.h"

namespace garden::kernels {
namespace {

// Whether a GemmRecorder lives (sgemm's check without the lock), and what it
// has seen; recorder_mutex guards both, so a recorder's end comes after every
// call that saw it begin.
std::atomic<bool> recording{false};
std::mutex recorder_mutex;
std::vector<GemmCall> recorded;

void record_gemm_call(const GemmCall& call) {
  std::lock_guard<std::mutex> guard(recorder_mutex);
  if (recording.load(std::memory_order_relaxed)) recorded.push_back(call);
}

}  // namespace

GemmRecorder::GemmRecorder() {
  std::lock_guard<std::mutex> guard(recorder_mutex);
  if (recording.load(std::memory_order_relaxed))
    throw Error("GemmRecorder: another recorder is already recording sgemm's calls");
  recorded.clear();
  recording.store(true, std::memory_order_relaxed);
}

GemmRecorder::~GemmRecorder() {
  std::lock_guard<std::mutex> guard(recorder_mutex);
  recorded.clear();
  recording.store(false, std::memory_order_relaxed);
}

std::vector<GemmCall> GemmRecorder::calls() const {
  std::lock_guard<std::mutex> guard(recorder_mutex);
  return recorded;
}

bool sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const MatrixLibraries& libraries = matrix_libraries();
  // oneDNN divides the product over this thread's OpenMP threads: give the
  // thread LibTorch's count first, as at::parallel_for does (a thread that
  // has not run one yet has the process's default).
  at::internal::lazy_init_num_threads();
  if (recording.load(std::memory_order_relaxed))
    record_gemm_call(GemmCall{trans_a, trans_b, m, n, k});
  if (libraries.dnnl_sgemm)
    return libraries.dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0;
  return blas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool blas_sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  const auto blas = matrix_libraries().sgemm;
  if (!blas) return false;
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > INT_MAX) return false;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const int mi = static_cast<int>(n), ni = static_cast<int>(m), ki = static_cast<int>(k);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  blas(&trans_b, &trans_a, &mi, &ni, &ki, &alpha, b, &la, a, &lb, &beta, c, &lc);
  return true;
}

}  // namespace garden::kernels
