#include "garden/core/runtime.h"

#include <c10/core/Allocator.h>
#include <c10/core/alignment.h>
#include <torch/torch.h>

#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "garden/base/error.h"
#include "garden/base/logging.h"
#include "garden/base/torch_features.h"
#include "garden/config/yaml_io.h"
#include "garden/core/gemm.h"

namespace garden {

void finalize_config(config::ExperimentConfig& params, distribute::ProcessGroup* process_group) {
  if (params.locked()) return;
  if (process_group && !params.runtime.seed) {
    // Every worker has the same config: the chief draws the seed for all
    // (below 2^31, exact in a double).
    const double mine =
        process_group->is_chief() ? static_cast<double>(std::random_device{}() & 0x7fffffff) : 0.0;
    params.runtime.seed = static_cast<int64_t>(process_group->sum({mine}, "the chief's seed")[0]);
  }
  if (!params.runtime.seed) {
    std::random_device device;
    params.runtime.seed = static_cast<int64_t>(device() & 0x7fffffff);
  }
  if (params.task) {
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

namespace {
constexpr const char* kMallocVariables[] = {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                                            "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                                            "GLIBC_TUNABLES"};
bool heap_kept = false;

// LibTorch's CPU allocator with malloc in place of posix_memalign. With
// every size on the heap, glibc's memalign leaves a small chunk after each
// large block it carves (the rest of its over-allocation, kept in the
// thread's cache and so never merged with its neighbours); a freed block is
// then too small for the next request of the same size, which takes fresh
// pages from the top of the heap instead. A loop that makes a new
// [2048, 32000] softmax before freeing the last one page-faulted all 250 MB
// of it on every pass, and the heap grew by as much each time. Asking malloc
// for a little more and aligning inside the block lets a freed block serve
// the next request of its size exactly. The block's address is kept just
// before the data, so the data pointer alone frees it (LibTorch's raw
// allocations need that).
void free_aligned(void* data) {
  if (data != nullptr) std::free(static_cast<void**>(data)[-1]);
}

class HeapCpuAllocator final : public c10::Allocator {
 public:
#if GARDEN_HAS_ALLOCATOR_COPY_DATA
  c10::DataPtr allocate(size_t bytes) override { return make(bytes); }
  void copy_data(void* destination, const void* source, size_t count) const override {
    std::memcpy(destination, source, count);
  }
#else
  c10::DataPtr allocate(size_t bytes) const override { return make(bytes); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &free_aligned; }

 private:
  static c10::DataPtr make(size_t bytes) {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes == 0) return {nullptr, nullptr, &free_aligned, cpu};
    constexpr size_t kAlignment = c10::gAlignment;
    void* block = std::malloc(bytes + sizeof(void*) + kAlignment - 1);
    TORCH_CHECK(block != nullptr, "DefaultCPUAllocator: not enough memory: you tried to allocate ",
                bytes, " bytes.");
    const auto first = reinterpret_cast<std::uintptr_t>(block) + sizeof(void*);
    void* data = reinterpret_cast<void*>((first + kAlignment - 1) &
                                         ~static_cast<std::uintptr_t>(kAlignment - 1));
    static_cast<void**>(data)[-1] = block;
    return {data, data, &free_aligned, cpu};
  }
};
}  // namespace

namespace {
// OpenBLAS's x86 kernels, by the widest vectors they use: 2 for AVX-512, 1
// for AVX2 with FMA, 0 for the older families (SSE to AVX), -1 for a name
// not listed here (another architecture, or a family newer than this list,
// which is left alone).
int openblas_kernel_rank(const std::string& name) {
  static const std::map<std::string, int> ranks = {
      {"sapphirerapids", 2}, {"cooperlake", 2},  {"skylakex", 2},
      {"haswell", 1},        {"zen", 1},         {"unknown", 0},
      {"katmai", 0},         {"coppermine", 0},  {"northwood", 0},
      {"prescott", 0},       {"banias", 0},      {"atom", 0},
      {"core2", 0},          {"penryn", 0},      {"dunnington", 0},
      {"nehalem", 0},        {"athlon", 0},      {"opteron", 0},
      {"opteron_sse3", 0},   {"barcelona", 0},   {"nano", 0},
      {"sandybridge", 0},    {"bobcat", 0},      {"bulldozer", 0},
      {"piledriver", 0},     {"steamroller", 0}, {"excavator", 0}};
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto found = ranks.find(lower);
  return found == ranks.end() ? -1 : found->second;
}

// What OpenBLAS chose on its own before garden set OPENBLAS_CORETYPE (for
// the log), passed through the restart.
constexpr const char* kOpenBlasOwnChoice = "GARDEN_OPENBLAS_OWN_CHOICE";
// OpenBLAS's threads wait 2^14 TSC ticks (about 8 us) for the next product,
// then sleep; its default, 2^28 (about 0.1 s at 2 GHz), keeps them spinning
// through the work between products.
constexpr const char* kOpenBlasThreadTimeout = "14";
// libgomp's spins before a waiting thread sleeps (each a pause instruction;
// libgomp counts 100,000 as about a millisecond) when Garden's products run
// on oneDNN, whose threads are libgomp's own: a step's parallel regions
// follow each other within microseconds, and a thread that slept is woken
// through the kernel for the next one. Set with OMP_WAIT_POLICY=PASSIVE,
// whose own count is 0.
constexpr const char* kGompSpinCount = "100000";
// Set with it, so that the log can say garden chose the count, not the
// user.
constexpr const char* kGompSpinCountByGarden = "GARDEN_SET_GOMP_SPINCOUNT";

// Whether Garden's own products run on oneDNN (libgomp's threads), not on
// the BLAS: a bad GARDEN_GEMM is reported later, by apply_runtime.
bool products_on_onednn() {
  try {
    return gemm_library().rfind("oneDNN", 0) == 0;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

std::string openblas_kernels() {
  using CoreName = char* (*)();
  void* symbol = dlsym(RTLD_DEFAULT, "openblas_get_corename");
  if (symbol == nullptr) return "";
  const char* name = reinterpret_cast<CoreName>(symbol)();
  return name != nullptr ? name : "";
}

std::string best_openblas_kernels_for_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's checks include the operating system's support (XGETBV) for the
  // AVX and AVX-512 registers.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

std::string openblas_kernels_to_force(const std::string& loaded, const std::string& best) {
  const int have = openblas_kernel_rank(loaded), could = openblas_kernel_rank(best);
  return have >= 0 && could > have ? best : "";
}

void restart_with_fast_settings(char** argv, bool passive_openmp_waits) {
  std::vector<const char*> set;  // what this call set, undone if execv fails
  if (passive_openmp_waits && std::getenv("OMP_WAIT_POLICY") == nullptr &&
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0) {
    set.push_back("OMP_WAIT_POLICY");
    if (std::getenv("GOMP_SPINCOUNT") == nullptr && products_on_onednn() &&
        setenv("GOMP_SPINCOUNT", kGompSpinCount, 1) == 0 &&
        setenv(kGompSpinCountByGarden, "1", 1) == 0) {
      set.push_back("GOMP_SPINCOUNT");
      set.push_back(kGompSpinCountByGarden);
    }
  }
  // Empty when the BLAS is not OpenBLAS: then neither variable is set.
  const std::string own = openblas_kernels();
  if (passive_openmp_waits && !own.empty() && std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr &&
      std::getenv("GOTO_THREAD_TIMEOUT") == nullptr &&
      setenv("OPENBLAS_THREAD_TIMEOUT", kOpenBlasThreadTimeout, 1) == 0)
    set.push_back("OPENBLAS_THREAD_TIMEOUT");
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const std::string force = openblas_kernels_to_force(own, best_openblas_kernels_for_cpu());
    if (!force.empty() && setenv("OPENBLAS_CORETYPE", force.c_str(), 1) == 0) {
      set.push_back("OPENBLAS_CORETYPE");
      if (setenv(kOpenBlasOwnChoice, own.c_str(), 1) == 0) set.push_back(kOpenBlasOwnChoice);
    }
  }
  if (set.empty()) return;
  execv("/proc/self/exe", argv);
  for (const char* name : set) unsetenv(name);  // no /proc, or not allowed: go on as started
}

std::string openblas_setting() {
  const std::string kernels = openblas_kernels();
  if (kernels.empty()) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* own = std::getenv(kOpenBlasOwnChoice);
  std::string line = kernels + " kernels";
  if (forced != nullptr && own != nullptr)
    line +=
        std::string(" (OPENBLAS_CORETYPE set by garden: OpenBLAS chose ") + own + " for this CPU)";
  else if (forced != nullptr)
    line += std::string(" (OPENBLAS_CORETYPE=") + forced + " as the user set)";
  return line;
}

std::string openmp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy ? policy : "";
}

namespace {
// For train.log: "GOMP_SPINCOUNT=N", naming garden where it set it; "" when
// unset.
std::string openmp_spin_setting() {
  const char* count = std::getenv("GOMP_SPINCOUNT");
  if (count == nullptr) return "";
  return std::string("GOMP_SPINCOUNT=") + count +
         (std::getenv(kGompSpinCountByGarden) != nullptr
              ? " (set by garden: Garden's products run on oneDNN)"
              : "");
}
}  // namespace

void keep_freed_memory_in_the_heap() {
  for (const char* name : kMallocVariables)
    if (std::getenv(name) != nullptr) return;
  heap_kept = mallopt(M_MMAP_MAX, 0) == 1 &&
              mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
  if (heap_kept) {
    static HeapCpuAllocator allocator;
    c10::SetAllocator(c10::DeviceType::CPU, &allocator, /*priority=*/1);
  }
}

std::string malloc_setting() {
  if (heap_kept) return "heap only, freed memory kept";
  for (const char* name : kMallocVariables)
    if (const char* value = std::getenv(name))
      return std::string("as the user set (") + name + "=" + value + ")";
  return "glibc's default";
}

int parallel_for_threads() {
  const int threads = at::get_num_threads();
  // One slot per thread, each written only by its own thread.
  std::vector<char> took(static_cast<std::size_t>(std::max(threads, 1)), 0);
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    const int thread = at::get_thread_num();
    if (thread >= 0 && thread < threads) took[static_cast<std::size_t>(thread)] = 1;
  });
  return static_cast<int>(std::count(took.begin(), took.end(), 1));
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void apply_runtime(const config::RuntimeConfig& runtime) {
  const std::string policy = openmp_wait_policy();
  bool spinning = false;  // 0 kept to one thread: libgomp spins here
  if (runtime.intra_op_parallelism_threads > 0) {
    at::set_num_threads(static_cast<int>(runtime.intra_op_parallelism_threads));
  } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    // libgomp's default wait policy spins its threads after each parallel
    // region, on the cores OpenBLAS's threads need: two threads then ran a
    // step 0.4x as fast as one (docs/PERFORMANCE.md). garden's commands
    // start with PASSIVE (libgomp takes it in any case); a program of the
    // user's that did not gets one.
    std::string upper = policy;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const int cores = usable_cores();
    spinning = cores > 1 && upper != "PASSIVE";
    at::set_num_threads(spinning ? 1 : cores);
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
         << ", matrix products of Garden's layers: " << gemm << ", malloc: " << malloc_setting();
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
  warn_if_slow_blas();
}

std::string loaded_blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string libtorch_cpu;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libblas.so") != std::string::npos ||
        path.find("libopenblas") != std::string::npos || path.find("libmkl") != std::string::npos)
      return path;
    if (libtorch_cpu.empty() && path.find("libtorch_cpu") != std::string::npos) libtorch_cpu = path;
  }
  // Python PyTorch's wheel links MKL into libtorch_cpu itself.
  if (at::hasMKL() && !libtorch_cpu.empty()) return libtorch_cpu + " (its own mkl)";
  return "";
}

std::vector<std::string> slow_blas_warning(const std::string& blas) {
  if (blas.empty() || blas.find("openblas") != std::string::npos ||
      blas.find("mkl") != std::string::npos || blas.find("blis") != std::string::npos)
    return {};
  return {"**************************************************************",
          "SLOW BLAS: " + blas + " is the reference BLAS; matrix products run",
          "about 25x slower. Install libopenblas0-pthread (scripts/setup.sh does).",
          "**************************************************************"};
}

bool set_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  void* symbol = dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  if (symbol == nullptr || threads < 1) return false;
  reinterpret_cast<SetThreads>(symbol)(threads);
  return true;
}

void warn_if_slow_blas() {
  static bool warned = false;
  if (warned) return;
  warned = true;
  for (const auto& line : slow_blas_warning(loaded_blas_library())) log_warning() << line;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice
  const std::string kernels = openblas_kernels();
  const std::string best = best_openblas_kernels_for_cpu();
  if (!openblas_kernels_to_force(kernels, best).empty())
    log_warning() << "OpenBLAS runs its " << kernels << " kernels on a CPU that can run its "
                  << best << " ones (it does not know this CPU's model), so matrix products are "
                  << "several times slower; start the program with OPENBLAS_CORETYPE=" << best
                  << " (garden's commands set it for themselves)";
}

}  // namespace garden
