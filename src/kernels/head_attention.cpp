// Inference's multi-head attention on heads already split (a decoding
// step's queries and its KV cache): the forward loops of attention_loops.h
// without autograd and without dropout.
#include "garden/kernels/attention.h"

#include "attention_loops.h"
#include "kernel_builds.h"
#include "simd/small_gemm.h"
#include "simd/vector_math.h"

#include "garden/base/cpu_isa.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

namespace garden::kernels {

using namespace detail;

namespace {

// head_attention's operands as it reads them; with `same_batch`, k and v
// have q's rows (false: read through an index).
bool head_operands_usable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, bool same_batch) {
  const auto usable = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 4 &&
           t.stride(3) == 1 && !t.requires_grad();
  };
  if (!usable(q) || !usable(k) || !usable(v) || k.sizes() != v.sizes() ||
      k.strides() != v.strides() || (same_batch && q.size(0) != k.size(0)) ||
      q.size(1) != k.size(1) || q.size(3) != k.size(3) || q.numel() == 0 || k.numel() == 0)
    return false;
  for (int64_t n : {q.size(2), k.size(2), q.size(3)})
    if (n > kSmallProductMaxDim) return false;
  return mask_applies(mask, {q.size(0), q.size(1), q.size(2), k.size(2)});
}

}  // namespace

bool head_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, const at::Tensor& rows) {
  if (!rows.defined()) return head_operands_usable(q, k, v, mask, true);
  return rows.device().is_cpu() && rows.scalar_type() == at::kLong && rows.dim() == 2 &&
         rows.stride(1) == 1 && q.defined() && q.dim() == 4 && k.defined() && k.dim() == 4 &&
         rows.size(0) == q.size(0) && rows.size(1) >= k.size(2) && q.size(2) <= kFewQueries &&
         head_operands_usable(q, k, v, mask, false);
}

namespace {

at::Tensor head_attention_through(ForwardHead head, ForwardExample example, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                  const at::Tensor& rows) {
  if (!head_attention_applies(q, k, v, mask, rows))
    throw std::invalid_argument(
        rows.defined()
            ? "head_attention: with rows, expected int64 CPU rows [B, >= S] with unit stride along "
              "S, float32 CPU q [B, H, T, Dh] with T at most 8, k and v [B0, H, S, Dh] with the "
              "same strides and unit stride in Dh, none requiring a gradient, S and Dh at most "
              "256, and a float32 mask broadcastable to [B, H, T, S]"
            : "head_attention: expected float32 CPU q [B, H, T, Dh], k and v [B, H, S, Dh] with "
              "the same strides and unit stride in Dh, none requiring a gradient, T, S and Dh at "
              "most 256, and a float32 mask broadcastable to [B, H, T, S]");
  if (rows.defined()) {
    // Every position read must name a row of k and v.
    const int64_t* r = rows.data_ptr<int64_t>();
    for (int64_t b = 0; b < rows.size(0); ++b)
      for (int64_t s = 0; s < k.size(2); ++s) {
        const int64_t row = r[b * rows.stride(0) + s];
        if (row < 0 || row >= k.size(0))
          throw std::invalid_argument("head_attention: rows[" + std::to_string(b) + "][" +
                                      std::to_string(s) + "] is " + std::to_string(row) +
                                      ", not a row of k and v (they have " +
                                      std::to_string(k.size(0)) + ")");
      }
  }
  Geometry g{};
  g.probs_unused = true;
  g.batch = q.size(0);
  g.heads = q.size(1);
  g.q_len = q.size(2);
  g.kv_len = k.size(2);
  g.head_size = q.size(3);
  g.hidden = g.heads * g.head_size;
  g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_size)));
  g.q = q.data_ptr<float>();
  g.q_batch = q.stride(0);
  g.q_head = q.stride(1);
  g.q_row = q.stride(2);
  g.k = k.data_ptr<float>();
  g.v = v.data_ptr<float>();
  g.kv_batch = k.stride(0);
  g.kv_head = k.stride(1);
  g.kv_row = k.stride(2);
  if (rows.defined()) {
    g.kv_rows = rows.data_ptr<int64_t>();
    g.kv_rows_stride = rows.stride(0);
  }
  const at::Tensor expanded =
      mask.defined() ? mask.expand({g.batch, g.heads, g.q_len, g.kv_len}) : at::Tensor();
  g.mask = expanded.defined() ? expanded.data_ptr<float>() : nullptr;
  for (int i = 0; i < 4; ++i) g.mask_stride[i] = expanded.defined() ? expanded.stride(i) : 0;
  at::Tensor out = at::empty({g.batch, g.q_len, g.hidden}, q.options());
  // A decoding step's head is a few thousand flops: heads (or examples) go
  // to threads in groups of about 64 K multiply-adds.
  const int64_t work = g.q_len * g.kv_len * g.head_size;
  float* result = out.data_ptr<float>();
  if (g.q_len <= kFewQueries) {
    const int64_t example_work = work * g.heads;
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, example_work));
    at::parallel_for(0, g.batch, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) example(g, b, result);
    });
    return out;
  }
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, work));
  at::parallel_for(0, g.batch * g.heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> pack(static_cast<size_t>(pack_floats(g)));
    std::vector<float> probs(static_cast<size_t>(g.q_len * g.kv_len));
    KeepScratch unused(0);
    for (int64_t i = begin; i < end; ++i)
      head(g, i / g.heads, i % g.heads, probs.data(), nullptr, unused, pack.data(), result);
  });
  return out;
}

}  // namespace

at::Tensor head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, const at::Tensor& rows) {
  static const ForwardHead head =
      widest_kernel<ForwardHead>(forward_head_avx512, forward_head_avx2, forward_head_portable);
  static const ForwardExample example = widest_kernel<ForwardExample>(
      forward_example_avx512, forward_example_avx2, forward_example_portable);
  return head_attention_through(head, example, q, k, v, mask, rows);
}

bool kernel_build_runs(KernelBuild build) {
  switch (build) {
    case KernelBuild::kAvx512:
      return cpu_isa().avx512;
    case KernelBuild::kAvx2:
      return cpu_isa().avx2_fma;
    case KernelBuild::kPortable:
      return true;
  }
  return false;
}

at::Tensor head_attention_with_build(KernelBuild build, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, const at::Tensor& mask,
                                     const at::Tensor& rows) {
  if (!kernel_build_runs(build))
    throw std::invalid_argument("head_attention_with_build: this CPU does not run that build");
  const ForwardHead head = build == KernelBuild::kAvx512 ? forward_head_avx512
                           : build == KernelBuild::kAvx2 ? forward_head_avx2
                                                         : forward_head_portable;
  const ForwardExample example = build == KernelBuild::kAvx512 ? forward_example_avx512
                                 : build == KernelBuild::kAvx2 ? forward_example_avx2
                                                               : forward_example_portable;
  return head_attention_through(head, example, q, k, v, mask, rows);
}

}  // namespace garden::kernels
