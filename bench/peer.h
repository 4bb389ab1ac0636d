// What the peer benchmarks share: finding a peer script in bench/peers/,
// running it for its JSON line, the statistics of alternating rounds, and
// the step benchmarks' flags and summary line.
#pragma once

#include <sys/resource.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "garden/kernels/gemm.h"
#include "garden/platform/allocator.h"
#include "garden/platform/blas.h"
#include "garden/platform/process.h"

namespace garden_bench {

// `given` (--peer), else bench/peers/<script> of the source tree the
// benchmark was built from (`source_dir`), else of the working directory or
// the nearest of its ancestors that has one (a build copied elsewhere, run
// from its checkout or a folder in it).
// "none" (--peer none) stands for no peer: Garden's side alone.
inline std::string find_peer(const std::string& given, const std::string& script,
                             const std::string& source_dir) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  const fs::path in_source = fs::path(source_dir) / "bench" / "peers" / script;
  if (fs::exists(in_source)) return fs::canonical(in_source).string();
  for (fs::path base = fs::absolute(fs::current_path());; base = base.parent_path()) {
    const fs::path candidate = base / "bench" / "peers" / script;
    if (fs::exists(candidate)) return fs::canonical(candidate).string();
    if (!base.has_relative_path()) break;
  }
  throw std::runtime_error(script + " not found in bench/peers/: pass --peer PATH");
}

// Runs `command` (a peer) and returns the first line of its output that is a
// JSON object.
inline nlohmann::json run_peer_command(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot start: " + command);
  std::string out;
  std::array<char, 4096> buffer;
  while (std::fgets(buffer.data(), buffer.size(), pipe.get())) out += buffer.data();
  for (std::size_t start = 0; start < out.size();) {
    const std::size_t end = std::min(out.find('\n', start), out.size());
    const std::string line = out.substr(start, end - start);
    if (!line.empty() && line.front() == '{') return nlohmann::json::parse(line);
    start = end + 1;
  }
  throw std::runtime_error("the peer printed no JSON line; command: " + command + "\n" + out);
}

// Peak resident set size in MiB of this process (RUSAGE_SELF) or of the
// largest child waited for so far, the peers (RUSAGE_CHILDREN).
inline double peak_rss_mib(int who) {
  struct rusage usage {};
  getrusage(who, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

// The matrix-product ceiling of this machine at the current thread count,
// in `dtype` (float32 by default; bfloat16 for a step under CPU autocast,
// whose products LibTorch runs on oneDNN, with AMX where the CPU has it):
// the best of 5 timings of a 1024 x 1024 x 1024 product, in GFLOP/s. In
// float32 the product is timed both as at::mm (LibTorch's BLAS) and through
// Garden's GEMM where that is another library (oneDNN, core/gemm.h), and the
// faster counts: the ceiling is the fastest product the process can run.
inline double gemm_ceiling_gflops(at::ScalarType dtype = at::kFloat) {
  const at::Tensor a = at::randn({1024, 1024}).to(dtype), b = at::randn({1024, 1024}).to(dtype);
  at::Tensor c = at::mm(a, b);
  const bool garden_gemm = dtype == at::kFloat && garden::gemm_library().rfind("oneDNN", 0) == 0;
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    for (int library = 0; library < (garden_gemm ? 2 : 1); ++library) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < 4; ++i) {
        if (library == 0)
          at::mm_out(c, a, b);
        else
          garden::kernels::sgemm('N', 'N', 1024, 1024, 1024, 1.0f, a.data_ptr<float>(), 1024,
                                 b.data_ptr<float>(), 1024, 0.0f, c.data_ptr<float>(), 1024);
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, 4 * 2.0 * 1024 * 1024 * 1024 / s / 1e9);
    }
  }
  return best;
}

// A round's ceiling: the higher of gemm_ceiling_gflops() measured just
// before Garden's steps (`before`) and just after (measured here). This
// machine's speed moves within seconds (its 1024³ products at 249 to 320
// GFLOP/s within a minute), and one burst measured while another tenant
// held the cores read 158 GFLOP/s, against which a base step's GEMM share
// came to 110 %. The higher of two measurements bracketing
// the steps is the nearer to what the machine could do meanwhile; it can only
// lower a round's share.
inline double bracketed_ceiling(double before, at::ScalarType dtype = at::kFloat) {
  return std::max(before, gemm_ceiling_gflops(dtype));
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// x to `digits` decimals, as the nearest double (so JSON prints it short).
inline double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

inline std::vector<double> rounded_all(std::vector<double> xs, int digits) {
  for (double& x : xs) x = rounded(x, digits);
  return xs;
}

// The options every step benchmark takes: --threads --steps --warmup --batch
// --length --rounds --peer --profile, and --preset when `presets` is not
// empty. `o` holds the defaults; `usage_line` is printed after a problem.
struct StepOptions {
  std::string preset;
  int threads = 1;
  int steps = 5;
  int warmup = 2;
  int64_t batch = 0;
  int64_t length = 0;
  int rounds = 3;
  std::string peer;  // a path, "" (bench/peers/'s), or "none": Garden's side alone
  bool profile = false;
  // --smoke: one small step of Garden's side alone, no peer (what CI runs so
  // the benchmark keeps building and running; not a figure to quote).
  bool smoke = false;
  // --replay: one step's matrix products recorded, then run again alone
  // beside the step, round by round (bench/replay.h); Garden only, float32
  // on the CPU.
  bool replay = false;
  // --peer_malloc glibc|garden: the peer runs with glibc's malloc settings
  // (default, as PyTorch users run it) or with those Garden sets.
  std::string peer_malloc = "glibc";
  // --device cpu|cuda|cuda:N and --amp none|bf16 (translation_bench; the
  // peer takes the same two flags).
  std::string device = "cpu";
  std::string amp = "none";
  // --cuda-graph: Garden's step captured as a CUDA graph and replayed
  // (translation_bench on CUDA; the peer runs eagerly as before).
  bool cuda_graph = false;
};

// The dtype of the step's products: bfloat16 under --amp bf16 (autocast),
// float32 otherwise; the GEMM ceiling is measured in it.
inline at::ScalarType product_dtype(const StepOptions& o) {
  return o.amp == "bf16" ? at::kBFloat16 : at::kFloat;
}

[[noreturn]] inline void usage(const std::string& problem, const std::string& usage_line) {
  std::cerr << problem << "\nusage: " << usage_line << "\n";
  std::exit(2);
}

inline StepOptions parse_step_options(int argc, char** argv, StepOptions o,
                                      const std::vector<std::string>& presets,
                                      const std::string& usage_line) {
  const auto fail = [&](const std::string& problem) { usage(problem, usage_line); };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--profile") {
      o.profile = true;
      continue;
    }
    if (flag == "--smoke") {
      o.smoke = true;
      continue;
    }
    if (flag == "--replay") {
      o.replay = true;
      continue;
    }
    if (flag == "--cuda-graph") {
      o.cuda_graph = true;
      continue;
    }
    if (i + 1 >= argc) fail(flag + " needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--preset" && !presets.empty())
        o.preset = value;
      else if (flag == "--threads")
        o.threads = std::stoi(value);
      else if (flag == "--steps")
        o.steps = std::stoi(value);
      else if (flag == "--warmup")
        o.warmup = std::stoi(value);
      else if (flag == "--batch")
        o.batch = std::stoll(value);
      else if (flag == "--length")
        o.length = std::stoll(value);
      else if (flag == "--rounds")
        o.rounds = std::stoi(value);
      else if (flag == "--peer")
        o.peer = value;
      else if (flag == "--peer_malloc" && (value == "glibc" || value == "garden"))
        o.peer_malloc = value;
      else if (flag == "--peer_malloc")
        fail("--peer_malloc must be glibc or garden, got '" + value + "'");
      else if (flag == "--device")
        o.device = value;
      else if (flag == "--amp" && (value == "none" || value == "bf16"))
        o.amp = value;
      else if (flag == "--amp")
        fail("--amp must be none or bf16, got '" + value + "'");
      else
        fail("unknown flag " + flag);
    } catch (const std::logic_error&) {
      fail(flag + " expects a number, got '" + value + "'");
    }
  }
  if (!presets.empty() && std::find(presets.begin(), presets.end(), o.preset) == presets.end())
    fail("--preset must be one of the presets, got '" + o.preset + "'");
  if (o.threads < 1 || o.steps < 1 || o.warmup < 0 || o.batch < 1 || o.length < 1 || o.rounds < 1)
    fail("threads, steps, batch, length and rounds must be positive, warmup >= 0");
  if (o.replay && (o.device != "cpu" || o.amp != "none" || o.cuda_graph || o.profile))
    fail(
        "--replay times float32 products on the CPU: leave out --device, --amp, --cuda-graph "
        "and --profile");
  if (o.smoke) {
    o.steps = 1;
    o.warmup = 1;
    o.rounds = 1;
    o.batch = std::min<int64_t>(o.batch, 4);
    o.length = std::min<int64_t>(o.length, 16);
  }
  return o;
}

// Runs a step peer script once with the options' preset, threads, steps,
// warmup, batch and length, and returns its JSON line.
inline nlohmann::json run_peer_script(const std::string& script, const StepOptions& o) {
  // --peer_malloc garden: the malloc settings Garden makes in its own process.
  // GOMP_SPINCOUNT, which garden sets where its products run on oneDNN, is
  // left out: the peer's products run on OpenBLAS, whose threads need the
  // cores that spinning libgomp threads would hold (it runs with passive
  // waits, as it always has).
  const std::string environment =
      std::string("env -u GOMP_SPINCOUNT ") +
      (o.peer_malloc == "garden" ? "MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 " : "");
  // The Python with PyTorch: Debian's python3-torch by default, another
  // (a GPU machine's, say) through PEER_PYTHON.
  const char* python = std::getenv("PEER_PYTHON");
  const std::string command = environment + (python && *python ? python : "/usr/bin/python3") +
                              " '" + script + "' --preset " + o.preset + " --threads " +
                              std::to_string(o.threads) + " --steps " + std::to_string(o.steps) +
                              " --warmup " + std::to_string(o.warmup) + " --batch " +
                              std::to_string(o.batch) + " --length " + std::to_string(o.length) +
                              (o.device == "cpu" ? "" : " --device " + o.device) +
                              (o.amp == "none" ? "" : " --amp " + o.amp);
  return run_peer_command(command);
}

// The alternating rounds of a step benchmark: each round the peer script
// (unless `peer` is "none") and then Garden's `measure` (its mean step in
// ms), each side's JSON line printed as it comes; Garden's is `garden_line`
// of its ms, with the round and the ratio (Garden's rate over the peer's)
// added.
struct Rounds {
  std::vector<double> peer_ms, garden_ms, ratios;
  nlohmann::json peer_info;  // the peer's last line
};
inline Rounds run_rounds(const std::string& peer, const StepOptions& peer_options,
                         const std::function<double()>& measure,
                         const std::function<nlohmann::json(double garden_ms)>& garden_line) {
  Rounds out;
  const bool alone = peer == "none";
  for (int r = 0; r < peer_options.rounds; ++r) {
    double p = 0.0;
    if (!alone) {
      out.peer_info = run_peer_script(peer, peer_options);
      p = out.peer_info.at("step_ms").get<double>();
      nlohmann::json peer_line = out.peer_info;
      peer_line["round"] = r + 1;
      std::cout << peer_line.dump() << "\n" << std::flush;
    }
    const double g = measure();
    out.garden_ms.push_back(g);
    nlohmann::json line = garden_line(g);
    line["round"] = r + 1;
    if (!alone) {
      out.peer_ms.push_back(p);
      out.ratios.push_back(p / g);
      line["ratio"] = rounded(p / g, 3);
    }
    std::cout << line.dump() << "\n" << std::flush;
  }
  return out;
}

// The JSON line of --smoke: Garden's step alone.
inline nlohmann::json smoke_summary(const std::string& bench, const StepOptions& o,
                                    int64_t garden_params, double tokens, double garden_ms) {
  return {{"bench", bench},
          {"smoke", true},
          {"preset", o.preset},
          {"threads", o.threads},
          {"batch", o.batch},
          {"length", o.length},
          {"device", o.device},
          {"amp", o.amp},
          {"cuda_graph", o.cuda_graph},
          {"garden_params", garden_params},
          {"garden_step_ms", rounded(garden_ms, 1)},
          {"garden_tokens_per_s", rounded(tokens / garden_ms * 1000.0, 1)}};
}

// The last JSON line of a step benchmark: the options, both parameter
// counts, and the medians of the alternating rounds (`tokens` per step).
inline nlohmann::json step_summary(const std::string& bench, const StepOptions& o,
                                   int64_t garden_params, const nlohmann::json& peer_info,
                                   double tokens, const std::vector<double>& peer_ms,
                                   const std::vector<double>& garden_ms,
                                   const std::vector<double>& ratios) {
  std::vector<double> rounded_ratios;
  for (double x : ratios) rounded_ratios.push_back(rounded(x, 3));
  nlohmann::json summary = {
      {"bench", bench},
      {"preset", o.preset},
      {"threads", o.threads},
      {"omp_wait_policy", garden::openmp_wait_policy()},
      // Garden's side only: the peer runs without it (run_peer_script).
      {"garden_gomp_spincount", std::getenv("GOMP_SPINCOUNT") ? std::getenv("GOMP_SPINCOUNT") : ""},
      {"garden_malloc", garden::malloc_setting()},
      {"openblas", garden::openblas_setting()},
      {"peer_malloc", o.peer_malloc},
      {"batch", o.batch},
      {"length", o.length},
      {"steps", o.steps},
      {"warmup", o.warmup},
      {"rounds", o.rounds},
      {"garden_params", garden_params},
      {"garden_step_ms_median", rounded(median(garden_ms), 1)},
      {"garden_step_ms", rounded_all(garden_ms, 1)},
      {"garden_tokens_per_s_median", rounded(tokens / median(garden_ms) * 1000.0, 1)},
      {"garden_peak_rss_mib", rounded(peak_rss_mib(RUSAGE_SELF), 1)},
      {"device", o.device},
      {"amp", o.amp},
      {"cuda_graph", o.cuda_graph},
  };
  if (peer_ms.empty()) {  // --peer none
    summary["peer"] = "none";
    return summary;
  }
  summary["peer_params"] = peer_info.value("params", int64_t{0});
  summary["peer_torch"] = peer_info.value("torch", std::string());
  summary["peer_step_ms_median"] = rounded(median(peer_ms), 1);
  summary["peer_tokens_per_s_median"] = rounded(tokens / median(peer_ms) * 1000.0, 1);
  summary["ratio_median"] = rounded(median(ratios), 3);
  summary["ratios"] = rounded_ratios;
  summary["peer_peak_rss_mib"] = rounded(peak_rss_mib(RUSAGE_CHILDREN), 1);
  // The peer reports GPU memory as a number on CUDA and as null on the CPU.
  const auto gpu_memory = peer_info.find("max_memory_allocated_mib");
  if (gpu_memory != peer_info.end() && gpu_memory->is_number())
    summary["peer_max_memory_allocated_mib"] = *gpu_memory;
  return summary;
}

// Adds to a step summary the share of the machine's GEMM ceiling that each
// side's matrix products reach: `gflop` a step over the step time, over the
// ceiling measured in the same round in `ceiling_dtype` (`ceilings`,
// bracketed_ceiling() around Garden's steps, so a drift of the machine's speed
// during the run moves step and ceiling together); the median over rounds,
// and each round's.
inline void add_gemm_share(nlohmann::json& summary, double gflop,
                           const std::vector<double>& garden_ms, const std::vector<double>& peer_ms,
                           const std::vector<double>& ceilings, at::ScalarType ceiling_dtype) {
  std::vector<double> garden_share, peer_share, rounded_ceilings, rounded_shares;
  for (std::size_t r = 0; r < ceilings.size(); ++r) {
    garden_share.push_back(gflop / (garden_ms[r] / 1000.0) / ceilings[r]);
    if (r < peer_ms.size()) peer_share.push_back(gflop / (peer_ms[r] / 1000.0) / ceilings[r]);
    rounded_ceilings.push_back(rounded(ceilings[r], 1));
    rounded_shares.push_back(rounded(garden_share.back(), 3));
  }
  summary["matmul_gflop_per_step"] = rounded(gflop, 2);
  summary["gemm_ceiling_gflops"] = rounded(median(ceilings), 1);
  summary["gemm_ceiling_dtype"] = ceiling_dtype == at::kBFloat16 ? "bfloat16" : "float32";
  summary["garden_gemm"] = garden::gemm_library();
  summary["gemm_ceilings_gflops"] = rounded_ceilings;
  summary["garden_gemm_share"] = rounded(median(garden_share), 3);
  summary["garden_gemm_shares"] = rounded_shares;
  if (!peer_share.empty()) summary["peer_gemm_share"] = rounded(median(peer_share), 3);
}

}  // namespace garden_bench
