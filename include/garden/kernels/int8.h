// int8 inference for dense layers (decoding with --int8).
//
// The weight is quantized once, per output channel: symmetric int8 with
// scale max|w_row| / 127. Each call quantizes its input per row: asymmetric
// uint8 from the row's min and max (both widened to include 0), so
// x ≈ s_x (x_u8 - zp). The products are summed in int32 and turned back
// into float32 with the bias added:
//   y[m][n] = s_x[m] s_w[n] (sum_k x_u8[m][k] w_i8[n][k] - zp[m] sum_k w_i8[n][k]) + b[n].
//
// The products run on AMX (tdpbusd: a 16 x 16 block of int32 sums over 64
// inputs an instruction) where the CPU has AMX-INT8 and Linux grants the
// process its tile state, else on AVX512-VNNI (vpdpbusd, 64 multiply-adds
// an instruction), otherwise on a portable loop. All three give the same
// integers and the same float32 results, to the bit (correct everywhere,
// fast with VNNI or AMX).
// Not LibTorch's own int8 linear (oneDNN on Debian's 1.13): it builds a new
// kernel on every call, which costs more than the product at decoding's
// sizes.
//
// For decoding only: the quantized weight is a copy, so a weight that
// changes afterwards (training) is not seen, and there is no gradient.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace garden::kernels {

// The kernel Int8Linear uses on this CPU: "amx_int8", "avx512_vnni" or
// "portable".
std::string int8_kernel();

// Throws garden::Error, one line naming `what`, when int8 inference cannot run
// for weights on `device` (it runs on the CPU only).
void check_int8_available(const std::string& what, const c10::Device& device);

class Int8Linear {
 public:
  Int8Linear() = default;
  // weight [out, in] on the CPU (any floating dtype), bias [out] or undefined.
  Int8Linear(const at::Tensor& weight, const at::Tensor& bias);
  bool defined() const { return out_ > 0; }
  // x [..., in] -> [..., out] float32; with relu, at::relu of that, applied
  // as each output is stored (no second pass).
  at::Tensor forward(const at::Tensor& x, bool relu = false) const;
  // The same with the portable loop, whatever the CPU, or with the VNNI
  // kernel (garden::Error without AVX512-VNNI), for tests.
  at::Tensor forward_portable(const at::Tensor& x, bool relu = false) const;
  at::Tensor forward_vnni(const at::Tensor& x, bool relu = false) const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // The quantized weight [out, in] and its per-channel scales [out].
  at::Tensor quantized_weight() const;
  at::Tensor weight_scales() const;

 private:
  at::Tensor run(const at::Tensor& x, int kernel, bool relu) const;
  int64_t in_ = 0, out_ = 0;
  int64_t k_groups_ = 0;        // ceil(in / 64) * 16: whole blocks of 64 inputs
  int64_t n_blocks_ = 0;        // ceil(out / 16)
  std::vector<int8_t> packed_;  // [n_blocks][k_groups][16 outputs][4 inputs]
  std::vector<float> scales_;   // [n_blocks * 16], 0 past `out`
  std::vector<int32_t> sums_;   // sum_k w_i8[n][k], [n_blocks * 16]
  std::vector<float> bias_;     // [n_blocks * 16], zeros without a bias
};

}  // namespace garden::kernels
