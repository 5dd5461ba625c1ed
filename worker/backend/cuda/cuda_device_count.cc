// The CudaDeviceCount fallback of builds without the CUDA backend. With it, cuda_device.cu
// defines these functions (this file is compiled into psformer_model in every build).
#include "worker/backend/cuda/cuda_device.h"

#ifndef PSFORMER_HAVE_CUDA
namespace psformer {

int CudaDeviceCount() { return 0; }

uint64_t CudaDeviceMemoryBytes(int) { return 0; }

std::string CudaUnavailableReason() { return "no CUDA device: psformer was built without the CUDA backend"; }

std::string CudaBuildDescription() { return "not built (PSFORMER_CUDA=OFF or no nvcc)"; }

}  // namespace psformer
#endif
