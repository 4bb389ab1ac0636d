// int8 dense layers and int8 decoding (garden/nlp/int8.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "garden/base/error.h"
#include "garden/nlp/modeling/attention.h"
#include "garden/kernels/int8.h"
#include "garden/kernels/linear.h"
#include "garden/nlp/modeling/transformer.h"

namespace garden::kernels {
namespace {

using namespace garden::nlp;

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

// Values the quantization represents exactly give exact products: weights
// whose row maximum is 127 (scale 1), inputs whose row spans [lo, lo + 255]
// with lo <= 0 <= lo + 255 and integer steps (scale 1, zero point -lo).
TEST(Int8Test, ExactlyRepresentableValuesGiveTheExactProduct) {
  const int64_t out = 37, in = 21;  // neither a multiple of the tile sizes
  at::Tensor w = torch::randint(-127, 128, {out, in}, torch::kFloat);
  w.select(1, 0).fill_(127);
  at::Tensor b = torch::randint(-50, 50, {out}, torch::kFloat);
  at::Tensor x = torch::randint(-100, 100, {9, in}, torch::kFloat);
  x.select(1, 1).fill_(-100);
  x.select(1, 2).fill_(155);
  const Int8Linear layer(w, b);
  const at::Tensor expected =
      at::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t()) + b.to(torch::kDouble);
  EXPECT_EQ(max_abs(layer.forward(x).to(torch::kDouble) - expected), 0.0);
  EXPECT_EQ(max_abs(layer.forward_portable(x).to(torch::kDouble) - expected), 0.0);
}

TEST(Int8Test, WeightsArePerChannelSymmetric) {
  at::Tensor w = torch::tensor({{0.3f, -1.0f, 0.25f}, {2.0f, 0.0f, -0.5f}, {0.f, 0.f, 0.f}});
  const Int8Linear layer(w, at::Tensor());
  EXPECT_TRUE(
      torch::allclose(layer.weight_scales(), torch::tensor({1.0f / 127, 2.0f / 127, 1.0f})));
  // round(w / scale): 38.1 -> 38, 31.75 -> 32, -31.75 -> -32.
  EXPECT_TRUE(
      torch::equal(layer.quantized_weight(),
                   torch::tensor({{38, -127, 32}, {127, 0, -32}, {0, 0, 0}}, torch::kChar)));
}

// Random float values: within the error the two quantizations allow, and
// the AVX512-VNNI kernel (where the CPU has it) equal to the portable loop
// to the bit, for every tail of rows and outputs.
TEST(Int8Test, CloseToFloatAndBothKernelsAgreeBitwise) {
  torch::manual_seed(3);
  for (const int64_t rows : {1, 3, 4, 7}) {
    for (const int64_t out : {5, 16, 64, 100}) {
      const int64_t in = 48;
      at::Tensor w = torch::randn({out, in}) * 0.1;
      at::Tensor b = torch::randn({out});
      at::Tensor x = torch::randn({2, rows, in});
      const Int8Linear layer(w, b);
      const at::Tensor y = layer.forward(x);
      ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, rows, out}));
      EXPECT_TRUE(torch::equal(y, layer.forward_portable(x))) << rows << " x " << out;
      // |x w - xq wq| <= sum_k |x_k| |dw_k| + |w_k| |dx_k| + |dx_k| |dw_k|,
      // with |dw| <= s_w / 2 per output and |dx| <= s_x per row (half a
      // step from rounding, up to a step more where the zero point's own
      // rounding clamps the row's minimum).
      const at::Tensor s_w = w.abs().amax(1) / 127;  // [out]
      const at::Tensor s_x =
          (x.amax(-1).clamp_min(0) - x.amin(-1).clamp_max(0)) / 255;  // [2, rows]
      const at::Tensor bound = at::matmul(x.abs(), torch::ones({in, 1})) * s_w / 2 +
                               at::matmul(torch::ones_like(x), w.abs().t()) * s_x.unsqueeze(-1) +
                               in * s_x.unsqueeze(-1) * s_w / 2;
      const at::Tensor error = (y - torch::nn::functional::linear(x, w, b)).abs();
      EXPECT_TRUE((error <= bound * 1.001 + 1e-5).all().item<bool>()) << rows << " x " << out;
    }
  }
}

// On a CPU with AMX-INT8 (int8_kernel() "amx_int8"), forward runs on the
// tiles: equal to the VNNI kernel and the portable loop to the bit, for
// row counts around the tiles' 16 and 32 rows, output counts around the
// pairs of 16-output blocks, and input widths off and on the blocks of 64.
TEST(Int8Test, AmxAgreesBitwiseWithVnniAndThePortableLoop) {
  if (int8_kernel() != "amx_int8")
    GTEST_SKIP() << "this CPU runs int8 on " << int8_kernel() << ", not AMX";
  torch::manual_seed(7);
  for (const int64_t in : {21, 64, 200}) {
    for (const int64_t rows : {1, 15, 16, 17, 33, 70}) {
      for (const int64_t out : {5, 16, 33, 64}) {
        const at::Tensor w = torch::randn({out, in}) * 0.1;
        const at::Tensor b = torch::randn({out});
        const at::Tensor x = torch::randn({rows, in});
        const Int8Linear layer(w, b);
        const at::Tensor y = layer.forward(x);
        EXPECT_TRUE(torch::equal(y, layer.forward_vnni(x))) << rows << " x " << in << " -> " << out;
        EXPECT_TRUE(torch::equal(y, layer.forward_portable(x)))
            << rows << " x " << in << " -> " << out;
      }
    }
  }
}

// With relu, each kernel stores at::relu of its own outputs: the same bits,
// exact zeros included (a row of zeros against a zero bias), on both sides
// of the blocks of 16 outputs and of the tiles' 16 rows. A Dense layer's forward_relu is
// relu(forward) with and without int8 and gradients.
TEST(Int8Test, ReluAsTheOutputsAreStoredIsAtRelu) {
  torch::manual_seed(9);
  for (const int64_t in : {21, 64, 200}) {
    for (const int64_t rows : {1, 15, 17, 33}) {
      for (const int64_t out : {5, 16, 33}) {
        at::Tensor b = torch::randn({out});
        b[0] = 0.0f;
        const at::Tensor w = torch::randn({out, in}) * 0.1;
        at::Tensor x = torch::randn({rows, in});
        x[0].zero_();
        const Int8Linear layer(w, b);
        const at::Tensor want = at::relu(layer.forward(x));
        EXPECT_TRUE(layer.forward(x, /*relu=*/true).equal(want)) << rows << " x " << in;
        EXPECT_TRUE(layer.forward_portable(x, /*relu=*/true).equal(want)) << rows << " x " << in;
        if (int8_kernel() != "portable") {
          EXPECT_TRUE(layer.forward_vnni(x, /*relu=*/true).equal(want)) << rows << " x " << in;
        }
      }
    }
  }
  Dense dense = make_dense(40, 24, /*use_bias=*/true);
  {
    torch::NoGradGuard no_grad;
    dense->bias.normal_();
  }
  const at::Tensor x = torch::randn({5, 40});
  for (const bool int8 : {false, true}) {
    dense->use_int8(int8);
    for (const bool grad : {false, true}) {
      torch::AutoGradMode mode(grad);
      EXPECT_TRUE(dense->forward_relu(x).equal(at::relu(dense->forward(x))))
          << "int8 " << int8 << " grad " << grad;
    }
  }
}

TEST(Int8Test, BadInputsAreErrors) {
  const Int8Linear layer(torch::randn({4, 3}), torch::randn({4}));
  EXPECT_THROW(layer.forward(torch::randn({2, 5})), Error);
  at::Tensor x = torch::randn({2, 3});
  x[1][2] = NAN;
  EXPECT_THROW(layer.forward(x), Error);
  EXPECT_THROW(layer.forward_portable(x), Error);
  at::Tensor w = torch::randn({4, 3});
  w[0][0] = INFINITY;
  EXPECT_THROW(Int8Linear(w, at::Tensor()), Error);
  EXPECT_THROW(Int8Linear(torch::randn({4, 3}), torch::randn({3})), Error);
  EXPECT_THROW(check_int8_available("x", c10::Device("cuda:0")), Error);
  EXPECT_NO_THROW(check_int8_available("x", c10::Device("cpu")));
}

// A Dense layer in int8 runs only while gradients are off, and use_int8(false)
// gives back the float results to the bit.
TEST(Int8Test, DenseUsesInt8OnlyWithoutGradientsAndUntilTurnedOff) {
  torch::manual_seed(5);
  Dense dense = make_dense(32, 24, true);
  const at::Tensor x = torch::randn({3, 32});
  at::Tensor fp32;
  {
    torch::NoGradGuard no_grad;
    fp32 = dense->forward(x);
  }
  dense->use_int8(true);
  EXPECT_TRUE(dense->int8());
  EXPECT_TRUE(torch::equal(dense->forward(x).detach(), fp32));  // gradients on: float
  {
    torch::NoGradGuard no_grad;
    const at::Tensor q = dense->forward(x);
    EXPECT_FALSE(torch::equal(q, fp32));
    EXPECT_LT(max_abs(q - fp32), 0.05 * max_abs(fp32));
  }
  dense->use_int8(false);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(dense->forward(x), fp32));
}

// int8 decoding of a whole model: every dense layer and the tied output
// projection switch, the logits stay close to float32's, and the parameters
// (what checkpoints and exports hold) do not change.
TEST(Int8Test, Seq2SeqDecodingInInt8StaysCloseToFloat) {
  torch::manual_seed(11);
  Seq2SeqTransformerOptions o;
  o.vocab_size = 50;
  o.hidden_size = 32;
  o.num_layers = 2;
  o.num_heads = 4;
  o.intermediate_size = 64;
  o.dropout_rate = o.attention_dropout_rate = o.intermediate_dropout = 0.0;
  Seq2SeqTransformer model(o);
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor src = torch::tensor({{3, 4, 5, 6, 7}, {8, 9, 10, 0, 0}}, torch::kLong);
  const at::Tensor tgt = torch::tensor({{1, 11, 12, 13}, {1, 14, 15, 0}}, torch::kLong);
  const at::Tensor fp32 = model->forward(src, tgt);
  std::vector<at::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.clone());

  model->use_int8(true);
  EXPECT_TRUE(model->int8());
  int dense_layers = 0;
  for (const auto& m : model->modules(false))
    if (auto* d = m->as<DenseImpl>()) dense_layers += d->int8() ? 1 : 0;
  EXPECT_EQ(dense_layers, 2 * 4 + 2 * 7);  // encoder: qkv, output, 2 ffn; decoder: + q, kv, output
  const at::Tensor int8 = model->forward(src, tgt);
  EXPECT_FALSE(torch::equal(int8, fp32));
  EXPECT_LT(max_abs(int8 - fp32), 0.05 * max_abs(fp32));
  // Incremental decoding goes through the same int8 layers.
  Cache cache = model->init_cache(model->encode(src), 2, 4);
  for (int64_t step = 0; step < tgt.size(1); ++step) {
    const at::Tensor logits = model->decode_step(tgt.select(1, step), step, cache);
    EXPECT_LT(max_abs(logits - int8.select(1, step)), 0.02 * max_abs(fp32));
  }
  for (std::size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(torch::equal(model->parameters()[i], before[i]));

  model->use_int8(false);
  EXPECT_FALSE(model->int8());
  EXPECT_TRUE(torch::equal(model->forward(src, tgt), fp32));
}

}  // namespace
}  // namespace garden::kernels
