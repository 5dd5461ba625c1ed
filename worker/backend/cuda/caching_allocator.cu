// The caching device allocator (caching_allocator.h) and the CUDA error reporters.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/logging.h"
#include "worker/backend/cuda/caching_allocator.h"
#include "worker/backend/cuda/cuda_check.h"

namespace psformer {
namespace cuda_internal {

void CudaFailed(cudaError_t error, const char* call, const char* file, int line) {
  PSF_LOG(Error) << "CUDA error at " << file << ":" << line << ": " << call << " failed: " << cudaGetErrorName(error)
                 << " (" << cudaGetErrorString(error) << ")";
  std::abort();
}

void CublasFailed(cublasStatus_t status, const char* call, const char* file, int line) {
  PSF_LOG(Error) << "cuBLAS error at " << file << ":" << line << ": " << call
                 << " failed: " << cublasGetStatusName(status) << " (" << cublasGetStatusString(status) << ")";
  std::abort();
}

}  // namespace cuda_internal

namespace {
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;
// A cached block serves a request when it is at most this much larger: bounds the waste of
// handing a big block to a small buffer.
constexpr size_t kMaxSlackNumerator = 5;  // 5/4 = 1.25x
constexpr size_t kMaxSlackDenominator = 4;
}  // namespace

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::~CachingAllocator() {
  // Leaked buffers (used_) are freed too: the device memory goes with the backend either way.
  for (auto& [size, ptr] : free_) cudaFree(ptr);
  for (auto& [ptr, size] : used_) cudaFree(ptr);
}

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundSize(bytes);
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size / kMaxSlackDenominator * kMaxSlackNumerator + kSmallRound) {
    void* ptr = it->second;
    const size_t block = it->first;
    free_.erase(it);
    used_[ptr] = block;
    stats_.in_use_bytes += block;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    return ptr;
  }
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state before retrying
    ReleaseCache();
    err = cudaMalloc(&ptr, size);
  }
  if (err != cudaSuccess) {
    PSF_LOG(Error) << "out of GPU memory: cannot allocate " << size << " bytes (" << stats_.in_use_bytes
                   << " bytes in use, " << stats_.reserved_bytes << " reserved): " << cudaGetErrorString(err);
    std::abort();
  }
  used_[ptr] = size;
  ++stats_.device_allocations;
  stats_.reserved_bytes += size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.in_use_bytes += size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return ptr;
}

void CachingAllocator::Free(void* ptr) {
  auto it = used_.find(ptr);
  PSF_CHECK(it != used_.end() && "freeing a pointer this allocator did not hand out");
  stats_.in_use_bytes -= it->second;
  free_.emplace(it->second, ptr);
  used_.erase(it);
}

void CachingAllocator::ReleaseCache() {
  if (free_.empty()) return;
  // Blocks may still be read by queued work only if their owner freed them early; the owner's
  // stream is synchronised by cudaFree's implicit device synchronisation.
  for (auto& [size, ptr] : free_) {
    PSF_CUDA_CHECK(cudaFree(ptr));
    stats_.reserved_bytes -= size;
  }
  free_.clear();
}

}  // namespace psformer
