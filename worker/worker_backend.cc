#include "worker/worker_backend.h"

#include <string>
#include <utility>

#include "common/logging.h"
#include "common/role_threads.h"
#include "worker/backend/cpu_backend.h"
#ifdef PSFORMER_HAVE_CUDA
#include "worker/backend/cuda/cuda_backend.h"
#endif

namespace psformer {

StatusOr<std::unique_ptr<Backend<float>>> MakeWorkerBackend(const proto::JobConfig& config, int gpu) {
  if (gpu < 0) {
    const int threads = WorkerThreads(config);
    PSF_LOG(Info) << "computing on the CPU, " << threads << " thread(s), OpenBLAS kernels " << BlasCoreName();
    return std::unique_ptr<Backend<float>>(std::make_unique<CpuBackend<float>>(threads));
  }
#ifdef PSFORMER_HAVE_CUDA
  CudaBackendOptions cuda;
  cuda.device = gpu;
  cuda.gemm_math = config.cluster().compute_dtype() == proto::ClusterConfig::BF16 ? GemmMath::kBf16 : GemmMath::kFp32;
  PSF_ASSIGN_OR_RETURN(auto backend, CudaBackend::Create(cuda));
  PSF_LOG(Info) << "computing on CUDA device " << gpu << " (" << backend->device_name() << "), "
                << GemmMathName(backend->gemm_math()) << " matrix products";
  return std::unique_ptr<Backend<float>>(std::move(backend));
#else
  return Status::Unimplemented("--gpu " + std::to_string(gpu) +
                               ": this psformer was built without the CUDA backend (PSFORMER_CUDA=OFF or no nvcc)");
#endif
}

}  // namespace psformer
