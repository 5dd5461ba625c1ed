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

// CUDA's versions are 1000 * major + 10 * minor (13000 is 13.0).
std::string CudaBuildDescription() {
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int driver = 0;
  const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  cudaGetLastError();
  return "built with CUDA " + version(CUDART_VERSION) + "; " +
         (has_driver ? "driver for CUDA " + version(driver) : std::string("no CUDA driver here"));
}

}  // namespace psformer
