// ELECTRA pretraining-step benchmark (issue 11): Garden's ElectraPretrainer
// against the PyTorch peer bench/peers/peer_electra.py, measured
// alternately in one run.
//
//   electra_bench [--preset tiny|small] [--threads 1] [--steps 5] [--warmup 2]
//                 [--batch 16] [--length 128] [--rounds 3] [--peer PATH|none] [--peer_malloc
//                 glibc|garden] [--amp none|bf16] [--profile] [--replay] [--smoke]
//
// The model is the peer's preset: `tiny` is vocab 8000, embedding width 128,
// discriminator 128 wide x 4 layers x 2 heads (feed-forward 512), generator
// 32 x 4 x 1 (feed-forward 128); `small` is 30522, 128, 256 x 12 x 4 (1024),
// 64 x 12 x 1 (256). Post-layer-norm blocks, GELU, LayerNorm eps 1e-12,
// dropout 0.1, the generator's word embeddings tied to the discriminator's;
// AdamW at a constant 5e-4 with weight decay 0.01 on every parameter
// (torch.optim.AdamW's semantics: epsilon 1e-8, no clipping).
//
// The batch is the peer's: ids uniform in [1000, V), one segment, no
// padding, P = round(0.15 T) distinct masked positions a row (never position
// 0) whose ids become 103. Loss = MLM + 50 * RTD, both as the peer computes
// them: MLM is the weighted cross-entropy over the masked positions, RTD the
// binary cross-entropy of the discriminator's logits against its labels,
// averaged over input_mask. Tokens/s = batch * length / step time, as the
// peer counts.
//
// Differences that remain: Garden follows Model Garden, so its generator
// also runs the sentence classification head (two small dense layers on
// [CLS]), and its feed-forward has no dropout on the intermediate
// activation (torch's TransformerEncoderLayer has one).
//
// --amp bf16 runs Garden's forward and loss under bfloat16 autocast (on a CPU
// with AMX its products run on oneDNN's AMX kernels), against the peer in
// float32: the peer has no bfloat16 option. The GEMM share is then against
// the bfloat16 ceiling.
//
// --profile times forward, loss, backward and optimizer apart (Garden only,
// no peer) and prints LibTorch's operator profile. --peer none: Garden's side
// alone, the same rounds and summary without the peer's figures.
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
#include "garden/core/precision.h"
#include "garden/kernels/dropout.h"
#include "garden/kernels/gelu.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/modeling/electra_pretrainer.h"
#include "garden/optim/optimizer.h"
#include "garden/platform/allocator.h"
#include "garden/platform/process.h"
#include "peer.h"
#include "profile.h"
#include "replay.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using Options = garden_bench::StepOptions;
const char* const kUsage =
    "electra_bench [--preset tiny|small] [--threads N] [--steps S] [--warmup W] [--batch B] "
    "[--length T] [--rounds R] [--peer PATH|none] [--peer_malloc glibc|garden] [--amp none|bf16] "
    "[--profile] [--replay] [--smoke]";

[[noreturn]] void usage(const std::string& problem) { garden_bench::usage(problem, kUsage); }

Options parse(int argc, char** argv) {
  Options defaults;
  defaults.preset = "tiny";
  defaults.batch = 16;
  defaults.length = 128;
  const Options o =
      garden_bench::parse_step_options(argc, argv, defaults, {"tiny", "small"}, kUsage);
  if (o.device != "cpu")
    garden_bench::usage("electra_bench runs on the CPU: --device is translation_bench's", kUsage);
  if (o.cuda_graph)
    garden_bench::usage("electra_bench runs on the CPU: --cuda-graph is translation_bench's",
                        kUsage);
  if (o.length < 3) usage("--length must be at least 3 ([CLS], a piece, [SEP])");
  if (o.length > 512) usage("--length must be at most 512 (the position table)");
  return o;
}

// The peer's PRESETS: width, layers, heads, feed-forward of one encoder.
garden::nlp::BertEncoderOptions encoder(int64_t vocab, int64_t embedding, int64_t hidden,
                                        int64_t layers, int64_t heads, int64_t ffn) {
  garden::nlp::BertEncoderOptions e;
  e.vocab_size = vocab;
  e.embedding_size = embedding;
  e.hidden_size = hidden;
  e.num_layers = layers;
  e.num_attention_heads = heads;
  e.intermediate_size = ffn;
  e.hidden_activation = "gelu";
  e.dropout_rate = e.attention_dropout_rate = 0.1;
  e.norm_first = false;
  e.norm_epsilon = 1e-12;
  return e;
}

// The floating-point operations of one step's matrix products, counted from
// the shapes as translation_bench counts them (2 per multiply-add; backward =
// 2 x forward): both encoders (the embedding projection where the embedding
// width is not the hidden width; per layer Q, K, V, the output, the two
// feed-forward products and attention's two), the generator's MLM head on its
// P masked positions per row (dense, then the tied vocabulary projection),
// the discriminator's head on every token, and the generator's sentence head
// on [CLS]. Norms, softmax, GELU, dropout and the optimizer are not counted.
double matmul_flops_per_step(const Options& o) {
  const bool tiny = o.preset == "tiny";
  const double vocab = tiny ? 8000 : 30522, embedding = 128;
  const double batch = static_cast<double>(o.batch), length = static_cast<double>(o.length);
  const double tokens = batch * length;
  const double masked = batch * std::max<double>(1, std::llround(0.15 * length));
  const auto encoder = [&](double hidden, double layers, double ffn) {
    const double projection = embedding != hidden ? 2.0 * tokens * embedding * hidden : 0.0;
    const double layer = 2.0 * tokens * (4 * hidden * hidden + 2 * hidden * ffn) +
                         2.0 * 2.0 * batch * length * length * hidden;
    return projection + layers * layer;
  };
  const double discriminator_hidden = tiny ? 128 : 256, generator_hidden = tiny ? 32 : 64;
  const double forward =
      (tiny ? encoder(128, 4, 512) : encoder(256, 12, 1024)) +
      (tiny ? encoder(32, 4, 128) : encoder(64, 12, 256)) +
      2.0 * masked * (generator_hidden * embedding + embedding * vocab) +
      2.0 * tokens * (discriminator_hidden * discriminator_hidden + discriminator_hidden) +
      2.0 * batch * (generator_hidden * generator_hidden + generator_hidden * 2);
  return 3.0 * forward;
}

// The model, optimizer and fixed synthetic batch of one Garden run.
class GardenStep {
 public:
  explicit GardenStep(const Options& o)
      : amp_(o.amp == "bf16" ? std::optional<std::string>("bfloat16") : std::nullopt) {
    torch::manual_seed(0);
    const bool tiny = o.preset == "tiny";
    const int64_t vocab = tiny ? 8000 : 30522;
    garden::nlp::ElectraPretrainerOptions m;
    m.discriminator =
        tiny ? encoder(vocab, 128, 128, 4, 2, 512) : encoder(vocab, 128, 256, 12, 4, 1024);
    m.generator = tiny ? encoder(vocab, 128, 32, 4, 1, 128) : encoder(vocab, 128, 64, 12, 1, 256);
    const int64_t predictions = std::max<int64_t>(1, std::llround(0.15 * o.length));
    m.num_token_predictions = predictions;
    m.tie_embeddings = true;
    model_ = garden::nlp::ElectraPretrainer(m);
    model_->train();

    garden::config::OptimizationConfig c;
    c.optimizer.type = "adamw";
    c.optimizer.adamw.weight_decay_rate = 0.01;  // torch.optim.AdamW's default, on every parameter
    c.optimizer.adamw.epsilon = 1e-8;            // torch's default (Keras: 1e-7)
    c.optimizer.adamw.gradient_clip_norm = 0.0;  // the peer does not clip
    c.learning_rate.type = "constant";
    c.learning_rate.constant.learning_rate = 5e-4;
    std::vector<garden::optim::NamedParameter> params;
    for (const auto& item : model_->named_parameters())
      params.push_back({item.key(), item.value()});
    optimizer_ = garden::optim::make_optimizer(c, std::move(params));

    // The peer's batch: distinct positions in 1 .. T-1 per row, their ids
    // kept as labels and replaced by 103 ([MASK]) in the input.
    const int64_t B = o.batch, T = o.length;
    at::Tensor ids = torch::randint(1000, vocab, {B, T}, torch::kLong);
    std::vector<at::Tensor> rows;
    for (int64_t b = 0; b < B; ++b)
      rows.push_back(torch::randperm(T - 1, torch::kLong).narrow(0, 0, predictions) + 1);
    at::Tensor positions = torch::stack(rows);
    at::Tensor masked_ids = ids.gather(1, positions);
    inputs_["input_word_ids"] = ids.scatter(1, positions, 103);
    inputs_["input_mask"] = torch::ones({B, T}, torch::kLong);
    inputs_["input_type_ids"] = torch::zeros({B, T}, torch::kLong);
    inputs_["masked_lm_positions"] = positions;
    inputs_["masked_lm_ids"] = masked_ids;
    weights_ = torch::ones({B, predictions});
  }

  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& p : model_->parameters()) n += p.numel();
    return n;
  }

  // MLM + 50 * RTD from the model's outputs, the MLM part as
  // ElectraPretrainTask::build_losses computes it.
  at::Tensor loss(const garden::Batch& out) const {
    const at::Tensor lm = out.at("lm_outputs").to(at::kFloat);  // [B, P, V]
    at::Tensor nll = garden::kernels::sparse_cross_entropy_rows(
        lm.reshape({-1, lm.size(2)}), inputs_.at("masked_lm_ids").reshape({-1}));
    at::Tensor w = weights_.reshape({-1});
    at::Tensor mlm = (nll * w).sum() / w.sum().clamp_min(1e-9);
    at::Tensor mask = inputs_.at("input_mask").to(at::kFloat);
    at::Tensor bce = at::binary_cross_entropy_with_logits(
        out.at("disc_logits"), out.at("disc_label"), {}, {}, at::Reduction::None);
    at::Tensor rtd = (bce * mask).sum() / mask.sum();
    return mlm + 50.0 * rtd;
  }

  double step() {
    optimizer_->zero_grad();
    at::Tensor total;
    {
      const garden::AutocastGuard autocast(amp_, torch::kCPU);
      total = loss(model_->forward(inputs_));
    }
    total.backward();
    optimizer_->step();
    return total.item<double>();
  }

  // The same step, each phase timed: {forward, loss, backward, optimizer} in ms.
  std::array<double, 4> timed_step() {
    std::array<double, 4> ms{};
    auto lap = [&ms, t = Clock::now()](int i) mutable {
      const auto now = Clock::now();
      ms[i] = std::chrono::duration<double, std::milli>(now - t).count();
      t = now;
    };
    optimizer_->zero_grad();
    at::Tensor total;
    {
      const garden::AutocastGuard autocast(amp_, torch::kCPU);
      garden::Batch out = model_->forward(inputs_);
      lap(0);
      total = loss(out);
      lap(1);
    }
    total.backward();
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

 private:
  std::optional<std::string> amp_;
  garden::nlp::ElectraPretrainer model_{nullptr};
  std::unique_ptr<garden::optim::Optimizer> optimizer_;
  garden::Batch inputs_;
  at::Tensor weights_;
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
  // One more step under LibTorch's profiler.
  garden_bench::print_step_profile([&] { garden.step(); }, 300, garden_bench::product_dtype(o));
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
  const double tokens = static_cast<double>(o.batch * o.length);
  if (o.profile) {
    profile(garden, o);
    return 0;
  }
  if (o.replay) {
    garden_bench::run_product_replay(
        "electra_step", o, matmul_flops_per_step(o) / 1e9, [&] { garden.step(); },
        [&](int warmup, int steps) { return garden.measure(warmup, steps); });
    return 0;
  }
  if (o.smoke) {
    const double g = garden.measure(o.warmup, o.steps);
    std::cout << garden_bench::smoke_summary("electra_step", o, garden.parameter_count(), tokens, g)
                     .dump()
              << "\n";
    return 0;
  }
  const bool alone = o.peer == "none";
  const std::string peer =
      alone ? "none" : garden_bench::find_peer(o.peer, "peer_electra.py", GARDEN_SOURCE_DIR);
  std::cout << "# electra " << o.preset << ", batch " << o.batch << " x " << o.length
            << ", threads " << o.threads << ", " << o.warmup << " warmup + " << o.steps
            << " timed steps a round, peer " << peer << "\n";
  std::vector<double> ceilings;
  Options peer_options = o;
  peer_options.amp = "none";  // the peer runs in float32 only
  const garden_bench::Rounds rounds = garden_bench::run_rounds(
      peer, peer_options,
      [&] {
        // The ceiling on either side of Garden's steps, the higher counting
        // (garden_bench::bracketed_ceiling).
        const double before = garden_bench::gemm_ceiling_gflops(garden_bench::product_dtype(o));
        const double g = garden.measure(o.warmup, o.steps);
        ceilings.push_back(garden_bench::bracketed_ceiling(before, garden_bench::product_dtype(o)));
        return g;
      },
      [&](double g) {
        return nlohmann::json{{"garden", "libtorch-cpp"},
                              {"task", "electra"},
                              {"preset", o.preset},
                              {"threads", o.threads},
                              {"params", garden.parameter_count()},
                              {"batch", o.batch},
                              {"length", o.length},
                              {"step_ms", garden_bench::rounded(g, 1)},
                              {"tokens_per_s", garden_bench::rounded(tokens / g * 1000.0, 1)}};
      });
  nlohmann::json summary =
      garden_bench::step_summary("electra_step", o, garden.parameter_count(), rounds.peer_info,
                                 tokens, rounds.peer_ms, rounds.garden_ms, rounds.ratios);
  garden_bench::add_gemm_share(summary, matmul_flops_per_step(o) / 1e9, rounds.garden_ms,
                               rounds.peer_ms, ceilings, garden_bench::product_dtype(o));
  if (!alone) summary["peer_amp"] = "none";
  std::cout << summary.dump() << "\n";
  return 0;
}
