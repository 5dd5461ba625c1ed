// Whether CUDA devices are present, for the launcher (how many GPU workers to start) and for
// tests (skip when none). Safe to call in every build: without the CUDA backend compiled in
// (PSFORMER_CUDA=OFF or no nvcc), and on a machine without a driver or device, it returns 0.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_DEVICE_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

namespace psformer {

// The number of visible CUDA devices; 0 when there is no driver, no device, or no CUDA build.
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
