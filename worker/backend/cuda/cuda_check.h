// Turns CUDA runtime and cuBLAS failures into a message naming the call, the file and the line,
// then aborts. Backend operations return void (the Backend<T> contract): a failing kernel or
// library call mid-step is a broken device or a programming error, not a condition the model code
// can recover from. Construction-time failures (no device, bad ordinal) are reported as Status by
// CudaBackend::Create instead. Included only by CUDA translation units.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_CHECK_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace psformer::cuda_internal {

[[noreturn]] void CudaFailed(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void CublasFailed(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace psformer::cuda_internal

#define PSF_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                       \
    const cudaError_t _psf_err = (call);                                                                     \
    if (_psf_err != cudaSuccess) ::psformer::cuda_internal::CudaFailed(_psf_err, #call, __FILE__, __LINE__); \
  } while (0)

#define PSF_CUBLAS_CHECK(call)                                                                                         \
  do {                                                                                                                 \
    const cublasStatus_t _psf_st = (call);                                                                             \
    if (_psf_st != CUBLAS_STATUS_SUCCESS) ::psformer::cuda_internal::CublasFailed(_psf_st, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the next synchronisation.
#define PSF_CUDA_CHECK_LAUNCH(kernel_name) PSF_CUDA_CHECK(cudaPeekAtLastError())

namespace psformer::cuda_internal {

// Makes `device` the calling thread's where it is not: a thread that never chose one acts on
// device 0, and its first CUDA call makes a context there, so that every worker of a node whose
// data-path threads wait on their GPU's events would hold memory on GPU 0 and share it.
// (cudaGetDevice reads the thread's choice; it makes no context.)
inline void UseDevice(int device) {
  int current = -1;
  const cudaError_t got = cudaGetDevice(&current);
  if (got == cudaSuccess && current == device) return;
  if (got != cudaSuccess) (void)cudaGetLastError();  // not kept for the next launch's check
  PSF_CUDA_CHECK(cudaSetDevice(device));
}

}  // namespace psformer::cuda_internal

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CUDA_CHECK_H_
