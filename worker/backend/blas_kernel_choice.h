// Which OpenBLAS kernel set a psformer process computes with, and why.
//
// OpenBLAS picks its kernels once, when the library loads (before main), from the CPU it
// recognises, or from OPENBLAS_CORETYPE. A distribution's OpenBLAS that is older than the CPU
// does not recognise it and falls back to an old core: Debian 12's 0.3.21 runs its SSE3
// (Prescott) kernels on a recent Xeon, 2.4x slower for the demo's step than its AVX-512 ones
// (measured on an Intel Xeon VM; the kernel sets side by side: bench/RESULTS.md). So the choice
// is made again here by the CPU's own features (CPUID), and where the library's is older the
// process runs itself again (exec) with OPENBLAS_CORETYPE set.
//
// The rules, in order (ChooseBlasKernels):
//   1. OPENBLAS_CORETYPE set by psformer (kChosenByPsformerVariable equal to it): keep it.
//   2. OPENBLAS_CORETYPE set by the user: kept when this CPU can run it (with a warning where
//      the library runs another set for the name, as 0.3.21 runs Prescott for Katmai); a set
//      this CPU lacks the instructions for (it would die of SIGILL at the first matrix product)
//      or a name OpenBLAS does not know (it silently runs another) is an error.
//   3. Unset: the library's own choice when it is as new as the features allow, else the best
//      set for the features (ForFeatures), by re-exec.
#ifndef PSFORMER_WORKER_BACKEND_BLAS_KERNEL_CHOICE_H_
#define PSFORMER_WORKER_BACKEND_BLAS_KERNEL_CHOICE_H_

#include <optional>
#include <string>

#include "common/status.h"

namespace psformer {

// The instruction-set extensions the kernel sets need, as CPUID reports them; the AVX and
// AVX-512 ones only where the OS also saves their registers (XGETBV).
struct CpuFeatures {
  bool sse3 = false;
  bool ssse3 = false;
  bool sse4_1 = false;
  bool sse4_2 = false;
  bool avx = false;
  bool fma = false;   // FMA3
  bool fma4 = false;  // AMD's Bulldozer kernels use it
  bool avx2 = false;
  bool avx512 = false;  // F, BW, DQ, VL and CD: what OpenBLAS's SkylakeX kernels use
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};

// This CPU's features.
CpuFeatures DetectCpuFeatures();

// "AVX-512 + BF16", "AVX2 + FMA", ...: the best level of `features`, for the log.
std::string DescribeFeatures(const CpuFeatures& features);

// The fastest kernel set of OpenBLAS 0.3.21 (Debian 12) for `features`, for single-precision
// matrix products: SkylakeX (AVX-512), Haswell (AVX2 + FMA), Sandybridge (AVX), else Prescott.
// (Cooperlake and Sapphirerapids add only bf16 and AMX products, which psformer does not use.)
std::string BestKernelsFor(const CpuFeatures& features);

// A kernel set's name as OpenBLAS knows it, case-insensitively: its canonical spelling, and
// whether `features` can run it. nullopt for a name OpenBLAS has no kernels of.
struct KernelSet {
  std::string name;  // "Haswell"
  int level = 0;     // 0 SSE*, 1 AVX, 2 AVX2, 3 AVX-512: newer is faster
  bool runnable = false;
  std::string needs;  // "AVX-512", for the error when !runnable
};
std::optional<KernelSet> FindKernelSet(const std::string& name, const CpuFeatures& features);

struct BlasKernelChoice {
  // Set: run the process again with OPENBLAS_CORETYPE = *reexec_with.
  std::optional<std::string> reexec_with;
  // Why the kernels that run are these, for the log (BlasKernelReason).
  std::string reason;
  // Non-empty: to print at start-up (the user's OPENBLAS_CORETYPE runs another set than named).
  std::string warning;
};

// The rules above, for the library's own choice `library_kernels` (openblas_get_corename), the
// variables `coretype` (OPENBLAS_CORETYPE) and `chosen_by_psformer` (kChosenByPsformerVariable),
// unset when nullopt. Fails (InvalidArgument, naming the variable, what is wrong and what to set
// instead) for a user's OPENBLAS_CORETYPE this CPU cannot run or OpenBLAS does not know.
StatusOr<BlasKernelChoice> ChooseBlasKernels(const std::string& library_kernels, const CpuFeatures& features,
                                             const std::optional<std::string>& coretype,
                                             const std::optional<std::string>& chosen_by_psformer);

// Set beside OPENBLAS_CORETYPE when psformer chose it, so that the process after the exec (and
// every role it starts, which inherit both) knows it was not the user's.
inline constexpr char kChosenByPsformerVariable[] = "PSFORMER_OPENBLAS_CORETYPE";

// For main(), before anything computes: ChooseBlasKernels for this process; re-execs it
// (/proc/self/exe, the same argv) with the variables set where the rules say so. Returns the
// error of ChooseBlasKernels; a failed exec only costs speed and is reported on stderr.
Status UseBestBlasKernels(char** argv);

// Why this process runs the kernels it runs, for the line that names them (backend_factory.h):
// "OpenBLAS's own detection, the best for this CPU's AVX2 + FMA", "OPENBLAS_CORETYPE=SkylakeX
// chosen by psformer for this CPU's AVX-512", "OPENBLAS_CORETYPE=Prescott" (the user's), ...
std::string BlasKernelReason();

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_BLAS_KERNEL_CHOICE_H_
