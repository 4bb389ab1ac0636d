// Weight initializers the model layers share (Keras's, as Model Garden's
// networks use them).
#pragma once

#include <ATen/Tensor.h>

namespace garden {

// Fills `weight` from a normal of stddev `stddev` truncated at two stddevs
// (Keras's TruncatedNormal: values beyond are drawn again, so the result's
// stddev is about 0.88 * stddev), from LibTorch's default generator.
void truncated_normal_(at::Tensor weight, double stddev);

}  // namespace garden
