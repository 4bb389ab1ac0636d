// Multi-head scaled dot-product attention, as the Transformer's blocks use it
// (Model Garden's MultiHeadAttention with fused projections), and its masks.
//
// Layout conventions used throughout garden/nlp:
//   B batch (for decoding: batch x beam, flattened), S source length,
//   T target length, D hidden size, H heads, Dh = D / H.
//   Attention masks are ADDITIVE float tensors broadcastable to [B, H, T, S]:
//   0 where attending is allowed, kMaskedValue where it is not.
#pragma once

#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "garden/kernels/bias_dropout_add.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/int8.h"

namespace garden::nlp {

// Added to the attention logits of disallowed positions. Finite (not -inf) so
// a row with every key masked gives a uniform softmax instead of NaN.
constexpr double kMaskedValue = -1e9;

// Additive padding mask [B, 1, 1, S] for token ids [B, S]: `pad_id` is masked.
at::Tensor padding_mask(const at::Tensor& ids, int64_t pad_id = 0,
                        at::ScalarType dtype = at::kFloat);
// Keys or values read through a row index, as beam search keeps them
// (garden/nlp/modeling/cache.h): buffer [B0, H, >= length, Dh] and rows int64
// [B, >= length] give [B, H, length, Dh] whose row b holds, at each position
// s < length, position s of buffer row rows[b][s]. A row outside [0, B0)
// is an index error.
at::Tensor gather_steps(const at::Tensor& buffer, const at::Tensor& rows, int64_t length);

// Additive causal mask [1, 1, T, T]: position t attends to positions <= t.
at::Tensor causal_mask(int64_t length, at::ScalarType dtype = at::kFloat,
                       at::Device device = at::kCPU);

// LibTorch's fused attention, at::scaled_dot_product_attention (LibTorch 2.0
// and later; its flash and memory-efficient kernels on a GPU): softmax(q k^T /
// sqrt(Dh) + mask) v over heads q [B, H, T, Dh], k and v [B, H, S, Dh], with
// dropout `dropout` on the probabilities, heads merged: [B, T, H * Dh].
// MultiHeadAttention attends with it on a GPU. On a LibTorch without it,
// library_attention_available() is false and library_attention throws
// std::logic_error.
bool library_attention_available();
at::Tensor library_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& mask, double dropout);

// A dense layer, y = x w^T + b, with the parameters torch::nn::Linear has
// ("weight" [out, in], "bias" [out]: checkpoints name them the same), and an
// optional int8 copy of them for decoding (garden/nlp/int8.h).
class DenseImpl : public torch::nn::Cloneable<DenseImpl> {
 public:
  DenseImpl(int64_t in, int64_t out, bool use_bias);
  void reset() override;
  // x [..., in] -> [..., out]. With int8 on and gradients off (inference),
  // through the int8 copy; otherwise in the weight's own dtype.
  at::Tensor forward(const at::Tensor& x);
  // at::relu(forward(x)); without gradients in place, and in int8 as the
  // outputs are stored.
  at::Tensor forward_relu(const at::Tensor& x);
  // forward(x) without the bias, which is stored in `*bias` for the caller
  // to add in a fused pass (kernels::bias_dropout_add), where that pass runs
  // (float32 on the CPU without autocast, not through the int8 copy);
  // otherwise forward(x), `*bias` left undefined. A null `bias` is forward(x).
  at::Tensor forward_deferring_bias(const at::Tensor& x, at::Tensor* bias);
  // On: quantizes the weights as they are now (throws garden::Error where
  // int8 cannot run: see check_int8_available); off: float again. A weight
  // changed later is not seen until use_int8(true) runs again.
  void use_int8(bool on);
  bool int8() const { return int8_ != nullptr; }
  int64_t in_features, out_features;
  bool use_bias;
  at::Tensor weight, bias;

 private:
  std::shared_ptr<const kernels::Int8Linear> int8_;
};
TORCH_MODULE(Dense);

// A dense layer initialized as Model Garden's are: Glorot-uniform kernel, zero
// bias.
Dense make_dense(int64_t in, int64_t out, bool use_bias);

struct AttentionOptions {
  int64_t hidden_size = 512;
  int64_t num_heads = 8;
  // false: self-attention with one fused [D, 3D] QKV projection.
  // true: cross-attention, a [D, D] query and a fused [D, 2D] key/value projection.
  bool cross_attention = false;
  bool use_bias = true;
  double attention_dropout = 0.0;  // on the attention probabilities
};

// Multi-head scaled dot-product attention; all heads in batched matmuls.
// The softmax runs in float32 (double stays double) whatever the input dtype.
class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  explicit MultiHeadAttentionImpl(const AttentionOptions& options);

  // Self-attention: query [B, T, D], mask broadcastable to [B, H, T, T] or undefined.
  // Cross-attention: memory [B, S, D], mask broadcastable to [B, H, T, S].
  // Returns [B, T, D]. With `output_bias`, the output projection may leave
  // its bias out and store it there (Dense::forward_deferring_bias).
  at::Tensor forward(const at::Tensor& query, const at::Tensor& memory = {},
                     const at::Tensor& mask = {}, at::Tensor* output_bias = nullptr);

  // The pieces, for incremental decoding. All heads are [B, H, len, Dh].
  // Self-attention only: q, k, v of x [B, T, D].
  std::tuple<at::Tensor, at::Tensor, at::Tensor> project_qkv(const at::Tensor& x);
  // Cross-attention only: q of x, and k, v of memory.
  at::Tensor project_q(const at::Tensor& x);
  std::pair<at::Tensor, at::Tensor> project_kv(const at::Tensor& memory);
  // softmax(q k^T / sqrt(Dh) + mask) v, heads merged and projected: [B, T, D].
  // With `rows` (int64 [B, >= S]), k and v [B0, H, S, Dh] are read through it
  // as gather_steps reads them (a decoding step over beam search's cache).
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& mask, const at::Tensor& rows = {});

  const AttentionOptions& options() const { return options_; }
  Dense qkv{nullptr};     // self-attention: [D] -> [3D] (q | k | v)
  Dense query{nullptr};   // cross-attention: [D] -> [D]
  Dense kv{nullptr};      // cross-attention: [D] -> [2D] (k | v)
  Dense output{nullptr};  // [D] -> [D]

 private:
  // [B, T, n * D] -> n tensors [B, H, T, Dh].
  std::vector<at::Tensor> split_heads(const at::Tensor& x, int64_t n) const;
  AttentionOptions options_;
  int64_t head_size_;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace garden::nlp
