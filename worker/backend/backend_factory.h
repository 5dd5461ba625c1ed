// The compute backends as the rest of psformer sees them: one made by choice, and the CUDA devices
// this machine has. Code outside worker/ (the launcher's commands) includes this header, never a
// backend's own (cpu_backend.h, cuda/...), so that the backends stay free to change.
#ifndef PSFORMER_WORKER_BACKEND_BACKEND_FACTORY_H_
#define PSFORMER_WORKER_BACKEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/cuda_device.h"  // CudaDeviceCount, CudaDeviceMemoryBytes, CudaUnavailableReason,
                                              // CudaBuildDescription

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

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_BACKEND_FACTORY_H_
