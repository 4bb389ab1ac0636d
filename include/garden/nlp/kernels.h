// CPU kernels of the Transformer's hot spots, each with a LibTorch fallback:
// inverted dropout (fused with relu, or with a sublayer's bias and residual,
// where asked), GELU's backward, the
// batched matrix products of attention (per head, on the views as they are),
// training's whole attention from the projections in one operation,
// ELECTRA's sampling from a softmax and beam search's candidates.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <utility>

namespace garden::nlp {

// Inverted dropout as every layer here applies it: in training, each element
// is zeroed with probability p and the others are scaled by 1 / (1 - p); the
// identity otherwise. On the CPU (float, double, bfloat16 computed in float
// and rounded once) the mask comes from a
// counter-based generator seeded by one draw from LibTorch's default CPU
// generator: torch::manual_seed reproduces it, whatever the thread count.
at::Tensor dropout(const at::Tensor& x, double p, bool training);
// GELU, the exact (erf) form, x Phi(x). On the CPU in float32 with
// gradients, its backward is Garden's one-pass kernel (LibTorch 1.13's took
// ten times the forward); bfloat16 is widened to float32 for it and the
// result rounded back; otherwise at::gelu. Not twice differentiable on
// that path.
at::Tensor gelu(const at::Tensor& x);
// gelu(x + bias), bias [C] over x's last dimension: the feed-forward layer's
// activation with its product's bias, so the product runs without it. On
// the CPU in float32 one pass forward (the erf form, x Phi(x), with erf to
// 1.5e-7 absolute, Abramowitz and Stegun 7.1.26) and one backward
// that also sums the bias gradient (in double, the same bits with any
// number of threads); otherwise gelu(x + bias). Not twice differentiable.
bool bias_gelu_applies(const at::Tensor& x, const at::Tensor& bias);
at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias);
// residual + dropout(y + bias, p) (bias [C] over y's last dimension, or
// undefined; dropout only in training): the end of a Transformer sublayer,
// whose output projection then runs without its bias. Where it applies (a
// bias, float32 CPU tensors) one pass forward, with the mask dropout()
// would draw for y + bias and the same products, and one pass backward that
// also sums the bias gradient (in double, the same bits with any number of
// threads); otherwise the separate operations. Not twice differentiable.
bool bias_dropout_add_applies(const at::Tensor& y, const at::Tensor& bias,
                              const at::Tensor& residual);
at::Tensor bias_dropout_add(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& residual,
                            double p, bool training);
// dropout(relu(x)) in one pass.
at::Tensor relu_dropout(const at::Tensor& x, double p, bool training);
// relu_dropout(y + bias) (bias [C] over y's last dimension, or undefined):
// a ReLU feed-forward layer's activation with its product's bias, so the
// product runs without it. In training with 0 < p < 1 on float32 CPU
// tensors with a bias, one pass forward (the mask and values relu_dropout
// gives y + bias, to the bit) and one backward that also sums the bias
// gradient (in double, the same bits with any number of threads);
// otherwise relu_dropout(y + bias). Not twice differentiable.
at::Tensor bias_relu_dropout(const at::Tensor& y, const at::Tensor& bias, double p, bool training);
// x W^T + b as at::linear (x [..., K], weight [N, K], bias [N] or undefined;
// differentiable in all three, not twice). Where linear_applies (float32
// strided CPU tensors, a contiguous weight and bias, no autocast, and
// Garden's GEMM is oneDNN: core/gemm.h), the products of the forward and the
// backward go to that GEMM, which on this project's AMD EPYC machine ran
// them about twice as fast as LibTorch's OpenBLAS; otherwise at::linear.
bool linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
// weight [V, D]'s rows at ids, as at::embedding without a padding id. On the
// CPU its gradient is sparse (the rows looked up, one a token): autograd adds
// it in place into the weight's dense gradient from a tied output projection
// (nlp::linear with the same weight), where at::embedding's dense gradient
// cost a zero-filled [V, D] and a [V, D] sum for each lookup (25 ms of a
// base translation step). In a backward that reaches the weight through
// such lookups only, .grad is left sparse: the Minimizer and the optimizer
// make it dense (optim::Optimizer::make_gradients_dense).
at::Tensor embedding_rows(const at::Tensor& weight, const at::Tensor& ids);
// Whether linear turns the products that oneDNN's sgemm ran faster with an
// operand transposed first (a narrowing or square layer's forward, a
// widening layer's weight gradient; linear.cpp): on by default. For bench/linear_bench and the
// tests, which compare the two layouts in one process.
void set_linear_turns(bool on);
bool linear_turns();

// Layer normalization over the last dimension, (x - mean) / sqrt(var + eps)
// * weight + bias with the biased variance, as at::layer_norm (weight and
// bias [C]; differentiable in all three). On the CPU in float and double,
// forward and backward are Garden's one-pass-per-row loops (AVX-512, AVX2 or
// portable builds; the sums in double, the weight and bias gradients summed
// in the same order whatever the thread count); otherwise at::layer_norm. A
// bfloat16 input with float32 parameters on the CPU (autocast) is widened and
// the result is float32.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);
// layer_norm for a tensor a residual sublayer uses twice: {y, skip}, where
// skip is x itself (kInput: pre-LN, x feeds the norm and the residual sum)
// or y itself (kOutput: post-LN, y feeds the next sublayer and its residual
// sum). Use skip for the second use. Where layer_norm's loops apply and a
// gradient is taken, one autograd node takes both gradients and adds them
// in its pass (kInput: skip's gradient into dx as it is written; kOutput:
// the two gradients of y before the normalization's backward), where
// autograd added them in a pass and a tensor of their own; the same sums,
// so the same bits. skip is then a view LibTorch will not change in place.
// Otherwise {layer_norm(x), x or y}.
enum class LayerNormSkip { kInput, kOutput };
std::array<at::Tensor, 2> layer_norm_and_skip(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, double eps,
                                              LayerNormSkip skip);

// alpha * a @ b over the last two dims of [B, H, m, k] x [B, H, k, n]
// tensors (differentiable). With heads_last, the result [B, H, m, n] is a view
// of [B, m, H, n] storage, so merging the heads afterwards is a view. On the
// CPU, each head's product is, in float32 with n and k up to 256 (training's
// heads), Garden's register-blocked loops (AVX-512, AVX2 or SSE builds); for
// m <= 8 (a decoding step's queries), its loops of dot products and weighted
// sums; otherwise one call to the BLAS LibTorch loaded. All work on the views
// as they are. Without that BLAS, or off the CPU, it is at::matmul.
at::Tensor attention_matmul(const at::Tensor& a, const at::Tensor& b, double alpha,
                            bool heads_last);

// Multi-head scaled dot-product attention straight from the projections,
// as one differentiable operation: for q_proj [B, T, 3D] (self-attention,
// q | k | v side by side, kv_proj undefined) or q_proj [B, T, D] with
// kv_proj [B, S, 2D] (k | v), split into `heads` heads of Dh = D / heads,
//   context = softmax(q k^T / sqrt(Dh) + mask) v, heads merged: [B, T, D],
// with inverted dropout at rate `dropout` on the probabilities in training
// (the mask nlp::dropout would draw over the [B, H, T, S] probabilities, from
// one seed of LibTorch's default CPU generator). mask: additive float32,
// broadcastable to [B, heads, T, S], or undefined. Gradients for q_proj and
// kv_proj. Garden's CPU kernel (fused_attention.cpp): float32 on the CPU
// with T, S and Dh at most 256, which fused_attention_applies tells;
// otherwise std::invalid_argument (the caller keeps the unfused path).
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
// (garden/nlp/cache.h): key and value s of example b are at position s of
// batch row rows[b][s] of k and v [B0, H, S, Dh], whose B0 need not be B;
// at most 8 queries (T) then. A row outside [0, B0) is
// std::invalid_argument. The result is what the same call gives on k and v
// gathered by gather_steps, to the bit.
bool head_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, const at::Tensor& rows = {});
at::Tensor head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, const at::Tensor& rows = {});

// One id per row of logits [..., V], drawn from softmax(logits) as Model
// Garden's ELECTRA sample_from_softmax draws it (argmax of the logits plus
// Gumbel noise, temperature 1); with disallow_ids [...] defined, each row's
// id there has 1000 subtracted from its logit first. Returns [...] int64, no
// gradient. On the CPU in float32 (bfloat16 widened to it) by the inverse
// CDF with one uniform a row
// from LibTorch's default generator (torch::manual_seed reproduces it,
// whatever the thread count); otherwise, or for logits holding a NaN or an
// infinity, by Model Garden's formula, -log(-log(u + 1e-9) + 1e-9) per id.
at::Tensor sample_from_softmax(const at::Tensor& logits, const at::Tensor& disallow_ids = {});

// Beam search's candidates: for logits [n * beams, V] and the beams' scores
// alive [n, beams], the best k over each example's (b, v) of
// log_softmax(logits[e * beams + b])[v] + alive[e][b], as {scores [n, k]
// (double, best first), indices b * V + v [n, k] (long)}; ties go to the
// lower index. On the CPU in float32: three passes over each row, each
// exponential in float summed in double, the [n * beams, V]
// log-probabilities never written; the scores are within 1e-6 of LibTorch's
// log-softmax in double (float32's, Model Garden's, is about as close).
// Otherwise, or with a NaN or infinite logit, LibTorch's log_softmax in
// double and topk.
std::pair<at::Tensor, at::Tensor> top_log_prob_extensions(const at::Tensor& logits,
                                                          const at::Tensor& alive, int64_t k);

}  // namespace garden::nlp
