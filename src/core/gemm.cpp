#include "garden/core/gemm.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "garden/base/error.h"

namespace garden {
namespace {

// oneDNN's C API (dnnl.h), row-major; found with dlsym in the libraries the
// process loaded, so Garden builds without oneDNN's headers and runs where
// LibTorch has none (or links it in statically, hidden, as the wheels do).
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using DnnlVersionFn = const DnnlVersion* (*)();
// The Fortran BLAS interface, column-major.
using BlasSgemm = void (*)(const char*, const char*, const int*, const int*, const int*,
                           const float*, const float*, const int*, const float*, const int*,
                           const float*, float*, const int*);

struct Gemm {
  DnnlSgemm dnnl = nullptr;
  std::string name;
};

const Gemm& gemm() {
  static const Gemm chosen = [] {
    Gemm g;
    const char* env = std::getenv("GARDEN_GEMM");
    const std::string wanted = env ? env : "";
    if (!wanted.empty() && wanted != "onednn" && wanted != "blas")
      throw Error("GARDEN_GEMM=" + wanted + ": must be onednn or blas");
    if (wanted != "blas") g.dnnl = reinterpret_cast<DnnlSgemm>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
    if (g.dnnl) {
      g.name = "oneDNN sgemm";
      if (auto version = reinterpret_cast<DnnlVersionFn>(dlsym(RTLD_DEFAULT, "dnnl_version"))) {
        const DnnlVersion* v = version();
        g.name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                 std::to_string(v->patch) + " sgemm";
      }
    } else {
      g.name = dlsym(RTLD_DEFAULT, "sgemm_") ? "BLAS" : "none";
    }
    return g;
  }();
  return chosen;
}

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

const std::string& gemm_library() { return gemm().name; }

bool sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const Gemm& g = gemm();
  // oneDNN divides the product over this thread's OpenMP threads: give the
  // thread LibTorch's count first, as at::parallel_for does (a thread that
  // has not run one yet has the process's default).
  at::internal::lazy_init_num_threads();
  if (recording.load(std::memory_order_relaxed))
    record_gemm_call(GemmCall{trans_a, trans_b, m, n, k});
  if (g.dnnl) return g.dnnl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0;
  return blas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool blas_sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  static const auto blas = reinterpret_cast<BlasSgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
  if (!blas) return false;
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > INT_MAX) return false;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const int mi = static_cast<int>(n), ni = static_cast<int>(m), ki = static_cast<int>(k);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  blas(&trans_b, &trans_a, &mi, &ni, &ki, &alpha, b, &la, a, &lb, &beta, c, &lc);
  return true;
}

}  // namespace garden
