// Warp and block reductions with a fixed combination order (butterfly over lanes, then warps in
// index order), so a reduction gives the same bits on every run whatever the scheduling.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_REDUCE_CUH_
#define PSFORMER_WORKER_BACKEND_CUDA_REDUCE_CUH_

#include <cuda_runtime.h>

namespace psformer::cuda_kernels {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

template <typename T>
__device__ inline T WarpSum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds one T per warp (32 at most).
// REQUIRES: blockDim.x a multiple of 32; called by every thread of the block.
template <typename T>
__device__ inline T BlockSum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous BlockSum
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  return WarpSum(total);
}

// Grid-stride loop index helpers.
__device__ inline size_t GlobalThread() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline size_t GridThreads() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

}  // namespace psformer::cuda_kernels

#endif  // PSFORMER_WORKER_BACKEND_CUDA_REDUCE_CUH_
