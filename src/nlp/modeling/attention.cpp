#include "garden/nlp/modeling/attention.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "garden/base/torch_features.h"
#include "garden/kernels/autocast.h"
#include "garden/kernels/attention.h"
#include "garden/kernels/autocast.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/int8.h"
#include "garden/kernels/linear.h"
#include "garden/kernels/widen.h"

namespace garden::nlp {

DenseImpl::DenseImpl(int64_t in, int64_t out, bool use_bias)
    : in_features(in), out_features(out), use_bias(use_bias) {
  reset();
}

void DenseImpl::reset() {
  // torch::nn::Linear's initialization (Kaiming-uniform weight, bias
  // uniform in +-1/sqrt(in)); make_dense replaces it with Model Garden's.
  int8_.reset();
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  bias = register_parameter("bias", use_bias ? torch::empty({out_features}) : torch::Tensor(),
                            /*requires_grad=*/use_bias);
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (use_bias) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0;
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

at::Tensor DenseImpl::forward(const at::Tensor& x) {
  if (int8_ && !at::GradMode::is_enabled()) return int8_->forward(x);
  return kernels::linear(x, weight, bias);
}

at::Tensor DenseImpl::forward_relu(const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) {
    if (int8_) return int8_->forward(x, /*relu=*/true);
    return kernels::linear(x, weight, bias).relu_();
  }
  return at::relu(kernels::linear(x, weight, bias));
}

at::Tensor DenseImpl::forward_deferring_bias(const at::Tensor& x, at::Tensor* bias_out) {
  const bool defer = bias_out != nullptr && bias.defined() &&
                     !(int8_ && !at::GradMode::is_enabled()) && x.device().is_cpu() &&
                     x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                     bias.scalar_type() == at::kFloat && !kernels::autocast_on(x.device());
  if (!defer) return forward(x);
  *bias_out = bias;
  return kernels::linear(x, weight, {});
}

void DenseImpl::use_int8(bool on) {
  int8_ = on ? std::make_shared<const kernels::Int8Linear>(weight, bias) : nullptr;
}

Dense make_dense(int64_t in, int64_t out, bool use_bias) {
  Dense dense(in, out, use_bias);
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(dense->weight);
  if (use_bias) dense->bias.zero_();
  return dense;
}

at::Tensor padding_mask(const at::Tensor& ids, int64_t pad_id, at::ScalarType dtype) {
  TORCH_CHECK(ids.dim() == 2, "padding_mask expects ids [B, S]");
  return (ids == pad_id).to(dtype).mul_(kMaskedValue).view({ids.size(0), 1, 1, ids.size(1)});
}

at::Tensor causal_mask(int64_t length, at::ScalarType dtype, at::Device device) {
  return at::triu(at::full({length, length}, kMaskedValue,
                           at::TensorOptions().dtype(dtype).device(device)),
                  1)
      .view({1, 1, length, length});
}

bool library_attention_available() { return GARDEN_HAS_FUSED_ATTENTION; }

at::Tensor library_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& mask, double dropout) {
#if GARDEN_HAS_FUSED_ATTENTION
  // The kernels take the mask in the query's dtype. In float16 kMaskedValue
  // would become -inf (a row with every key masked would be NaN): it is
  // clamped to float16's lowest finite value first.
  // No mask is nullopt: an undefined tensor is refused.
  c10::optional<at::Tensor> typed_mask;
  if (mask.defined())
    typed_mask =
        (q.scalar_type() == at::kHalf ? mask.clamp_min(-65504.0) : mask).to(q.scalar_type());
  const at::Tensor context = at::scaled_dot_product_attention(q, k, v, typed_mask, dropout, false);
  return context.transpose(1, 2).reshape({q.size(0), q.size(2), q.size(1) * q.size(3)});
#else
  (void)q, (void)k, (void)v, (void)mask, (void)dropout;
  throw std::logic_error("library_attention: this LibTorch (" TORCH_VERSION
                         ") has no at::scaled_dot_product_attention");
#endif
}

at::Tensor gather_steps(const at::Tensor& buffer, const at::Tensor& rows, int64_t length) {
  TORCH_CHECK(buffer.dim() == 4 && buffer.size(2) >= length && rows.dim() == 2 &&
                  rows.size(1) >= length && length >= 0,
              "gather_steps: expected buffer [B0, H, >= ", length, ", Dh] and rows [B, >= ", length,
              "], got ", buffer.sizes(), " and ", rows.sizes());
  using torch::indexing::Slice;
  const at::Tensor source = rows.narrow(1, 0, length).to(buffer.device(), at::kLong);
  // (LibTorch's indexing takes -1 for the last row; the index never means it.)
  TORCH_CHECK_INDEX(source.numel() == 0 || source.min().item<int64_t>() >= 0,
                    "gather_steps: a row of ", source.min().item<int64_t>(),
                    " in rows; they must be in [0, ", buffer.size(0), ")");
  const at::Tensor position =
      torch::arange(length, source.options()).unsqueeze(0).expand_as(source);
  // Two index tensors around a slice: the indexed dimensions come first,
  // [B, length, H, Dh].
  return buffer.index({source, Slice(), position}).permute({0, 2, 1, 3});
}

// ---- MultiHeadAttention --------------------------------------------------------

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const AttentionOptions& options)
    : options_(options) {
  const int64_t d = options.hidden_size;
  TORCH_CHECK(options.num_heads > 0 && d % options.num_heads == 0,
              "hidden_size must be a multiple of num_heads");
  head_size_ = d / options.num_heads;
  if (options.cross_attention) {
    query = register_module("query", make_dense(d, d, options.use_bias));
    kv = register_module("key_value", make_dense(d, 2 * d, options.use_bias));
  } else {
    qkv = register_module("query_key_value", make_dense(d, 3 * d, options.use_bias));
  }
  output = register_module("output", make_dense(d, d, options.use_bias));
}

std::vector<at::Tensor> MultiHeadAttentionImpl::split_heads(const at::Tensor& x, int64_t n) const {
  // [B, T, n*D] -> [n, B, H, T, Dh]: one view and one permute for all heads.
  return x.view({x.size(0), x.size(1), n, options_.num_heads, head_size_})
      .permute({2, 0, 3, 1, 4})
      .unbind(0);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> MultiHeadAttentionImpl::project_qkv(
    const at::Tensor& x) {
  TORCH_CHECK(!options_.cross_attention, "project_qkv is for self-attention");
  auto heads = split_heads(qkv->forward(x), 3);
  return {heads[0], heads[1], heads[2]};
}

at::Tensor MultiHeadAttentionImpl::project_q(const at::Tensor& x) {
  TORCH_CHECK(options_.cross_attention, "project_q is for cross-attention");
  return split_heads(query->forward(x), 1)[0];
}

std::pair<at::Tensor, at::Tensor> MultiHeadAttentionImpl::project_kv(const at::Tensor& memory) {
  TORCH_CHECK(options_.cross_attention, "project_kv is for cross-attention");
  auto heads = split_heads(kv->forward(memory), 2);
  return {heads[0], heads[1]};
}

at::Tensor MultiHeadAttentionImpl::attend(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const at::Tensor& mask,
                                          const at::Tensor& rows) {
  if (rows.defined()) {
    // Garden's kernel reads the rows in place; elsewhere they are gathered.
    if (!(is_training() && options_.attention_dropout > 0) &&
        kernels::head_attention_applies(q, k, v, mask, rows))
      return output->forward(kernels::head_attention(q, k, v, mask, rows));
    const int64_t length = k.size(2);
    return attend(q, gather_steps(k, rows, length), gather_steps(v, rows, length), mask);
  }
  // On a GPU: LibTorch's fused attention (flash or memory-efficient
  // kernels), without the T x S scores in memory.
  if (!q.device().is_cpu() && library_attention_available())
    return output->forward(
        library_attention(q, k, v, mask, is_training() ? options_.attention_dropout : 0.0));
  // Inference on the CPU (a decoding step over its KV cache): one pass per
  // head, reading the views in place, instead of two products, a mask add,
  // a softmax and their autograd nodes.
  if (!(is_training() && options_.attention_dropout > 0) && kernels::head_attention_applies(q, k, v, mask))
    return output->forward(kernels::head_attention(q, k, v, mask));
  // The 1 / sqrt(Dh) scale rides along in the product (gemm's alpha, or q
  // scaled before the fallback matmul: T x Dh is cheaper than T x S).
  at::Tensor scores =
      kernels::attention_matmul(q, k.transpose(-2, -1), 1.0 / std::sqrt(static_cast<double>(head_size_)),
                       /*heads_last=*/false);
  if (mask.defined()) scores = scores + mask;
  // Softmax in float32 for half/bfloat16 inputs; double stays double.
  const auto softmax_type = scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor probs = at::softmax(scores, -1, softmax_type).to(v.scalar_type());
  probs = kernels::dropout(probs, options_.attention_dropout, is_training());
  // [B, H, T, Dh], stored as [B, T, H, Dh] when the BLAS path ran: then the
  // reshape merging the heads is a view.
  at::Tensor context = kernels::attention_matmul(probs, v, 1.0, /*heads_last=*/true);
  context = context.transpose(1, 2).reshape({q.size(0), q.size(2), options_.hidden_size});
  return output->forward(context);
}

at::Tensor MultiHeadAttentionImpl::forward(const at::Tensor& query_in, const at::Tensor& memory,
                                           const at::Tensor& mask, at::Tensor* output_bias) {
  // On the CPU in float32 (training's and evaluation's shapes), the heads are
  // read in place from the projections by one fused operation
  // (kernels::fused_attention); otherwise split into views and attended. Under
  // CPU autocast the projections are bfloat16: the fused kernel takes them
  // widened (cheaper than LibTorch 1.13's bfloat16 batched products and
  // softmax over [B, H, T, S]).
  const double dropout = options_.attention_dropout;
  if (options_.cross_attention) {
    TORCH_CHECK(memory.defined(), "cross-attention needs memory");
    const at::Tensor q = kernels::widened_on_cpu(query->forward(query_in));
    const at::Tensor kv_proj = kernels::widened_on_cpu(kv->forward(memory));
    if (kernels::fused_attention_applies(q, kv_proj, options_.num_heads, mask))
      return output->forward_deferring_bias(
          kernels::fused_attention(q, kv_proj, options_.num_heads, mask, dropout, is_training()),
          output_bias);
    auto heads = split_heads(kv_proj, 2);
    return attend(split_heads(q, 1)[0], heads[0], heads[1], mask);
  }
  const at::Tensor qkv_proj = kernels::widened_on_cpu(qkv->forward(query_in));
  if (kernels::fused_attention_applies(qkv_proj, {}, options_.num_heads, mask))
    return output->forward_deferring_bias(
        kernels::fused_attention(qkv_proj, {}, options_.num_heads, mask, dropout, is_training()),
        output_bias);
  auto heads = split_heads(qkv_proj, 3);
  return attend(heads[0], heads[1], heads[2], mask);
}

}  // namespace garden::nlp
