// The hand-written Transformer layers against plain reference computations
// (explicit per-head loops, step-by-step blocks) in double precision, finite
// difference gradients and masks.
#include "garden/nlp/modeling/transformer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "nlp/transformer_reference.h"

namespace {

using namespace garden::nlp;
using namespace transformer_reference;  // NOLINT

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

}  // namespace
