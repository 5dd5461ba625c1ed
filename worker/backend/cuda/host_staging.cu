#include <algorithm>
#include <cstring>

#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/host_staging.h"

namespace psformer {
namespace {

constexpr size_t kMinBlockBytes = 64 << 10;  // a base batch's token ids are ~100 KB

}  // namespace

HostStaging::~HostStaging() {
  for (Block& b : blocks_) {
    cudaEventSynchronize(b.read);
    cudaEventDestroy(b.read);
    cudaFreeHost(b.host);
  }
}

HostStaging::Block& HostStaging::FreeBlock(size_t bytes) {
  for (Block& b : blocks_) {
    if (b.bytes < bytes) continue;
    const cudaError_t state = cudaEventQuery(b.read);
    if (state == cudaSuccess) return b;
    if (state != cudaErrorNotReady) PSF_CUDA_CHECK(state);
    // Not an error, but the runtime keeps it as the thread's last one: the next launch's check
    // (cudaPeekAtLastError) would take it for that launch's failure.
    (void)cudaGetLastError();
  }
  Block b;
  b.bytes = std::max(bytes, kMinBlockBytes);
  PSF_CUDA_CHECK(cudaHostAlloc(&b.host, b.bytes, cudaHostAllocDefault));
  PSF_CUDA_CHECK(cudaEventCreateWithFlags(&b.read, cudaEventDisableTiming));
  blocks_.push_back(b);
  return blocks_.back();
}

void HostStaging::Copy(CUstream_st* stream, void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  Block& b = FreeBlock(bytes);
  std::memcpy(b.host, host_src, bytes);
  PSF_CUDA_CHECK(cudaMemcpyAsync(device_dst, b.host, bytes, cudaMemcpyHostToDevice, stream));
  PSF_CUDA_CHECK(cudaEventRecord(b.read, stream));
}

}  // namespace psformer
