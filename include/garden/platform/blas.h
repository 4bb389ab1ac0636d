// The matrix-product libraries LibTorch brought into the process (its BLAS,
// and oneDNN where it loaded it as a shared library), found once, and what
// Garden learns about them: which one runs Garden's own products, which
// kernels OpenBLAS chose for this CPU, and whether the BLAS is a slow one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace garden {

// The functions, bound once per process with dlsym in the libraries already
// loaded; null where absent.
struct MatrixLibraries {
  // The Fortran BLAS interface, column-major.
  using BlasSgemm = void (*)(const char*, const char*, const int*, const int*, const int*,
                             const float*, const float*, const int*, const float*, const int*,
                             const float*, float*, const int*);
  using BlasDgemm = void (*)(const char*, const char*, const int*, const int*, const int*,
                             const double*, const double*, const int*, const double*, const int*,
                             const double*, double*, const int*);
  // oneDNN's C API (dnnl.h), row-major; 0 on success.
  using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                            const float*, int64_t, float, float*, int64_t);
  BlasSgemm sgemm = nullptr;
  BlasDgemm dgemm = nullptr;
  // Null also with GARDEN_GEMM=blas.
  DnnlSgemm dnnl_sgemm = nullptr;
  // What runs Garden's own float32 products: "oneDNN 2.6.3 sgemm", "BLAS",
  // or "none".
  std::string gemm_name;
};

// GARDEN_GEMM=blas keeps Garden's products on LibTorch's BLAS; onednn, the
// default, puts them on oneDNN's sgemm where oneDNN is loaded. Another value
// throws garden::Error naming it.
const MatrixLibraries& matrix_libraries();
// matrix_libraries().gemm_name.
const std::string& gemm_library();

// The path of the BLAS library this process uses, from /proc/self/maps
// ("" when none is loaded yet); a LibTorch with MKL linked into it (Python
// PyTorch's wheel) gives "<its libtorch_cpu> (its own mkl)".
std::string loaded_blas_library();
// The lines of the loud warning for the BLAS library at `blas` (a path as
// loaded_blas_library() gives it): empty for OpenBLAS, MKL, BLIS or none.
std::vector<std::string> slow_blas_warning(const std::string& blas);
// Logs slow_blas_warning(loaded_blas_library()), once per process, and a
// warning when OpenBLAS runs kernels older than the CPU can run and the user
// did not choose them (OPENBLAS_CORETYPE unset): a program of the user's that
// does not call restart_with_fast_settings.
void warn_if_slow_blas();

// The kernels the loaded OpenBLAS runs (openblas_get_corename: "SkylakeX",
// "Haswell", "Prescott", ...); "" when the BLAS is not OpenBLAS.
std::string openblas_kernels();
// The fastest of OpenBLAS's x86 kernel families this CPU and its operating
// system can run: "SkylakeX" (AVX-512 F, CD, BW, DQ and VL), "Haswell" (AVX2
// and FMA), or "" (neither, or not x86). OpenBLAS's Cooperlake and
// SapphireRapids kernels add bfloat16 products, which LibTorch does not ask
// OpenBLAS for; their float32 products are SkylakeX's.
std::string best_openblas_kernels_for_cpu();
// `best` when the kernels named `loaded` use narrower vectors than `best`
// (SSE or AVX against AVX2, AVX2 against AVX-512), else "": the
// OPENBLAS_CORETYPE to start with. A name it does not know (another
// architecture, a newer family) is never replaced.
std::string openblas_kernels_to_force(const std::string& loaded, const std::string& best);
// The variable the restart leaves OpenBLAS's own choice in, for the log.
inline constexpr const char* kOpenBlasOwnChoiceVariable = "GARDEN_OPENBLAS_OWN_CHOICE";
// The loaded OpenBLAS's kernels for the log: "SkylakeX kernels (OPENBLAS_CORETYPE
// set by garden: OpenBLAS chose Prescott for this CPU)", "Haswell kernels
// (OPENBLAS_CORETYPE=Haswell as the user set)" or "Haswell kernels"; "" when
// the BLAS is not OpenBLAS.
std::string openblas_setting();

// Sets the threads of the loaded OpenBLAS's own pool (openblas_set_num_threads,
// the runtime form of OPENBLAS_NUM_THREADS); false when the BLAS is not
// OpenBLAS. For code that runs several products at once on threads of its own.
bool set_blas_threads(int threads);

}  // namespace garden
