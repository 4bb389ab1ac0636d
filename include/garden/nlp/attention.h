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
#include <tuple>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace garden::nlp {

// Added to the attention logits of disallowed positions. Finite (not -inf) so
// a row with every key masked gives a uniform softmax instead of NaN.
constexpr double kMaskedValue = -1e9;

// Additive padding mask [B, 1, 1, S] for token ids [B, S]: `pad_id` is masked.
at::Tensor padding_mask(const at::Tensor& ids, int64_t pad_id = 0,
                        at::ScalarType dtype = at::kFloat);
// Additive causal mask [1, 1, T, T]: position t attends to positions <= t.
at::Tensor causal_mask(int64_t length, at::ScalarType dtype = at::kFloat);

// A dense layer initialized as Model Garden's are: Glorot-uniform kernel, zero
// bias.
torch::nn::Linear make_dense(int64_t in, int64_t out, bool use_bias);

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
  // Returns [B, T, D].
  at::Tensor forward(const at::Tensor& query, const at::Tensor& memory = {},
                     const at::Tensor& mask = {});

  // The pieces, for incremental decoding. All heads are [B, H, len, Dh].
  // Self-attention only: q, k, v of x [B, T, D].
  std::tuple<at::Tensor, at::Tensor, at::Tensor> project_qkv(const at::Tensor& x);
  // Cross-attention only: q of x, and k, v of memory.
  at::Tensor project_q(const at::Tensor& x);
  std::pair<at::Tensor, at::Tensor> project_kv(const at::Tensor& memory);
  // softmax(q k^T / sqrt(Dh) + mask) v, heads merged and projected: [B, T, D].
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& mask);

  const AttentionOptions& options() const { return options_; }
  torch::nn::Linear qkv{nullptr};     // self-attention: [D] -> [3D] (q | k | v)
  torch::nn::Linear query{nullptr};   // cross-attention: [D] -> [D]
  torch::nn::Linear kv{nullptr};      // cross-attention: [D] -> [2D] (k | v)
  torch::nn::Linear output{nullptr};  // [D] -> [D]

 private:
  // [B, T, n * D] -> n tensors [B, H, T, Dh].
  std::vector<at::Tensor> split_heads(const at::Tensor& x, int64_t n) const;
  AttentionOptions options_;
  int64_t head_size_;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace garden::nlp
