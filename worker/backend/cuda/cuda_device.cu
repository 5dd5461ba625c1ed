// CudaDeviceCount for builds with the CUDA backend (see cuda_device.h).
#include <cuda_runtime.h>

#include "worker/backend/cuda/cuda_device.h"

namespace psformer {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not sticky, but clear it for later callers
    return 0;
  }
  return count;
}

uint64_t CudaDeviceMemoryBytes(int device) {
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return properties.totalGlobalMem;
}

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  return count == 0 ? "no CUDA device: the driver reports 0 devices" : "";
}

}  // namespace psformer
