// The CUDA backend's RangeUploader: the ranges are copied host-to-device on a stream of their own,
// in the order Start lists them (a worker's: forward order), so the copies of later layers overlap
// the kernels of the earlier ones. Start makes the upload stream wait for the compute stream's work
// so far (the last step's kernels may still read the old values), enqueues each range's
// cudaMemcpyAsync and records an event after it (Add enqueues one more range behind the same
// wait); Await makes the compute stream wait for the
// events of the ranges it overlaps, on the device: the launching thread never waits.
//
// The host array must be pinned for the copies to be asynchronous (Backend::PinHostMemory, which
// the worker does for its parameters); from pageable memory each copy is staged by the driver and
// Start returns only once the copies are done: still correct, only not overlapped.
//
// CUDA failures abort with the call, file and line (cuda_check.h), as every backend operation
// does. Unverified on a GPU so far: no GPU has run this code yet.
// This header includes no CUDA header, so host code built by the C++ compiler can use it.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_CUDA_RANGE_UPLOADER_H_
#define PSFORMER_WORKER_BACKEND_CUDA_CUDA_RANGE_UPLOADER_H_

#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/backend/cuda/device_timeline.h"
#include "worker/backend/range_uploader.h"

struct CUstream_st;
struct CUevent_st;

namespace psformer {

class CudaRangeUploader final : public RangeUploader {
 public:
  // An uploader of host[0, n) into device[0, n), elements of `element_bytes`, for the work of
  // `compute_stream`. Unavailable when its stream or events cannot be created.
  // REQUIRES: the calling thread's current device is the stream's; the stream and both arrays
  // outlive the uploader.
  // While a trace records, each range's copy is added to it on `timeline` (null: none), at the
  // next Start or at the end.
  static StatusOr<std::unique_ptr<CudaRangeUploader>> Create(CUstream_st* compute_stream, const void* host,
                                                             void* device, size_t n, size_t element_bytes,
                                                             const DeviceTimeline* timeline = nullptr);

  class ConstructionKey {
    friend class CudaRangeUploader;
    ConstructionKey() = default;
  };
  CudaRangeUploader(ConstructionKey, CUstream_st* compute_stream, const void* host, void* device, size_t n,
                    size_t element_bytes, const DeviceTimeline* timeline);
  // Waits for the copies in flight, then destroys the events and the stream.
  ~CudaRangeUploader() override;
  CudaRangeUploader(const CudaRangeUploader&) = delete;
  CudaRangeUploader& operator=(const CudaRangeUploader&) = delete;

  void Start(const std::vector<ElementRange>& ranges) override;
  void Add(ElementRange range) override;
  // From `src`: registered host memory (cudaHostRegister) for the copy to be a DMA that the
  // calling thread does not wait for; pageable memory is copied too, synchronously.
  void AddFrom(ElementRange range, const void* src) override;
  void Await(uint64_t begin, uint64_t end) override;
  void Quiesce() override;

 private:
  struct Started {
    ElementRange range;
    CUevent_st* done;  // recorded on upload_stream_ after the range's copy
    // While a trace records: timing events around the copy, and the timeline's slot.
    CUevent_st* traced_begin = nullptr;
    CUevent_st* traced_end = nullptr;
    int traced_slot = -1;
  };
  // Adds the last Start's traced copies to the trace, and lets go of their events.
  void EmitTraced();
  // Add's and AddFrom's: device[range) from src.
  void Enqueue(ElementRange range, const char* src);

  CUstream_st* compute_stream_;  // the backend's
  const DeviceTimeline* timeline_;  // the backend's, or null
  CUstream_st* upload_stream_ = nullptr;
  CUevent_st* computed_ = nullptr;  // recorded on compute_stream_ at each Start
  CUevent_st* quiesced_ = nullptr;  // Quiesce's (blocking sync), made on first use
  const char* host_;                // (n * element_bytes_)
  char* device_;                    // (n * element_bytes_)
  size_t n_;
  size_t element_bytes_;
  std::vector<Started> started_;     // the last Start's ranges, in its order
  std::vector<CUevent_st*> events_;  // every event made, reused by the next Start
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_CUDA_RANGE_UPLOADER_H_
