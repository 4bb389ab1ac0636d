// What the Transformer tests share: plain reference computations of the
// layers (explicit per-head loops, step-by-step blocks) in double precision,
// a finite-difference gradient check, and the small model they test.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "garden/nlp/modeling/transformer.h"

namespace transformer_reference {

using namespace garden::nlp;

inline const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

inline void expect_close(const at::Tensor& actual, const at::Tensor& expected, double tol) {
  EXPECT_EQ(actual.sizes(), expected.sizes());
  if (actual.sizes() != expected.sizes()) return;  // the difference would broadcast or throw
  const double diff = (actual - expected).abs().max().item<double>();
  EXPECT_LE(diff, tol) << "max abs difference " << diff;
}

inline at::Tensor ref_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = torch::matmul(x, w.t());
  return b.defined() ? y + b : y;
}

inline at::Tensor rows(const at::Tensor& t, int64_t begin, int64_t end) {
  return t.defined() ? t.slice(0, begin, end) : t;
}

// Attention the obvious way: for each example and head, project, score,
// softmax by exp/sum, mix values; concatenate heads; project out.
// mask: additive [B, T, S] or undefined.
inline at::Tensor ref_attention(const at::Tensor& xq, const at::Tensor& xkv, const at::Tensor& wq,
                                const at::Tensor& bq, const at::Tensor& wk, const at::Tensor& bk,
                                const at::Tensor& wv, const at::Tensor& bv, const at::Tensor& wo,
                                const at::Tensor& bo, int64_t heads, const at::Tensor& mask) {
  const int64_t batch = xq.size(0), d = xq.size(2), dh = d / heads;
  std::vector<at::Tensor> outputs;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<at::Tensor> contexts;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t lo = h * dh, hi = (h + 1) * dh;
      at::Tensor q = ref_linear(xq[b], rows(wq, lo, hi), rows(bq, lo, hi));
      at::Tensor k = ref_linear(xkv[b], rows(wk, lo, hi), rows(bk, lo, hi));
      at::Tensor v = ref_linear(xkv[b], rows(wv, lo, hi), rows(bv, lo, hi));
      at::Tensor scores = torch::matmul(q, k.t()) / std::sqrt(static_cast<double>(dh));
      if (mask.defined()) scores = scores + mask[b];
      at::Tensor e = torch::exp(scores - std::get<0>(scores.max(1, true)));
      contexts.push_back(torch::matmul(e / e.sum(1, true), v));
    }
    outputs.push_back(ref_linear(torch::cat(contexts, 1), wo, bo));
  }
  return torch::stack(outputs);
}

inline at::Tensor ref_self_attention(MultiHeadAttention& m, const at::Tensor& x,
                                     const at::Tensor& mask) {
  const int64_t d = m->options().hidden_size;
  const auto& w = m->qkv->weight;
  const auto& b = m->qkv->bias;
  return ref_attention(x, x, rows(w, 0, d), rows(b, 0, d), rows(w, d, 2 * d), rows(b, d, 2 * d),
                       rows(w, 2 * d, 3 * d), rows(b, 2 * d, 3 * d), m->output->weight,
                       m->output->bias, m->options().num_heads, mask);
}

inline at::Tensor ref_cross_attention(MultiHeadAttention& m, const at::Tensor& x,
                                      const at::Tensor& mem, const at::Tensor& mask) {
  const int64_t d = m->options().hidden_size;
  const auto& w = m->kv->weight;
  const auto& b = m->kv->bias;
  return ref_attention(x, mem, m->query->weight, m->query->bias, rows(w, 0, d), rows(b, 0, d),
                       rows(w, d, 2 * d), rows(b, d, 2 * d), m->output->weight, m->output->bias,
                       m->options().num_heads, mask);
}

inline at::Tensor ref_layer_norm(const at::Tensor& x, torch::nn::LayerNorm& norm, double eps) {
  at::Tensor mean = x.mean(-1, true);
  at::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / torch::sqrt(var + eps) * norm->weight + norm->bias;
}

inline at::Tensor ref_feed_forward(FeedForward& ff, const at::Tensor& x, bool gelu) {
  at::Tensor h = ref_linear(x, ff->intermediate->weight, ff->intermediate->bias);
  h = gelu ? 0.5 * h * (1 + torch::erf(h / std::sqrt(2.0))) : torch::clamp_min(h, 0);
  return ref_linear(h, ff->output->weight, ff->output->bias);
}

// Central differences of a scalar function of `x` against autograd.
inline void check_gradient(const std::function<at::Tensor(const at::Tensor&)>& f, at::Tensor x) {
  x = x.detach().clone().requires_grad_(true);
  at::Tensor analytic = torch::autograd::grad({f(x)}, {x})[0];
  at::Tensor numeric = torch::zeros_like(x);
  const double eps = 1e-6;
  torch::NoGradGuard no_grad;
  auto flat = x.detach().view(-1);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double saved = flat[i].item<double>();
    flat[i] = saved + eps;
    const double up = f(x).item<double>();
    flat[i] = saved - eps;
    const double down = f(x).item<double>();
    flat[i] = saved;
    numeric.view(-1)[i] = (up - down) / (2 * eps);
  }
  expect_close(analytic, numeric, 1e-6);
}

// Additive [B, T, S] mask hiding the last `padded[b]` keys of example b.
inline at::Tensor key_padding(int64_t t, int64_t s, const std::vector<int64_t>& padded) {
  at::Tensor mask = torch::zeros({static_cast<int64_t>(padded.size()), t, s}, kF64);
  for (std::size_t b = 0; b < padded.size(); ++b)
    if (padded[b] > 0) mask[b].slice(1, s - padded[b]).fill_(kMaskedValue);
  return mask;
}

inline TransformerBlockOptions small_block(bool norm_first,
                                           const std::string& activation = "relu") {
  TransformerBlockOptions o;
  o.hidden_size = 8;
  o.num_heads = 2;
  o.intermediate_size = 12;
  o.activation = activation;
  o.norm_first = norm_first;
  return o;
}

inline Seq2SeqTransformerOptions small_model(bool norm_first) {
  Seq2SeqTransformerOptions o;
  o.vocab_size = 13;
  o.hidden_size = 8;
  o.num_layers = 2;
  o.num_heads = 2;
  o.intermediate_size = 16;
  o.norm_first = norm_first;
  return o;
}

}  // namespace transformer_reference
