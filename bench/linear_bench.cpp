// Dense-layer benchmark (issue 17): kernels::linear's forward and backward (the
// input's, the weight's and the bias's gradients) on the layers of base
// translation and ELECTRA small, with the products that linear transposes
// (a narrowing layer's forward, a widening layer's weight gradient: see
// linear.cpp) and without, alternated call by call in one process, so a
// drift of the machine's speed moves both alike. One JSON line: per layer,
// the median milliseconds each way and their ratio (1 within the noise for
// the layers that transpose nothing: the attention output).
//
//   linear_bench [--rows 2048] [--rounds 15] [--threads 0]   # 0: every core
//   linear_bench --smoke      # CI: 600 rows, 2 rounds; checks both ways agree
//
// With --held, a decoder step's products instead: the forward without
// gradients on a few rows (4 to 256; --rows picks one), through oneDNN's
// sgemm and through the held weights of a kernels::FrozenWeights scope,
// alternated, on the demo's and base translation's decoder layers and
// output projections (--smoke: the demo's, 4 and 64 rows).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "garden/kernels/gemm.h"
#include "garden/kernels/linear.h"
#include "garden/platform/allocator.h"
#include "garden/platform/process.h"
#include "peer.h"

namespace {

struct Options {
  int64_t rows = 2048;
  int rounds = 15;
  int threads = 0;
  bool smoke = false;
  bool held = false;
  bool rows_given = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "linear_bench: " << why
            << "\nusage: linear_bench [--held] [--rows R] [--rounds N] [--threads T] | --smoke "
               "[--held]\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--smoke") {
      o.smoke = true;
      o.rows = 600;
      o.rounds = 2;
      continue;
    }
    if (flag == "--held") {
      o.held = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--rows") {
        o.rows = std::stoll(value);
        o.rows_given = true;
      } else if (flag == "--rounds")
        o.rounds = std::stoi(value);
      else if (flag == "--threads")
        o.threads = std::stoi(value);
      else
        usage("unknown flag " + flag);
    } catch (const std::logic_error&) {
      usage(flag + " " + value + ": not a number");
    }
  }
  if (o.rows < 1 || o.rounds < 1 || o.threads < 0) usage("rows and rounds >= 1, threads >= 0");
  return o;
}

struct Layer {
  const char* name;
  int64_t in, out;
};

double elapsed_us(std::chrono::steady_clock::time_point start, int reps) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() /
         reps;
}

// --held: each decoder layer's forward on a few rows, oneDNN's against the
// held weights', alternated round by round.
int held_products(const Options& o) {
  std::vector<Layer> layers = {{"demo q|k|v", 128, 384},
                               {"demo attention out", 128, 128},
                               {"demo feed-forward in", 128, 512},
                               {"demo feed-forward out", 512, 128},
                               {"demo output projection", 128, 3000}};
  if (!o.smoke)
    for (const Layer& l : std::vector<Layer>{{"base q|k|v", 512, 1536},
                                             {"base attention out", 512, 512},
                                             {"base feed-forward in", 512, 2048},
                                             {"base feed-forward out", 2048, 512},
                                             {"base output projection", 512, 32000}})
      layers.push_back(l);
  std::vector<int64_t> row_counts = {4, 16, 64, 128, 256};
  if (o.smoke) row_counts = {4, 64};
  if (o.rows_given) row_counts = {o.rows};
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  // The held copies last from one timing to the next (each opens its own
  // FrozenWeights).
  const garden::kernels::KeepHeldWeights keep;
  nlohmann::json results = nlohmann::json::array();
  bool agree = true;
  for (const Layer& layer : layers) {
    const at::Tensor w = torch::randn({layer.out, layer.in}) * 0.05;
    const at::Tensor b = torch::randn({layer.out});
    for (const int64_t rows : row_counts) {
      const at::Tensor x = torch::randn({rows, layer.in});
      // Some 20 million multiply-adds a timing.
      const int reps = static_cast<int>(
          std::max<int64_t>(1, 20'000'000 / std::max<int64_t>(1, rows * layer.in * layer.out)));
      at::Tensor outputs[2];
      const auto time = [&](bool held) {
        std::optional<garden::kernels::FrozenWeights> scope;
        if (held) scope.emplace();
        const auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) outputs[held] = garden::kernels::linear(x, w, b);
        return elapsed_us(start, reps);
      };
      time(false);
      time(true);
      std::vector<double> onednn, held;
      for (int r = 0; r < o.rounds; ++r) {
        onednn.push_back(time(false));
        held.push_back(time(true));
      }
      const double worst = (outputs[0] - outputs[1]).abs().max().item<double>() /
                           std::max(outputs[0].abs().max().item<double>(), 1e-30);
      agree = agree && worst < 1e-5;
      results.push_back(
          {{"layer", layer.name},
           {"in", layer.in},
           {"out", layer.out},
           {"rows", rows},
           {"onednn_us", garden_bench::rounded(garden_bench::median(onednn), 2)},
           {"held_us", garden_bench::rounded(garden_bench::median(held), 2)},
           {"speedup",
            garden_bench::rounded(garden_bench::median(onednn) / garden_bench::median(held), 3)},
           {"largest_relative_difference", worst}});
    }
  }
  nlohmann::json summary = {
      {"bench", "linear_held"},         {"rounds", o.rounds}, {"threads", at::get_num_threads()},
      {"gemm", garden::gemm_library()}, {"layers", results},  {"products_agree", agree}};
  std::cout << summary.dump() << std::endl;
  return agree ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  garden::restart_with_fast_settings(argv, true);
  garden::keep_freed_memory_in_the_heap();
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : static_cast<int>(std::thread::hardware_concurrency()));
  if (o.held) return held_products(o);
  const std::vector<Layer> layers = {{"base feed-forward in", 512, 2048},
                                     {"base feed-forward out", 2048, 512},
                                     {"base q|k|v", 512, 1536},
                                     {"base cross k|v", 512, 1024},
                                     {"base attention out", 512, 512},
                                     {"electra_small feed-forward in", 256, 1024},
                                     {"electra_small feed-forward out", 1024, 256},
                                     {"electra_small q|k|v", 256, 768},
                                     {"electra_small attention out", 256, 256}};
  torch::manual_seed(0);
  nlohmann::json results = nlohmann::json::array();
  bool agree = true;
  for (const Layer& layer : layers) {
    const at::Tensor x = torch::randn({o.rows, layer.in}).requires_grad_();
    const at::Tensor w = (torch::randn({layer.out, layer.in}) * 0.05).requires_grad_();
    const at::Tensor b = torch::randn({layer.out}).requires_grad_();
    const at::Tensor g = torch::randn({o.rows, layer.out});
    std::vector<at::Tensor> outputs[2];  // plain, transposed: y, dx, dw, db
    const auto step = [&](bool transposed) {
      garden::kernels::set_linear_transposes(transposed);
      for (const at::Tensor& t : {x, w, b}) t.mutable_grad() = at::Tensor();
      const auto start = std::chrono::steady_clock::now();
      const at::Tensor y = garden::kernels::linear(x, w, b);
      y.backward(g);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      outputs[transposed] = {y.detach(), x.grad(), w.grad(), b.grad()};
      return ms;
    };
    step(false);
    step(true);  // warm-up, each way
    std::vector<double> plain, transposed;
    for (int r = 0; r < o.rounds; ++r) {
      plain.push_back(step(false));
      transposed.push_back(step(true));
    }
    // The same products in another layout: equal to float32's rounding.
    double worst = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const at::Tensor diff = (outputs[0][i] - outputs[1][i]).abs().max();
      const double scale = outputs[0][i].abs().max().item<double>();
      worst = std::max(worst, diff.item<double>() / std::max(scale, 1e-30));
    }
    agree = agree && worst < 1e-5;
    results.push_back(
        {{"layer", layer.name},
         {"in", layer.in},
         {"out", layer.out},
         {"plain_ms", garden_bench::rounded(garden_bench::median(plain), 3)},
         {"transposed_ms", garden_bench::rounded(garden_bench::median(transposed), 3)},
         {"speedup",
          garden_bench::rounded(garden_bench::median(plain) / garden_bench::median(transposed), 3)},
         {"largest_relative_difference", worst}});
  }
  garden::kernels::set_linear_transposes(true);
  nlohmann::json summary = {{"bench", "linear_layers"},
                            {"rows", o.rows},
                            {"rounds", o.rounds},
                            {"threads", at::get_num_threads()},
                            {"gemm", garden::gemm_library()},
                            {"layers", results},
                            {"layouts_agree", agree}};
  std::cout << summary.dump() << std::endl;
  return agree ? 0 : 1;
}
