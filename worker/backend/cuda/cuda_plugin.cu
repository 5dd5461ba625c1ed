// The entry of libpsformer_cuda.so (worker/backend/cuda_plugin.h): the table through which the
// binary reaches the CUDA backend and the devices.
#include "worker/backend/backend_factory.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/cuda_device.h"
#include "worker/backend/cuda_plugin.h"

namespace psformer {
namespace {

StatusOr<std::unique_ptr<Backend<float>>> MakeCudaBackend(const BackendChoice& choice, std::string* description) {
  CudaBackendOptions cuda;
  cuda.device = choice.gpu;
  cuda.gemm_math = choice.bf16_gemm ? GemmMath::kBf16 : GemmMath::kFp32;
  PSF_ASSIGN_OR_RETURN(auto backend, CudaBackend::Create(cuda));
  if (description != nullptr) {
    *description = "CUDA device " + std::to_string(choice.gpu) + " (" + backend->device_name() + "), " +
                   GemmMathName(backend->gemm_math()) + " matrix products";
  }
  return std::unique_ptr<Backend<float>>(std::move(backend));
}

CudaPlugin MakeTable() {
  CudaPlugin table;
  table.device_count = &CudaDeviceCount;
  table.device_memory_bytes = &CudaDeviceMemoryBytes;
  table.unavailable_reason = &CudaUnavailableReason;
  table.build_description = &CudaBuildDescription;
  table.make_backend = &MakeCudaBackend;
  return table;
}

}  // namespace
}  // namespace psformer

extern "C" __attribute__((visibility("default"))) const psformer::CudaPlugin* psformer_cuda_plugin() {
  static const psformer::CudaPlugin table = psformer::MakeTable();
  return &table;
}
