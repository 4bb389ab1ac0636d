// Training's multi-head attention as one operation on the CPU in float32:
// for each (example, head), softmax(alpha q k^T + mask) with dropout, times
// v, forward and backward, while the head's [T, S] scores stay in cache.
//
// Unfused, a base translation layer's attention was eight LibTorch and
// Garden operations, each a pass over [B, H, T, S] or [B, T, 3, H, Dh]:
// the heads' copy out of the fused projection, the scores' product, the mask
// add, softmax, dropout, the context's product, and in the backward the
// same again plus the stack of the q, k and v gradients back into one
// tensor. Here the heads are read in place from the projections, the
// gradients are written in place into one tensor shaped like them, and one
// [B, H, T, S] tensor (the probabilities) is kept for the backward; the
// dropout mask is drawn again from its seed there.
//
// The products are small_gemm.cpp's; the exponential is vector_math.h's.
// The dropout mask is element for element the one kernels::dropout draws for the
// same seed over the contiguous [B, H, T, S] probabilities (dropout_bits.h),
// so training draws the same masks as the unfused layers did.
#include "garden/kernels/attention.h"

#include "attention_loops.h"
#include "simd/dropout_bits.h"
#include "simd/small_gemm.h"

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


// The geometry of q_proj [B, T, 3D] (self-attention: q, k, v side by side)
// or q_proj [B, T, D] with kv_proj [B, S, 2D] (k, v side by side), both
// contiguous.
Geometry geometry(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                  const at::Tensor& mask) {
  Geometry g{};
  const bool self = !kv_proj.defined();
  g.batch = q_proj.size(0);
  g.q_len = q_proj.size(1);
  g.hidden = self ? q_proj.size(2) / 3 : q_proj.size(2);
  g.kv_len = self ? g.q_len : kv_proj.size(1);
  g.heads = heads;
  g.head_size = g.hidden / heads;
  g.alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_size)));
  g.q = q_proj.data_ptr<float>();
  g.q_row = q_proj.size(2);
  g.q_batch = g.q_len * g.q_row;
  const at::Tensor& kv = self ? q_proj : kv_proj;
  g.k = kv.data_ptr<float>() + (self ? g.hidden : 0);
  g.v = g.k + g.hidden;
  g.kv_row = kv.size(2);
  g.kv_batch = kv.size(1) * g.kv_row;
  g.q_head = g.kv_head = g.head_size;
  g.mask = mask.defined() ? mask.data_ptr<float>() : nullptr;
  for (int i = 0; i < 4; ++i) g.mask_stride[i] = mask.defined() ? mask.stride(i) : 0;
  return g;
}

// The mask as a [B, H, T, S] view (strides 0 where it broadcasts).
at::Tensor expanded_mask(const at::Tensor& mask, const Geometry& g) {
  if (!mask.defined()) return mask;
  return mask.expand({g.batch, g.heads, g.q_len, g.kv_len});
}

class FusedAttention : public torch::autograd::Function<FusedAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in,
                            const at::Tensor& kv_in, int64_t heads, const at::Tensor& mask_in,
                            double rate, bool training) {
    RECORD_FUNCTION("garden::fused_attention", std::vector<c10::IValue>());
    // Autograd's inputs must be defined: an empty kv_in stands for
    // self-attention and an empty mask_in for none (fused_attention).
    const at::Tensor q_proj = q_in.contiguous();
    const at::Tensor kv_proj = kv_in.dim() == 3 ? kv_in.contiguous() : at::Tensor();
    Geometry g = geometry(q_proj, kv_proj, heads, {});
    const at::Tensor mask = mask_in.numel() > 0 ? expanded_mask(mask_in, g) : at::Tensor();
    g = geometry(q_proj, kv_proj, heads, mask);
    g.dropout = training && rate > 0;
    if (g.dropout) {
      g.seed = draw_dropout_seed();
      g.threshold = dropout_threshold(rate);
      g.scale = static_cast<float>(1.0 / (1.0 - rate));
    }
    at::Tensor probs = at::empty({g.batch, g.heads, g.q_len, g.kv_len}, q_proj.options());
    at::Tensor out = at::empty({g.batch, g.q_len, g.hidden}, q_proj.options());
    forward_heads(g, probs.data_ptr<float>(), out.data_ptr<float>());
    ctx->save_for_backward({q_proj, kv_proj, mask, probs});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["dropout"] = g.dropout;
    ctx->saved_data["seed"] = static_cast<int64_t>(g.seed);
    ctx->saved_data["rate"] = rate;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& q_proj = saved[0];
    const at::Tensor& kv_proj = saved[1];
    const at::Tensor& probs = saved[3];
    Geometry g = geometry(q_proj, kv_proj, ctx->saved_data["heads"].toInt(), saved[2]);
    g.dropout = ctx->saved_data["dropout"].toBool();
    if (g.dropout) {
      const double rate = ctx->saved_data["rate"].toDouble();
      g.seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
      g.threshold = dropout_threshold(rate);
      g.scale = static_cast<float>(1.0 / (1.0 - rate));
    }
    const at::Tensor grad_out = grads[0].contiguous();
    at::Tensor grad_q = at::empty_like(q_proj);
    at::Tensor grad_kv = kv_proj.defined() ? at::empty_like(kv_proj) : at::Tensor();
    Gradients d{};
    d.dq = grad_q.data_ptr<float>();
    d.dq_row = g.q_row;
    d.dq_batch = g.q_batch;
    float* kv_base = kv_proj.defined() ? grad_kv.data_ptr<float>() : d.dq + g.hidden;
    d.dk = kv_base;
    d.dv = kv_base + g.hidden;
    d.dkv_row = g.kv_row;
    d.dkv_batch = g.kv_batch;
    backward_heads(g, d, probs.data_ptr<float>(), grad_out.data_ptr<float>());
    return {grad_q, grad_kv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};


}  // namespace

namespace detail {

// Whether the kernels take `mask` (undefined: none): a float32 CPU tensor
// without a gradient, broadcastable to `full` [B, H, T, S].
bool mask_applies(const at::Tensor& mask, const std::array<int64_t, 4>& full) {
  if (!mask.defined()) return true;
  if (!mask.device().is_cpu() || mask.scalar_type() != at::kFloat || mask.dim() > 4 ||
      mask.requires_grad())
    return false;
  for (int64_t i = 0; i < mask.dim(); ++i) {
    const int64_t size = mask.size(mask.dim() - 1 - i);
    if (size != 1 && size != full[static_cast<std::size_t>(3 - i)]) return false;
  }
  return true;
}

}  // namespace detail

bool fused_attention_applies(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                             const at::Tensor& mask) {
  const auto is_cpu_float = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 3;
  };
  if (!is_cpu_float(q_proj) || heads < 1 || q_proj.size(0) < 1 || q_proj.size(1) < 1) return false;
  const bool self = !kv_proj.defined();
  if (!self && (!is_cpu_float(kv_proj) || kv_proj.size(0) != q_proj.size(0) || kv_proj.size(1) < 1))
    return false;
  const int64_t width = q_proj.size(2);
  if (self ? width % 3 != 0 : kv_proj.size(2) != 2 * width) return false;
  const int64_t hidden = self ? width / 3 : width;
  if (hidden < 1 || hidden % heads != 0) return false;
  const int64_t kv_len = self ? q_proj.size(1) : kv_proj.size(1);
  for (int64_t n : {q_proj.size(1), kv_len, hidden / heads})
    if (n > kSmallProductMaxDim) return false;
  return mask_applies(mask, {q_proj.size(0), heads, q_proj.size(1), kv_len});
}

at::Tensor fused_attention(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                           const at::Tensor& mask, double dropout, bool training) {
  if (!fused_attention_applies(q_proj, kv_proj, heads, mask))
    throw std::invalid_argument(
        "fused_attention: expected float32 CPU q_proj [B, T, 3D] (or [B, T, D] with kv_proj "
        "[B, S, 2D]), D a multiple of heads, T, S and D / heads at most 256, and a float32 mask "
        "broadcastable to [B, heads, T, S]");
  if (training && !(dropout >= 0 && dropout < 1))
    throw std::invalid_argument("fused_attention: dropout must be in [0, 1)");
  const at::Tensor none = at::empty({0}, q_proj.options());
  return FusedAttention::apply(q_proj, kv_proj.defined() ? kv_proj : none, heads,
                               mask.defined() ? mask : none, dropout, training);
}

}  // namespace garden::kernels
