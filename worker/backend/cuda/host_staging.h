// HostStaging: small host-to-device copies that never make the launching thread wait. Each copy's
// bytes are first copied into a pinned block no earlier copy still reads, and the DMA from there
// is enqueued on the stream; an event recorded behind it frees the block again. Blocks are made
// as needed (a step's few token-id copies use a handful, reused every step), so the caller's
// array may change or go as soon as Copy returns.
//
// This header includes no CUDA header. REQUIRES: one thread; the device current on it is the
// stream's.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_HOST_STAGING_H_
#define PSFORMER_WORKER_BACKEND_CUDA_HOST_STAGING_H_

#include <cstddef>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace psformer {

class HostStaging {
 public:
  HostStaging() = default;
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  // Waits for every copy still reading a block, then frees them.
  ~HostStaging();

  // Enqueues on `stream` the copy of host_src[0, bytes) to device_dst, from a pinned block.
  void Copy(CUstream_st* stream, void* device_dst, const void* host_src, size_t bytes);
  size_t blocks() const { return blocks_.size(); }

 private:
  struct Block {
    void* host = nullptr;  // pinned (cudaHostAlloc)
    size_t bytes = 0;
    CUevent_st* read = nullptr;  // recorded behind the last copy from it
  };
  // A block of at least `bytes` that no enqueued copy reads any more; made if there is none.
  Block& FreeBlock(size_t bytes);

  std::vector<Block> blocks_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_HOST_STAGING_H_
