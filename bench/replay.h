// The step benchmarks' --replay: a step's matrix products alone. One step
// runs under garden::kernels::GemmRecorder, which keeps the layouts and sizes of its
// sgemm calls (every dense layer's forward and backward, the vocabulary
// projections: all but attention's per-head products, which run in Garden's
// own kernel); then, round by round beside the step itself, the same calls
// run again in the same order on operands of the same sizes and nothing else
// runs. The products' rate in the replay against the ceiling is the GEMM
// share the step would reach if it did nothing but products: with this GEMM
// library on this machine, no step can do better.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "garden/kernels/gemm.h"
#include "peer.h"

namespace garden_bench {

// What stops --replay, as one line on stderr, and exit status 1.
[[noreturn]] inline void replay_failed(const std::string& why) {
  std::cerr << "--replay: " << why << "\n";
  std::exit(1);
}

class ProductReplay {
 public:
  // The operands live in one buffer twice the size of the largest call's
  // three matrices, taken in turn as the step takes fresh activations, so
  // that each call finds its operands about as recently touched as the
  // step's own (in the caches where they fit, not all in them).
  explicit ProductReplay(std::vector<garden::kernels::GemmCall> calls) : calls_(std::move(calls)) {
    int64_t largest = 0;
    for (const auto& c : calls_) {
      largest = std::max(largest, padded(c.m * c.k) + padded(c.k * c.n) + padded(c.m * c.n));
      gflop_ += 2.0 * static_cast<double>(c.m) * static_cast<double>(c.n) *
                static_cast<double>(c.k) / 1e9;
    }
    ring_ = at::rand({std::max<int64_t>(2 * largest, 1)});
  }

  const std::vector<garden::kernels::GemmCall>& calls() const { return calls_; }
  double gflop() const { return gflop_; }

  // Every call once, in order, on Garden's GEMM (garden::kernels::sgemm) or on
  // LibTorch's BLAS (garden::kernels::blas_sgemm); the wall time in ms.
  double run_ms(bool on_blas = false) {
    float* base = ring_.data_ptr<float>();
    const int64_t size = ring_.numel();
    int64_t cursor = 0;
    const auto take = [&](int64_t elements) {
      const int64_t n = padded(elements);
      if (cursor + n > size) cursor = 0;
      float* p = base + cursor;
      cursor += n;
      return p;
    };
    const auto start = std::chrono::steady_clock::now();
    for (const auto& c : calls_) {
      const float* a = take(c.m * c.k);
      const float* b = take(c.k * c.n);
      float* out = take(c.m * c.n);
      const auto product = on_blas ? &garden::kernels::blas_sgemm : &garden::kernels::sgemm;
      if (!product(c.trans_a, c.trans_b, c.m, c.n, c.k, 1.0f, a, c.trans_a == 'N' ? c.k : c.m, b,
                   c.trans_b == 'N' ? c.n : c.k, 0.0f, out, c.n))
        replay_failed((on_blas ? std::string("the BLAS's") : garden::gemm_library()) +
                      " sgemm failed on a [" + std::to_string(c.m) + ", " + std::to_string(c.k) +
                      "] x [" + std::to_string(c.k) + ", " + std::to_string(c.n) + "] product");
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

 private:
  // Operands start on 64-byte boundaries, as LibTorch's tensors do.
  static int64_t padded(int64_t elements) { return (elements + 15) / 16 * 16; }

  std::vector<garden::kernels::GemmCall> calls_;
  double gflop_ = 0.0;
  at::Tensor ring_;
};

// --replay for a step benchmark: records one step's products (`step`), then
// each round measures the ceiling, Garden's step (`measure(warmup, steps)`,
// ms), the replay (the median of three passes after one untimed) and the
// ceiling again, printing a JSON line a round and a summary. Where Garden's
// GEMM is oneDNN, the same calls also run on LibTorch's BLAS (three passes
// more), the other library at hand. `gflop` is the step's matrix-product
// work as the benchmark counts it (attention's head products included), so
// each round also says how much time the step's other work takes now and
// may take at an 80 % share, were every product to run at the replay's rate
// (both with that round's ceiling and replay).
inline void run_product_replay(const std::string& bench, const StepOptions& o, double gflop,
                               const std::function<void()>& step,
                               const std::function<double(int, int)>& measure) {
  if (garden::gemm_library() == "none") replay_failed("no GEMM library to replay the products on");
  std::vector<garden::kernels::GemmCall> calls;
  {
    garden::kernels::GemmRecorder recorder;
    step();
    calls = recorder.calls();
  }
  if (calls.empty())
    replay_failed("the step ran no product through garden::kernels::sgemm (" + garden::gemm_library() + ")");
  ProductReplay replay(std::move(calls));
  std::cout << "# " << bench << " " << o.preset << " --replay: " << replay.calls().size()
            << " sgemm calls a step, " << replay.gflop() << " GFLOP of the " << gflop
            << " counted\n";
  const bool blas_too = garden::gemm_library().rfind("oneDNN", 0) == 0;
  replay.run_ms();
  if (blas_too) replay.run_ms(true);
  std::vector<double> step_ms, replay_ms, ceilings, step_shares, replay_shares, blas_shares,
      other_now, other_allowed;
  for (int r = 0; r < o.rounds; ++r) {
    const double before = gemm_ceiling_gflops();
    const double s = measure(o.warmup, o.steps);
    std::vector<double> passes;
    for (int i = 0; i < 3; ++i) passes.push_back(replay.run_ms());
    const double p = median(passes);
    std::vector<double> blas_passes;
    if (blas_too)
      for (int i = 0; i < 3; ++i) blas_passes.push_back(replay.run_ms(true));
    const double ceiling = bracketed_ceiling(before);
    step_ms.push_back(s);
    replay_ms.push_back(p);
    ceilings.push_back(ceiling);
    step_shares.push_back(gflop / (s / 1000.0) / ceiling);
    replay_shares.push_back(replay.gflop() / (p / 1000.0) / ceiling);
    // At the replay's rate all the step's counted products take gflop / rate;
    // an 80 % share leaves the rest of the step gflop / (0.8 x ceiling) minus that.
    const double products_ms = gflop / (replay.gflop() / p);
    other_now.push_back(s - products_ms);
    other_allowed.push_back(gflop / (0.8 * ceiling) * 1000.0 - products_ms);
    nlohmann::json line = {{"round", r + 1},
                           {"step_ms", rounded(s, 1)},
                           {"replay_ms", rounded(p, 1)},
                           {"gemm_ceiling_gflops", rounded(median(ceilings), 1)},
                           {"garden_gemm_share", rounded(step_shares.back(), 3)},
                           {"products_only_share", rounded(replay_shares.back(), 3)},
                           {"other_ms_now", rounded(other_now.back(), 1)},
                           {"other_ms_allowed_at_80_percent", rounded(other_allowed.back(), 1)}};
    if (blas_too) {
      blas_shares.push_back(replay.gflop() / (median(blas_passes) / 1000.0) / ceiling);
      line["blas_replay_ms"] = rounded(median(blas_passes), 1);
      line["blas_products_only_share"] = rounded(blas_shares.back(), 3);
    }
    std::cout << line.dump() << "\n" << std::flush;
  }
  nlohmann::json summary = {{"bench", bench},
                              {"replay", true},
                              {"preset", o.preset},
                              {"threads", o.threads},
                              {"batch", o.batch},
                              {"length", o.length},
                              {"garden_gemm", garden::gemm_library()},
                              {"matmul_gflop_per_step", rounded(gflop, 2)},
                              {"replayed_gflop", rounded(replay.gflop(), 2)},
                              {"replayed_calls", replay.calls().size()},
                              {"gemm_ceiling_gflops", rounded(median(ceilings), 1)},
                              {"garden_step_ms", rounded(median(step_ms), 1)},
                              {"replay_ms", rounded(median(replay_ms), 1)},
                              {"garden_gemm_share", rounded(median(step_shares), 3)},
                              {"products_only_share", rounded(median(replay_shares), 3)},
                              {"products_only_shares", rounded_all(replay_shares, 3)},
                              {"other_ms_now", rounded(median(other_now), 1)},
                              {"other_ms_allowed_at_80_percent", rounded(median(other_allowed), 1)}};
  if (blas_too) summary["blas_products_only_share"] = rounded(median(blas_shares), 3);
  std::cout << summary.dump() << "\n";
}

}  // namespace garden_bench
