// The hand-written Transformer layers against plain reference computations
// (explicit per-head loops, step-by-step blocks) in double precision, finite
// difference gradients, masks, cached decoding and weight tying.
#include "garden/nlp/modeling/transformer.h"

#include "garden/nlp/modeling/beam_search.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>

namespace {

using namespace garden::nlp;

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

void expect_close(const at::Tensor& actual, const at::Tensor& expected, double tol) {
  EXPECT_EQ(actual.sizes(), expected.sizes());
  if (actual.sizes() != expected.sizes()) return;  // the difference would broadcast or throw
  const double diff = (actual - expected).abs().max().item<double>();
  EXPECT_LE(diff, tol) << "max abs difference " << diff;
}

at::Tensor ref_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = torch::matmul(x, w.t());
  return b.defined() ? y + b : y;
}

at::Tensor rows(const at::Tensor& t, int64_t begin, int64_t end) {
  return t.defined() ? t.slice(0, begin, end) : t;
}

// Attention the obvious way: for each example and head, project, score,
// softmax by exp/sum, mix values; concatenate heads; project out.
// mask: additive [B, T, S] or undefined.
at::Tensor ref_attention(const at::Tensor& xq, const at::Tensor& xkv, const at::Tensor& wq,
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

at::Tensor ref_self_attention(MultiHeadAttention& m, const at::Tensor& x, const at::Tensor& mask) {
  const int64_t d = m->options().hidden_size;
  const auto& w = m->qkv->weight;
  const auto& b = m->qkv->bias;
  return ref_attention(x, x, rows(w, 0, d), rows(b, 0, d), rows(w, d, 2 * d), rows(b, d, 2 * d),
                       rows(w, 2 * d, 3 * d), rows(b, 2 * d, 3 * d), m->output->weight,
                       m->output->bias, m->options().num_heads, mask);
}

at::Tensor ref_cross_attention(MultiHeadAttention& m, const at::Tensor& x, const at::Tensor& mem,
                               const at::Tensor& mask) {
  const int64_t d = m->options().hidden_size;
  const auto& w = m->kv->weight;
  const auto& b = m->kv->bias;
  return ref_attention(x, mem, m->query->weight, m->query->bias, rows(w, 0, d), rows(b, 0, d),
                       rows(w, d, 2 * d), rows(b, d, 2 * d), m->output->weight, m->output->bias,
                       m->options().num_heads, mask);
}

at::Tensor ref_layer_norm(const at::Tensor& x, torch::nn::LayerNorm& norm, double eps) {
  at::Tensor mean = x.mean(-1, true);
  at::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / torch::sqrt(var + eps) * norm->weight + norm->bias;
}

at::Tensor ref_feed_forward(FeedForward& ff, const at::Tensor& x, bool gelu) {
  at::Tensor h = ref_linear(x, ff->intermediate->weight, ff->intermediate->bias);
  h = gelu ? 0.5 * h * (1 + torch::erf(h / std::sqrt(2.0))) : torch::clamp_min(h, 0);
  return ref_linear(h, ff->output->weight, ff->output->bias);
}

// Central differences of a scalar function of `x` against autograd.
void check_gradient(const std::function<at::Tensor(const at::Tensor&)>& f, at::Tensor x) {
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
at::Tensor key_padding(int64_t t, int64_t s, const std::vector<int64_t>& padded) {
  at::Tensor mask = torch::zeros({static_cast<int64_t>(padded.size()), t, s}, kF64);
  for (std::size_t b = 0; b < padded.size(); ++b)
    if (padded[b] > 0) mask[b].slice(1, s - padded[b]).fill_(kMaskedValue);
  return mask;
}

TransformerBlockOptions small_block(bool norm_first, const std::string& activation = "relu") {
  TransformerBlockOptions o;
  o.hidden_size = 8;
  o.num_heads = 2;
  o.intermediate_size = 12;
  o.activation = activation;
  o.norm_first = norm_first;
  return o;
}

Seq2SeqTransformerOptions small_model(bool norm_first) {
  Seq2SeqTransformerOptions o;
  o.vocab_size = 13;
  o.hidden_size = 8;
  o.num_layers = 2;
  o.num_heads = 2;
  o.intermediate_size = 16;
  o.norm_first = norm_first;
  return o;
}

TEST(TransformerTest, PositionEncodingMatchesHandFormula) {
  const int64_t length = 5, width = 6, start = 3;
  at::Tensor pe = relative_position_encoding(length, width, start, 1.0, 1.0e4, torch::kDouble);
  ASSERT_EQ(pe.sizes(), (std::vector<int64_t>{length, width}));
  const int64_t half = width / 2;
  for (int64_t p = 0; p < length; ++p)
    for (int64_t i = 0; i < half; ++i) {
      // timescale_i = 1e4^(i / (half - 1)): sin half first, then cos half.
      const double angle = static_cast<double>(p + start) / std::pow(1.0e4, double(i) / (half - 1));
      EXPECT_NEAR(pe[p][i].item<double>(), std::sin(angle), 1e-12);
      EXPECT_NEAR(pe[p][half + i].item<double>(), std::cos(angle), 1e-12);
    }
}

// Inference embeds through one loop and a kept table of position encodings
// (decoding asks for one position a step): the same bits as the operations
// that training runs, at positions on both sides of the table's first size
// and growth (128, 256), with pad ids zeroed; an id outside the vocabulary
// is an error, as in the operations.
TEST(TransformerTest, InferenceEmbeddingGivesTheOperationsBits) {
  torch::manual_seed(12);
  Seq2SeqTransformerOptions o = small_model(true);
  o.hidden_size = 40;  // off the vector widths
  o.num_heads = 4;
  o.dropout_rate = 0.0;
  Seq2SeqTransformer model(o);
  at::Tensor ids = torch::randint(0, o.vocab_size, {6, 3}, torch::kLong);
  ids[1][0] = o.pad_id;
  ids[4][2] = o.pad_id;
  for (const int64_t start : {0, 1, 7, 126, 127, 128, 200, 255, 256, 300, 1000}) {
    model->train();
    const at::Tensor want = model->embed(ids, start);
    model->eval();
    torch::NoGradGuard no_grad;
    const at::Tensor got = model->embed(ids, start);
    EXPECT_TRUE(got.equal(want)) << "start " << start;
    // One position alone, as a decoding step asks for it.
    EXPECT_TRUE(model->embed(ids.narrow(1, 2, 1), start + 2).equal(want.narrow(1, 2, 1)))
        << "start " << start;
    // The table's row is the encoding computed for that position alone.
    EXPECT_TRUE(relative_position_encoding(1, o.hidden_size, start + 1, 1.0, 1.0e4)
                    .equal(relative_position_encoding(start + 2, o.hidden_size, 0, 1.0, 1.0e4)
                               .narrow(0, start + 1, 1)))
        << "start " << start;
  }
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_THROW(model->embed(torch::tensor({{3, o.vocab_size}}, torch::kLong), 0), c10::Error);
  EXPECT_THROW(model->embed(torch::tensor({{-1}}, torch::kLong), 0), c10::Error);
}

// In float32 on the CPU a GELU feed-forward layer runs its first product
// without the bias and kernels::bias_gelu adds it: the output and every
// gradient as the reference in double (the same weights), in training and
// without gradients.
TEST(TransformerTest, GeluFeedForwardWithItsBiasFusedMatchesTheReference) {
  torch::manual_seed(13);
  TransformerBlockOptions o = small_block(false, "gelu");
  o.intermediate_size = 40;
  o.use_bias = true;
  FeedForward ff(o);
  {
    torch::NoGradGuard no_grad;
    ff->intermediate->bias.normal_();
    ff->output->bias.normal_();
  }
  const at::Tensor x = torch::randn({3, 5, o.hidden_size}, torch::requires_grad());
  const at::Tensor y = ff->forward(x);
  const at::Tensor grad = torch::randn(y.sizes());
  y.backward(grad);

  FeedForward reference(o);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : reference->named_parameters())
      item.value().copy_(ff->named_parameters()[item.key()]);
  }
  reference->to(torch::kDouble);
  const at::Tensor xd = x.detach().to(torch::kDouble).requires_grad_();
  const at::Tensor want = ref_feed_forward(reference, xd, true);
  want.backward(grad.to(torch::kDouble));
  expect_close(y.detach().to(torch::kDouble), want.detach(), 2e-6);
  expect_close(x.grad().to(torch::kDouble), xd.grad(), 2e-6);
  for (auto& item : ff->named_parameters()) {
    SCOPED_TRACE(item.key());
    expect_close(item.value().grad().to(torch::kDouble),
                 reference->named_parameters()[item.key()].grad(), 1e-5);
  }
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(ff->forward(x).equal(y.detach()));
}

TEST(TransformerTest, MasksHaveDocumentedShapeAndValues) {
  at::Tensor ids = torch::tensor({5, 3, 0, 0}, torch::kLong).view({1, 4});
  at::Tensor pad = padding_mask(ids);
  ASSERT_EQ(pad.sizes(), (std::vector<int64_t>{1, 1, 1, 4}));
  EXPECT_EQ(pad[0][0][0][1].item<float>(), 0.0f);
  EXPECT_EQ(pad[0][0][0][2].item<float>(), static_cast<float>(kMaskedValue));
  at::Tensor causal = causal_mask(3);
  ASSERT_EQ(causal.sizes(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_EQ(causal[0][0][1][1].item<float>(), 0.0f);
  EXPECT_EQ(causal[0][0][1][2].item<float>(), static_cast<float>(kMaskedValue));
}

TEST(TransformerTest, SelfAttentionMatchesPerHeadReference) {
  torch::manual_seed(1);
  MultiHeadAttention attention(AttentionOptions{8, 2, false, true, 0.0});
  attention->to(torch::kDouble);
  at::Tensor x = torch::randn({2, 4, 8}, kF64);
  at::Tensor mask = key_padding(4, 4, {0, 2});
  // The module takes the [B, 1, 1, S] form; the reference the expanded one.
  at::Tensor module_mask = mask.select(1, 0).view({2, 1, 1, 4});
  expect_close(attention->forward(x, {}, module_mask), ref_self_attention(attention, x, mask),
               1e-12);
  expect_close(attention->forward(x), ref_self_attention(attention, x, {}), 1e-12);
}

TEST(TransformerTest, CrossAttentionWithoutBiasMatchesReference) {
  torch::manual_seed(2);
  MultiHeadAttention attention(AttentionOptions{8, 4, true, false, 0.0});
  attention->to(torch::kDouble);
  EXPECT_FALSE(attention->kv->bias.defined());
  at::Tensor x = torch::randn({2, 3, 8}, kF64), memory = torch::randn({2, 5, 8}, kF64);
  at::Tensor mask = key_padding(3, 5, {1, 3});
  expect_close(attention->forward(x, memory, mask.select(1, 0).view({2, 1, 1, 5})),
               ref_cross_attention(attention, x, memory, mask), 1e-12);
}

TEST(TransformerTest, AttentionGradientsMatchFiniteDifferences) {
  torch::manual_seed(3);
  MultiHeadAttention attention(AttentionOptions{4, 2, true, true, 0.0});
  attention->to(torch::kDouble);
  at::Tensor x = torch::randn({1, 3, 4}, kF64), memory = torch::randn({1, 2, 4}, kF64);
  at::Tensor weights = torch::randn({1, 3, 4}, kF64);  // makes the loss depend on every output
  check_gradient(
      [&](const at::Tensor& q) { return (attention->forward(q, memory) * weights).sum(); }, x);
  check_gradient([&](const at::Tensor& m) { return (attention->forward(x, m) * weights).sum(); },
                 memory);
  // A parameter too: the fused key/value kernel, applied here by hand so the
  // finite differences can perturb it (bias and head split as in the module).
  const at::Tensor& bias = attention->kv->bias;
  check_gradient(
      [&](const at::Tensor& w) {
        at::Tensor y = torch::matmul(memory, w.t()) + bias;
        auto heads = [](const at::Tensor& t) { return t.view({1, -1, 2, 2}).transpose(1, 2); };
        return (attention->attend(attention->project_q(x), heads(y.slice(2, 0, 4)),
                                  heads(y.slice(2, 4, 8)), {}) *
                weights)
            .sum();
      },
      attention->kv->weight);
}

TEST(TransformerTest, EncoderBlockMatchesStepByStepReference) {
  for (bool norm_first : {true, false}) {
    SCOPED_TRACE(norm_first ? "pre-LN" : "post-LN");
    torch::manual_seed(4);
    auto options = small_block(norm_first, "gelu");
    TransformerEncoderBlock block(options);
    block->to(torch::kDouble);
    block->eval();
    at::Tensor x = torch::randn({2, 5, 8}, kF64);
    at::Tensor mask = key_padding(5, 5, {0, 2});
    const double eps = options.norm_epsilon;
    at::Tensor expected;
    if (norm_first) {
      at::Tensor h =
          x + ref_self_attention(block->self_attention,
                                 ref_layer_norm(x, block->self_attention_norm, eps), mask);
      expected = h + ref_feed_forward(block->feed_forward,
                                      ref_layer_norm(h, block->output_norm, eps), true);
    } else {
      at::Tensor h = ref_layer_norm(x + ref_self_attention(block->self_attention, x, mask),
                                    block->self_attention_norm, eps);
      expected = ref_layer_norm(h + ref_feed_forward(block->feed_forward, h, true),
                                block->output_norm, eps);
    }
    expect_close(block->forward(x, mask.select(1, 0).view({2, 1, 1, 5})), expected, 1e-12);
  }
}

TEST(TransformerTest, DecoderBlockMatchesStepByStepReference) {
  for (bool norm_first : {true, false}) {
    SCOPED_TRACE(norm_first ? "pre-LN" : "post-LN");
    torch::manual_seed(5);
    auto options = small_block(norm_first);
    TransformerDecoderBlock block(options);
    block->to(torch::kDouble);
    block->eval();
    at::Tensor x = torch::randn({2, 4, 8}, kF64), memory = torch::randn({2, 3, 8}, kF64);
    at::Tensor causal = torch::triu(torch::full({4, 4}, kMaskedValue, kF64), 1).expand({2, 4, 4});
    at::Tensor cross = key_padding(4, 3, {1, 0});
    const double eps = options.norm_epsilon;
    auto ln = [&](const at::Tensor& t, torch::nn::LayerNorm& n) {
      return ref_layer_norm(t, n, eps);
    };
    at::Tensor expected;
    if (norm_first) {
      at::Tensor h =
          x + ref_self_attention(block->self_attention, ln(x, block->self_attention_norm), causal);
      h = h + ref_cross_attention(block->cross_attention, ln(h, block->cross_attention_norm),
                                  memory, cross);
      expected = h + ref_feed_forward(block->feed_forward, ln(h, block->output_norm), false);
    } else {
      at::Tensor h =
          ln(x + ref_self_attention(block->self_attention, x, causal), block->self_attention_norm);
      h = ln(h + ref_cross_attention(block->cross_attention, h, memory, cross),
             block->cross_attention_norm);
      expected = ln(h + ref_feed_forward(block->feed_forward, h, false), block->output_norm);
    }
    at::Tensor actual = block->forward(x, memory, causal_mask(4, torch::kDouble),
                                       cross.select(1, 0).view({2, 1, 1, 3}));
    expect_close(actual, expected, 1e-12);
  }
}

// In float32 on the CPU the output projections run without their biases,
// which kernels::bias_dropout_add adds with dropout and the residual in one
// pass: a training block (dropout 0, so no mask to replay) against a double
// copy of it, whose layers take the unfused operations; output, input and
// every parameter gradient, the biases random so that a lost one shows.
TEST(TransformerTest, FusedBiasResidualBlocksMatchTheUnfusedInDouble) {
  for (const bool norm_first : {true, false}) {
    for (const bool decoder : {false, true}) {
      SCOPED_TRACE(std::string(norm_first ? "pre-LN" : "post-LN") +
                   (decoder ? " decoder" : " encoder"));
      torch::manual_seed(17);
      TransformerBlockOptions o = small_block(norm_first, decoder ? "relu" : "gelu");
      o.dropout_rate = 0.0;
      o.use_bias = true;
      std::shared_ptr<torch::nn::Module> block, reference;
      if (decoder) {
        block = TransformerDecoderBlock(o).ptr();
        reference = TransformerDecoderBlock(o).ptr();
      } else {
        block = TransformerEncoderBlock(o).ptr();
        reference = TransformerEncoderBlock(o).ptr();
      }
      {
        torch::NoGradGuard no_grad;
        for (auto& item : block->named_parameters())
          if (item.key().find("bias") != std::string::npos) item.value().normal_();
        for (auto& item : reference->named_parameters())
          item.value().copy_(block->named_parameters()[item.key()]);
      }
      reference->to(torch::kDouble);
      const at::Tensor x = torch::randn({2, 5, o.hidden_size}, torch::requires_grad());
      const at::Tensor memory = torch::randn({2, 3, o.hidden_size});
      const at::Tensor xd = x.detach().to(torch::kDouble).requires_grad_();
      const auto run = [&](torch::nn::Module& m, const at::Tensor& in, const at::Tensor& mem) {
        if (auto* d = m.as<TransformerDecoderBlockImpl>())
          return d->forward(in, mem, causal_mask(5, in.scalar_type()), {});
        return m.as<TransformerEncoderBlockImpl>()->forward(in, {});
      };
      const at::Tensor y = run(*block, x, memory);
      const at::Tensor want = run(*reference, xd, memory.to(torch::kDouble));
      const at::Tensor grad = torch::randn(y.sizes());
      y.backward(grad);
      want.backward(grad.to(torch::kDouble));
      expect_close(y.detach().to(torch::kDouble), want.detach(), 1e-5);
      expect_close(x.grad().to(torch::kDouble), xd.grad(), 1e-5);
      for (auto& item : block->named_parameters()) {
        SCOPED_TRACE(item.key());
        expect_close(item.value().grad().to(torch::kDouble),
                     reference->named_parameters()[item.key()].grad(), 1e-4);
      }
    }
  }
}

// A stack whose blocks pass their output's second handle on
// (forward_with_skip, as BertEncoder runs its layers) computes what the same
// blocks chained through forward compute, bit for bit: the output, the
// input's gradient and every parameter's, in training with dropout (the
// same seed, so the same masks); post-LN, where the handle goes from block
// to block, and pre-LN.
TEST(TransformerTest, BlocksPassingTheirSkipHandleOnGiveTheChainedBits) {
  for (const bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-LN" : "post-LN");
    torch::manual_seed(19);
    TransformerBlockOptions o = small_block(norm_first, "gelu");
    o.dropout_rate = 0.1;
    o.use_bias = true;
    std::vector<TransformerEncoderBlock> blocks{TransformerEncoderBlock(o),
                                                TransformerEncoderBlock(o)};
    const at::Tensor x0 = torch::randn({2, 5, o.hidden_size});
    const at::Tensor grad = torch::randn({2, 5, o.hidden_size});
    std::vector<at::Tensor> results;
    for (const bool handles : {true, false}) {
      for (auto& b : blocks) b->zero_grad();
      const at::Tensor x = x0.clone().requires_grad_();
      torch::manual_seed(5);
      at::Tensor y = x, skip = x;
      for (auto& b : blocks) {
        if (handles) {
          auto out = b->forward_with_skip(y, skip);
          y = out[0];
          skip = out[1];
        } else {
          y = b->forward(y);
        }
      }
      y.backward(grad);
      results.push_back(y.detach());
      results.push_back(x.grad());
      for (auto& b : blocks)
        for (auto& p : b->parameters()) results.push_back(p.grad().clone());
    }
    const size_t half = results.size() / 2;
    for (size_t i = 0; i < half; ++i)
      EXPECT_TRUE(torch::equal(results[i], results[half + i])) << "tensor " << i;
  }
}

TEST(TransformerTest, BlockGradientsMatchFiniteDifferences) {
  torch::manual_seed(6);
  auto options = small_block(true, "gelu");
  options.hidden_size = 4;
  options.intermediate_size = 6;
  TransformerEncoderBlock encoder(options);
  TransformerDecoderBlock decoder(options);
  encoder->to(torch::kDouble);
  decoder->to(torch::kDouble);
  at::Tensor x = torch::randn({1, 3, 4}, kF64), memory = torch::randn({1, 2, 4}, kF64);
  at::Tensor weights = torch::randn({1, 3, 4}, kF64);
  check_gradient([&](const at::Tensor& in) { return (encoder->forward(in) * weights).sum(); }, x);
  at::Tensor causal = causal_mask(3, torch::kDouble);
  check_gradient(
      [&](const at::Tensor& in) {
        return (decoder->forward(in, memory, causal, {}) * weights).sum();
      },
      x);
  check_gradient(
      [&](const at::Tensor& m) { return (decoder->forward(x, m, causal, {}) * weights).sum(); },
      memory);
}

TEST(TransformerTest, PaddedKeysDoNotAffectOutputs) {
  torch::manual_seed(7);
  TransformerEncoderBlock block(small_block(true));
  block->to(torch::kDouble);
  at::Tensor ids = torch::tensor({4, 2, 7, 0, 0}, torch::kLong).view({1, 5});
  at::Tensor mask = padding_mask(ids, 0, torch::kDouble);
  at::Tensor x = torch::randn({1, 5, 8}, kF64);
  at::Tensor changed = x.clone();
  changed.slice(1, 3).normal_();  // new inputs at the padded positions only
  expect_close(block->forward(changed, mask).slice(1, 0, 3), block->forward(x, mask).slice(1, 0, 3),
               1e-12);

  // Whole model: extra trailing padding on the source changes no logit.
  Seq2SeqTransformer model(small_model(true));
  model->to(torch::kDouble);
  model->eval();
  at::Tensor tgt = torch::tensor({0, 5, 6}, torch::kLong).view({1, 3});
  at::Tensor longer = torch::cat({ids, torch::zeros({1, 3}, torch::kLong)}, 1);
  expect_close(model->forward(longer, tgt), model->forward(ids, tgt), 1e-12);
}

TEST(TransformerTest, CausalMaskHidesFutureTokens) {
  torch::manual_seed(8);
  Seq2SeqTransformer model(small_model(true));
  model->to(torch::kDouble);
  model->eval();
  at::Tensor src = torch::tensor({3, 4, 5, 6}, torch::kLong).view({1, 4});
  at::Tensor tgt = torch::tensor({0, 7, 8, 9, 10}, torch::kLong).view({1, 5});
  at::Tensor changed = tgt.clone();
  changed[0][3] = 2;
  changed[0][4] = 11;
  at::Tensor a = model->forward(src, tgt), b = model->forward(src, changed);
  expect_close(b.slice(1, 0, 3), a.slice(1, 0, 3), 1e-12);
  EXPECT_GT((b.slice(1, 3) - a.slice(1, 3)).abs().max().item<double>(), 1e-6);
}

// Greedy-free check: feed the teacher-forcing inputs one step at a time.
void check_cached_decoding(bool norm_first, torch::Dtype dtype, double tol, int64_t max_steps) {
  torch::manual_seed(9);
  Seq2SeqTransformer model(small_model(norm_first));
  model->to(dtype);
  model->eval();
  torch::NoGradGuard no_grad;
  at::Tensor src = torch::tensor({{3, 4, 5, 6}, {7, 8, 0, 0}}, torch::kLong);
  at::Tensor tgt = torch::tensor({{0, 9, 10, 11, 12}, {0, 1, 2, 3, 0}}, torch::kLong);
  at::Tensor full = model->forward(src, tgt);
  Cache cache = model->init_cache(model->encode(src), 2, max_steps);
  for (int64_t step = 0; step < tgt.size(1); ++step) {
    at::Tensor logits = model->decode_step(tgt.select(1, step), step, cache);
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 13}));
    expect_close(logits, full.select(1, step), tol);
  }
  // The documented shapes: batch on dim 0 everywhere, self k/v preallocated
  // to max_steps, or grown to T when it is shorter.
  EXPECT_EQ(cache.size(), 1u + 4u * 2u);
  EXPECT_EQ(cache.at("steps/layer_1/self_k").sizes(),
            (std::vector<int64_t>{2, 2, std::max<int64_t>(max_steps, 5), 4}));
  EXPECT_EQ(cache.at("per_example/layer_0/cross_v").sizes(), (std::vector<int64_t>{2, 2, 4, 4}));
  EXPECT_EQ(cache.at("per_example/encoder_padding_mask").sizes(),
            (std::vector<int64_t>{2, 1, 1, 4}));
}

TEST(TransformerTest, CachedDecodingMatchesForwardPreLN) {
  ASSERT_NO_FATAL_FAILURE(check_cached_decoding(true, torch::kDouble, 1e-12, 0));
  ASSERT_NO_FATAL_FAILURE(check_cached_decoding(true, torch::kFloat, 1e-5, 0));
}

// Preallocated self-attention keys: written in place (the buffer is the same
// storage after every step), or grown when the steps outrun it.
TEST(TransformerTest, PreallocatedCacheDecodesAsTheGrowingOne) {
  ASSERT_NO_FATAL_FAILURE(check_cached_decoding(true, torch::kDouble, 1e-12, 5));
  ASSERT_NO_FATAL_FAILURE(check_cached_decoding(true, torch::kFloat, 1e-5, 8));
  ASSERT_NO_FATAL_FAILURE(check_cached_decoding(false, torch::kDouble, 1e-12, 3));
  torch::manual_seed(9);
  Seq2SeqTransformer model(small_model(true));
  model->eval();
  torch::NoGradGuard no_grad;
  Cache cache = model->init_cache(model->encode(torch::tensor({{3, 4, 5}}, torch::kLong)), 1, 4);
  const void* storage = cache.at("steps/layer_0/self_k").data_ptr();
  for (int64_t step = 0; step < 4; ++step)
    model->decode_step(torch::tensor({step + 2}, torch::kLong), step, cache);
  EXPECT_EQ(cache.at("steps/layer_0/self_k").data_ptr(), storage);
  EXPECT_THROW(model->decode_step(torch::tensor({2}, torch::kLong), 6, cache), c10::Error);
}

TEST(TransformerTest, CachedDecodingMatchesForwardPostLN) {
  ASSERT_NO_FATAL_FAILURE(check_cached_decoding(false, torch::kDouble, 1e-12, 0));
}

TEST(TransformerTest, CacheReorderedOnDimZeroFollowsItsRows) {
  // What beam search does: gather the cache rows mid-decoding.
  torch::manual_seed(10);
  Seq2SeqTransformer model(small_model(true));
  model->to(torch::kDouble);
  model->eval();
  torch::NoGradGuard no_grad;
  at::Tensor src = torch::tensor({{3, 4, 5}, {7, 8, 0}}, torch::kLong);
  at::Tensor tgt = torch::tensor({{0, 9, 10, 11}, {0, 1, 2, 3}}, torch::kLong);
  at::Tensor order = torch::tensor({1, 1}, torch::kLong);  // keep row 1 twice
  Cache cache = model->init_cache(model->encode(src), 2);
  model->decode_step(tgt.select(1, 0), 0, cache);
  model->decode_step(tgt.select(1, 1), 1, cache);
  for (auto& [name, tensor] : cache) tensor = tensor.index_select(0, order);
  at::Tensor reordered_tgt = tgt.index_select(0, order);
  at::Tensor full = model->forward(src.index_select(0, order), reordered_tgt);
  expect_close(model->decode_step(reordered_tgt.select(1, 2), 2, cache), full.select(1, 2), 1e-12);
}

// small_model(pre-LN) with the weights of `seed`, in `dtype`, evaluating.
Seq2SeqTransformer evaluated_model(uint64_t seed, torch::Dtype dtype) {
  torch::manual_seed(seed);
  Seq2SeqTransformer model(small_model(true));
  model->to(dtype);
  model->eval();
  return model;
}

// "step_rows" (garden/nlp/modeling/cache.h): decode_step reads and writes the
// self-attention keys through the index. Its own rows at first, so the
// steps decode as the forward pass does, in double (keys gathered) and in
// float (the kernel reads them in place).
TEST(TransformerTest, StepRowsDecodeAsTheForwardPass) {
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    Seq2SeqTransformer model = evaluated_model(9, dtype);
    torch::NoGradGuard no_grad;
    const at::Tensor src = torch::tensor({{3, 4, 5, 6}, {7, 8, 0, 0}}, torch::kLong);
    const at::Tensor tgt = torch::tensor({{0, 9, 10, 11, 12}, {0, 1, 2, 3, 0}}, torch::kLong);
    const at::Tensor full = model->forward(src, tgt);
    Cache cache = model->init_cache(model->encode(src), 2, 5, /*step_rows=*/true);
    ASSERT_TRUE(cache.at(kStepRowsEntry).equal(torch::tensor({0, 1}).view({2, 1}).expand({2, 5})));
    const void* storage = cache.at("steps/layer_0/self_k").data_ptr();
    for (int64_t step = 0; step < 5; ++step)
      expect_close(model->decode_step(tgt.select(1, step), step, cache), full.select(1, step),
                   dtype == torch::kDouble ? 1e-12 : 1e-5);
    EXPECT_EQ(cache.at("steps/layer_0/self_k").data_ptr(), storage);
    // No room for step 5: one line, not a write past the buffers.
    EXPECT_THROW(model->decode_step(tgt.select(1, 0), 5, cache), c10::Error);
  }
}

// What beam search does with the index: mid-decoding, row 0 takes over row
// 1's history by copying its indices, and writes its next keys into its own
// buffer row. The buffers are not touched, and both rows decode as the
// forward pass of row 1's prefix does.
TEST(TransformerTest, StepRowsReorderedFollowTheirHistories) {
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    Seq2SeqTransformer model = evaluated_model(10, dtype);
    torch::NoGradGuard no_grad;
    const at::Tensor src = torch::tensor({{3, 4, 5}, {3, 4, 5}}, torch::kLong);
    const at::Tensor tgt = torch::tensor({{0, 9, 10, 11}, {0, 1, 2, 3}}, torch::kLong);
    Cache cache = model->init_cache(model->encode(src), 2, 4, /*step_rows=*/true);
    model->decode_step(tgt.select(1, 0), 0, cache);
    model->decode_step(tgt.select(1, 1), 1, cache);
    at::Tensor& rows = cache.at(kStepRowsEntry);
    rows[0].copy_(rows[1]);  // row 0 continues row 1's history ...
    rows[0][2] = 0;          // ... writing step 2 into its own buffer row
    const at::Tensor k_before = cache.at("steps/layer_1/self_k").narrow(2, 0, 2).clone();
    const at::Tensor want = model->forward(src, tgt.select(0, 1).expand({2, 4})).select(1, 2);
    const at::Tensor got = model->decode_step(tgt.select(0, 1).select(0, 2).expand({2}), 2, cache);
    expect_close(got, want, dtype == torch::kDouble ? 1e-12 : 1e-5);
    EXPECT_TRUE(cache.at("steps/layer_1/self_k").narrow(2, 0, 2).equal(k_before));
  }
}

// A step's keys are written into the rows step_rows names by rows and heads
// into the model's contiguous buffers, by index_copy_ into any other (a
// strided view here): the same buffers and outputs either way.
TEST(TransformerTest, StepRowsWriteAnyBufferLayout) {
  torch::manual_seed(13);
  TransformerDecoderBlock block(small_block(true));
  block->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({3, 1, 8}), memory = torch::randn({3, 4, 8});
  auto [cross_k, cross_v] = block->cross_attention->project_kv(memory);
  const at::Tensor rows = torch::tensor({{4, 2, 2}, {0, 4, 1}, {1, 0, 0}}, torch::kLong);
  at::Tensor k = torch::randn({5, 2, 3, 4}), v = torch::randn({5, 2, 3, 4});
  // The same values in a [B0, capacity, H, Dh] layout, seen as [B0, H, capacity, Dh].
  at::Tensor strided_k = k.permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
  at::Tensor strided_v = v.permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
  ASSERT_FALSE(strided_k.is_contiguous());
  const at::Tensor got = block->forward_step(x, 2, k, v, cross_k, cross_v, {}, rows);
  const at::Tensor want =
      block->forward_step(x, 2, strided_k, strided_v, cross_k, cross_v, {}, rows);
  EXPECT_TRUE(got.equal(want));
  EXPECT_TRUE(k.equal(strided_k));
  EXPECT_TRUE(v.equal(strided_v));
  // Buffer rows 2, 1 and 0 (column 2 of rows) took this step's keys at
  // position 2 (pre-LN: of the normalized x).
  const at::Tensor step_k =
      std::get<1>(block->self_attention->project_qkv(layer_norm(x, block->self_attention_norm)))
          .select(2, 0);
  EXPECT_TRUE(k.select(2, 2).index_select(0, torch::tensor({2, 1, 0})).equal(step_k));
  const at::Tensor bad = torch::tensor({{4, 2, 2}, {0, 4, 1}, {1, 0, 5}}, torch::kLong);
  EXPECT_THROW(block->forward_step(x, 2, k, v, cross_k, cross_v, {}, bad), c10::Error);
}

// translate_ids decodes through the index on the CPU. Beam search and greedy
// give the same bits with and without it, examples leaving the batch at
// their own limits; with it, the keys' buffers are never moved or copied.
TEST(TransformerTest, SearchesThroughStepRowsGiveTheSameBits) {
  torch::manual_seed(12);
  Seq2SeqTransformerOptions options = small_model(true);
  options.vocab_size = 29;
  options.hidden_size = 32;
  options.num_heads = 2;
  Seq2SeqTransformer model(options);
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor src = torch::randint(3, 29, {6, 7}, torch::kLong);
  const at::Tensor limits = torch::tensor({9, 3, 12, 1, 7, 12}, torch::kLong);
  const int64_t capacity = 12;
  for (const int64_t beams : {1, 4}) {
    std::vector<BeamSearchResult> results;
    for (const bool indexed : {false, true}) {
      Cache cache = model->init_cache(model->encode(src), 6, capacity, indexed);
      // The search makes the beams' rows once, before step 0; from then on
      // the values' buffer is the same memory with every row, or not.
      const void* storage = nullptr;
      bool moved = false;
      const SymbolsToLogitsFn step_fn = [&](const at::Tensor& ids, int64_t step, Cache& c) {
        const at::Tensor& values = c.at("steps/layer_1/self_v");
        if (step == 0) storage = values.data_ptr();
        moved = moved || values.data_ptr() != storage || values.size(0) != 6 * beams;
        return model->decode_step(ids.select(1, step), step, c);
      };
      const at::Tensor initial = torch::zeros({6}, torch::kLong);
      results.push_back(
          beams == 1 ? greedy_decode(step_fn, initial, cache, limits, 2)
                     : sequence_beam_search(step_fn, initial, cache, 29, beams, 0.6, limits, 2));
      EXPECT_EQ(moved, !indexed) << beams << " beams";
    }
    EXPECT_TRUE(results[0].sequences.equal(results[1].sequences)) << beams << " beams";
    EXPECT_TRUE(results[0].scores.equal(results[1].scores)) << beams << " beams";
  }
}

TEST(TransformerTest, OutputProjectionIsTiedToTheEmbedding) {
  torch::manual_seed(11);
  Seq2SeqTransformer model(small_model(true));
  model->to(torch::kDouble);
  model->eval();
  // One [V, D] parameter: no separate output kernel.
  int64_t vocab_sized = 0;
  for (const auto& p : model->parameters())
    if (p.dim() == 2 && p.size(0) == 13) ++vocab_sized;
  EXPECT_EQ(vocab_sized, 1);
  at::Tensor src = torch::tensor({{3, 4, 5}}, torch::kLong);
  at::Tensor tgt = torch::tensor({{0, 9}}, torch::kLong);
  at::Tensor hidden = model->decode(tgt, model->encode(src));
  expect_close(model->forward(src, tgt), torch::matmul(hidden, model->embedding->weight.t()),
               1e-12);
  // Gradients from the logits reach the embedding through both paths.
  model->train();
  model->forward(src, tgt).sum().backward();
  EXPECT_TRUE(model->embedding->weight.grad().defined());
}

}  // namespace
