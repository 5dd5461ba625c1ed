// A caching allocator for device memory: freed blocks go to a free list and are handed out again
// to later requests of a similar size, so the training step loop (whose buffers are freed and
// reallocated as batch shapes change) calls cudaMalloc only while shapes still grow.
//
// Blocks are used by the one stream of their backend, so a block freed while kernels that use it
// are still queued can be reused at once: work on a single stream runs in issue order.
// Not thread-safe (one per backend, like the backend itself).
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CACHING_ALLOCATOR_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <map>
#include <unordered_map>

namespace psformer {

struct DeviceMemoryStats {
  size_t in_use_bytes = 0;  // handed out and not yet freed (rounded sizes)
  size_t peak_in_use_bytes = 0;
  size_t reserved_bytes = 0;  // obtained from cudaMalloc, in use or cached
  size_t peak_reserved_bytes = 0;
  size_t device_allocations = 0;  // cudaMalloc calls so far
};

class CachingAllocator {
 public:
  CachingAllocator() = default;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  // Frees every block with cudaFree. REQUIRES: the device is idle (the owner synchronises first).
  ~CachingAllocator();

  // A block of at least `bytes` bytes (uninitialised), 256-byte aligned. When cudaMalloc fails,
  // the cache is released and the call retried once; a second failure aborts with a message that
  // names the size and what is in use.
  void* Allocate(size_t bytes);
  // REQUIRES: ptr came from Allocate of this allocator and was not freed since.
  void Free(void* ptr);
  // Returns cached (free) blocks to the device.
  void ReleaseCache();

  const DeviceMemoryStats& stats() const { return stats_; }

  // Sizes are rounded so that slightly different requests share blocks: to 512 bytes below
  // 1 MiB, to 2 MiB above.
  static size_t RoundSize(size_t bytes);

 private:
  std::multimap<size_t, void*> free_;       // size -> cached block
  std::unordered_map<void*, size_t> used_;  // block -> size
  DeviceMemoryStats stats_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CACHING_ALLOCATOR_H_
