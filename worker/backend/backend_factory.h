// The compute backends as the rest of psformer sees them: one made by choice, and the CUDA devices
// this machine has. Code outside worker/ (the launcher's commands) includes this header, never a
// backend's own (cpu_backend.h, cuda/...), so that the backends stay free to change. The CUDA
// backend is reached through libpsformer_cuda.so, loaded on first use (cuda_plugin.h).
#ifndef PSFORMER_WORKER_BACKEND_BACKEND_FACTORY_H_
#define PSFORMER_WORKER_BACKEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/backend/backend.h"

namespace psformer {

struct BackendChoice {
  int gpu = -1;            // a CUDA device ordinal, or -1 for the CPU
  int cpu_threads = 0;     // the CPU backend's threads (0 = every core)
  bool bf16_gemm = false;  // CUDA: matrix products in bf16 with fp32 accumulation
};

// The backend `choice` names; `description` (if given) says what it computes with, for a log
// line: "the CPU, 4 thread(s), OpenBLAS kernels Haswell (why: blas_kernel_choice.h)" or "CUDA device 0 (NVIDIA H100), fp32
// matrix products". Unimplemented for a GPU when this psformer was built without the CUDA
// backend; fails as CudaBackend::Create does when the device cannot be used.
StatusOr<std::unique_ptr<Backend<float>>> MakeBackend(const BackendChoice& choice, std::string* description = nullptr);

// What the CPU backend computes with, for `psformer version`: the OpenBLAS library as it
// describes its build, and the kernels it runs on this machine ("OpenBLAS 0.3.21 ...
// DYNAMIC_ARCH ...; kernels here: Haswell").
std::string CpuBackendDescription();

// The CUDA devices this machine has, for the launcher (how many GPU workers to start, and their
// memory) and tests (skip when none). Each loads libpsformer_cuda.so the first time; without it
// (built with PSFORMER_CUDA=OFF, or the library or the CUDA libraries it needs are missing here),
// or without a driver or device, there are 0 GPUs and GpuUnavailableReason says why.
int GpuCount();
uint64_t GpuMemoryBytes(int device);  // 0 when it cannot be asked
// Why GpuCount() is 0, as one line ("no CUDA device: ..."), or "" when it is not.
std::string GpuUnavailableReason();

// For `psformer version`: the CUDA runtime the backend was built with, the driver here and where
// the library was loaded from ("built with CUDA 13.0; driver for CUDA 13.0
// (/opt/psformer/libpsformer_cuda.so)"), or why it is not there.
std::string CudaBackendDescription();

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_BACKEND_FACTORY_H_
