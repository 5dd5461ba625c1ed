// The CUDA backend's RangeDownloader: each range is copied device-to-host on a copy stream of its
// own, so the copy overlaps the kernels the compute stream runs next (the rest of backward).
// Start records an event on the compute stream, makes the copy stream wait for it (the copy sees
// the range as the kernels issued before Start leave it), enqueues the cudaMemcpyAsync and records
// a completion event after it (blocking-sync: a thread waiting on it sleeps); WaitOldest waits for
// those events in start order, on the data path's thread while the launching thread goes on.
//
// The host array is pinned (cudaHostRegister) for the downloader's lifetime, which is what lets
// the copies run asynchronously. Where pinning fails (memory limits, an array already registered)
// it logs a warning and copies into pageable memory: still correct, but each Start then returns
// only once its copy is done, so the host waits at every range as it did with synchronous copies.
//
// Thread safety: as RangeDownloader's (Start on the launching thread, WaitOldest on one other);
// the events in flight and the pool of free ones are shared under a mutex.
//
// CUDA failures during Start or WaitOldest abort with the call, file and line (cuda_check.h), as
// every backend operation does. Unverified on a GPU so far: no GPU has run this code yet.
// This header includes no CUDA header, so host code built by the C++ compiler can use it.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_RANGE_DOWNLOADER_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_RANGE_DOWNLOADER_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "worker/backend/cuda/device_timeline.h"
#include "worker/backend/range_downloader.h"

struct CUstream_st;
struct CUevent_st;

namespace psformer {

class CudaRangeDownloader final : public RangeDownloader {
 public:
  // A downloader of device[0, n) into host[0, n), elements of `element_bytes` (fp32 or bf16), after
  // the work of `compute_stream`. Unavailable when the copy stream or its events cannot be created.
  // While a trace records, each range's span from final on the compute stream to copied is added
  // to it on `timeline` (null: none).
  // REQUIRES: the calling thread's current device is the one `device` and the stream belong to;
  // the stream, device[0, n), host[0, n) and the timeline outlive the downloader.
  static StatusOr<std::unique_ptr<CudaRangeDownloader>> Create(CUstream_st* compute_stream, const void* device,
                                                               void* host, size_t n, size_t element_bytes,
                                                               const DeviceTimeline* timeline = nullptr);

  // Only Create can make the key: it is the way to a downloader.
  class ConstructionKey {
    friend class CudaRangeDownloader;
    ConstructionKey() = default;
  };
  CudaRangeDownloader(ConstructionKey, CUstream_st* compute_stream, const void* device, void* host, size_t n,
                      size_t element_bytes, const DeviceTimeline* timeline);
  // Waits for every copy still in flight, then destroys the events and the copy stream and
  // unregisters the host array.
  ~CudaRangeDownloader() override;
  CudaRangeDownloader(const CudaRangeDownloader&) = delete;
  CudaRangeDownloader& operator=(const CudaRangeDownloader&) = delete;

  void Start(uint64_t begin, uint64_t end) override;
  ElementRange WaitOldest() override;
  // Each copy then computes the CRC-32C of its whole blocks on the copy stream, from the device
  // bytes it copies (crc32c_kernels.cu), and copies those (8 bytes a 4 KiB block) to the host
  // with it. Null, with a warning, where the kernel's results on a test block are not the host's
  // (then the client checksums the bytes itself, as before) or the host array is not pinned.
  BlockCrcs* RecordBlockCrcs() override;

  // Whether host[0, n) is pinned (else copies go to pageable memory; see above).
  bool host_pinned() const { return host_pinned_; }

 private:
  // Pins host_[0, n_), or logs why it cannot.
  void PinHost();
  // An event from the pool, or a new one.
  CUevent_st* TakeEvent();
  // Empty if LaunchBlockCrc32c on this device gives Crc32c's values for a few test blocks; else
  // what went wrong.
  std::string CheckBlockCrcs();

  struct InFlight {
    ElementRange range;
    CUevent_st* done;  // recorded on copy_stream_ after the range's copy
    // While a trace records: timing events on the compute stream at Start and after the copy,
    // and the timeline's slot they are placed by.
    CUevent_st* traced_final = nullptr;
    CUevent_st* traced_copied = nullptr;
    int traced_slot = -1;
  };

  CUstream_st* compute_stream_;  // the backend's
  const DeviceTimeline* timeline_;  // the backend's, or null
  CUstream_st* copy_stream_ = nullptr;
  CUevent_st* computed_ = nullptr;  // recorded on compute_stream_ at each Start
  int device_ordinal_ = 0;          // the GPU: WaitOldest makes it its thread's
  const char* device_;              // (n * element_bytes_)
  char* host_;                      // (n * element_bytes_)
  size_t n_;
  size_t element_bytes_;
  bool host_pinned_ = false;
  // With RecordBlockCrcs: where the kernel writes the blocks' CRCs, and the pinned copy of them
  // on the host that crcs_ reads; (n_ * element_bytes_ / kCrcBlockBytes) each.
  BlockCrcs::Entry* device_entries_ = nullptr;
  BlockCrcs::Entry* host_entries_ = nullptr;
  std::unique_ptr<BlockCrcs> crcs_;
  Mutex mutex_;
  std::deque<InFlight> in_flight_ PSF_GUARDED_BY(mutex_);        // started, not yet returned, in start order
  std::vector<CUevent_st*> free_events_ PSF_GUARDED_BY(mutex_);  // done events of returned ranges, for reuse
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CUDA_RANGE_DOWNLOADER_H_
