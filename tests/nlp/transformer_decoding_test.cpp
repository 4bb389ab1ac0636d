// The Transformer decoding one step at a time: cached keys and values (growing,
// preallocated, reordered), step rows, the searches through them, and the
// output projection tied to the embedding, against the full forward pass.
#include "garden/nlp/modeling/transformer.h"

#include "garden/nlp/modeling/beam_search.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>

#include "nlp/transformer_reference.h"

namespace {

using namespace garden::nlp;
using namespace transformer_reference;  // NOLINT

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
