#include "garden/nlp/transformer.h"

#include <torch/torch.h>

#include <cmath>

namespace garden::nlp {

namespace {

// Dropout that costs nothing when it would be the identity.
at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) {
  return (training && p > 0) ? at::dropout(x, p, /*train=*/true) : x;
}

// One residual sublayer: pre-LN is x + drop(f(LN(x))), post-LN is LN(x + drop(f(x))).
template <typename F>
at::Tensor residual(const at::Tensor& x, torch::nn::LayerNorm& norm, bool norm_first,
                    double dropout_rate, bool training, F&& f) {
  if (norm_first) return x + maybe_dropout(f(norm->forward(x)), dropout_rate, training);
  return norm->forward(x + maybe_dropout(f(x), dropout_rate, training));
}

// Model Garden's dense layers use Glorot-uniform kernels and zero biases.
torch::nn::Linear make_dense(int64_t in, int64_t out, bool use_bias) {
  torch::nn::Linear dense(torch::nn::LinearOptions(in, out).bias(use_bias));
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(dense->weight);
  if (use_bias) dense->bias.zero_();
  return dense;
}

torch::nn::LayerNorm make_norm(int64_t width, double epsilon) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(epsilon));
}

}  // namespace

at::Tensor padding_mask(const at::Tensor& ids, int64_t pad_id, at::ScalarType dtype) {
  TORCH_CHECK(ids.dim() == 2, "padding_mask expects ids [B, S]");
  return (ids == pad_id).to(dtype).mul_(kMaskedValue).view({ids.size(0), 1, 1, ids.size(1)});
}

at::Tensor causal_mask(int64_t length, at::ScalarType dtype) {
  return at::triu(at::full({length, length}, kMaskedValue, at::TensorOptions().dtype(dtype)), 1)
      .view({1, 1, length, length});
}

at::Tensor relative_position_encoding(int64_t length, int64_t hidden_size, int64_t start,
                                      double min_timescale, double max_timescale,
                                      at::ScalarType dtype) {
  TORCH_CHECK(hidden_size % 2 == 0, "position encoding needs an even hidden_size");
  const int64_t num_timescales = hidden_size / 2;
  // Computed in double, then cast, so float and double models see the same values.
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const double log_increment = std::log(max_timescale / min_timescale) /
                               static_cast<double>(std::max<int64_t>(num_timescales - 1, 1));
  at::Tensor inv_timescales =
      min_timescale * at::exp(at::arange(num_timescales, f64) * -log_increment);
  at::Tensor position = at::arange(start, start + length, f64);
  at::Tensor scaled_time = position.unsqueeze(1) * inv_timescales.unsqueeze(0);
  return at::cat({at::sin(scaled_time), at::cos(scaled_time)}, 1).to(dtype);
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
                                          const at::Tensor& v, const at::Tensor& mask) {
  // Scaling q (T x Dh) is cheaper than scaling the T x S scores.
  at::Tensor scores =
      at::matmul(q * (1.0 / std::sqrt(static_cast<double>(head_size_))), k.transpose(-2, -1));
  if (mask.defined()) scores = scores + mask;
  // Softmax in float32 for half/bfloat16 inputs; double stays double.
  const auto softmax_type = scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor probs = at::softmax(scores, -1, softmax_type).to(v.scalar_type());
  probs = maybe_dropout(probs, options_.attention_dropout, is_training());
  at::Tensor context = at::matmul(probs, v);  // [B, H, T, Dh]
  context = context.transpose(1, 2).reshape({q.size(0), q.size(2), options_.hidden_size});
  return output->forward(context);
}

at::Tensor MultiHeadAttentionImpl::forward(const at::Tensor& query_in, const at::Tensor& memory,
                                           const at::Tensor& mask) {
  if (options_.cross_attention) {
    TORCH_CHECK(memory.defined(), "cross-attention needs memory");
    auto [k, v] = project_kv(memory);
    return attend(project_q(query_in), k, v, mask);
  }
  auto [q, k, v] = project_qkv(query_in);
  return attend(q, k, v, mask);
}

// ---- blocks ----------------------------------------------------------------------

FeedForwardImpl::FeedForwardImpl(const TransformerBlockOptions& options)
    : gelu_(options.activation == "gelu"), dropout_(options.intermediate_dropout) {
  TORCH_CHECK(options.activation == "relu" || options.activation == "gelu",
              "activation must be relu or gelu, got ", options.activation);
  intermediate = register_module(
      "intermediate", make_dense(options.hidden_size, options.intermediate_size, options.use_bias));
  output = register_module(
      "output", make_dense(options.intermediate_size, options.hidden_size, options.use_bias));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  at::Tensor h = intermediate->forward(x);
  h = gelu_ ? at::gelu(h) : at::relu(h);
  return output->forward(maybe_dropout(h, dropout_, is_training()));
}

namespace {
AttentionOptions attention_options(const TransformerBlockOptions& o, bool cross) {
  AttentionOptions a;
  a.hidden_size = o.hidden_size;
  a.num_heads = o.num_heads;
  a.cross_attention = cross;
  a.use_bias = o.use_bias;
  a.attention_dropout = o.attention_dropout_rate;
  return a;
}
}  // namespace

TransformerEncoderBlockImpl::TransformerEncoderBlockImpl(const TransformerBlockOptions& options)
    : options_(options) {
  self_attention =
      register_module("self_attention", MultiHeadAttention(attention_options(options, false)));
  self_attention_norm = register_module("self_attention_layer_norm",
                                        make_norm(options.hidden_size, options.norm_epsilon));
  feed_forward = register_module("feed_forward", FeedForward(options));
  output_norm =
      register_module("output_layer_norm", make_norm(options.hidden_size, options.norm_epsilon));
}

at::Tensor TransformerEncoderBlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  const bool pre = options_.norm_first, training = is_training();
  const double p = options_.dropout_rate;
  at::Tensor h = residual(x, self_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    return self_attention->forward(in, {}, mask);
  });
  return residual(h, output_norm, pre, p, training,
                  [&](const at::Tensor& in) { return feed_forward->forward(in); });
}

TransformerDecoderBlockImpl::TransformerDecoderBlockImpl(const TransformerBlockOptions& options)
    : options_(options) {
  self_attention =
      register_module("self_attention", MultiHeadAttention(attention_options(options, false)));
  self_attention_norm = register_module("self_attention_layer_norm",
                                        make_norm(options.hidden_size, options.norm_epsilon));
  cross_attention =
      register_module("encdec_attention", MultiHeadAttention(attention_options(options, true)));
  cross_attention_norm = register_module("encdec_attention_layer_norm",
                                         make_norm(options.hidden_size, options.norm_epsilon));
  feed_forward = register_module("feed_forward", FeedForward(options));
  output_norm =
      register_module("output_layer_norm", make_norm(options.hidden_size, options.norm_epsilon));
}

at::Tensor TransformerDecoderBlockImpl::forward(const at::Tensor& x, const at::Tensor& memory,
                                                const at::Tensor& self_mask,
                                                const at::Tensor& cross_mask) {
  const bool pre = options_.norm_first, training = is_training();
  const double p = options_.dropout_rate;
  at::Tensor h = residual(x, self_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    return self_attention->forward(in, {}, self_mask);
  });
  h = residual(h, cross_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    return cross_attention->forward(in, memory, cross_mask);
  });
  return residual(h, output_norm, pre, p, training,
                  [&](const at::Tensor& in) { return feed_forward->forward(in); });
}

at::Tensor TransformerDecoderBlockImpl::forward_step(const at::Tensor& x, at::Tensor& self_k,
                                                     at::Tensor& self_v, const at::Tensor& cross_k,
                                                     const at::Tensor& cross_v,
                                                     const at::Tensor& cross_mask) {
  const bool pre = options_.norm_first, training = is_training();
  const double p = options_.dropout_rate;
  at::Tensor h = residual(x, self_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    auto [q, k, v] = self_attention->project_qkv(in);
    self_k = at::cat({self_k, k}, 2);
    self_v = at::cat({self_v, v}, 2);
    // Only past and current keys are in the cache: no causal mask needed.
    return self_attention->attend(q, self_k, self_v, {});
  });
  h = residual(h, cross_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    return cross_attention->attend(cross_attention->project_q(in), cross_k, cross_v, cross_mask);
  });
  return residual(h, output_norm, pre, p, training,
                  [&](const at::Tensor& in) { return feed_forward->forward(in); });
}

// ---- Seq2SeqTransformer ----------------------------------------------------------

TransformerBlockOptions Seq2SeqTransformerOptions::block_options() const {
  TransformerBlockOptions o;
  o.hidden_size = hidden_size;
  o.num_heads = num_heads;
  o.intermediate_size = intermediate_size;
  o.activation = activation;
  o.dropout_rate = dropout_rate;
  o.attention_dropout_rate = attention_dropout_rate;
  o.intermediate_dropout = intermediate_dropout;
  o.use_bias = use_bias;
  o.norm_first = norm_first;
  o.norm_epsilon = norm_epsilon;
  return o;
}

Seq2SeqTransformerImpl::Seq2SeqTransformerImpl(const Seq2SeqTransformerOptions& options)
    : options_(options) {
  const int64_t d = options.hidden_size;
  embedding = register_module("embedding", torch::nn::Embedding(options.vocab_size, d));
  {
    // Model Garden: normal(0, D^-0.5), so the sqrt(D)-scaled inputs have unit
    // scale and the tied logits start small.
    torch::NoGradGuard no_grad;
    embedding->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(d)));
  }
  const auto block = options.block_options();
  for (int64_t i = 0; i < options.num_layers; ++i) {
    encoder_layers.push_back(
        register_module("encoder_layer_" + std::to_string(i), TransformerEncoderBlock(block)));
    decoder_layers.push_back(
        register_module("decoder_layer_" + std::to_string(i), TransformerDecoderBlock(block)));
  }
  if (options.norm_first) {
    encoder_norm = register_module("encoder_norm", make_norm(d, options.norm_epsilon));
    decoder_norm = register_module("decoder_norm", make_norm(d, options.norm_epsilon));
  }
}

at::Tensor Seq2SeqTransformerImpl::embed(const at::Tensor& ids, int64_t start) {
  const auto& weight = embedding->weight;
  at::Tensor x = embedding->forward(ids) * std::sqrt(static_cast<double>(options_.hidden_size));
  x = x * (ids != options_.pad_id).unsqueeze(-1).to(x.scalar_type());
  x = x + relative_position_encoding(ids.size(1), options_.hidden_size, start, 1.0, 1.0e4,
                                     weight.scalar_type())
              .to(weight.device());
  return maybe_dropout(x, options_.dropout_rate, is_training());
}

at::Tensor Seq2SeqTransformerImpl::project(const at::Tensor& hidden) {
  return at::matmul(hidden, embedding->weight.t());
}

EncoderOutput Seq2SeqTransformerImpl::encode(const at::Tensor& src_ids) {
  at::Tensor mask =
      padding_mask(src_ids, options_.pad_id, embedding->weight.scalar_type()).to(src_ids.device());
  at::Tensor x = embed(src_ids, 0);
  for (auto& layer : encoder_layers) x = layer->forward(x, mask);
  if (options_.norm_first) x = encoder_norm->forward(x);
  return {x, mask};
}

at::Tensor Seq2SeqTransformerImpl::decode(const at::Tensor& tgt_in, const EncoderOutput& encoded) {
  at::Tensor self_mask =
      causal_mask(tgt_in.size(1), embedding->weight.scalar_type()).to(tgt_in.device());
  at::Tensor x = embed(tgt_in, 0);
  for (auto& layer : decoder_layers)
    x = layer->forward(x, encoded.outputs, self_mask, encoded.padding_mask);
  if (options_.norm_first) x = decoder_norm->forward(x);
  return x;
}

at::Tensor Seq2SeqTransformerImpl::forward(const at::Tensor& src_ids, const at::Tensor& tgt_in) {
  return project(decode(tgt_in, encode(src_ids)));
}

Cache Seq2SeqTransformerImpl::init_cache(const EncoderOutput& encoded, int64_t batch) {
  TORCH_CHECK(encoded.outputs.size(0) == batch && encoded.padding_mask.size(0) == batch,
              "init_cache: encoder outputs must have `batch` rows (tile them for beams first)");
  const int64_t heads = options_.num_heads, head_size = options_.hidden_size / heads;
  Cache cache;
  cache["encoder_padding_mask"] = encoded.padding_mask;
  for (std::size_t i = 0; i < decoder_layers.size(); ++i) {
    const std::string prefix = "layer_" + std::to_string(i) + "/";
    auto [k, v] = decoder_layers[i]->cross_attention->project_kv(encoded.outputs);
    cache[prefix + "cross_k"] = k.contiguous();
    cache[prefix + "cross_v"] = v.contiguous();
    // Empty along time: decode_step appends one position per step.
    cache[prefix + "self_k"] = at::zeros({batch, heads, 0, head_size}, encoded.outputs.options());
    cache[prefix + "self_v"] = at::zeros({batch, heads, 0, head_size}, encoded.outputs.options());
  }
  return cache;
}

at::Tensor Seq2SeqTransformerImpl::decode_step(const at::Tensor& ids_at_step, int64_t step,
                                               Cache& cache) {
  at::Tensor x = embed(ids_at_step.reshape({-1, 1}), step);  // [B, 1, D]
  const at::Tensor& cross_mask = cache.at("encoder_padding_mask");
  for (std::size_t i = 0; i < decoder_layers.size(); ++i) {
    const std::string prefix = "layer_" + std::to_string(i) + "/";
    TORCH_CHECK(cache.at(prefix + "self_k").size(2) == step, "decode_step: cache holds ",
                cache.at(prefix + "self_k").size(2), " steps but step is ", step);
    x = decoder_layers[i]->forward_step(x, cache.at(prefix + "self_k"), cache.at(prefix + "self_v"),
                                        cache.at(prefix + "cross_k"), cache.at(prefix + "cross_v"),
                                        cross_mask);
  }
  if (options_.norm_first) x = decoder_norm->forward(x);
  return project(x).squeeze(1);
}

}  // namespace garden::nlp
