// Copies ranges of a host array onto the device beside the backend's computing, so that the
// computing waits for each range only where it first reads it: a worker's forward pass starts on
// the first layer's parameters while the later layers' are still on their way (the mirror of
// RangeDownloader, range_downloader.h).
//
// Backend<T>::MakeRangeUploader makes one: the default (ImmediateRangeUploader) copies every range
// in Start, which is all the CPU backend needs (its "device" memory is host memory); the CUDA
// backend copies on a stream of its own and makes its compute stream wait on an event per range,
// on the device, in Await (CudaRangeUploader).
// Thread safety: one thread, the one that drives the backend.
#ifndef PSFORMER_WORKER_BACKEND_RANGE_UPLOADER_H_
#define PSFORMER_WORKER_BACKEND_RANGE_UPLOADER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/logging.h"
#include "worker/backend/device_buffer.h"
#include "worker/backend/range_downloader.h"

namespace psformer {

class RangeUploader {
 public:
  virtual ~RangeUploader() = default;
  // Starts copying host[r) to device[r) for each range r, in this order, once every backend
  // operation issued before this call is done (those may still read the old values); returns
  // without waiting for the copies. Forgets the ranges of the previous Start.
  // REQUIRES: ranges within [0, n); nothing writes host[r) until the copies are awaited.
  virtual void Start(const std::vector<ElementRange>& ranges) = 0;
  // Starts copying one more range after the last Start's, waiting for the same backend
  // operations as it (not for any issued since): for a range whose host values arrive later.
  // REQUIRES: as Start's; Start was called since the uploader was made.
  virtual void Add(ElementRange range) = 0;
  // The same from `src`, whose elements are device[range)'s values, instead of host[range): a
  // pulled piece left where it came in (pserver/client/pull_landing.h's LentParams).
  // REQUIRES: as Add's; src's range.end - range.begin elements stay as they are until Quiesce
  // has returned.
  virtual void AddFrom(ElementRange range, const void* src) = 0;
  // Returns once every copy started has read its host bytes (the calling thread sleeps if it
  // must wait): a source given to AddFrom may then change or go.
  virtual void Quiesce() = 0;
  // Backend operations issued after this call see device[begin, end) as the last Start copied
  // it: they wait (on the device; the calling thread does not) for the copies of the started
  // ranges that overlap [begin, end).
  virtual void Await(uint64_t begin, uint64_t end) = 0;
};

// Copies each range in Start through DeviceMemory::CopyToDevice, which returns once it is done;
// Await has nothing to wait for. Elements of `element_bytes` bytes.
// REQUIRES: memory, host[0, n) and device[0, n) outlive it.
class ImmediateRangeUploader final : public RangeUploader {
 public:
  ImmediateRangeUploader(DeviceMemory* memory, const void* host, void* device, size_t n, size_t element_bytes)
      : memory_(memory),
        host_(static_cast<const char*>(host)),
        device_(static_cast<char*>(device)),
        n_(n),
        element_bytes_(element_bytes) {}

  void Start(const std::vector<ElementRange>& ranges) override {
    for (const ElementRange& r : ranges) {
      PSF_CHECK(r.begin <= r.end && r.end <= n_);
      const size_t at = r.begin * element_bytes_;
      if (r.end > r.begin) memory_->CopyToDevice(device_ + at, host_ + at, (r.end - r.begin) * element_bytes_);
    }
  }
  void Add(ElementRange range) override { Start({range}); }
  void AddFrom(ElementRange r, const void* src) override {
    PSF_CHECK(r.begin <= r.end && r.end <= n_);
    if (r.end > r.begin)
      memory_->CopyToDevice(device_ + r.begin * element_bytes_, src, (r.end - r.begin) * element_bytes_);
  }
  void Await(uint64_t /*begin*/, uint64_t /*end*/) override {}
  void Quiesce() override {}

 private:
  DeviceMemory* memory_;
  const char* host_;
  char* device_;
  size_t n_;
  size_t element_bytes_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_RANGE_UPLOADER_H_
