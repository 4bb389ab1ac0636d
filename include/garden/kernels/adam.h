// Adam's update of one float32 parameter in one pass over its memory (the
// optimizer's own kernel).
#pragma once

#include <cstdint>

namespace garden::kernels {

// What Adam::update does in four to six LibTorch ops (each a pass over the
// parameter), in their order of operations: where `decays`, p -= decay * p
// (AdamWeightDecay's lr * rate); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2)
// g g; p += step * m / (sqrt(v) + eps), step = -lr_t. n elements of each.
void adam_pass(float* p, const float* g, float* m, float* v, int64_t n, float b1, float b2,
               float step, float eps, bool decays, float decay);

}  // namespace garden::kernels
