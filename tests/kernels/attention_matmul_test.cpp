// kernels::attention_matmul (garden/kernels/attention.h): alpha * a @ b per head, on
// the views attention passes it, against at::matmul in double.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <utility>
#include <vector>

#include "garden/kernels/attention.h"
#include "kernels/simd/small_gemm.h"

namespace garden::kernels {
namespace {

void expect_product(const at::Tensor& a, const at::Tensor& b, double alpha, bool heads_last) {
  const at::Tensor got = attention_matmul(a, b, alpha, heads_last);
  const at::Tensor want = at::matmul(a.to(at::kDouble), b.to(at::kDouble)) * alpha;
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.scalar_type(), a.scalar_type());
  const double tolerance = a.scalar_type() == at::kFloat ? 2e-5 : 1e-12;
  EXPECT_LE((got.to(at::kDouble) - want).abs().max().item<double>(),
            tolerance * (1.0 + want.abs().max().item<double>()))
      << "a " << a.sizes() << " b " << b.sizes();
  if (heads_last) {  // [B, H, m, n] viewing [B, m, H, n] storage
    EXPECT_EQ(got.stride(3), 1);
    EXPECT_EQ(got.stride(1), got.size(3));
  }
}

// A decoding step: `queries` rows per head (1 in self-attention, the beams
// in cross-attention) against a cache of `room` steps of which the first
// `steps` are filled (the narrowed view the decoder passes).
void expect_decoding_step(at::ScalarType type, int64_t batch, int64_t heads, int64_t head_size,
                          int64_t steps, int64_t room, int64_t queries = 1) {
  const auto options = at::TensorOptions().dtype(type);
  // q as split_heads makes it: [B, m, H * Dh] viewed as [B, H, m, Dh].
  const at::Tensor q =
      torch::randn({batch, queries, heads, head_size}, options).permute({0, 2, 1, 3});
  const at::Tensor keys =
      torch::randn({batch, heads, room, head_size}, options).narrow(2, 0, steps);
  const at::Tensor values =
      torch::randn({batch, heads, room, head_size}, options).narrow(2, 0, steps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_size));
  expect_product(q, keys.transpose(-2, -1), scale, /*heads_last=*/false);
  const at::Tensor probs =
      torch::softmax(torch::randn({batch, heads, queries, steps}, options), -1);
  expect_product(probs, values, 1.0, /*heads_last=*/true);
}

TEST(AttentionMatmulTest, DecodingQueriesAgainstTheCacheMatchMatmul) {
  torch::manual_seed(3);
  for (const auto type : {at::kFloat, at::kDouble}) {
    // Head sizes on and off the kernel's 16-wide lanes; one step, and more
    // steps than the head size; an odd batch.
    expect_decoding_step(type, 12, 4, 64, 1, 40);
    expect_decoding_step(type, 12, 4, 64, 37, 40);
    expect_decoding_step(type, 5, 3, 20, 70, 70);
    expect_decoding_step(type, 1, 1, 7, 3, 9);
    expect_decoding_step(type, 9, 8, 1, 5, 5);
    // An example's beams against its shared encoder keys: 4 and 8 rows (the
    // written-out products), 9 (BLAS).
    expect_decoding_step(type, 6, 4, 64, 23, 23, 4);
    expect_decoding_step(type, 3, 2, 20, 17, 30, 8);
    expect_decoding_step(type, 3, 2, 20, 17, 30, 9);
  }
}

TEST(AttentionMatmulTest, ManyQueryRowsAndOtherLayoutsMatchMatmul) {
  torch::manual_seed(4);
  for (const auto type : {at::kFloat, at::kDouble}) {
    const auto options = at::TensorOptions().dtype(type);
    const at::Tensor a = torch::randn({3, 2, 5, 16}, options);
    const at::Tensor b = torch::randn({3, 2, 16, 11}, options);
    expect_product(a, b, 0.25, false);
    expect_product(a, b, 1.0, true);
    expect_product(a, torch::randn({3, 2, 11, 16}, options).transpose(-2, -1), 0.5, false);
    // A single row whose a is not contiguous along k, and a b with neither
    // stride 1 (copied first).
    const at::Tensor strided_a = torch::randn({3, 2, 1, 32}, options).slice(3, 0, 32, 2);
    expect_product(strided_a, b, 1.0, false);
    expect_product(torch::randn({3, 2, 1, 8}, options),
                   torch::randn({3, 2, 16, 22}, options).slice(2, 0, 16, 2).slice(3, 0, 22, 2), 1.0,
                   true);
  }
}

// Training's heads in float32 (more than 8 query rows): Garden's
// register-blocked loops for n and k up to 256, in blocks of 6 rows and 32
// (AVX-512), 16 (AVX2) or 8 columns. Row counts, column counts and depths on
// and off those blocks, b read in place (rows contiguous, n a multiple of 32)
// or repacked (transposed, strided or a short last block), a transposed or
// strided along k, and sizes past 256 (OpenBLAS).
TEST(AttentionMatmulTest, TrainingHeadsInFloatMatchMatmulOnEveryBlockEdge) {
  torch::manual_seed(6);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  for (const int64_t m : {9, 12, 13, 17, 32}) {
    for (const int64_t k : {1, 7, 64, 65}) {
      for (const int64_t n : {1, 15, 16, 17, 32, 33, 64, 70}) {
        const at::Tensor a = torch::randn({2, 3, m, k}, options);
        expect_product(a, torch::randn({2, 3, k, n}, options), 0.125, false);
        expect_product(a, torch::randn({2, 3, k, n}, options), 1.0, true);
        expect_product(torch::randn({2, 3, k, m}, options).transpose(-2, -1),
                       torch::randn({2, 3, n, k}, options).transpose(-2, -1), 0.5, false);
        expect_product(
            torch::randn({2, 3, m, 2 * k}, options).slice(3, 0, 2 * k, 2),
            torch::randn({2, 3, 2 * k, 2 * n}, options).slice(2, 0, 2 * k, 2).slice(3, 0, 2 * n, 2),
            1.0, false);
      }
    }
  }
  // q, k, v as the model's heads see them: [B, T, H, Dh] storage viewed as
  // [B, H, T, Dh]; scores, then the context written heads last.
  const at::Tensor q = torch::randn({4, 32, 8, 64}, options).transpose(1, 2);
  const at::Tensor keys = torch::randn({4, 32, 8, 64}, options).transpose(1, 2);
  expect_product(q, keys.transpose(-2, -1), 0.125, false);
  expect_product(torch::softmax(torch::randn({4, 8, 32, 32}, options), -1), keys, 1.0, true);
  // Past the loops' limit, OpenBLAS.
  expect_product(torch::randn({2, 2, 10, 300}, options), torch::randn({2, 2, 300, 20}, options),
                 1.0, false);
  expect_product(torch::randn({2, 2, 10, 20}, options), torch::randn({2, 2, 20, 300}, options), 1.0,
                 false);
}

// Each build of those loops (this CPU runs only the widest), on one head.
TEST(AttentionMatmulTest, EveryBuildOfTheHeadLoopsMatchesMatmul) {
  torch::manual_seed(8);
  for (const int lanes : {16, 8, 4}) {
    for (const int64_t m : {1, 5, 6, 13}) {
      for (const int64_t n : {3, 8, 16, 24, 32, 40, 64, 72, 96, 128}) {
        // k 37 and 64: b's transposition 16 by 16 (and a tail of 5 for 37).
        for (const auto& [transposed_b, k] : std::vector<std::pair<bool, int64_t>>{
                 {false, 11}, {true, 11}, {true, 37}, {true, 64}}) {
          const at::Tensor a = torch::randn({m, k});
          const at::Tensor b = transposed_b ? torch::randn({n, k}).t() : torch::randn({k, n});
          at::Tensor c = torch::full({m, n + 3}, 7.0f);  // 3 columns past n stay untouched
          std::vector<float> scratch(static_cast<size_t>(small_product_scratch(k, n)));
          const SmallProduct p{a.data_ptr<float>(),
                               a.stride(0),
                               a.stride(1),
                               b.data_ptr<float>(),
                               b.stride(0),
                               b.stride(1),
                               m,
                               k,
                               n,
                               0.5f,
                               c.data_ptr<float>(),
                               c.stride(0)};
          if (!small_product_with_lanes(lanes, p, scratch.data())) continue;
          const at::Tensor want = at::matmul(a.to(at::kDouble), b.to(at::kDouble)) * 0.5;
          EXPECT_LE((c.narrow(1, 0, n).to(at::kDouble) - want).abs().max().item<double>(), 1e-5)
              << lanes << " lanes, m " << m << " n " << n << " k " << k;
          EXPECT_TRUE(torch::all(c.narrow(1, n, 3) == 7.0f).item<bool>());
        }
      }
    }
  }
}

// b_padded (kernels::linear's held weights): b read in place from rows of
// n rounded up to 32 columns, starting 0 or 64 columns into them, whatever
// the padding holds (NaN here: its products are dropped); every build, C's
// columns past n untouched.
TEST(AttentionMatmulTest, EveryBuildReadsPaddedRowsInPlace) {
  torch::manual_seed(9);
  for (const int lanes : {16, 8, 4}) {
    for (const int64_t m : {1, 5, 7}) {
      for (const int64_t n : {1, 7, 33, 70, 100}) {
        for (const int64_t k : {3, 130}) {
          for (const int64_t first : {0, 64}) {
            const int64_t ldb = first + (n + 31) / 32 * 32;
            std::vector<float> rows(static_cast<size_t>(k * ldb),
                                    std::numeric_limits<float>::quiet_NaN());
            const at::Tensor b = torch::randn({k, n});
            for (int64_t l = 0; l < k; ++l)
              for (int64_t j = 0; j < n; ++j)
                rows[static_cast<size_t>(l * ldb + first + j)] = b[l][j].item<float>();
            const at::Tensor a = torch::randn({m, k});
            at::Tensor c = torch::full({m, n + 3}, 7.0f);
            SmallProduct p{
                a.data_ptr<float>(), k,          1, rows.data() + first, ldb, 1, m, k, n, 1.0f,
                c.data_ptr<float>(), c.stride(0)};
            p.b_padded = true;
            if (!small_product_with_lanes(lanes, p, nullptr)) continue;
            const at::Tensor want = at::matmul(a.to(at::kDouble), b.to(at::kDouble));
            EXPECT_LE((c.narrow(1, 0, n).to(at::kDouble) - want).abs().max().item<double>(), 1e-4)
                << lanes << " lanes, m " << m << " n " << n << " k " << k << " from " << first;
            EXPECT_TRUE(torch::all(c.narrow(1, n, 3) == 7.0f).item<bool>());
          }
        }
      }
    }
  }
}

// The four backward products of scores and context in float32, against
// autograd through at::matmul in double.
TEST(AttentionMatmulTest, TrainingHeadGradientsInFloatMatchMatmul) {
  torch::manual_seed(7);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor q = torch::randn({3, 19, 4, 24}, options).transpose(1, 2).requires_grad_();
  const at::Tensor keys = torch::randn({3, 19, 4, 24}, options).transpose(1, 2).requires_grad_();
  const at::Tensor values = torch::randn({3, 19, 4, 24}, options).transpose(1, 2).requires_grad_();
  const at::Tensor upstream = torch::randn({3, 4, 19, 24}, options);
  const at::Tensor scores = attention_matmul(q, keys.transpose(-2, -1), 0.25, false);
  attention_matmul(torch::softmax(scores, -1), values, 1.0, true).backward(upstream);

  std::vector<at::Tensor> reference;
  for (const at::Tensor& t : {q, keys, values})
    reference.push_back(t.detach().to(at::kDouble).requires_grad_());
  const at::Tensor reference_scores =
      at::matmul(reference[0], reference[1].transpose(-2, -1)) * 0.25;
  at::matmul(torch::softmax(reference_scores, -1), reference[2]).backward(upstream.to(at::kDouble));
  const at::Tensor* grads[] = {&q.grad(), &keys.grad(), &values.grad()};
  for (size_t i = 0; i < 3; ++i) {
    const at::Tensor want = reference[i].grad();
    EXPECT_LE((grads[i]->to(at::kDouble) - want).abs().max().item<double>(),
              1e-5 * (1.0 + want.abs().max().item<double>()))
        << "input " << i;
  }
}

TEST(AttentionMatmulTest, OneQueryRowGradientsMatchMatmul) {
  torch::manual_seed(5);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = torch::randn({4, 2, 1, 6}, options).requires_grad_();
  const at::Tensor keys = torch::randn({4, 2, 9, 6}, options).requires_grad_();
  const at::Tensor upstream = torch::randn({4, 2, 1, 9}, options);
  attention_matmul(q, keys.transpose(-2, -1), 0.5, false).backward(upstream);
  const at::Tensor q_ref = q.detach().clone().requires_grad_();
  const at::Tensor keys_ref = keys.detach().clone().requires_grad_();
  (at::matmul(q_ref, keys_ref.transpose(-2, -1)) * 0.5).backward(upstream);
  EXPECT_TRUE(torch::allclose(q.grad(), q_ref.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(keys.grad(), keys_ref.grad(), 1e-12, 1e-12));
}

}  // namespace
}  // namespace garden::kernels
