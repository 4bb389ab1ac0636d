#include "garden/platform/blas.h"

#include <ATen/Context.h>

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>

#include "garden/base/cpu_isa.h"
#include "garden/base/error.h"
#include "garden/base/logging.h"

namespace garden {

const MatrixLibraries& matrix_libraries() {
  static const MatrixLibraries libraries = [] {
    MatrixLibraries m;
    m.sgemm = reinterpret_cast<MatrixLibraries::BlasSgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
    m.dgemm = reinterpret_cast<MatrixLibraries::BlasDgemm>(dlsym(RTLD_DEFAULT, "dgemm_"));
    const char* env = std::getenv("GARDEN_GEMM");
    const std::string wanted = env ? env : "";
    if (!wanted.empty() && wanted != "onednn" && wanted != "blas")
      throw Error("GARDEN_GEMM=" + wanted + ": must be onednn or blas");
    if (wanted != "blas")
      m.dnnl_sgemm =
          reinterpret_cast<MatrixLibraries::DnnlSgemm>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
    if (m.dnnl_sgemm) {
      struct DnnlVersion {
        int major, minor, patch;
        const char* hash;
        unsigned cpu_runtime, gpu_runtime;
      };
      using DnnlVersionFn = const DnnlVersion* (*)();
      m.gemm_name = "oneDNN sgemm";
      if (auto version = reinterpret_cast<DnnlVersionFn>(dlsym(RTLD_DEFAULT, "dnnl_version"))) {
        const DnnlVersion* v = version();
        m.gemm_name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                      "." + std::to_string(v->patch) + " sgemm";
      }
    } else {
      m.gemm_name = m.sgemm ? "BLAS" : "none";
    }
    return m;
  }();
  return libraries;
}

const std::string& gemm_library() { return matrix_libraries().gemm_name; }

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

}  // namespace

std::string openblas_kernels() {
  using CoreName = char* (*)();
  void* symbol = dlsym(RTLD_DEFAULT, "openblas_get_corename");
  if (symbol == nullptr) return "";
  const char* name = reinterpret_cast<CoreName>(symbol)();
  return name != nullptr ? name : "";
}

std::string best_openblas_kernels_for_cpu() {
  if (cpu_isa().avx512_skylakex) return "SkylakeX";
  if (cpu_isa().avx2_fma) return "Haswell";
  return "";
}

std::string openblas_kernels_to_force(const std::string& loaded, const std::string& best) {
  const int have = openblas_kernel_rank(loaded), could = openblas_kernel_rank(best);
  return have >= 0 && could > have ? best : "";
}

std::string openblas_setting() {
  const std::string kernels = openblas_kernels();
  if (kernels.empty()) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* own = std::getenv(kOpenBlasOwnChoiceVariable);
  std::string line = kernels + " kernels";
  if (forced != nullptr && own != nullptr)
    line +=
        std::string(" (OPENBLAS_CORETYPE set by garden: OpenBLAS chose ") + own + " for this CPU)";
  else if (forced != nullptr)
    line += std::string(" (OPENBLAS_CORETYPE=") + forced + " as the user set)";
  return line;
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
