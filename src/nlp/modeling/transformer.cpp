#include "garden/nlp/modeling/transformer.h"

#include "garden/base/error.h"
#include "garden/kernels/autocast.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace garden::nlp {

std::array<at::Tensor, 2> layer_norm_and_skip(const at::Tensor& x, torch::nn::LayerNorm& norm,
                                              kernels::LayerNormSkip skip) {
  const auto& shape = norm->options.normalized_shape();
  if (shape.size() != 1 || !norm->options.elementwise_affine()) {
    at::Tensor y = norm->forward(x);
    return {y, skip == kernels::LayerNormSkip::kInput ? x : y};
  }
  return kernels::layer_norm_and_skip(x, norm->weight, norm->bias, norm->options.eps(), skip);
}

at::Tensor layer_norm(const at::Tensor& x, torch::nn::LayerNorm& norm) {
  const auto& shape = norm->options.normalized_shape();
  if (shape.size() != 1 || !norm->options.elementwise_affine()) return norm->forward(x);
  return kernels::layer_norm(x, norm->weight, norm->bias, norm->options.eps());
}

namespace {

// Row r of `step_keys` [B, H, 1, Dh] into position `step` of row rows[r] of
// `buffer` [B0, H, capacity, Dh]: by rows and heads on the CPU (LibTorch's
// index_copy_ goes element by element, a few percent of a beam search),
// index_copy_ elsewhere.
void write_step(at::Tensor& buffer, int64_t step, const at::Tensor& rows,
                const at::Tensor& step_keys) {
  const at::Tensor source = step_keys.select(2, 0);  // [B, H, Dh]
  if (!buffer.device().is_cpu() || !buffer.is_contiguous() || source.stride(2) != 1 ||
      source.scalar_type() != buffer.scalar_type() || rows.scalar_type() != at::kLong ||
      !rows.device().is_cpu()) {
    buffer.select(2, step).index_copy_(0, rows, source);
    return;
  }
  const at::Tensor index = rows.contiguous();
  const int64_t* row = index.data_ptr<int64_t>();
  const int64_t heads = buffer.size(1), head_size = buffer.size(3);
  const auto element = static_cast<int64_t>(buffer.element_size());
  const std::size_t bytes = static_cast<std::size_t>(head_size * element);
  char* to = static_cast<char*>(buffer.data_ptr());
  const char* from = static_cast<const char*>(source.data_ptr());
  for (int64_t r = 0; r < source.size(0); ++r) {
    TORCH_CHECK(row[r] >= 0 && row[r] < buffer.size(0), "decode_step: step_rows names row ", row[r],
                " of a cache with ", buffer.size(0));
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(to + (((row[r] * heads + h) * buffer.size(2) + step) * head_size) * element,
                  from + (r * source.stride(0) + h * source.stride(1)) * element, bytes);
  }
}

// One residual sublayer: pre-LN is x + drop(f(LN(x))), post-LN is LN(x + drop(f(x))).
// (Decoding's steps; the blocks' forward takes residual_with_skip below.)
template <typename F>
at::Tensor residual(const at::Tensor& x, torch::nn::LayerNorm& norm, bool norm_first,
                    double dropout_rate, bool training, F&& f) {
  if (norm_first) return x + kernels::dropout(f(layer_norm(x, norm)), dropout_rate, training);
  return layer_norm(x + kernels::dropout(f(x), dropout_rate, training), norm);
}

// The same sublayer with f leaving its output projection's bias out and
// storing it in its at::Tensor* (then the bias, dropout and the residual are
// one pass: kernels::bias_dropout_add), and with a second handle on the input:
// skip holds x's values (pre-LN: x itself; post-LN: the handle the layer
// norm before gave for the residual sum) and is what the residual sum
// reads. Returns the output and its handle for the next sublayer's residual
// sum. Each tensor the sublayer reads twice goes through
// layer_norm_and_skip, whose node adds its two gradients in its own pass
// (kernels.h).
template <typename F>
std::array<at::Tensor, 2> residual_with_skip(const at::Tensor& x, const at::Tensor& skip,
                                             torch::nn::LayerNorm& norm, bool norm_first,
                                             double dropout_rate, bool training, F&& f) {
  at::Tensor bias;
  if (norm_first) {
    // x is read by the norm and by the sum; skip is x itself.
    TORCH_CHECK(skip.is_same(x), "residual: a pre-LN sublayer's skip must be its input");
    auto [normalized, passed] = layer_norm_and_skip(x, norm, kernels::LayerNormSkip::kInput);
    const at::Tensor y = f(normalized, &bias);
    const at::Tensor out = kernels::bias_dropout_add(y, bias, passed, dropout_rate, training);
    return {out, out};
  }
  const at::Tensor y = f(x, &bias);
  return layer_norm_and_skip(kernels::bias_dropout_add(y, bias, skip, dropout_rate, training), norm,
                             kernels::LayerNormSkip::kOutput);
}

}  // namespace

torch::nn::LayerNorm make_layer_norm(int64_t width, double epsilon) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(epsilon));
}

at::Tensor relative_position_encoding(int64_t length, int64_t hidden_size, int64_t start,
                                      double min_timescale, double max_timescale,
                                      at::ScalarType dtype, at::Device device) {
  TORCH_CHECK(hidden_size % 2 == 0, "position encoding needs an even hidden_size");
  const int64_t num_timescales = hidden_size / 2;
  // Computed in double, then cast, so float and double models see the same values.
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  const double log_increment = std::log(max_timescale / min_timescale) /
                               static_cast<double>(std::max<int64_t>(num_timescales - 1, 1));
  at::Tensor inv_timescales =
      min_timescale * at::exp(at::arange(num_timescales, f64) * -log_increment);
  at::Tensor position = at::arange(start, start + length, f64);
  at::Tensor scaled_time = position.unsqueeze(1) * inv_timescales.unsqueeze(0);
  return at::cat({at::sin(scaled_time), at::cos(scaled_time)}, 1).to(dtype);
}

PositionEncoding position_encoding_from_name(const std::string& name) {
  if (name == "model_garden") return PositionEncoding::kModelGarden;
  if (name == "marian") return PositionEncoding::kMarian;
  throw Error("position encoding '" + name + "' is not one of model_garden, marian");
}

at::Tensor position_encoding(PositionEncoding style, int64_t length, int64_t hidden_size,
                             int64_t start, at::ScalarType dtype, at::Device device) {
  if (style == PositionEncoding::kModelGarden)
    return relative_position_encoding(length, hidden_size, start, 1.0, 1.0e4, dtype, device);
  TORCH_CHECK(hidden_size % 2 == 0, "position encoding needs an even hidden_size");
  // transformers: pos / 10000^(2i / D), in double, then cast.
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  const at::Tensor timescales =
      at::pow(1.0e4, at::arange(hidden_size / 2, f64) * (2.0 / static_cast<double>(hidden_size)));
  const at::Tensor scaled_time =
      at::arange(start, start + length, f64).unsqueeze(1) / timescales.unsqueeze(0);
  return at::cat({at::sin(scaled_time), at::cos(scaled_time)}, 1).to(dtype);
}

// ---- blocks ----------------------------------------------------------------------

FeedForwardImpl::FeedForwardImpl(const TransformerBlockOptions& options)
    : gelu_(options.activation == "gelu"),
      swish_(options.activation == "swish"),
      dropout_(options.intermediate_dropout) {
  TORCH_CHECK(options.activation == "relu" || gelu_ || swish_,
              "activation must be relu, gelu or swish, got ", options.activation);
  intermediate = register_module(
      "intermediate", make_dense(options.hidden_size, options.intermediate_size, options.use_bias));
  output = register_module(
      "output", make_dense(options.intermediate_size, options.hidden_size, options.use_bias));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x, at::Tensor* output_bias) {
  if (swish_)
    return output->forward_deferring_bias(
        kernels::dropout(at::silu(intermediate->forward(x)), dropout_, is_training()), output_bias);
  // Inference: ReLU with the product (dropout is off), with no pass of its own in int8.
  if (!gelu_ && (!is_training() || dropout_ == 0.0) && !at::GradMode::is_enabled())
    return output->forward_deferring_bias(intermediate->forward_relu(x), output_bias);
  at::Tensor h;
  const at::Tensor& weight = intermediate->weight;
  const bool fused = intermediate->use_bias &&
                     !(intermediate->int8() && !at::GradMode::is_enabled()) &&
                     !kernels::autocast_on(x.device()) && x.device().is_cpu() &&
                     x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat;
  // Fused: the product without its bias, which the activation's pass adds
  // (kernels.h): GELU's always, ReLU's where dropout draws a mask.
  if (gelu_) {
    h = fused ? kernels::bias_gelu(kernels::linear(x, weight, {}), intermediate->bias)
              : kernels::gelu(intermediate->forward(x));
    h = kernels::dropout(h, dropout_, is_training());
  } else if (fused && is_training() && dropout_ > 0 && dropout_ < 1) {
    h = kernels::bias_relu_dropout(kernels::linear(x, weight, {}), intermediate->bias, dropout_,
                                   true);
  } else {
    h = kernels::relu_dropout(intermediate->forward(x), dropout_, is_training());
  }
  return output->forward_deferring_bias(h, output_bias);
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
                                        make_layer_norm(options.hidden_size, options.norm_epsilon));
  feed_forward = register_module("feed_forward", FeedForward(options));
  output_norm = register_module("output_layer_norm",
                                make_layer_norm(options.hidden_size, options.norm_epsilon));
}

at::Tensor TransformerEncoderBlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  return forward_with_skip(x, x, mask)[0];
}

std::array<at::Tensor, 2> TransformerEncoderBlockImpl::forward_with_skip(const at::Tensor& x,
                                                                         const at::Tensor& skip,
                                                                         const at::Tensor& mask) {
  const bool pre = options_.norm_first, training = is_training();
  const double p = options_.dropout_rate;
  const auto h = residual_with_skip(x, skip, self_attention_norm, pre, p, training,
                                    [&](const at::Tensor& in, at::Tensor* bias) {
                                      return self_attention->forward(in, {}, mask, bias);
                                    });
  return residual_with_skip(
      h[0], h[1], output_norm, pre, p, training,
      [&](const at::Tensor& in, at::Tensor* bias) { return feed_forward->forward(in, bias); });
}

TransformerDecoderBlockImpl::TransformerDecoderBlockImpl(const TransformerBlockOptions& options)
    : options_(options) {
  self_attention =
      register_module("self_attention", MultiHeadAttention(attention_options(options, false)));
  self_attention_norm = register_module("self_attention_layer_norm",
                                        make_layer_norm(options.hidden_size, options.norm_epsilon));
  cross_attention =
      register_module("encdec_attention", MultiHeadAttention(attention_options(options, true)));
  cross_attention_norm = register_module(
      "encdec_attention_layer_norm", make_layer_norm(options.hidden_size, options.norm_epsilon));
  feed_forward = register_module("feed_forward", FeedForward(options));
  output_norm = register_module("output_layer_norm",
                                make_layer_norm(options.hidden_size, options.norm_epsilon));
}

at::Tensor TransformerDecoderBlockImpl::forward(const at::Tensor& x, const at::Tensor& memory,
                                                const at::Tensor& self_mask,
                                                const at::Tensor& cross_mask) {
  const bool pre = options_.norm_first, training = is_training();
  const double p = options_.dropout_rate;
  auto h = residual_with_skip(x, x, self_attention_norm, pre, p, training,
                              [&](const at::Tensor& in, at::Tensor* bias) {
                                return self_attention->forward(in, {}, self_mask, bias);
                              });
  h = residual_with_skip(h[0], h[1], cross_attention_norm, pre, p, training,
                         [&](const at::Tensor& in, at::Tensor* bias) {
                           return cross_attention->forward(in, memory, cross_mask, bias);
                         });
  return residual_with_skip(
      h[0], h[1], output_norm, pre, p, training,
      [&](const at::Tensor& in, at::Tensor* bias) { return feed_forward->forward(in, bias); })[0];
}

at::Tensor TransformerDecoderBlockImpl::forward_step(const at::Tensor& x, int64_t step,
                                                     at::Tensor& self_k, at::Tensor& self_v,
                                                     const at::Tensor& cross_k,
                                                     const at::Tensor& cross_v,
                                                     const at::Tensor& cross_mask,
                                                     const at::Tensor& step_rows) {
  const bool pre = options_.norm_first, training = is_training();
  const double p = options_.dropout_rate;
  at::Tensor h = residual(x, self_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    auto [q, k, v] = self_attention->project_qkv(in);
    if (step_rows.defined()) {
      // Each row writes its own buffer row, and reads its history where the
      // index says (beam search moved the indices, not the keys).
      TORCH_CHECK(step_rows.dim() == 2 && step_rows.size(0) == in.size(0) &&
                      step_rows.size(1) > step && self_k.size(2) > step,
                  "decode_step: step ", step, " needs step_rows [", in.size(0),
                  ", > step] and buffers with room for it; got step_rows ", step_rows.sizes(),
                  " and a capacity of ", self_k.size(2));
      const at::Tensor own = step_rows.select(1, step);
      write_step(self_k, step, own, k);
      write_step(self_v, step, own, v);
      return self_attention->attend(q, self_k.narrow(2, 0, step + 1), self_v.narrow(2, 0, step + 1),
                                    {}, step_rows);
    }
    if (self_k.size(2) > step) {
      // Preallocated: this step's position is written in place.
      self_k.narrow(2, step, 1).copy_(k);
      self_v.narrow(2, step, 1).copy_(v);
    } else {
      self_k = at::cat({self_k, k}, 2);
      self_v = at::cat({self_v, v}, 2);
    }
    // Only past and current keys are read: no causal mask needed. The
    // narrowed buffers are strided views the attention products take as
    // they are.
    return self_attention->attend(q, self_k.narrow(2, 0, step + 1), self_v.narrow(2, 0, step + 1),
                                  {});
  });
  h = residual(h, cross_attention_norm, pre, p, training, [&](const at::Tensor& in) {
    // The beams of an example share its encoder keys and values: its rows
    // [beams, 1, D] attend as one example's `beams` queries, so each key and
    // value is read once for all of them (rows e * beams + k, see Cache).
    const int64_t rows = in.size(0), examples = cross_k.size(0);
    TORCH_CHECK(examples > 0 && rows % examples == 0 && in.size(1) == 1, "decode_step: ", rows,
                " rows do not divide into the cache's ", examples, " examples");
    const at::Tensor queries = in.reshape({examples, rows / examples, in.size(2)});
    return cross_attention
        ->attend(cross_attention->project_q(queries), cross_k, cross_v, cross_mask)
        .reshape(in.sizes());
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
    : options_(options), positions_(std::make_shared<PositionTable>()) {
  const int64_t d = options.hidden_size;
  embedding = register_module("embedding", torch::nn::Embedding(options.vocab_size, d));
  {
    // Model Garden: normal(0, D^-0.5), so the sqrt(D)-scaled inputs have unit
    // scale and the tied logits start small.
    torch::NoGradGuard no_grad;
    embedding->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(d)));
  }
  const auto block = options.block_options();
  const int64_t decoder_depth =
      options.decoder_num_layers >= 0 ? options.decoder_num_layers : options.num_layers;
  for (int64_t i = 0; i < std::max(options.num_layers, decoder_depth); ++i) {
    if (i < options.num_layers)
      encoder_layers.push_back(
          register_module("encoder_layer_" + std::to_string(i), TransformerEncoderBlock(block)));
    if (i < decoder_depth)
      decoder_layers.push_back(
          register_module("decoder_layer_" + std::to_string(i), TransformerDecoderBlock(block)));
  }
  if (options.norm_first) {
    encoder_norm = register_module("encoder_layer_norm", make_layer_norm(d, options.norm_epsilon));
    decoder_norm = register_module("decoder_layer_norm", make_layer_norm(d, options.norm_epsilon));
  }
  if (options.output_bias)
    final_logits_bias = register_buffer("final_logits_bias", torch::zeros({options.vocab_size}));
}

struct Seq2SeqTransformerImpl::PositionTable {
  std::mutex mutex;
  at::Tensor rows;  // [n, D] float32, CPU
};

at::Tensor Seq2SeqTransformerImpl::position_rows(int64_t n) {
  std::lock_guard<std::mutex> lock(positions_->mutex);
  at::Tensor& rows = positions_->rows;
  if (!rows.defined() || rows.size(0) < n) {
    const int64_t grown = std::max<int64_t>({n, 128, rows.defined() ? 2 * rows.size(0) : 0});
    rows = position_encoding(options_.position_encoding, grown, options_.hidden_size, 0, at::kFloat,
                             at::kCPU);
  }
  return rows;
}

at::Tensor Seq2SeqTransformerImpl::embed(const at::Tensor& ids, int64_t start,
                                         bool sparse_gradient) {
  const auto& weight = embedding->weight;
  if (!is_training() && !at::GradMode::is_enabled() && weight.device().is_cpu() &&
      weight.scalar_type() == at::kFloat && weight.is_contiguous() && ids.dim() == 2 &&
      ids.scalar_type() == at::kLong && ids.device().is_cpu() && start >= 0) {
    // A decoding step's input: one row a sentence and beam. As the
    // operations below: x * float(sqrt(D)), times 1 or 0, plus the encoding
    // (whose rows do not depend on where the table starts: each is its
    // position's own products, sines and cosines in double).
    const int64_t rows = ids.size(0), length = ids.size(1), width = weight.size(1);
    const int64_t vocab = weight.size(0);
    const at::Tensor id = ids.contiguous();
    const at::Tensor table = position_rows(start + length);
    at::Tensor x = at::empty({rows, length, width}, weight.options());
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(options_.hidden_size)));
    const int64_t* index = id.data_ptr<int64_t>();
    const float* embeddings = weight.data_ptr<float>();
    const float* positions = table.data_ptr<float>();
    float* out = x.data_ptr<float>();
    for (int64_t r = 0; r < rows * length; ++r) {
      const int64_t token = index[r];
      TORCH_CHECK(token >= 0 && token < vocab, "embedding: id ", token, " is not in [0, ", vocab,
                  ")");
      const float keep = token != options_.pad_id || !options_.zero_pad_embedding ? 1.0f : 0.0f;
      const float* __restrict e = embeddings + token * width;
      const float* __restrict p = positions + (start + r % length) * width;
      float* __restrict y = out + r * width;
      for (int64_t d = 0; d < width; ++d) y[d] = e[d] * scale * keep + p[d];
    }
    return x;
  }
  at::Tensor x =
      (sparse_gradient ? kernels::embedding_rows(weight, ids) : embedding->forward(ids)) *
      std::sqrt(static_cast<double>(options_.hidden_size));
  if (options_.zero_pad_embedding)
    x = x * (ids != options_.pad_id).unsqueeze(-1).to(x.scalar_type());
  x = x + position_encoding(options_.position_encoding, ids.size(1), options_.hidden_size, start,
                            weight.scalar_type(), weight.device());
  const double p = options_.embedding_dropout_rate >= 0 ? options_.embedding_dropout_rate
                                                        : options_.dropout_rate;
  return kernels::dropout(x, p, is_training());
}

at::Tensor Seq2SeqTransformerImpl::project(const at::Tensor& hidden) {
  const at::Tensor bias =
      final_logits_bias.defined() ? final_logits_bias.to(hidden.scalar_type()) : at::Tensor();
  if (int8_projection_ && !at::GradMode::is_enabled()) {
    const at::Tensor logits = int8_projection_->forward(hidden);
    return bias.defined() ? logits + bias : logits;
  }
  return kernels::linear(hidden, embedding->weight, bias);
}

void Seq2SeqTransformerImpl::use_int8(bool on) {
  if (on) kernels::check_int8_available("int8 decoding", embedding->weight.device());
  for (const auto& module : modules(/*include_self=*/false))
    if (auto* dense = module->as<DenseImpl>()) dense->use_int8(on);
  int8_projection_ =
      on ? std::make_shared<const kernels::Int8Linear>(embedding->weight, at::Tensor()) : nullptr;
}

EncoderOutput Seq2SeqTransformerImpl::encode(const at::Tensor& src_ids) {
  return encode(src_ids, false);
}

EncoderOutput Seq2SeqTransformerImpl::encode(const at::Tensor& src_ids, bool sparse_gradient) {
  at::Tensor mask =
      padding_mask(src_ids, options_.pad_id, embedding->weight.scalar_type()).to(src_ids.device());
  at::Tensor x = embed(src_ids, 0, sparse_gradient);
  for (auto& layer : encoder_layers) x = layer->forward(x, mask);
  if (options_.norm_first) x = layer_norm(x, encoder_norm);
  return {x, mask};
}

at::Tensor Seq2SeqTransformerImpl::decode(const at::Tensor& tgt_in, const EncoderOutput& encoded) {
  return decode(tgt_in, encoded, false);
}

at::Tensor Seq2SeqTransformerImpl::decode(const at::Tensor& tgt_in, const EncoderOutput& encoded,
                                          bool sparse_gradient) {
  at::Tensor self_mask =
      causal_mask(tgt_in.size(1), embedding->weight.scalar_type(), tgt_in.device());
  at::Tensor x = embed(tgt_in, 0, sparse_gradient);
  for (auto& layer : decoder_layers)
    x = layer->forward(x, encoded.outputs, self_mask, encoded.padding_mask);
  if (options_.norm_first) x = layer_norm(x, decoder_norm);
  return x;
}

at::Tensor Seq2SeqTransformerImpl::forward(const at::Tensor& src_ids, const at::Tensor& tgt_in) {
  // Both lookups' gradients sparse, added into the projection's dense one
  // (kernels::embedding_rows): no zero-filled [V, D] table and [V, D] sum each.
  return project(decode(tgt_in, encode(src_ids, true), true));
}

Cache Seq2SeqTransformerImpl::init_cache(const EncoderOutput& encoded, int64_t batch,
                                         int64_t max_steps, bool step_rows) {
  TORCH_CHECK(encoded.outputs.size(0) == batch && encoded.padding_mask.size(0) == batch,
              "init_cache: encoder outputs must have `batch` rows (tile them for beams first)");
  TORCH_CHECK(max_steps >= 0, "init_cache: max_steps must be >= 0, not ", max_steps);
  const int64_t heads = options_.num_heads, head_size = options_.hidden_size / heads;
  TORCH_CHECK(!step_rows || max_steps > 0, "init_cache: step_rows needs max_steps > 0");
  Cache cache;
  cache["per_example/encoder_padding_mask"] = encoded.padding_mask;
  if (step_rows) {
    // Row b reads and writes its own buffer row until a search says otherwise.
    cache[kStepRowsEntry] = torch::arange(batch, encoded.outputs.options().dtype(torch::kLong))
                                .unsqueeze(1)
                                .expand({batch, max_steps})
                                .contiguous();
  }
  for (std::size_t i = 0; i < decoder_layers.size(); ++i) {
    const std::string layer = "layer_" + std::to_string(i) + "/";
    auto [k, v] = decoder_layers[i]->cross_attention->project_kv(encoded.outputs);
    cache["per_example/" + layer + "cross_k"] = k.contiguous();
    cache["per_example/" + layer + "cross_v"] = v.contiguous();
    // Written one position per step; what is not written yet is never read.
    cache["steps/" + layer + "self_k"] =
        at::empty({batch, heads, max_steps, head_size}, encoded.outputs.options());
    cache["steps/" + layer + "self_v"] =
        at::empty({batch, heads, max_steps, head_size}, encoded.outputs.options());
  }
  return cache;
}

at::Tensor Seq2SeqTransformerImpl::decode_step(const at::Tensor& ids_at_step, int64_t step,
                                               Cache& cache) {
  at::Tensor x = embed(ids_at_step.reshape({-1, 1}), step);  // [B, 1, D]
  const at::Tensor& cross_mask = cache.at("per_example/encoder_padding_mask");
  const auto rows = cache.find(kStepRowsEntry);
  const at::Tensor step_rows = rows == cache.end() ? at::Tensor() : rows->second;
  for (std::size_t i = 0; i < decoder_layers.size(); ++i) {
    const std::string layer = "layer_" + std::to_string(i) + "/";
    at::Tensor& self_k = cache.at("steps/" + layer + "self_k");
    TORCH_CHECK(step >= 0 && self_k.size(2) >= step, "decode_step: step ", step,
                " but the cache has room for ", self_k.size(2), " steps before it");
    x = decoder_layers[i]->forward_step(x, step, self_k, cache.at("steps/" + layer + "self_v"),
                                        cache.at("per_example/" + layer + "cross_k"),
                                        cache.at("per_example/" + layer + "cross_v"), cross_mask,
                                        step_rows);
  }
  if (options_.norm_first) x = layer_norm(x, decoder_norm);
  return project(x).squeeze(1);
}

}  // namespace garden::nlp
