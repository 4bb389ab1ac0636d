#include "garden/core/runtime.h"

#include <torch/torch.h>

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/kernels/convolution.h"
#include "garden/platform/allocator.h"
#include "garden/platform/blas.h"
#include "garden/platform/cpu_share.h"
#include "garden/platform/process.h"
#include "garden/platform/threads.h"

namespace garden {

std::optional<int64_t> checkpoint_seed(const std::string& model_dir) {
  std::error_code ec;
  if (model_dir.empty() || !std::filesystem::is_directory(model_dir, ec)) return std::nullopt;
  try {
    const auto latest = latest_checkpoint(model_dir);
    if (!latest) return std::nullopt;
    const nlohmann::json meta = read_checkpoint_meta(*latest);
    if (!meta.contains("params")) return std::nullopt;
    const YAML::Node seed = YAML::Load(meta.at("params").get<std::string>())["runtime"]["seed"];
    if (!seed || !seed.IsScalar()) return std::nullopt;
    const auto value = seed.as<int64_t>();
    constexpr int64_t kExact = int64_t{1} << 53;  // sent to the workers as a double
    if (value <= -kExact || value >= kExact) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;  // the restore names what is wrong with the checkpoint
  }
}

void finalize_config(config::ExperimentConfig& params, distribute::ProcessGroup* process_group,
                     std::optional<int64_t> resumed_seed) {
  if (params.locked()) return;
  if (!params.runtime.seed) {
    // A resumed run keeps the seed its checkpoint was trained with; a new one
    // draws it (below 2^31, exact in a double).
    const int64_t own =
        resumed_seed ? *resumed_seed : static_cast<int64_t>(std::random_device{}() & 0x7fffffff);
    if (resumed_seed && (!process_group || process_group->is_chief()))
      log_info() << "runtime.seed is not set: resuming with the checkpoint's seed " << own;
    if (process_group) {
      // Every worker has the same config: the chief's seed for all.
      const double mine = process_group->is_chief() ? static_cast<double>(own) : 0.0;
      params.runtime.seed = static_cast<int64_t>(process_group->sum({mine}, "the chief's seed")[0]);
    } else {
      params.runtime.seed = own;
    }
  }
  if (params.task) {
    params.task->resolve_from_files();
    auto& train = params.task->train_data_config();
    auto& validation = params.task->validation_data_config();
    if (!train.seed) train.seed = *params.runtime.seed;
    // runtime.seed + 1, kept in range when runtime.seed is the largest int.
    if (!validation.seed)
      validation.seed = *params.runtime.seed == std::numeric_limits<int64_t>::max()
                            ? 0
                            : *params.runtime.seed + 1;
  }
  config::validate_config(params);
  for (const std::string& line : config::compatibility_warnings(params)) log_warning() << line;
  params.lock();
}

void apply_runtime(const config::RuntimeConfig& runtime) {
  const std::string policy = openmp_wait_policy();
  bool spinning = false;  // 0 kept to one thread: libgomp spins here
  if (runtime.intra_op_parallelism_threads > 0) {
    at::set_num_threads(static_cast<int>(runtime.intra_op_parallelism_threads));
  } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    // libgomp's default wait policy spins its threads after each parallel
    // region, on the cores OpenBLAS's threads need: every core is used only
    // with PASSIVE waits, which garden's commands start with; a program of
    // the user's that did not gets one thread.
    std::string upper = policy;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const int cores = available_cores();  // the affinity, within the cgroup's CPU limit
    spinning = cores > 1 && upper != "PASSIVE";
    at::set_num_threads(spinning ? 1 : cores);
    // Garden chose the count: it follows what other processes leave free.
    if (!spinning) enable_cpu_share(cores);
  }
  // For train.log (the file alone: on stderr it would come before a one-line
  // error), once per process.
  const std::string& gemm = gemm_library();  // a bad GARDEN_GEMM stops here, at start-up
  static bool logged = false;
  if (!logged) {
    logged = true;
    const int threads = at::get_num_threads();
    std::ostringstream line;
    line << "threads: " << threads << " LibTorch intra-op (Garden's kernels on "
         << parallel_for_threads() << ")"
         << (spinning ? " (runtime.intra_op_parallelism_threads 0 is every core only with "
                        "OMP_WAIT_POLICY=PASSIVE, which garden's commands set)"
                      : "")
         << ", OMP_WAIT_POLICY="
         << (!policy.empty() ? policy
             : threads > 1   ? "unset (OpenMP threads spin between parallel regions)"
                             : "unset");
    if (const std::string spin = openmp_spin_setting(); !spin.empty()) line << ", " << spin;
    line << ", OPENBLAS_THREAD_TIMEOUT="
         << (std::getenv("OPENBLAS_THREAD_TIMEOUT") ? std::getenv("OPENBLAS_THREAD_TIMEOUT")
                                                    : "unset")
         << ", matrix products of Garden's layers: " << gemm << ", malloc: " << malloc_setting()
         << ", cpu share: " << cpu_share_setting();
    if (const std::string blas = openblas_setting(); !blas.empty()) line << ", OpenBLAS: " << blas;
    log_to_file(LogLevel::kInfo, line.str());
  }
  if (runtime.inter_op_parallelism_threads > 0) {
    try {
      at::set_num_interop_threads(static_cast<int>(runtime.inter_op_parallelism_threads));
    } catch (const c10::Error&) {
      // LibTorch allows this once per process, before any parallel work.
      log_warning() << "inter_op_parallelism_threads can be set only once per process; kept "
                    << at::get_num_interop_threads();
    }
  }
  if (runtime.seed) torch::manual_seed(static_cast<uint64_t>(*runtime.seed));
  const torch::Device device(runtime.device);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw Error("runtime.device is '" + runtime.device +
                "' but this LibTorch has no CUDA device; use runtime.device=cpu");
  kernels::set_convolution_algorithm(
      kernels::parse_convolution_algorithm(runtime.convolution_algorithm));
  if (runtime.convolution_algorithm == "winograd" && !device.is_cuda() &&
      !kernels::winograd_unavailable_reason().empty())
    throw Error("runtime.convolution_algorithm is 'winograd' but " +
                kernels::winograd_unavailable_reason() + "; use auto or direct");
  warn_if_slow_blas();
}

}  // namespace garden
