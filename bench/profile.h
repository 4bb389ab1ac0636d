// The step benchmarks' --profile: one step under LibTorch's legacy profiler,
// printed as the operators' self times, the matrix products by shape with the
// rate each reached, and the line that bounds the GEMM share: the rate of all
// of them together against the 1024^3 ceiling measured now. A step that did
// nothing but its products would reach that share, no more. The step's time
// is its wall time; Garden's own kernels (the forwards of its autograd
// functions, kernels::linear, the optimizer's step) record themselves as
// garden::* operators, and what no operator recorded (the autograd engine
// between them, mostly) is printed as such.
#pragma once

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "peer.h"

namespace garden_bench {

// Runs `step` once under the profiler and prints the `top` operators by self
// time, then every matrix product shape (aten::mm, aten::addmm), against the
// ceiling in the dtype the products run in.
inline void print_step_profile(const std::function<void()>& step, std::size_t top,
                               at::ScalarType product_dtype = at::kFloat) {
  namespace prof = torch::autograd::profiler;
  prof::enableProfilerLegacy(
      torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                            /*report_input_shapes=*/true));
  const auto start = std::chrono::steady_clock::now();
  step();
  const double wall_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto lists = prof::disableProfilerLegacy();
  struct Total {
    double self_us = 0, total_us = 0;
    int calls = 0;
  };
  std::map<std::string, Total> totals;
  struct Product {
    double us = 0, flops = 0;
    int calls = 0;
  };
  std::map<std::string, Product> products;
  double step_us = 0;  // the outermost events' time
  for (const auto& events : lists) {
    struct Open {
      const prof::LegacyEvent* push;
      double child_us;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kindStr() == "push") {
        stack.push_back({&e, 0.0});
      } else if (e.kindStr() == "pop" && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double us = open.push->cpuElapsedUs(e);
        const std::string name = open.push->name();
        Total& t = totals[name];
        t.self_us += us - open.child_us;
        t.total_us += us;
        ++t.calls;
        if (stack.empty())
          step_us += us;
        else
          stack.back().child_us += us;
        // mm(a [m, k], b [k, n]); addmm(bias, a, b); garden::mm, kernels::linear's
        // products on Garden's GEMM, recorded as mm.
        const auto shapes = open.push->shapes();
        const std::size_t a = name == "aten::mm" || name == "garden::mm" ? 0
                              : name == "aten::addmm"                    ? 1
                                                                         : shapes.size();
        if (a + 1 < shapes.size() && shapes[a].size() == 2 && shapes[a + 1].size() == 2) {
          const auto& x = shapes[a];
          const auto& y = shapes[a + 1];
          Product& product =
              products[name + " [" + std::to_string(x[0]) + "," + std::to_string(x[1]) + "]x[" +
                       std::to_string(y[0]) + "," + std::to_string(y[1]) + "]"];
          product.us += us;
          product.flops += 2.0 * x[0] * x[1] * y[1];
          ++product.calls;
        }
      }
    }
  }
  std::vector<std::pair<std::string, Total>> sorted(totals.begin(), totals.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
  std::printf("%-50s %10s %10s %6s\n", "operator", "self_ms", "total_ms", "calls");
  for (std::size_t i = 0; i < std::min(sorted.size(), top); ++i)
    std::printf("%-50s %10.2f %10.2f %6d\n", sorted[i].first.c_str(),
                sorted[i].second.self_us / 1000, sorted[i].second.total_us / 1000,
                sorted[i].second.calls);
  std::vector<std::pair<std::string, Product>> by_shape(products.begin(), products.end());
  std::sort(by_shape.begin(), by_shape.end(),
            [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  std::printf("\n%-50s %10s %10s %6s\n", "matrix product", "ms", "GFLOP/s", "calls");
  Product all;
  for (const auto& [shape, p] : by_shape) {
    std::printf("%-50s %10.2f %10.1f %6d\n", shape.c_str(), p.us / 1000, p.flops / p.us / 1000,
                p.calls);
    all.us += p.us;
    all.flops += p.flops;
    all.calls += p.calls;
  }
  if (all.us <= 0) return;
  const double ceiling = gemm_ceiling_gflops(product_dtype);
  const double rate = all.flops / all.us / 1000;
  std::printf(
      "\nall %d matrix products: %.1f ms of the profiled step's %.1f ms (%.1f ms of it outside "
      "any recorded operator), %.1f GFLOP, %.1f GFLOP/s = %.0f %% of the %.1f GFLOP/s ceiling "
      "measured now (the GEMM share of a step that did only these)\n",
      all.calls, all.us / 1000, wall_us / 1000, std::max(0.0, wall_us - step_us) / 1000,
      all.flops / 1e9, rate, 100 * rate / ceiling, ceiling);
}

}  // namespace garden_bench
