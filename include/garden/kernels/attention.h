// Multi-head attention's products: per head on the views as they are, fused
// from the projections for training, and for inference on split heads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace garden::kernels {

// alpha * a @ b over the last two dims of [B, H, m, k] x [B, H, k, n]
// tensors (differentiable). With heads_last, the result [B, H, m, n] is a view
// of [B, m, H, n] storage, so merging the heads afterwards is a view. On the
// CPU, each head's product is, in float32 with n and k up to 256 (training's
// heads), register-blocked loops (AVX-512, AVX2 or SSE builds); for m <= 8
// (a decoding step's queries), loops of dot products and weighted sums;
// otherwise one call to the BLAS LibTorch loaded. All work on the views as
// they are. Without that BLAS, or off the CPU, it is at::matmul.
at::Tensor attention_matmul(const at::Tensor& a, const at::Tensor& b, double alpha,
                            bool heads_last);

// Multi-head scaled dot-product attention straight from the projections,
// as one differentiable operation: for q_proj [B, T, 3D] (self-attention,
// q | k | v side by side, kv_proj undefined) or q_proj [B, T, D] with
// kv_proj [B, S, 2D] (k | v), split into `heads` heads of Dh = D / heads,
//   context = softmax(q k^T / sqrt(Dh) + mask) v, heads merged: [B, T, D],
// with inverted dropout at rate `dropout` on the probabilities in training
// (the mask kernels::dropout would draw over the [B, H, T, S] probabilities,
// from one seed of LibTorch's default CPU generator). mask: additive
// float32, broadcastable to [B, heads, T, S], or undefined. Gradients for
// q_proj and kv_proj. Float32 on the CPU with T, S and Dh at most 256, which
// fused_attention_applies tells; otherwise std::invalid_argument (the
// caller keeps the unfused path).
bool fused_attention_applies(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                             const at::Tensor& mask);
at::Tensor fused_attention(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                           const at::Tensor& mask, double dropout, bool training);

// The same attention for inference on heads already split: q [B, H, T, Dh],
// k and v [B, H, S, Dh] (views of any strides with unit stride in Dh, k and v
// alike: a decoding step's queries and its KV cache), mask as above;
// returns softmax(q k^T / sqrt(Dh) + mask) v with the heads merged,
// [B, T, H * Dh]. One pass per head, no autograd, no dropout: for tensors
// that need no gradient, in float32 on the CPU with T, S and Dh at most 256,
// which head_attention_applies tells; otherwise std::invalid_argument.
//
// With `rows` (int64 [B, >= S], unit stride along S), a decoding step reads
// its keys and values through an index, as beam search's cache does
// (garden/nlp/modeling/cache.h): key and value s of example b are at
// position s of batch row rows[b][s] of k and v [B0, H, S, Dh], whose B0
// need not be B; at most 8 queries (T) then. A row outside [0, B0) is
// std::invalid_argument. The result is what the same call gives on k and v
// gathered by gather_steps, to the bit.
bool head_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, const at::Tensor& rows = {});
at::Tensor head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, const at::Tensor& rows = {});

}  // namespace garden::kernels
