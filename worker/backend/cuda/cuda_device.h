// Whether CUDA devices are present, inside the CUDA backend's library (libpsformer_cuda.so): the
// rest of psformer asks through backend_factory.h (GpuCount, ...), which loads the library; the
// tests of the CUDA backend, linked with it, ask here. On a machine without a driver or device,
// CudaDeviceCount returns 0.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_DEVICE_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

namespace psformer {

// The number of visible CUDA devices; 0 when there is no driver or no device.
int CudaDeviceCount();

// Total memory of CUDA device `device` in bytes; 0 when it cannot be asked (as CudaDeviceCount).
uint64_t CudaDeviceMemoryBytes(int device);

// Why CudaDeviceCount() is 0, as one line ("no CUDA device: ..."), or "" when it is not.
std::string CudaUnavailableReason();

// The CUDA runtime this psformer was built with and the driver it finds ("built with CUDA
// 13.0; driver for CUDA 13.0", "...; no CUDA driver here"), or "not built (PSFORMER_CUDA=OFF or
// no nvcc)".
std::string CudaBuildDescription();

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CUDA_DEVICE_H_
