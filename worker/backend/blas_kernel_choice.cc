#include "worker/backend/blas_kernel_choice.h"

#include <cpuid.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "worker/backend/cpu_backend.h"

namespace psformer {
namespace {

// OpenBLAS's x86-64 kernel sets (driver/others/dynamic.c's names), the level of the best
// extension each uses and what a CPU needs to run it.
struct KnownKernels {
  const char* name;
  int level;
  const char* needs;
  bool (*runs)(const CpuFeatures&);
};

bool AnyX86(const CpuFeatures&) { return true; }
bool HasSse3(const CpuFeatures& f) { return f.sse3; }
bool HasSsse3(const CpuFeatures& f) { return f.ssse3; }
bool HasSse41(const CpuFeatures& f) { return f.sse4_1; }
bool HasSse42(const CpuFeatures& f) { return f.sse4_2; }
bool HasAvx(const CpuFeatures& f) { return f.avx; }
bool HasAvxFma4(const CpuFeatures& f) { return f.avx && f.fma4; }
bool HasAvxFma(const CpuFeatures& f) { return f.avx && f.fma; }
bool HasAvx2Fma(const CpuFeatures& f) { return f.avx2 && f.fma; }
bool HasAvx512(const CpuFeatures& f) { return f.avx512; }
bool HasAvx512Bf16(const CpuFeatures& f) { return f.avx512 && f.avx512_bf16; }
bool HasAmx(const CpuFeatures& f) { return f.avx512 && f.avx512_bf16 && f.amx_bf16; }

constexpr KnownKernels kKnownKernels[] = {
    {"Katmai", 0, "SSE", AnyX86},
    {"Coppermine", 0, "SSE", AnyX86},
    {"Northwood", 0, "SSE2", AnyX86},
    {"Athlon", 0, "SSE2", AnyX86},
    {"Opteron", 0, "SSE2", AnyX86},
    {"Prescott", 0, "SSE3", HasSse3},
    {"Banias", 0, "SSE3", HasSse3},
    {"Opteron_SSE3", 0, "SSE3", HasSse3},
    {"Barcelona", 0, "SSE3", HasSse3},
    {"Nano", 0, "SSE3", HasSse3},
    {"Atom", 0, "SSSE3", HasSsse3},
    {"Core2", 0, "SSSE3", HasSsse3},
    {"Bobcat", 0, "SSSE3", HasSsse3},
    {"Penryn", 0, "SSE4.1", HasSse41},
    {"Dunnington", 0, "SSE4.1", HasSse41},
    {"Nehalem", 0, "SSE4.2", HasSse42},
    {"Sandybridge", 1, "AVX", HasAvx},
    {"Bulldozer", 1, "AVX and FMA4", HasAvxFma4},
    {"Piledriver", 1, "AVX and FMA", HasAvxFma},
    {"Steamroller", 1, "AVX and FMA", HasAvxFma},
    {"Excavator", 2, "AVX2 and FMA", HasAvx2Fma},
    {"Haswell", 2, "AVX2 and FMA", HasAvx2Fma},
    {"Zen", 2, "AVX2 and FMA", HasAvx2Fma},
    {"SkylakeX", 3, "AVX-512 (F, BW, DQ, VL, CD)", HasAvx512},
    {"Cooperlake", 3, "AVX-512 with BF16", HasAvx512Bf16},
    {"Sapphirerapids", 3, "AVX-512 with BF16 and AMX", HasAmx},
};

BlasKernelChoice Keep(std::string reason, std::string warning = "") {
  BlasKernelChoice choice;
  choice.reason = std::move(reason);
  choice.warning = std::move(warning);
  return choice;
}

BlasKernelChoice Reexec(const std::string& kernels, std::string reason) {
  BlasKernelChoice choice;
  choice.reexec_with = kernels;
  choice.reason = std::move(reason);
  return choice;
}

bool SameName(const std::string& a, const std::string& b) { return strcasecmp(a.c_str(), b.c_str()) == 0; }

std::optional<std::string> Variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse3 = c & bit_SSE3;
  f.ssse3 = c & bit_SSSE3;
  f.sse4_1 = c & bit_SSE4_1;
  f.sse4_2 = c & bit_SSE4_2;
  const bool osxsave = c & bit_OSXSAVE;
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;       // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // and opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  f.avx = os_avx && (c & bit_AVX);
  f.fma = f.avx && (c & bit_FMA);
  if (__get_cpuid(0x80000001, &a, &b, &c, &d)) f.fma4 = f.avx && (c & bit_FMA4);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = f.avx && (b & bit_AVX2);
    f.avx512 = os_avx512 && (b & bit_AVX512F) && (b & bit_AVX512BW) && (b & bit_AVX512DQ) && (b & bit_AVX512VL) &&
               (b & bit_AVX512CD);
    f.amx_bf16 = os_amx && (d & (1u << 22));
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512 && (a1 & (1u << 5));
  }
  return f;
}

std::string DescribeFeatures(const CpuFeatures& f) {
  if (f.avx512) return f.avx512_bf16 ? "AVX-512 + BF16" : "AVX-512";
  if (f.avx2 && f.fma) return "AVX2 + FMA";
  if (f.avx) return "AVX";
  return f.sse3 ? "SSE3" : "SSE2";
}

std::string BestKernelsFor(const CpuFeatures& f) {
  if (f.avx512) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  if (f.avx) return "Sandybridge";
  return "Prescott";
}

std::optional<KernelSet> FindKernelSet(const std::string& name, const CpuFeatures& features) {
  for (const KnownKernels& k : kKnownKernels) {
    if (SameName(name, k.name)) return KernelSet{k.name, k.level, k.runs(features), k.needs};
  }
  return std::nullopt;
}

StatusOr<BlasKernelChoice> ChooseBlasKernels(const std::string& library_kernels, const CpuFeatures& features,
                                             const std::optional<std::string>& coretype,
                                             const std::optional<std::string>& chosen_by_psformer) {
  const std::string cpu = DescribeFeatures(features);
  const std::string best = BestKernelsFor(features);
  if (coretype && chosen_by_psformer && *coretype == *chosen_by_psformer) {
    // Inherited from a psformer on another CPU (a role started on another host) when this
    // CPU cannot run it or would run better: chosen again, for this CPU.
    const std::optional<KernelSet> chosen = FindKernelSet(*coretype, features);
    if (chosen && chosen->runnable && chosen->name == best) {
      return Keep("OPENBLAS_CORETYPE=" + *coretype + " chosen by psformer for this CPU's " + cpu);
    }
    if (!SameName(*coretype, best)) {
      return Reexec(best,
                    "psformer chose " + *coretype + " for another CPU: it runs " + best + " for this CPU's " + cpu);
    }
  }
  if (coretype) {
    const std::optional<KernelSet> wanted = FindKernelSet(*coretype, features);
    if (!wanted && SameName(library_kernels, *coretype)) {
      // A newer OpenBLAS's set, which the library runs as named: the user's to vouch for.
      return Keep("OPENBLAS_CORETYPE=" + *coretype);
    }
    if (!wanted) {
      return Status::InvalidArgument("OPENBLAS_CORETYPE=" + *coretype +
                                     " is not a kernel set OpenBLAS knows (it runs " + library_kernels +
                                     " instead); unset it (psformer then runs kernels of this CPU's level, " + cpu +
                                     ", OpenBLAS's own choice or " + best + ") or name one such as " + best);
    }
    if (!wanted->runnable) {
      return Status::InvalidArgument("OPENBLAS_CORETYPE=" + *coretype + " needs " + wanted->needs +
                                     ", which this CPU lacks (it has " + cpu +
                                     "): its first matrix product would die of an illegal instruction; unset it "
                                     "(psformer then runs kernels of this CPU's level, OpenBLAS's own choice or " +
                                     best + ") or name one this CPU runs, such as " + best);
    }
    if (!SameName(library_kernels, wanted->name)) {
      // Older names (Katmai, Athlon) or sets this build lacks: the library runs another set it
      // has, which this CPU runs. The user's choice still stands, with what it means said.
      const std::string what = "OPENBLAS_CORETYPE=" + *coretype + ": this OpenBLAS has no " + wanted->name +
                               " kernels and runs its " + library_kernels + " kernels instead";
      return Keep(what, what);
    }
    return Keep("OPENBLAS_CORETYPE=" + *coretype);
  }
  const std::optional<KernelSet> detected = FindKernelSet(library_kernels, features);
  const int best_level = FindKernelSet(best, features)->level;
  if (detected && detected->level >= best_level) {
    return Keep("OpenBLAS's own detection, the best for this CPU's " + cpu);
  }
  return Reexec(best, "OpenBLAS's own detection chose " + library_kernels + ", older than this CPU's " + cpu +
                          " allows: psformer runs " + best);
}

Status UseBestBlasKernels(char** argv) {
  PSF_ASSIGN_OR_RETURN(BlasKernelChoice choice,
                       ChooseBlasKernels(BlasCoreName(), DetectCpuFeatures(), Variable("OPENBLAS_CORETYPE"),
                                         Variable(kChosenByPsformerVariable)));
  if (!choice.warning.empty()) std::cerr << "psformer: warning: " << choice.warning << "\n";
  if (!choice.reexec_with) return Status::Ok();
  // The library reads OPENBLAS_CORETYPE only when it loads, so only a new image of this
  // process can run other kernels.
  setenv("OPENBLAS_CORETYPE", choice.reexec_with->c_str(), 1);
  setenv(kChosenByPsformerVariable, choice.reexec_with->c_str(), 1);
  execv("/proc/self/exe", argv);
  std::cerr << "psformer: warning: " << choice.reason << ", but could not run itself again (" << std::strerror(errno)
            << "); computing with OpenBLAS's " << BlasCoreName() << " kernels\n";
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChosenByPsformerVariable);
  return Status::Ok();
}

std::string BlasKernelReason() {
  auto choice = ChooseBlasKernels(BlasCoreName(), DetectCpuFeatures(), Variable("OPENBLAS_CORETYPE"),
                                  Variable(kChosenByPsformerVariable));
  if (!choice.ok()) return choice.status().message();
  // Only psformer's main() re-execs; a process that did not (a test binary) runs the library's.
  if (choice->reexec_with) return "OpenBLAS's own detection; psformer would run " + *choice->reexec_with;
  return choice->reason;
}

}  // namespace psformer
