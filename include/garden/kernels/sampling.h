// Drawing ids from a softmax (ELECTRA's generator).
#pragma once

#include <ATen/core/Tensor.h>

namespace garden::kernels {

// One id per row of logits [..., V], drawn from softmax(logits) as Model
// Garden's ELECTRA sample_from_softmax draws it (argmax of the logits plus
// Gumbel noise, temperature 1); with disallow_ids [...] defined, each row's
// id there has 1000 subtracted from its logit first. Returns [...] int64, no
// gradient. On the CPU in float32 (bfloat16 widened to it) by the inverse
// CDF with one uniform a row from LibTorch's default generator
// (torch::manual_seed reproduces it, whatever the thread count); otherwise,
// or for logits holding a NaN or an infinity, by Model Garden's formula,
// -log(-log(u + 1e-9) + 1e-9) per id.
at::Tensor sample_from_softmax(const at::Tensor& logits, const at::Tensor& disallow_ids = {});

}  // namespace garden::kernels
