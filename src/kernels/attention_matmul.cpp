#include "garden/kernels/attention.h"

#include "simd/small_gemm.h"
#include "simd/vector_math.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace garden::kernels {

namespace {

// ---- attention matmuls -------------------------------------------------------------
// LibTorch 1.13's CPU bmm runs a [B, H, T, S] product as B*H separate
// select + addmm calls, and matmul first copies the permuted q/k/v views and
// the context into contiguous layouts. For the short sequences of
// translation that overhead costs more than the arithmetic. Here each head's
// product works on the views as they are: Garden's loops for training's
// float heads (small_gemm.cpp) and for a few query rows (below), one BLAS
// gemm call otherwise; the context is written straight into [B, T, H, Dh]
// order, so merging the heads is a view.
// The BLAS is the one LibTorch itself loaded (found with dlsym); without it,
// or off the CPU, the attention falls back to at::matmul.

using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);
using DgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*);

struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
};

const Blas& blas() {
  static const Blas functions{reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_")),
                              reinterpret_cast<DgemmFn>(dlsym(RTLD_DEFAULT, "dgemm_"))};
  return functions;
}

void gemm(char ta, char tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  const float beta = 0;
  blas().sgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}
void gemm(char ta, char tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
  const double beta = 0;
  blas().dgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}

// A row-major [rows, cols] matrix with strides (row_stride, col_stride) as a
// column-major BLAS operand: 'N' with ld = row_stride, or 'T' with
// ld = col_stride. ld is 0 when neither stride is 1 (then copy first).
struct BlasOperand {
  char trans = 'N';
  int64_t ld = 0;
};

BlasOperand blas_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows == 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {'N', rows == 1 ? std::max<int64_t>(cols, 1) : row_stride};
  if (row_stride == 1 && (cols == 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {'T', cols == 1 ? std::max<int64_t>(rows, 1) : col_stride};
  return {};
}

BlasOperand blas_operand(const at::Tensor& x) {
  return blas_operand(x.size(2), x.size(3), x.stride(2), x.stride(3));
}

// ---- a few query rows (decoding) --------------------------------------------
// A decoding step attends with one query per head and beam: products of
// [m, k] x [k, n] with m 1 (self-attention) or the beam count
// (cross-attention, where an example's beams share the keys), which OpenBLAS
// packs as if they were large. Written out, the scores are dot products with
// the keys
// (b's columns are contiguous) and the context is a weighted sum of the
// values (b's rows are contiguous); a head's keys and values stay in cache
// across the m rows.
constexpr int64_t kFewRows = 8;

struct FewRowsProduct {
  const void* a;  // [m, k], each row contiguous, a_row_stride apart
  int64_t a_row_stride;
  const void* b;         // [k, n]
  int64_t b_row_stride;  // 1: each column of b is contiguous
  int64_t b_col_stride;  // 1: each row of b is contiguous
  int64_t m, k, n;
  double alpha;
  void* c;  // [m, n], each row contiguous, c_row_stride apart
  int64_t c_row_stride;
};

template <typename T>
__attribute__((always_inline)) inline void few_rows_product_loop(const FewRowsProduct& p) {
  const T alpha = static_cast<T>(p.alpha);
  for (int64_t r = 0; r < p.m; ++r) {
    const T* __restrict a = static_cast<const T*>(p.a) + r * p.a_row_stride;
    const T* __restrict b = static_cast<const T*>(p.b);
    T* __restrict c = static_cast<T*>(p.c) + r * p.c_row_stride;
    if (p.b_row_stride == 1) {
      // c[j] = a . column j, in 16 lanes summed pairwise (vector adds of
      // halves, not 16 scalar adds: the head sizes are short).
      constexpr int kLanes = 16;  // the pairwise sum below is written for 16
      for (int64_t j = 0; j < p.n; ++j) {
        const T* __restrict column = b + j * p.b_col_stride;
        T lane[kLanes] = {};
        int64_t i = 0;
        for (; i + kLanes <= p.k; i += kLanes)
          for (int l = 0; l < kLanes; ++l) lane[l] += a[i + l] * column[i + l];
        T tail = 0;
        for (; i < p.k; ++i) tail += a[i] * column[i];
        for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
        for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
        for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
        c[j] = alpha * ((lane[0] + lane[1]) + tail);
      }
    } else {
      // c = sum_i a[i] row i, 32 outputs at a time held in registers across
      // the rows (a running sum in c would wait on its own stores).
      constexpr int kChunk = 32;
      int64_t j = 0;
      for (; j + kChunk <= p.n; j += kChunk) {
        T sum[kChunk] = {};
        for (int64_t i = 0; i < p.k; ++i) {
          const T weight = a[i];
          const T* __restrict row = b + i * p.b_row_stride + j;
          for (int l = 0; l < kChunk; ++l) sum[l] += weight * row[l];
        }
        for (int l = 0; l < kChunk; ++l) c[j + l] = alpha * sum[l];
      }
      for (; j < p.n; ++j) {
        T sum = 0;
        for (int64_t i = 0; i < p.k; ++i) sum += a[i] * b[i * p.b_row_stride + j];
        c[j] = alpha * sum;
      }
    }
  }
}

__attribute__((target("avx512f,avx512dq"))) void few_rows_product_avx512(const FewRowsProduct& p) {
  few_rows_product_loop<float>(p);
}
__attribute__((target("avx2,fma"))) void few_rows_product_avx2(const FewRowsProduct& p) {
  few_rows_product_loop<float>(p);
}
void few_rows_product_portable(const FewRowsProduct& p) { few_rows_product_loop<float>(p); }

void few_rows_product(const FewRowsProduct& p, float /*type*/) {
  static const auto kernel =
      widest_kernel(few_rows_product_avx512, few_rows_product_avx2, few_rows_product_portable);
  kernel(p);
}
void few_rows_product(const FewRowsProduct& p, double /*type*/) {
  few_rows_product_loop<double>(p);
}

// out[i, j] = alpha * a[i, j] @ b[i, j] for a [N1, N2, m, k], b [N1, N2, k, n]
// and a preallocated out [N1, N2, m, n] with unit stride in its last dim.
template <typename T>
void batched_gemm(const at::Tensor& a_in, const at::Tensor& b_in, double alpha, at::Tensor& out) {
  if constexpr (std::is_same_v<T, float>) {
    if (a_in.size(2) > kFewRows && small_product_applies(a_in.size(3), b_in.size(3))) {
      // Training's heads: Garden's register-blocked loops (small_gemm.cpp),
      // on the views as they are.
      const int64_t n1 = a_in.size(0), n2 = a_in.size(1);
      const float* pa = a_in.data_ptr<float>();
      const float* pb = b_in.data_ptr<float>();
      float* pc = out.data_ptr<float>();
      at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
        std::vector<float> scratch(
            static_cast<size_t>(small_product_scratch(a_in.size(3), b_in.size(3))));
        for (int64_t i = begin; i < end; ++i) {
          const int64_t i1 = i / n2, i2 = i % n2;
          small_product(
              {pa + i1 * a_in.stride(0) + i2 * a_in.stride(1), a_in.stride(2), a_in.stride(3),
               pb + i1 * b_in.stride(0) + i2 * b_in.stride(1), b_in.stride(2), b_in.stride(3),
               a_in.size(2), a_in.size(3), b_in.size(3), static_cast<float>(alpha),
               pc + i1 * out.stride(0) + i2 * out.stride(1), out.stride(2)},
              scratch.data());
        }
      });
      return;
    }
  }
  const at::Tensor a = blas_operand(a_in).ld ? a_in : a_in.contiguous();
  const at::Tensor b = blas_operand(b_in).ld ? b_in : b_in.contiguous();
  const BlasOperand oa = blas_operand(a), ob = blas_operand(b);
  const int64_t n1 = a.size(0), n2 = a.size(1);
  const int m = static_cast<int>(a.size(2)), k = static_cast<int>(a.size(3)),
            n = static_cast<int>(b.size(3)), ldc = static_cast<int>(out.stride(2));
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  if (m <= kFewRows && a.stride(3) == 1 && (b.stride(2) == 1 || b.stride(3) == 1)) {
    at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t i1 = i / n2, i2 = i % n2;
        few_rows_product({pa + i1 * a.stride(0) + i2 * a.stride(1), a.stride(2),
                          pb + i1 * b.stride(0) + i2 * b.stride(1), b.stride(2), b.stride(3), m, k,
                          n, alpha, pc + i1 * out.stride(0) + i2 * out.stride(1), out.stride(2)},
                         T{});
      }
    });
    return;
  }
  at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t i1 = i / n2, i2 = i % n2;
      // Row-major C = A B is column-major C^T = B^T A^T.
      gemm(ob.trans, oa.trans, n, m, k, static_cast<T>(alpha),
           pb + i1 * b.stride(0) + i2 * b.stride(1), static_cast<int>(ob.ld),
           pa + i1 * a.stride(0) + i2 * a.stride(1), static_cast<int>(oa.ld),
           pc + i1 * out.stride(0) + i2 * out.stride(1), ldc);
    }
  });
}

void batched_gemm(const at::Tensor& a, const at::Tensor& b, double alpha, at::Tensor& out) {
  if (a.scalar_type() == at::kFloat)
    batched_gemm<float>(a, b, alpha, out);
  else
    batched_gemm<double>(a, b, alpha, out);
}

// alpha * a @ b for [N1, N2, m, k] x [N1, N2, k, n]; with heads_last the
// result [N1, N2, m, n] is a view of [N1, m, N2, n] storage.
class AttentionMatmul : public torch::autograd::Function<AttentionMatmul> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                            const at::Tensor& b, double alpha, bool heads_last) {
    RECORD_FUNCTION("garden::attention_matmul", std::vector<c10::IValue>());
    at::Tensor out =
        heads_last
            ? at::empty({a.size(0), a.size(2), a.size(1), b.size(3)}, a.options()).transpose(1, 2)
            : at::empty({a.size(0), a.size(1), a.size(2), b.size(3)}, a.options());
    batched_gemm(a, b, alpha, out);
    ctx->save_for_backward({a, b});
    ctx->saved_data["alpha"] = alpha;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const at::Tensor& grad = grads[0];
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) {
      grad_a = at::empty(a.sizes(), grad.options());
      batched_gemm(grad, b.transpose(2, 3), alpha, grad_a);
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = at::empty(b.sizes(), grad.options());
      batched_gemm(a.transpose(2, 3), grad, alpha, grad_b);
    }
    return {grad_a, grad_b, at::Tensor(), at::Tensor()};
  }
};

bool blas_attention_applies(const at::Tensor& a, const at::Tensor& b) {
  if (!a.device().is_cpu() || a.scalar_type() != b.scalar_type() || a.dim() != 4 || b.dim() != 4 ||
      a.size(0) != b.size(0) || a.size(1) != b.size(1) || a.size(3) != b.size(2))
    return false;
  const Blas& f = blas();
  if (a.scalar_type() == at::kFloat ? !f.sgemm : a.scalar_type() != at::kDouble || !f.dgemm)
    return false;
  const int64_t limit = std::numeric_limits<int>::max();
  for (int64_t d : {a.size(2), a.size(3), b.size(3)})
    if (d == 0 || d > limit / 4) return false;
  return a.numel() > 0 && b.numel() > 0;
}

}  // namespace

at::Tensor attention_matmul(const at::Tensor& a, const at::Tensor& b, double alpha,
                            bool heads_last) {
  if (blas_attention_applies(a, b)) return AttentionMatmul::apply(a, b, alpha, heads_last);
  return at::matmul(alpha == 1.0 ? a : a * alpha, b);
}

}  // namespace garden::kernels
