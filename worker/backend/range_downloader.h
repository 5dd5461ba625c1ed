// Copies ranges of one device array into a host array while the backend goes on computing, and
// says which copies are complete, in the order they were started. The worker uses it to take each
// layer's gradient off the device as backward reports it final (GradientReady) and to push only
// ranges whose bytes have arrived on the host.
//
// Backend<T>::MakeRangeDownloader makes one: the default (ImmediateRangeDownloader) copies each
// range before Start returns, which is all the CPU backend needs (its "device" memory is host
// memory: one memcpy); the CUDA backend copies on a stream of its own (CudaRangeDownloader).
// Thread safety: one thread, the one that drives the backend.
#ifndef PSFORMER_WORKER_BACKEND_RANGE_DOWNLOADER_H_
#define PSFORMER_WORKER_BACKEND_RANGE_DOWNLOADER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/logging.h"
#include "worker/backend/device_buffer.h"

namespace psformer {

// Elements [begin, end) of a flat array.
struct ElementRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
// Spelled out: CUDA translation units (C++17) include this too, where `= default` is not allowed.
inline bool operator==(const ElementRange& a, const ElementRange& b) { return a.begin == b.begin && a.end == b.end; }

class RangeDownloader {
 public:
  virtual ~RangeDownloader() = default;
  // Starts copying device[begin, end) to host[begin, end), as the range stands once every backend
  // operation issued before this call is done (those that wrote it).
  // REQUIRES: begin <= end <= n; nothing writes device[begin, end) or reads or writes
  // host[begin, end) until TakeComplete has returned the range.
  virtual void Start(uint64_t begin, uint64_t end) = 0;
  // The started ranges whose copies are complete and were not returned before, in the order they
  // were started (copies complete in that order). With wait_all, first waits for every copy
  // started, so the result holds all ranges not returned before.
  virtual std::vector<ElementRange> TakeComplete(bool wait_all) = 0;
};

// Copies each range in Start through DeviceMemory::CopyToHost, which returns once the copy is
// done; TakeComplete then returns every range started since its last call.
// REQUIRES: memory, device[0, n) and host[0, n) outlive it.
template <typename T>
class ImmediateRangeDownloader final : public RangeDownloader {
 public:
  ImmediateRangeDownloader(DeviceMemory* memory, const T* device, T* host, size_t n)
      : memory_(memory), device_(device), host_(host), n_(n) {}

  void Start(uint64_t begin, uint64_t end) override {
    PSF_CHECK(begin <= end && end <= n_);
    if (end > begin) memory_->CopyToHost(host_ + begin, device_ + begin, (end - begin) * sizeof(T));
    complete_.push_back({begin, end});
  }
  std::vector<ElementRange> TakeComplete(bool /*wait_all: every copy is complete already*/) override {
    std::vector<ElementRange> complete;
    complete.swap(complete_);
    return complete;
  }

 private:
  DeviceMemory* memory_;
  const T* device_;  // (n)
  T* host_;          // (n)
  size_t n_;
  std::vector<ElementRange> complete_;  // started, not yet returned
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_RANGE_DOWNLOADER_H_
