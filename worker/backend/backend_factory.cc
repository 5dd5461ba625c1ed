#include "worker/backend/backend_factory.h"

#include <utility>

#include "worker/backend/blas_kernel_choice.h"
#include "worker/backend/cpu_backend.h"
#ifdef PSFORMER_HAVE_CUDA
#include "worker/backend/cuda/cuda_backend.h"
#endif

namespace psformer {

StatusOr<std::unique_ptr<Backend<float>>> MakeBackend(const BackendChoice& choice, std::string* description) {
  if (choice.gpu < 0) {
    auto cpu = std::make_unique<CpuBackend<float>>(choice.cpu_threads);
    if (description != nullptr) {
      *description = "the CPU, " + std::to_string(cpu->threads()) + " thread(s), OpenBLAS kernels " + BlasCoreName() +
                     " (" + BlasKernelReason() + ")";
    }
    return std::unique_ptr<Backend<float>>(std::move(cpu));
  }
#ifdef PSFORMER_HAVE_CUDA
  CudaBackendOptions cuda;
  cuda.device = choice.gpu;
  cuda.gemm_math = choice.bf16_gemm ? GemmMath::kBf16 : GemmMath::kFp32;
  PSF_ASSIGN_OR_RETURN(auto backend, CudaBackend::Create(cuda));
  if (description != nullptr) {
    *description = "CUDA device " + std::to_string(choice.gpu) + " (" + backend->device_name() + "), " +
                   GemmMathName(backend->gemm_math()) + " matrix products";
  }
  return std::unique_ptr<Backend<float>>(std::move(backend));
#else
  return Status::Unimplemented("--gpu " + std::to_string(choice.gpu) +
                               ": this psformer was built without the CUDA backend (PSFORMER_CUDA=OFF or no nvcc)");
#endif
}

std::string CpuBackendDescription() {
  return BlasLibraryDescription() + "; kernels here: " + BlasCoreName() + " (" + BlasKernelReason() + ")";
}

}  // namespace psformer
