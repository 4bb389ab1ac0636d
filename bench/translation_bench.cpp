// Translation training-step benchmark (issue 5): Garden's Seq2SeqTransformer
// against the PyTorch peer bench/peers/peer_translation.py, measured
// alternately in one run.
//
//   translation_bench [--preset tiny|base|demo] [--threads 1] [--steps 5] [--warmup 2] [--batch 64]
//                     [--length 32] [--rounds 3] [--peer PATH|none] [--peer_malloc glibc|garden]
//                     [--device cpu|cuda|cuda:N] [--amp none|bf16] [--cuda-graph] [--profile]
//                     [--replay] [--smoke]
//
// The model is the peer's `tiny` preset: shared embedding (V 8000, d 256),
// 3 + 3 pre-layer-norm layers, 4 heads, feed-forward 1024 with ReLU, biases,
// (`base`: V 32000, d 512, 6 + 6 layers, 8 heads, feed-forward 2048;
// `demo`: wmt_transformer/demo's sizes, V 3000, d 128, 2 + 2 layers, 4 heads,
// feed-forward 512),
// final layer norms, dropout 0.1 on sublayer outputs, attention
// probabilities and the feed-forward activation; AdamW at a constant 1e-4
// with weight decay 0.01 (torch.optim.AdamW's default) and no clipping.
//
// --device runs both sides on that device (the peer with the same flag),
// --amp bf16 both under bfloat16 autocast (forward and loss). Each step
// ends with the loss read to the host on both sides (the peer's
// loss.item()), so a GPU step's time includes its kernels.
//
// --cuda-graph (CUDA): Garden's step runs through garden::StepGraphs, captured
// as a CUDA graph after two eager steps and replayed, with the optimizer's
// numbers read on the device (Optimizer::set_capturable); the peer runs
// eagerly as before.
//
// --peer none: Garden's side alone, the same rounds and summary without the
// peer's figures (for comparing Garden with itself: settings, builds).
//
// Each round runs the peer once (its own warmup and timed steps, one JSON
// line) and then Garden in this process. Tokens/s counts source + target
// tokens, 2 * batch * length, as the peer does (the batch has no padding).
//
// The loss is not the same formula: the peer uses PyTorch's
// cross_entropy(label_smoothing=0.1) (smoothing spread over all V ids,
// label included); Garden uses Model Garden's padded_cross_entropy_loss
// (0.9 on the label, 0.1 / (V - 1) elsewhere, minus the soft target's
// entropy). Both are one log-softmax over [B*T, V] plus a few reductions.
//
// --profile times forward, loss, backward and optimizer apart (Garden only,
// no peer; on a GPU each phase waits for its kernels) and, on the CPU, prints
// LibTorch's operator profile and the matrix products by shape
// (bench/profile.h).
//
// --replay records one step's matrix products, then times them alone beside
// the step, round by round (bench/replay.h): the GEMM share a step that did
// nothing else would reach with this library.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "garden/config/optimization.h"
#include "garden/core/cuda_graph.h"
#include "garden/core/precision.h"
#include "garden/platform/allocator.h"
#include "garden/platform/process.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/modeling/transformer.h"
#include "garden/optim/optimizer.h"
#include "peer.h"
#include "profile.h"
#include "replay.h"

// With CUDA's headers (a CUDA LibTorch): the caching allocator's statistics.
#if __has_include(<c10/cuda/CUDACachingAllocator.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define GARDEN_BENCH_CUDA_MEMORY 1
#endif

namespace {

namespace fs = std::filesystem;

// The most GPU memory LibTorch's caching allocator had handed out in this
// process (what the peer's torch.cuda.max_memory_allocated reports), in
// MiB; nullopt off a GPU or without CUDA's headers.
std::optional<double> garden_max_memory_allocated_mib(const c10::Device& device) {
#ifdef GARDEN_BENCH_CUDA_MEMORY
  if (device.is_cuda()) {
    // Entry 0 of the statistics is the aggregate over pool kinds.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        device.has_index() ? device.index() : c10::DeviceIndex(0));
    return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);
  }
#endif
  (void)device;
  return std::nullopt;
}
using Clock = std::chrono::steady_clock;

using Options = garden_bench::StepOptions;
const char* const kUsage =
    "translation_bench [--preset tiny|base|demo] [--threads N] [--steps S] [--warmup W] "
    "[--batch B] [--length T] [--rounds R] [--peer PATH|none] [--peer_malloc glibc|garden] "
    "[--device cpu|cuda|cuda:N] [--amp none|bf16] [--cuda-graph] [--profile] [--replay] [--smoke]";

Options parse(int argc, char** argv) {
  Options defaults;
  defaults.preset = "tiny";
  defaults.batch = 64;
  defaults.length = 32;
  const Options o =
      garden_bench::parse_step_options(argc, argv, defaults, {"tiny", "base", "demo"}, kUsage);
  try {
    const c10::Device device(o.device);
    if (device.is_cuda() && !torch::cuda::is_available())
      garden_bench::usage("--device " + o.device + ": this LibTorch has no CUDA device", kUsage);
    if (!device.is_cpu() && !device.is_cuda())
      garden_bench::usage("--device must be cpu, cuda or cuda:N, got '" + o.device + "'", kUsage);
  } catch (const c10::Error&) {
    garden_bench::usage("--device must be cpu, cuda or cuda:N, got '" + o.device + "'", kUsage);
  }
  if (o.cuda_graph && o.device.rfind("cuda", 0) != 0)
    garden_bench::usage("--cuda-graph needs --device cuda or cuda:N", kUsage);
  if (o.cuda_graph && o.profile)
    garden_bench::usage("--profile times the phases of an eager step: leave out --cuda-graph",
                        kUsage);
  return o;
}

// The peer's presets: width, layers (each side), heads, feed-forward, vocabulary.
struct Preset {
  int64_t width, layers, heads, ffn, vocab;
};
Preset preset_of(const std::string& name) {
  if (name == "base") return Preset{512, 6, 8, 2048, 32000};
  if (name == "demo") return Preset{128, 2, 4, 512, 3000};
  return Preset{256, 3, 4, 1024, 8000};
}

// The floating-point operations of one training step's matrix products,
// counted from the shapes (2 per multiply-add; backward = 2 x forward: the
// gradients of the inputs and of the weights), for B sentences of T tokens a
// side. Everything else (norms, softmax, dropout, adds, the optimizer) is
// not counted: the share of the GEMM ceiling this reaches is what the step
// gets out of the matrix products.
double matmul_flops_per_step(const Preset& p, int64_t batch, int64_t length) {
  const double n = static_cast<double>(batch * length);  // tokens a side
  const double d = static_cast<double>(p.width), f = static_cast<double>(p.ffn);
  const double attention = 2.0 * 2.0 * static_cast<double>(batch) * length * length * d;  // QK, PV
  const double encoder_layer = 2.0 * n * (3 * d * d + d * d + 2 * d * f) + attention;
  const double decoder_layer =
      2.0 * n * (3 * d * d + d * d + d * d + 2 * d * d + d * d + 2 * d * f) + 2 * attention;
  const double logits = 2.0 * n * d * static_cast<double>(p.vocab);
  const double forward = static_cast<double>(p.layers) * (encoder_layer + decoder_layer) + logits;
  return 3.0 * forward;
}

// The model, optimizer and fixed synthetic batch of one Garden run.
class GardenStep {
 public:
  explicit GardenStep(const Options& o)
      : vocab_(preset_of(o.preset).vocab),
        device_(o.device),
        amp_(o.amp == "bf16" ? std::optional<std::string>("bfloat16") : std::nullopt) {
    torch::manual_seed(0);
    const Preset p = preset_of(o.preset);
    garden::nlp::Seq2SeqTransformerOptions m;
    m.vocab_size = p.vocab;
    m.hidden_size = p.width;
    m.num_layers = p.layers;
    m.num_heads = p.heads;
    m.intermediate_size = p.ffn;
    m.activation = "relu";
    m.dropout_rate = m.attention_dropout_rate = m.intermediate_dropout = 0.1;
    m.use_bias = true;
    m.norm_first = true;
    model_ = garden::nlp::Seq2SeqTransformer(m);
    model_->to(device_);
    model_->train();

    garden::config::OptimizationConfig c;
    c.optimizer.type = "adamw";
    c.optimizer.adamw.weight_decay_rate = 0.01;  // torch.optim.AdamW's default
    c.optimizer.adamw.epsilon = 1e-8;            // torch's default (Keras: 1e-7)
    c.optimizer.adamw.gradient_clip_norm = 0.0;  // the peer does not clip
    c.learning_rate.type = "constant";
    c.learning_rate.constant.learning_rate = 1e-4;
    std::vector<garden::optim::NamedParameter> params;
    for (const auto& item : model_->named_parameters())
      params.push_back({item.key(), item.value()});
    optimizer_ = garden::optim::make_optimizer(c, std::move(params));

    src_ = torch::randint(1, vocab_, {o.batch, o.length}, torch::kLong).to(device_);
    tgt_ = torch::randint(1, vocab_, {o.batch, o.length}, torch::kLong).to(device_);
    if (o.cuda_graph) {
      optimizer_->set_capturable(true);
      graphs_ = std::make_unique<garden::StepGraphs>(device_);
    }
  }

  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& p : model_->parameters()) n += p.numel();
    return n;
  }

  double step() {
    if (!graphs_) return eager_step(src_, tgt_).item<double>();
    optimizer_->prepare_step();
    const garden::StepGraphs::Result result =
        graphs_->run({src_, tgt_}, [this](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{eager_step(in[0], in[1])};
        });
    if (result.replayed) optimizer_->count_replayed_step();
    return result.outputs[0].item<double>();
  }

  // The same step, each phase timed: {forward, loss, backward, optimizer} in ms.
  std::array<double, 4> timed_step() {
    std::array<double, 4> ms{};
    // On a GPU each phase waits for its kernels, so the laps split the step's device time.
    const bool cuda = device_.is_cuda();
    if (cuda) torch::cuda::synchronize(device_.index());
    auto lap = [&ms, cuda, this, t = Clock::now()](int i) mutable {
      if (cuda) torch::cuda::synchronize(device_.index());
      const auto now = Clock::now();
      ms[i] = std::chrono::duration<double, std::milli>(now - t).count();
      t = now;
    };
    optimizer_->zero_grad();
    at::Tensor loss;
    {
      const garden::AutocastGuard autocast(amp_, device_);
      at::Tensor logits = model_->forward(src_, tgt_);
      lap(0);
      loss = garden::kernels::padded_cross_entropy_loss(logits, tgt_, kSmoothing).mean();
      lap(1);
    }
    loss.backward();
    lap(2);
    optimizer_->step();
    lap(3);
    return ms;
  }

  // Mean step time in ms over `steps` after `warmup` untimed steps.
  double measure(int warmup, int steps) {
    for (int i = 0; i < warmup; ++i) step();
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
  }

  static constexpr double kSmoothing = 0.1;

 private:
  // Forward and loss, under autocast with --amp bf16.
  // One step on `src` and `tgt`; returns the loss (detached).
  at::Tensor eager_step(const at::Tensor& src, const at::Tensor& tgt) {
    optimizer_->zero_grad();
    at::Tensor loss;
    {
      const garden::AutocastGuard autocast(amp_, device_);
      at::Tensor logits = model_->forward(src, tgt);
      loss = garden::kernels::padded_cross_entropy_loss(logits, tgt, kSmoothing).mean();
    }
    loss.backward();
    optimizer_->step();
    return loss.detach();
  }

  int64_t vocab_;
  c10::Device device_;
  std::optional<std::string> amp_;
  garden::nlp::Seq2SeqTransformer model_{nullptr};
  std::unique_ptr<garden::optim::Optimizer> optimizer_;
  std::unique_ptr<garden::StepGraphs> graphs_;  // --cuda-graph
  at::Tensor src_, tgt_;
};

void profile(GardenStep& garden, const Options& o) {
  for (int i = 0; i < o.warmup; ++i) garden.step();
  std::array<double, 4> total{};
  for (int i = 0; i < o.steps; ++i) {
    const auto ms = garden.timed_step();
    for (int k = 0; k < 4; ++k) total[k] += ms[k] / o.steps;
  }
  std::cout << nlohmann::json{{"forward_ms", garden_bench::rounded(total[0], 1)},
                              {"loss_ms", garden_bench::rounded(total[1], 1)},
                              {"backward_ms", garden_bench::rounded(total[2], 1)},
                              {"optimizer_ms", garden_bench::rounded(total[3], 1)}}
                   .dump()
            << "\n";
  // One more step under LibTorch's profiler, which times the host's side of each operator:
  // on a GPU that is the launch, not the kernel.
  if (c10::Device(o.device).is_cuda()) {
    std::cout << "operator profile: CPU only (on " << o.device
              << " the phases above are the step's device time; time its kernels with nsys or "
                 "ncu)\n";
    return;
  }
  garden_bench::print_step_profile([&] { garden.step(); }, 30, garden_bench::product_dtype(o));
}

}  // namespace

int main(int argc, char** argv) {
  // As garden does. The peer, started from here, inherits the wait policy
  // and OpenBLAS's kernels; Garden's malloc settings only with --peer_malloc
  // garden (by default it runs with glibc's, as PyTorch users run it).
  garden::restart_with_fast_settings(argv, true);
  garden::keep_freed_memory_in_the_heap();
  const Options o = parse(argc, argv);
  at::set_num_threads(o.threads);
  GardenStep garden(o);
  const double tokens = 2.0 * static_cast<double>(o.batch * o.length);
  if (o.profile) {
    profile(garden, o);
    return 0;
  }
  if (o.replay) {
    garden_bench::run_product_replay(
        "translation_step", o, matmul_flops_per_step(preset_of(o.preset), o.batch, o.length) / 1e9,
        [&] { garden.step(); },
        [&](int warmup, int steps) { return garden.measure(warmup, steps); });
    return 0;
  }
  if (o.smoke) {
    const double g = garden.measure(o.warmup, o.steps);
    std::cout << garden_bench::smoke_summary("translation_step", o, garden.parameter_count(),
                                             tokens, g)
                     .dump()
              << "\n";
    return 0;
  }
  const bool alone = o.peer == "none";
  const std::string peer =
      alone ? "none" : garden_bench::find_peer(o.peer, "peer_translation.py", GARDEN_SOURCE_DIR);
  std::cout << "# translation " << o.preset << ", batch " << o.batch << " x " << o.length
            << ", threads " << o.threads << ", device " << o.device << ", amp " << o.amp << ", "
            << o.warmup << " warmup + " << o.steps << " timed steps a round, peer " << peer << "\n"
            << "# loss: Garden = Model Garden's padded_cross_entropy_loss (smoothing 0.1), "
               "peer = torch cross_entropy(label_smoothing=0.1); different values, "
               "comparable cost\n";
  std::printf("%5s %12s %14s %14s %16s %7s\n", "round", "peer_step_ms", "peer_tokens/s",
              "garden_step_ms", "garden_tokens/s", "ratio");
  std::vector<double> ratios, peer_ms, garden_ms, ceilings;
  nlohmann::json peer_info;
  for (int r = 0; r < o.rounds; ++r) {
    // With --peer none the peer's columns print as nan.
    double p = std::nan("");
    if (!alone) {
      peer_info = garden_bench::run_peer_script(peer, o);
      p = peer_info.at("step_ms").get<double>();
      peer_ms.push_back(p);
    }
    // The CPU's GEMM ceiling on either side of Garden's steps, the higher
    // counting (garden_bench::bracketed_ceiling): the share means nothing
    // for a GPU's step.
    const bool cpu = o.device == "cpu";
    const double before =
        cpu ? garden_bench::gemm_ceiling_gflops(garden_bench::product_dtype(o)) : 0;
    const double g = garden.measure(o.warmup, o.steps);
    garden_ms.push_back(g);
    if (cpu)
      ceilings.push_back(garden_bench::bracketed_ceiling(before, garden_bench::product_dtype(o)));
    if (!alone) ratios.push_back(p / g);  // tokens/s garden over peer
    std::printf("%5d %12.1f %14.1f %14.1f %16.1f %7.3f\n", r + 1, p, tokens / p * 1000.0, g,
                tokens / g * 1000.0, p / g);
    std::fflush(stdout);
  }
  nlohmann::json summary =
      garden_bench::step_summary("translation_step", o, garden.parameter_count(), peer_info, tokens,
                                 peer_ms, garden_ms, ratios);
  if (o.device == "cpu")
    garden_bench::add_gemm_share(
        summary, matmul_flops_per_step(preset_of(o.preset), o.batch, o.length) / 1e9, garden_ms,
        peer_ms, ceilings, garden_bench::product_dtype(o));
  if (const auto mib = garden_max_memory_allocated_mib(c10::Device(o.device)))
    summary["garden_max_memory_allocated_mib"] = garden_bench::rounded(*mib, 1);
  std::cout << summary.dump() << "\n";
  return 0;
}
