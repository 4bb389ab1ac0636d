#include "garden/nlp/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>

namespace garden::nlp {

namespace {

// ---- dropout ---------------------------------------------------------------------
// LibTorch's CPU dropout draws every mask bit through bernoulli_ with a
// mt19937 draw per element; without MKL that was the largest non-matmul cost
// of a translation training step (bench/translation_bench --profile). This one is the same inverted dropout (each element is
// zeroed with probability p, the rest scaled by 1 / (1 - p)) with the bits
// from a counter-based generator: element pair j of a call gets
// splitmix64(seed + j * golden_gamma), 32 bits each, so the mask does not
// depend on the thread count. The seed is drawn from LibTorch's default CPU
// generator, so torch::manual_seed and a saved generator state reproduce it.

uint64_t draw_dropout_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;
constexpr int64_t kDropoutGrain = 32768;  // element pairs per parallel task

// keep[i] = bits(i) >= threshold; y[i] = x[i] * keep[i] * scale (branch-free).
// With Relu, also keep[i] = 0 where x[i] <= 0: relu then dropout in one pass.
template <typename T, bool Relu>
void dropout_forward_kernel(const T* x, T* y, uint8_t* keep, int64_t n, uint64_t seed,
                            uint32_t threshold, T scale) {
  at::parallel_for(0, (n + 1) / 2, kDropoutGrain, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const uint64_t bits = splitmix64(seed + static_cast<uint64_t>(j) * kGoldenGamma);
      const uint32_t r[2] = {static_cast<uint32_t>(bits), static_cast<uint32_t>(bits >> 32)};
      for (int64_t h = 0, i = 2 * j; h < 2 && i < n; ++h, ++i) {
        const uint8_t k = (r[h] >= threshold) & (!Relu || x[i] > T(0));
        keep[i] = k;
        y[i] = x[i] * (static_cast<T>(k) * scale);
      }
    }
  });
}

template <typename T>
void dropout_backward_kernel(const T* grad, const uint8_t* keep, T* out, int64_t n, T scale) {
  at::parallel_for(0, n, 2 * kDropoutGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = grad[i] * (static_cast<T>(keep[i]) * scale);
  });
}

// dropout(x), or dropout(relu(x)) when `relu`.
class FastDropout : public torch::autograd::Function<FastDropout> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p,
                            bool relu) {
    const at::Tensor input = x.contiguous();
    at::Tensor output = at::empty_like(input);
    at::Tensor keep = at::empty(input.sizes(), input.options().dtype(at::kByte));
    // Drop when the 32 random bits are below p * 2^32.
    const auto threshold = static_cast<uint32_t>(std::llround(p * 4294967296.0));
    const double scale = 1.0 / (1.0 - p);
    const uint64_t seed = draw_dropout_seed();
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "garden_dropout", [&] {
      auto* kernel = relu ? dropout_forward_kernel<scalar_t, true>
                          : dropout_forward_kernel<scalar_t, false>;
      kernel(input.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(),
             input.numel(), seed, threshold, static_cast<scalar_t>(scale));
    });
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = scale;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor keep = ctx->get_saved_variables()[0];
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_input = at::empty_like(grad);
    AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "garden_dropout_backward", [&] {
      dropout_backward_kernel<scalar_t>(grad.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(),
                                        grad_input.data_ptr<scalar_t>(), grad.numel(),
                                        static_cast<scalar_t>(scale));
    });
    return {grad_input, at::Tensor(), at::Tensor()};
  }
};

// ---- attention matmuls -------------------------------------------------------------
// LibTorch 1.13's CPU bmm runs a [B, H, T, S] product as B*H separate
// select + addmm calls, and matmul first copies the permuted q/k/v views and
// the context into contiguous layouts. For the short sequences of
// translation that overhead costs more than the arithmetic. Here each head's
// product is one BLAS gemm call on the views as they are, and the context is
// written straight into [B, T, H, Dh] order, so merging the heads is a view.
// The BLAS is the one LibTorch itself loaded (found with dlsym); without it,
// or off the CPU, the attention falls back to at::matmul.

using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const float*, const float*, const int*, const float*, const int*,
                         const float*, float*, const int*);
using DgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*);

struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
};

const Blas& blas() {
  static const Blas functions{reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_")),
                              reinterpret_cast<DgemmFn>(dlsym(RTLD_DEFAULT, "dgemm_"))};
  return functions;
}

void gemm(char ta, char tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  const float beta = 0;
  blas().sgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}
void gemm(char ta, char tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
  const double beta = 0;
  blas().dgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}

// A row-major [rows, cols] matrix with strides (row_stride, col_stride) as a
// column-major BLAS operand: 'N' with ld = row_stride, or 'T' with
// ld = col_stride. ld is 0 when neither stride is 1 (then copy first).
struct BlasOperand {
  char trans = 'N';
  int64_t ld = 0;
};

BlasOperand blas_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows == 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {'N', rows == 1 ? std::max<int64_t>(cols, 1) : row_stride};
  if (row_stride == 1 && (cols == 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {'T', cols == 1 ? std::max<int64_t>(rows, 1) : col_stride};
  return {};
}

BlasOperand blas_operand(const at::Tensor& x) {
  return blas_operand(x.size(2), x.size(3), x.stride(2), x.stride(3));
}

// out[i, j] = alpha * a[i, j] @ b[i, j] for a [N1, N2, m, k], b [N1, N2, k, n]
// and a preallocated out [N1, N2, m, n] with unit stride in its last dim.
template <typename T>
void batched_gemm(const at::Tensor& a_in, const at::Tensor& b_in, double alpha, at::Tensor& out) {
  const at::Tensor a = blas_operand(a_in).ld ? a_in : a_in.contiguous();
  const at::Tensor b = blas_operand(b_in).ld ? b_in : b_in.contiguous();
  const BlasOperand oa = blas_operand(a), ob = blas_operand(b);
  const int64_t n1 = a.size(0), n2 = a.size(1);
  const int m = static_cast<int>(a.size(2)), k = static_cast<int>(a.size(3)),
            n = static_cast<int>(b.size(3)), ldc = static_cast<int>(out.stride(2));
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  at::parallel_for(0, n1 * n2, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t i1 = i / n2, i2 = i % n2;
      // Row-major C = A B is column-major C^T = B^T A^T.
      gemm(ob.trans, oa.trans, n, m, k, static_cast<T>(alpha),
           pb + i1 * b.stride(0) + i2 * b.stride(1), static_cast<int>(ob.ld),
           pa + i1 * a.stride(0) + i2 * a.stride(1), static_cast<int>(oa.ld),
           pc + i1 * out.stride(0) + i2 * out.stride(1), ldc);
    }
  });
}

void batched_gemm(const at::Tensor& a, const at::Tensor& b, double alpha, at::Tensor& out) {
  if (a.scalar_type() == at::kFloat)
    batched_gemm<float>(a, b, alpha, out);
  else
    batched_gemm<double>(a, b, alpha, out);
}

// alpha * a @ b for [N1, N2, m, k] x [N1, N2, k, n]; with heads_last the
// result [N1, N2, m, n] is a view of [N1, m, N2, n] storage.
class AttentionMatmul : public torch::autograd::Function<AttentionMatmul> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                            const at::Tensor& b, double alpha, bool heads_last) {
    at::Tensor out =
        heads_last ? at::empty({a.size(0), a.size(2), a.size(1), b.size(3)}, a.options())
                         .transpose(1, 2)
                   : at::empty({a.size(0), a.size(1), a.size(2), b.size(3)}, a.options());
    batched_gemm(a, b, alpha, out);
    ctx->save_for_backward({a, b});
    ctx->saved_data["alpha"] = alpha;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const at::Tensor& grad = grads[0];
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) {
      grad_a = at::empty(a.sizes(), grad.options());
      batched_gemm(grad, b.transpose(2, 3), alpha, grad_a);
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = at::empty(b.sizes(), grad.options());
      batched_gemm(a.transpose(2, 3), grad, alpha, grad_b);
    }
    return {grad_a, grad_b, at::Tensor(), at::Tensor()};
  }
};

bool blas_attention_applies(const at::Tensor& a, const at::Tensor& b) {
  if (!a.device().is_cpu() || a.scalar_type() != b.scalar_type() || a.dim() != 4 ||
      b.dim() != 4 || a.size(0) != b.size(0) || a.size(1) != b.size(1) || a.size(3) != b.size(2))
    return false;
  const Blas& f = blas();
  if (a.scalar_type() == at::kFloat ? !f.sgemm : a.scalar_type() != at::kDouble || !f.dgemm)
    return false;
  const int64_t limit = std::numeric_limits<int>::max();
  for (int64_t d : {a.size(2), a.size(3), b.size(3)})
    if (d == 0 || d > limit / 4) return false;
  return a.numel() > 0 && b.numel() > 0;
}

// alpha * a @ b over the last two dims of [B, H, *, *] tensors.
at::Tensor attention_matmul(const at::Tensor& a, const at::Tensor& b, double alpha,
                            bool heads_last) {
  if (blas_attention_applies(a, b)) return AttentionMatmul::apply(a, b, alpha, heads_last);
  return at::matmul(alpha == 1.0 ? a : a * alpha, b);
}

bool has_fast_dropout(const at::Tensor& x, double p) {
  return x.device().is_cpu() && p < 1 &&
         (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
}

// Dropout that costs nothing when it would be the identity.
at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p <= 0) return x;
  return has_fast_dropout(x, p) ? FastDropout::apply(x, p, /*relu=*/false)
                                : at::dropout(x, p, /*train=*/true);
}

// maybe_dropout(relu(x)), fused when the fast dropout applies.
at::Tensor relu_then_dropout(const at::Tensor& x, double p, bool training) {
  if (training && p > 0 && has_fast_dropout(x, p)) return FastDropout::apply(x, p, /*relu=*/true);
  return maybe_dropout(at::relu(x), p, training);
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

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  return maybe_dropout(x, p, training);
}

at::Tensor relu_dropout(const at::Tensor& x, double p, bool training) {
  return relu_then_dropout(x, p, training);
}

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
  // The 1 / sqrt(Dh) scale rides along in the product (gemm's alpha, or q
  // scaled before the fallback matmul: T x Dh is cheaper than T x S).
  at::Tensor scores = attention_matmul(q, k.transpose(-2, -1),
                                       1.0 / std::sqrt(static_cast<double>(head_size_)),
                                       /*heads_last=*/false);
  if (mask.defined()) scores = scores + mask;
  // Softmax in float32 for half/bfloat16 inputs; double stays double.
  const auto softmax_type = scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor probs = at::softmax(scores, -1, softmax_type).to(v.scalar_type());
  probs = maybe_dropout(probs, options_.attention_dropout, is_training());
  // [B, H, T, Dh], stored as [B, T, H, Dh] when the BLAS path ran: then the
  // reshape merging the heads is a view.
  at::Tensor context = attention_matmul(probs, v, 1.0, /*heads_last=*/true);
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
  h = gelu_ ? maybe_dropout(at::gelu(h), dropout_, is_training())
            : relu_then_dropout(h, dropout_, is_training());
  return output->forward(h);
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
  const double p = options_.embedding_dropout_rate >= 0 ? options_.embedding_dropout_rate
                                                        : options_.dropout_rate;
  return maybe_dropout(x, p, is_training());
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
