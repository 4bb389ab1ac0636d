// kernels::fused_attention (garden/kernels/attention.h): training's attention from the
// projections in one operation, against the definition composed from
// LibTorch's operations in double, with gradients by LibTorch's autograd of
// that definition; its dropout against kernels::dropout's mask for the same seed.
// kernels::head_attention (inference over split heads) and nlp::library_attention
// (LibTorch's fused attention, which MultiHeadAttention runs on a GPU)
// against the same definition.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "garden/core/precision.h"
#include "garden/kernels/attention.h"
#include "garden/kernels/dropout.h"
#include "garden/nlp/modeling/attention.h"
#include "kernels/kernel_builds.h"

namespace garden::kernels {
namespace {

using namespace garden::nlp;

// [B, L, n * D] -> n tensors [B, H, L, Dh].
std::vector<at::Tensor> heads_of(const at::Tensor& x, int64_t n, int64_t heads) {
  const int64_t d = x.size(2) / n;
  return x.view({x.size(0), x.size(1), n, heads, d / heads}).permute({2, 0, 3, 1, 4}).unbind(0);
}

// The definition, in the inputs' dtype: `keep` (undefined: no dropout) holds
// 0 or 1 / (1 - p) per [B, H, T, S] element.
at::Tensor reference(const at::Tensor& q_proj, const at::Tensor& kv_proj, int64_t heads,
                     const at::Tensor& mask, const at::Tensor& keep) {
  at::Tensor q, k, v;
  if (kv_proj.defined()) {
    q = heads_of(q_proj, 1, heads)[0];
    auto kv = heads_of(kv_proj, 2, heads);
    k = kv[0];
    v = kv[1];
  } else {
    auto qkv = heads_of(q_proj, 3, heads);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  }
  at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (mask.defined()) scores = scores + mask.to(scores.scalar_type());
  at::Tensor probs = at::softmax(scores, -1);
  if (keep.defined()) probs = probs * keep.to(probs.scalar_type());
  const at::Tensor context = at::matmul(probs, v);  // [B, H, T, Dh]
  return context.transpose(1, 2).reshape({q_proj.size(0), q_proj.size(1), -1});
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
         (1.0 + want.abs().max().item<double>());
}

// Forward and both gradients of the fused operation in float32 against the
// definition in double, for a random upstream gradient.
void expect_matches(int64_t batch, int64_t t_len, int64_t s_len, int64_t hidden, int64_t heads,
                    bool self, const at::Tensor& mask, double rate = 0.0) {
  SCOPED_TRACE(testing::Message() << "B " << batch << " T " << t_len << " S " << s_len << " D "
                                  << hidden << " H " << heads << (self ? " self" : " cross")
                                  << " dropout " << rate);
  const at::Tensor q_proj =
      torch::randn({batch, t_len, (self ? 3 : 1) * hidden}).mul_(1.5).requires_grad_();
  const at::Tensor kv_proj =
      self ? at::Tensor() : torch::randn({batch, s_len, 2 * hidden}).mul_(1.5).requires_grad_();
  ASSERT_TRUE(fused_attention_applies(q_proj, kv_proj, heads, mask));
  torch::manual_seed(7);
  const at::Tensor got = fused_attention(q_proj, kv_proj, heads, mask, rate, /*training=*/true);
  at::Tensor keep;
  if (rate > 0) {  // the mask kernels::dropout draws from the same generator state
    torch::manual_seed(7);
    keep = kernels::dropout(torch::ones({batch, heads, t_len, s_len}), rate, /*training=*/true);
    EXPECT_GT(keep.eq(0).sum().item<int64_t>(), 0);
  }
  const at::Tensor q64 = q_proj.detach().to(at::kDouble).requires_grad_();
  const at::Tensor kv64 = self ? at::Tensor() : kv_proj.detach().to(at::kDouble).requires_grad_();
  const at::Tensor want = reference(q64, kv64, heads, mask, keep);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LE(relative_error(got, want), 2e-5);

  const at::Tensor upstream = torch::randn(want.sizes(), torch::kDouble);
  got.backward(upstream.to(at::kFloat));
  want.backward(upstream);
  EXPECT_LE(relative_error(q_proj.grad(), q64.grad()), 5e-5) << "q_proj's gradient";
  if (!self) {
    EXPECT_LE(relative_error(kv_proj.grad(), kv64.grad()), 5e-5) << "kv_proj gradient";
  }
}

TEST(FusedAttention, SelfAttentionMatchesTheDefinition) {
  torch::manual_seed(0);
  // Head sizes on and off the 16-wide lanes and the 32-wide blocks;
  // lengths across the 6-row blocks; one head and several.
  expect_matches(2, 5, 5, 8, 2, true, {});
  expect_matches(3, 33, 33, 64, 4, true, {});
  expect_matches(2, 17, 17, 48, 3, true, {});
  expect_matches(1, 1, 1, 16, 1, true, {});
  expect_matches(2, 40, 40, 128, 2, true, {});
  // Padding [B, 1, 1, S] and causal [1, 1, T, T] masks, and both summed.
  const at::Tensor ids = torch::tensor({{5, 6, 7, 8, 9, 0, 0}, {1, 2, 3, 0, 0, 0, 0}});
  expect_matches(2, 7, 7, 32, 4, true, padding_mask(ids));
  expect_matches(2, 7, 7, 32, 4, true, causal_mask(7));
  expect_matches(2, 7, 7, 32, 4, true, padding_mask(ids) + causal_mask(7));
}

TEST(FusedAttention, CrossAttentionMatchesTheDefinition) {
  torch::manual_seed(1);
  const at::Tensor ids = torch::tensor({{5, 6, 7, 8, 9, 10, 11, 12, 0, 0, 0, 0},
                                        {1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0},
                                        {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}});
  expect_matches(3, 9, 12, 32, 2, false, padding_mask(ids));
  expect_matches(2, 4, 37, 24, 3, false, {});
  // A mask varying over every dimension, heads included.
  expect_matches(2, 6, 10, 16, 2, false, torch::randn({2, 2, 6, 10}));
}

TEST(FusedAttention, DropoutIsNlpDropoutsMaskForTheSameSeed) {
  torch::manual_seed(2);
  expect_matches(2, 19, 19, 32, 2, true, causal_mask(19), 0.3);
  expect_matches(3, 9, 14, 64, 4, false, {}, 0.1);
}

TEST(FusedAttention, NoDropoutOutsideTraining) {
  torch::manual_seed(3);
  const at::Tensor q_proj = torch::randn({2, 6, 48});
  torch::manual_seed(5);
  const at::Tensor eval = fused_attention(q_proj, {}, 2, {}, 0.5, /*training=*/false);
  const at::Tensor after_eval = torch::rand({4});
  torch::manual_seed(5);
  const at::Tensor none = fused_attention(q_proj, {}, 2, {}, 0.0, /*training=*/true);
  EXPECT_TRUE(eval.equal(none));
  // Evaluation draws nothing from the generator.
  EXPECT_TRUE(after_eval.equal(torch::rand({4})));
}

TEST(FusedAttention, SameBitsForAnyThreadCount) {
  torch::manual_seed(4);
  const at::Tensor q_proj = torch::randn({4, 24, 3 * 64}).requires_grad_();
  const at::Tensor upstream = torch::randn({4, 24, 64});
  const int threads = at::get_num_threads();
  std::vector<at::Tensor> outputs, grads;
  for (int n : {1, 2}) {
    at::set_num_threads(n);
    torch::manual_seed(9);
    const at::Tensor out = fused_attention(q_proj, {}, 4, causal_mask(24), 0.2, true);
    out.backward(upstream);
    outputs.push_back(out.detach());
    grads.push_back(q_proj.grad().clone());
    q_proj.mutable_grad().reset();
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(outputs[0].equal(outputs[1]));
  EXPECT_TRUE(grads[0].equal(grads[1]));
}

TEST(FusedAttention, ANanStaysInItsRowAndHead) {
  torch::manual_seed(6);
  at::Tensor q_proj = torch::randn({2, 5, 3 * 16});
  q_proj[1][3][0] = std::numeric_limits<float>::quiet_NaN();  // head 0's query of row 3
  const at::Tensor out = fused_attention(q_proj, {}, 2, {}, 0.0, false);
  const at::Tensor nan = out.isnan();
  EXPECT_TRUE(nan[1][3].narrow(0, 0, 8).all().item<bool>());
  EXPECT_EQ(nan.sum().item<int64_t>(), 8);
  // An infinite score makes its row NaN, in that head only (as LibTorch's
  // softmax does): head 1's key 2 is +inf where every query of head 1 is 1.
  at::Tensor inf_key = torch::randn({1, 4, 3 * 16});
  inf_key.select(2, 8).fill_(1.0);
  inf_key[0][2][16 + 8] = std::numeric_limits<float>::infinity();
  const at::Tensor poisoned = fused_attention(inf_key, {}, 2, {}, 0.0, false);
  EXPECT_TRUE(poisoned[0].narrow(1, 8, 8).isnan().all().item<bool>());
  EXPECT_FALSE(poisoned[0].narrow(1, 0, 8).isnan().any().item<bool>());
}

TEST(FusedAttention, AppliesOnlyWhereItsKernelRuns) {
  const at::Tensor q = torch::randn({2, 5, 48});
  EXPECT_TRUE(fused_attention_applies(q, {}, 2, {}));
  EXPECT_FALSE(fused_attention_applies(q.to(at::kDouble), {}, 2, {}));
  EXPECT_FALSE(fused_attention_applies(torch::randn({2, 5, 47}), {}, 2, {}));       // not 3D
  EXPECT_FALSE(fused_attention_applies(q, {}, 5, {}));                              // D % heads
  EXPECT_FALSE(fused_attention_applies(torch::randn({1, 257, 48}), {}, 2, {}));     // T > 256
  EXPECT_FALSE(fused_attention_applies(torch::randn({1, 4, 3 * 514}), {}, 2, {}));  // Dh > 256
  EXPECT_FALSE(fused_attention_applies(q, torch::randn({2, 7, 31}), 2, {}));        // kv not 2D
  EXPECT_FALSE(fused_attention_applies(q, {}, 2, torch::zeros({2, 1, 1, 4})));      // S is 5
  EXPECT_FALSE(fused_attention_applies(q, {}, 2, torch::zeros({2, 1, 1, 5}, torch::kDouble)));
  EXPECT_TRUE(fused_attention_applies(q, {}, 2, torch::zeros({5})));
  EXPECT_THROW(fused_attention(q.to(at::kDouble), {}, 2, {}, 0.0, true), std::invalid_argument);
  EXPECT_THROW(fused_attention(q, {}, 2, {}, 1.0, true), std::invalid_argument);
}

// A 64-wide, 4-head attention layer's options.
AttentionOptions layer_options(bool cross) {
  AttentionOptions options;
  options.hidden_size = 64;
  options.num_heads = 4;
  options.cross_attention = cross;
  return options;
}

// The module takes the fused path in float32 and the unfused one in double:
// the two agree, forward and gradients, with the module's own masks.
TEST(FusedAttention, ModuleAgreesWithItsUnfusedPath) {
  for (bool cross : {false, true}) {
    const AttentionOptions options = layer_options(cross);
    torch::manual_seed(10);
    MultiHeadAttention fused(options);
    torch::manual_seed(10);  // the same initial weights
    MultiHeadAttention unfused(options);
    unfused->to(at::kDouble);
    const at::Tensor x = torch::randn({3, 11, 64}).requires_grad_();
    const at::Tensor memory = torch::randn({3, 13, 64});
    const at::Tensor mask = cross ? padding_mask(torch::randint(0, 3, {3, 13})) : causal_mask(11);
    const at::Tensor x64 = x.detach().to(at::kDouble).requires_grad_();
    const at::Tensor got = fused->forward(x, cross ? memory : at::Tensor(), mask);
    const at::Tensor want =
        unfused->forward(x64, cross ? memory.to(at::kDouble) : at::Tensor(), mask);
    EXPECT_LE(relative_error(got, want), 2e-5) << (cross ? "cross" : "self");
    got.sum().backward();
    want.sum().backward();
    EXPECT_LE(relative_error(x.grad(), x64.grad()), 5e-5);
    const auto params = fused->named_parameters();
    const auto params64 = unfused->named_parameters();
    for (const auto& p : params)
      EXPECT_LE(relative_error(p.value().grad(), params64[p.key()].grad()), 5e-5) << p.key();
  }
}

// Under CPU autocast the projections are bfloat16; the module widens them
// for the fused float32 kernel (the same numbers through fused_attention)
// and stays within bfloat16's rounding of the float64 definition.
TEST(FusedAttention, ModuleUnderCpuAutocastWidensItsBfloat16Projections) {
  for (bool cross : {false, true}) {
    const AttentionOptions options = layer_options(cross);
    torch::manual_seed(11);
    MultiHeadAttention module(options);
    torch::manual_seed(11);
    MultiHeadAttention unfused(options);
    unfused->to(at::kDouble);
    const at::Tensor x = torch::randn({2, 9, 64});
    const at::Tensor memory = torch::randn({2, 7, 64});
    const at::Tensor mask = cross ? padding_mask(torch::randint(0, 3, {2, 7})) : causal_mask(9);
    at::Tensor got, want;
    {
      AutocastGuard autocast(std::string("bfloat16"), torch::kCPU);
      got = module->forward(x, cross ? memory : at::Tensor(), mask);
      const at::Tensor context =
          cross ? fused_attention(module->query->forward(x).to(at::kFloat),
                                  module->kv->forward(memory).to(at::kFloat), options.num_heads,
                                  mask, 0.0, /*training=*/true)
                : fused_attention(module->qkv->forward(x).to(at::kFloat), {}, options.num_heads,
                                  mask, 0.0, /*training=*/true);
      want = module->output->forward(context);
    }
    EXPECT_TRUE(torch::equal(got, want)) << (cross ? "cross" : "self");
    const at::Tensor exact =
        unfused->forward(x.to(at::kDouble), cross ? memory.to(at::kDouble) : at::Tensor(), mask);
    EXPECT_LE(relative_error(got, exact), 0.05) << (cross ? "cross" : "self");
  }
}

// head_attention: inference over heads already split, as a decoding step
// reads its queries and its KV cache (strided views), against the
// definition in double.
at::Tensor head_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask) {
  const at::Tensor q64 = q.to(at::kDouble), k64 = k.to(at::kDouble), v64 = v.to(at::kDouble);
  at::Tensor scores = at::matmul(q64, k64.transpose(-2, -1)) / std::sqrt(double(q.size(3)));
  if (mask.defined()) scores = scores + mask.to(at::kDouble);
  const at::Tensor context = at::matmul(at::softmax(scores, -1), v64);
  return context.transpose(1, 2).reshape({q.size(0), q.size(2), -1});
}

TEST(HeadAttention, StridedQueriesAndCacheMatchTheDefinition) {
  torch::manual_seed(11);
  for (const int64_t heads : {1, 4}) {
    for (const int64_t head_size : {8, 33, 64}) {
      SCOPED_TRACE(testing::Message() << "H " << heads << " Dh " << head_size);
      const int64_t batch = 3, hidden = heads * head_size, room = 40;
      // A self-attention step: q from the fused projection [B, 1, 3D], keys
      // and values the first `steps` positions of [B, H, room, Dh] caches.
      const at::Tensor qkv = torch::randn({batch, 1, 3 * hidden}).mul_(2.0);
      const at::Tensor q = heads_of(qkv, 3, heads)[0];
      const at::Tensor k_cache = torch::randn({batch, heads, room, head_size});
      const at::Tensor v_cache = torch::randn({batch, heads, room, head_size});
      for (const int64_t steps : {1, 7, 16, 17, 20, 33}) {
        const at::Tensor k = k_cache.narrow(2, 0, steps), v = v_cache.narrow(2, 0, steps);
        ASSERT_TRUE(head_attention_applies(q, k, v, {}));
        EXPECT_LE(relative_error(head_attention(q, k, v, {}), head_reference(q, k, v, {})), 2e-6)
            << steps << " steps";
      }
      // Cross-attention: each example's 4 beams query its encoder keys and
      // values [B, H, S, Dh] under a padding mask [B, 1, 1, S].
      const at::Tensor beams_q = heads_of(torch::randn({batch, 4, hidden}), 1, heads)[0];
      const at::Tensor kv = torch::randn({batch, 9, 2 * hidden});
      const auto split = heads_of(kv, 2, heads);
      const at::Tensor ck = split[0].contiguous(), cv = split[1].contiguous();
      const at::Tensor ids = torch::tensor({{5, 6, 7, 8, 9, 10, 11, 12, 13},
                                            {1, 2, 3, 0, 0, 0, 0, 0, 0},
                                            {1, 2, 3, 4, 5, 6, 7, 8, 0}});
      const at::Tensor mask = padding_mask(ids);
      EXPECT_LE(relative_error(head_attention(beams_q, ck, cv, mask),
                               head_reference(beams_q, ck, cv, mask)),
                2e-6);
      // The projection's own views (k and v side by side in one tensor).
      EXPECT_LE(relative_error(head_attention(beams_q, split[0], split[1], mask),
                               head_reference(beams_q, split[0], split[1], mask)),
                2e-6);
      // More queries than a decoding step's (the register-blocked products).
      const at::Tensor many_q = heads_of(torch::randn({batch, 12, hidden}), 1, heads)[0];
      EXPECT_LE(relative_error(head_attention(many_q, ck, cv, mask),
                               head_reference(many_q, ck, cv, mask)),
                2e-6);
      // A mask varying over every dimension.
      const at::Tensor full = torch::randn({batch, heads, 4, 9});
      EXPECT_LE(relative_error(head_attention(beams_q, ck, cv, full),
                               head_reference(beams_q, ck, cv, full)),
                2e-6);
    }
  }
}

// head_attention takes an example's heads together and runs their queries'
// softmaxes four at a time; fused_attention's forward (evaluation, a few
// queries) takes one head and one query at a time. Each query's numbers
// must be the same: whole groups of four, a group's remainder (3 heads x 2
// queries is one group and two alone), masked and not.
TEST(HeadAttention, QueriesInGroupsGiveTheBitsOfOneQueryAtATime) {
  torch::manual_seed(16);
  torch::NoGradGuard no_grad;
  for (const int64_t heads : {1, 2, 3, 4, 5}) {
    for (const int64_t queries : {1, 2, 3}) {
      for (const int64_t length : {5, 16, 21}) {
        SCOPED_TRACE(testing::Message() << "H " << heads << " T " << queries << " S " << length);
        const int64_t batch = 3, hidden = heads * 32;
        const at::Tensor q_proj = torch::randn({batch, queries, hidden}).mul_(2.0);
        const at::Tensor kv_proj = torch::randn({batch, length, 2 * hidden});
        const at::Tensor mask = padding_mask(torch::randint(0, 3, {batch, length}));
        const at::Tensor q = heads_of(q_proj, 1, heads)[0];
        const auto kv = heads_of(kv_proj, 2, heads);
        for (const bool masked : {false, true}) {
          const at::Tensor m = masked ? mask : at::Tensor();
          const at::Tensor one_at_a_time =
              fused_attention(q_proj, kv_proj, heads, m, 0.0, /*training=*/false);
          EXPECT_TRUE(head_attention(q, kv[0], kv[1], m).equal(one_at_a_time)) << masked;
        }
      }
    }
  }
}

TEST(HeadAttention, SameBitsForAnyThreadCountAndANanStaysInItsHead) {
  torch::manual_seed(12);
  const at::Tensor q = torch::randn({6, 4, 2, 32});
  const at::Tensor k = torch::randn({6, 4, 30, 32}), v = torch::randn({6, 4, 30, 32});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = head_attention(q, k, v, {});
  at::set_num_threads(2);
  const at::Tensor two = head_attention(q, k, v, {});
  at::set_num_threads(threads);
  EXPECT_TRUE(one.equal(two));
  at::Tensor poisoned = q.clone();
  poisoned[2][1][0][5] = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor nan = head_attention(poisoned, k, v, {}).isnan();
  EXPECT_TRUE(nan[2][0].narrow(0, 32, 32).all().item<bool>());
  EXPECT_EQ(nan.sum().item<int64_t>(), 32);
}

TEST(HeadAttention, AppliesOnlyWhereItsKernelRuns) {
  const at::Tensor q = torch::randn({2, 2, 1, 16});
  const at::Tensor k = torch::randn({2, 2, 5, 16}), v = torch::randn({2, 2, 5, 16});
  EXPECT_TRUE(head_attention_applies(q, k, v, {}));
  EXPECT_FALSE(head_attention_applies(q.clone().requires_grad_(), k, v, {}));  // needs autograd
  EXPECT_FALSE(head_attention_applies(q.to(at::kDouble), k, v, {}));
  EXPECT_FALSE(head_attention_applies(q, k, v.narrow(2, 0, 4), {}));  // k and v differ
  EXPECT_FALSE(head_attention_applies(q, k, k.transpose(2, 3).contiguous().transpose(2, 3), {}));
  EXPECT_FALSE(head_attention_applies(q.transpose(2, 3), k, v, {}));  // Dh strided
  EXPECT_FALSE(
      head_attention_applies(q, torch::randn({2, 2, 257, 16}), torch::randn({2, 2, 257, 16}), {}));
  EXPECT_FALSE(head_attention_applies(q, k, v, torch::zeros({2, 1, 1, 4})));  // S is 5
  EXPECT_FALSE(head_attention_applies(q, k, v, torch::zeros({2, 1, 1, 5}, torch::kDouble)));
  EXPECT_TRUE(head_attention_applies(q, k, v, torch::zeros({2, 1, 1, 5})));
  EXPECT_THROW(head_attention(q.to(at::kDouble), k, v, {}), std::invalid_argument);
}

// Beam search's cache read through an index (cache.h's "step_rows"): key
// and value s of query row b are at position s of buffer row rows[b][s].
// gather_steps is checked against a loop over the index; the kernel reading
// in place against itself on the gathered copy (to the bit) and against the
// definition.
TEST(HeadAttention, RowsReadTheCacheThroughTheirIndex) {
  torch::manual_seed(14);
  for (const int64_t heads : {1, 4}) {
    for (const int64_t head_size : {8, 33, 64}) {
      SCOPED_TRACE(testing::Message() << "H " << heads << " Dh " << head_size);
      const int64_t batch = 5, buffer_rows = 8, room = 20, hidden = heads * head_size;
      const at::Tensor qkv = torch::randn({batch, 2, 3 * hidden}).mul_(2.0);
      const at::Tensor q = heads_of(qkv, 3, heads)[0];  // two queries, strided
      const at::Tensor k_cache = torch::randn({buffer_rows, heads, room, head_size});
      const at::Tensor v_cache = torch::randn({buffer_rows, heads, room, head_size});
      const at::Tensor rows = torch::randint(0, buffer_rows, {batch, room}, torch::kLong);
      for (const int64_t steps : {1, 7, 20}) {
        const at::Tensor k = k_cache.narrow(2, 0, steps), v = v_cache.narrow(2, 0, steps);
        const at::Tensor gathered_k = gather_steps(k_cache, rows, steps);
        const at::Tensor gathered_v = gather_steps(v_cache, rows, steps);
        ASSERT_EQ(gathered_k.sizes(), (std::vector<int64_t>{batch, heads, steps, head_size}));
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t s = 0; s < steps; ++s) {
            const int64_t row = rows[b][s].item<int64_t>();
            ASSERT_TRUE(gathered_k[b].select(1, s).equal(k_cache[row].select(1, s)));
            ASSERT_TRUE(gathered_v[b].select(1, s).equal(v_cache[row].select(1, s)));
          }
        ASSERT_TRUE(head_attention_applies(q, k, v, {}, rows));
        const at::Tensor got = head_attention(q, k, v, {}, rows);
        EXPECT_TRUE(got.equal(head_attention(q, gathered_k, gathered_v, {}))) << steps;
        EXPECT_LE(relative_error(got, head_reference(q, gathered_k, gathered_v, {})), 2e-6)
            << steps;
        const at::Tensor mask = torch::randn({batch, heads, 2, steps});
        EXPECT_TRUE(head_attention(q, k, v, mask, rows)
                        .equal(head_attention(q, gathered_k, gathered_v, mask)))
            << steps;
      }
    }
  }
}

// The AVX-512 build scores sixteen keys at a time and the AVX2 build four:
// the same sums in the same order, so the same bits. The portable build has
// no fused multiply-add and agrees within rounding. Steps on both sides of
// each 16-key block's edge; head sizes with and without a scalar tail.
TEST(HeadAttention, EveryBuildOfItsLoopsAgrees) {
  torch::manual_seed(15);
  std::vector<KernelBuild> builds;
  for (const KernelBuild build : {KernelBuild::kAvx512, KernelBuild::kAvx2, KernelBuild::kPortable})
    if (kernel_build_runs(build)) builds.push_back(build);
  ASSERT_TRUE(kernel_build_runs(KernelBuild::kPortable));
  EXPECT_THROW(
      head_attention_with_build(KernelBuild::kPortable, torch::randn({1, 1, 1, 4}),
                                torch::randn({1, 1, 2, 5}), torch::randn({1, 1, 2, 5}), {}, {}),
      std::invalid_argument);
  for (const int64_t head_size : {8, 32, 33, 64}) {
    const int64_t batch = 6, heads = 2, room = 40;
    const at::Tensor k_cache = torch::randn({batch, heads, room, head_size}).mul_(2.0);
    const at::Tensor v_cache = torch::randn({batch, heads, room, head_size});
    const at::Tensor rows = torch::randint(0, batch, {batch, room}, torch::kLong);
    const at::Tensor one_query = torch::randn({batch, heads, 1, head_size});
    const at::Tensor four_queries = torch::randn({batch, heads, 4, head_size});
    for (const int64_t steps : {1, 3, 15, 16, 17, 31, 32, 33, 40}) {
      SCOPED_TRACE(testing::Message() << "Dh " << head_size << " steps " << steps);
      const at::Tensor k = k_cache.narrow(2, 0, steps), v = v_cache.narrow(2, 0, steps);
      const at::Tensor mask = torch::randn({batch, 1, 1, steps});
      const at::Tensor gathered_k = gather_steps(k_cache, rows, steps);
      const at::Tensor gathered_v = gather_steps(v_cache, rows, steps);
      const at::Tensor self_want = head_reference(one_query, gathered_k, gathered_v, {});
      const at::Tensor cross_want = head_reference(four_queries, k, v, mask);
      at::Tensor self_first, cross_first;
      for (const KernelBuild build : builds) {
        const at::Tensor self = head_attention_with_build(build, one_query, k, v, {}, rows);
        const at::Tensor cross = head_attention_with_build(build, four_queries, k, v, mask, {});
        EXPECT_LE(relative_error(self, self_want), 2e-6) << static_cast<int>(build);
        EXPECT_LE(relative_error(cross, cross_want), 2e-6) << static_cast<int>(build);
        if (build == KernelBuild::kPortable) continue;
        if (!self_first.defined()) {
          self_first = self;
          cross_first = cross;
          EXPECT_TRUE(self.equal(head_attention(one_query, k, v, {}, rows)));
          continue;
        }
        EXPECT_TRUE(self.equal(self_first)) << static_cast<int>(build);
        EXPECT_TRUE(cross.equal(cross_first)) << static_cast<int>(build);
      }
    }
  }
}

TEST(HeadAttention, RowsOfTheWrongShapeOrOutsideTheCacheAreRefused) {
  const at::Tensor q = torch::randn({2, 2, 1, 16});
  const at::Tensor k = torch::randn({3, 2, 5, 16}), v = torch::randn({3, 2, 5, 16});
  const at::Tensor rows = torch::tensor({{0, 1, 2, 0, 1, 2}, {2, 2, 2, 2, 2, 2}});
  EXPECT_TRUE(head_attention_applies(q, k, v, {}, rows));  // more columns than steps
  EXPECT_FALSE(head_attention_applies(q, k, v, {}, rows.to(torch::kInt)));
  EXPECT_FALSE(head_attention_applies(q, k, v, {}, rows.narrow(1, 0, 4)));  // S is 5
  EXPECT_FALSE(head_attention_applies(q, k, v, {}, torch::zeros({3, 5}, torch::kLong)));
  EXPECT_FALSE(head_attention_applies(q, k, v, {}, rows.t().contiguous().t()));       // S strided
  EXPECT_FALSE(head_attention_applies(torch::randn({2, 2, 9, 16}), k, v, {}, rows));  // T > 8
  EXPECT_FALSE(head_attention_applies(q.to(at::kDouble), k, v, {}, rows));
  for (const int64_t wrong : {3, -1}) {
    at::Tensor bad = rows.clone();
    bad[1][3] = wrong;
    try {
      head_attention(q, k, v, {}, bad);
      ADD_FAILURE() << "row " << wrong << " was read";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("rows[1][3] is " + std::to_string(wrong)),
                std::string::npos)
          << e.what();
    }
    EXPECT_ANY_THROW(gather_steps(k, bad, 5));
  }
  EXPECT_ANY_THROW(gather_steps(k, rows, 6));  // more steps than k holds
}

// The module reads through the index with the kernel in float32 and by
// gathering elsewhere (here double): either way as on the gathered cache.
TEST(HeadAttention, AttendThroughRowsAgreesWithTheGatheredCacheInEveryDtype) {
  torch::manual_seed(15);
  MultiHeadAttention attention(layer_options(/*cross=*/false));
  attention->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({5, 1, 64});
  const at::Tensor k_cache = torch::randn({7, 4, 12, 16}), v_cache = torch::randn({7, 4, 12, 16});
  const at::Tensor rows = torch::randint(0, 7, {5, 12}, torch::kLong);
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    attention->to(dtype);
    const at::Tensor q = std::get<0>(attention->project_qkv(x.to(dtype)));
    const at::Tensor k = k_cache.to(dtype).narrow(2, 0, 9), v = v_cache.to(dtype).narrow(2, 0, 9);
    EXPECT_EQ(head_attention_applies(q, k, v, {}, rows), dtype == at::kFloat);
    EXPECT_TRUE(
        attention->attend(q, k, v, {}, rows)
            .equal(attention->attend(q, gather_steps(k, rows, 9), gather_steps(v, rows, 9), {})))
        << dtype;
  }
}

// The module in evaluation mode without gradients takes head_attention for
// its split heads (attend, as a decoding step calls it), and agrees with
// the same module's attend where a gradient is needed (the unfused path).
TEST(HeadAttention, AttendWithoutAGradientAgreesWithTheUnfusedPath) {
  torch::manual_seed(13);
  MultiHeadAttention attention(layer_options(/*cross=*/true));
  attention->eval();
  const at::Tensor x = torch::randn({3, 4, 64});
  const at::Tensor memory = torch::randn({3, 13, 64});
  const at::Tensor mask = padding_mask(torch::randint(0, 3, {3, 13}));
  at::Tensor fused;
  {
    torch::NoGradGuard no_grad;
    const at::Tensor q = attention->project_q(x);
    auto [k, v] = attention->project_kv(memory);
    ASSERT_TRUE(head_attention_applies(q, k, v, mask));
    fused = attention->attend(q, k, v, mask);
  }
  const at::Tensor q = attention->project_q(x);
  auto [k, v] = attention->project_kv(memory);
  ASSERT_TRUE(q.requires_grad());
  const at::Tensor unfused = attention->attend(q, k, v, mask);
  EXPECT_LE(relative_error(fused, unfused.detach()), 2e-6);
}

// LibTorch's fused attention, which attend takes on a GPU, run here on the
// CPU (LibTorch 2.0 and later): the same definition as Garden's kernels, its
// masks and its gradients.
TEST(LibraryAttention, MatchesTheDefinitionWithGradients) {
  if (!library_attention_available())
    GTEST_SKIP() << "LibTorch " TORCH_VERSION " has no at::scaled_dot_product_attention";
  torch::manual_seed(14);
  const int64_t batch = 3, heads = 4, head_size = 16;
  const at::Tensor ids = torch::tensor(
      {{5, 6, 7, 8, 9, 10, 11, 12, 13}, {1, 2, 3, 0, 0, 0, 0, 0, 0}, {1, 2, 3, 4, 5, 6, 7, 8, 0}});
  struct Case {
    const char* name;
    int64_t t, s;
    at::Tensor mask;
  };
  const std::vector<Case> cases = {{"no mask", 5, 9, {}},
                                   {"padding", 5, 9, padding_mask(ids)},
                                   {"causal", 6, 6, causal_mask(6)},
                                   {"per head", 5, 9, torch::randn({batch, heads, 5, 9})}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const at::Tensor q = torch::randn({batch, heads, c.t, head_size}).requires_grad_();
    const at::Tensor k = torch::randn({batch, heads, c.s, head_size}).requires_grad_();
    const at::Tensor v = torch::randn({batch, heads, c.s, head_size}).requires_grad_();
    const at::Tensor got = library_attention(q, k, v, c.mask, 0.0);
    const at::Tensor want = head_reference(q, k, v, c.mask);  // double, from the same leaves
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LE(relative_error(got, want), 2e-6);
    const at::Tensor upstream = torch::randn(got.sizes());
    const auto got_grads = torch::autograd::grad({got}, {q, k, v}, {upstream});
    const auto want_grads = torch::autograd::grad({want}, {q, k, v}, {upstream.to(at::kDouble)});
    for (int i = 0; i < 3; ++i) EXPECT_LE(relative_error(got_grads[i], want_grads[i]), 1e-5) << i;
  }
}

// Dropout on the probabilities takes effect when asked for; in float16 the
// mask is clamped to a finite value, so a row whose every key is masked is
// finite, not NaN, and the others still mask their padding.
TEST(LibraryAttention, DropoutAndAFullyMaskedRowInFloat16) {
  if (!library_attention_available())
    GTEST_SKIP() << "LibTorch " TORCH_VERSION " has no at::scaled_dot_product_attention";
  torch::manual_seed(15);
  const at::Tensor q = torch::randn({2, 2, 4, 8});
  const at::Tensor k = torch::randn({2, 2, 6, 8}), v = torch::randn({2, 2, 6, 8});
  const at::Tensor plain = library_attention(q, k, v, {}, 0.0);
  EXPECT_TRUE(plain.equal(library_attention(q, k, v, {}, 0.0)));
  EXPECT_FALSE(plain.allclose(library_attention(q, k, v, {}, 0.5)));
  const at::Tensor ids = torch::tensor({{1, 2, 3, 0, 0, 0}, {0, 0, 0, 0, 0, 0}});
  const at::Tensor half =
      library_attention(q.to(at::kHalf), k.to(at::kHalf), v.to(at::kHalf), padding_mask(ids), 0.0);
  EXPECT_TRUE(half.isfinite().all().item<bool>());  // example 1 masks every key
  EXPECT_LE(relative_error(half[0], head_reference(q, k, v, padding_mask(ids))[0]), 5e-3);
}

}  // namespace
}  // namespace garden::kernels
