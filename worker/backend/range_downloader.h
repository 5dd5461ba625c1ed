// Copies ranges of one device array into a host array while the backend goes on computing, and
// says when each copy is complete, in the order they were started. The worker's data path uses
// it to take each layer's gradient off the device as backward reports it final: the launching
// thread only starts copies, and a stage thread of the data path (worker/datapath/) waits for
// them and pushes what has arrived.
//
// Backend<T>::MakeRangeDownloader makes one: the default (ImmediateRangeDownloader) copies each
// range before Start returns, which is all the CPU backend needs (its "device" memory is host
// memory: one memcpy); the CUDA backend copies on a stream of its own (CudaRangeDownloader).
// Thread safety: Start is called by one thread (the one that drives the backend), WaitOldest by
// one thread, the same or another; the two may run at once.
#ifndef PSFORMER_WORKER_BACKEND_RANGE_DOWNLOADER_H_
#define PSFORMER_WORKER_BACKEND_RANGE_DOWNLOADER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/block_crcs.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "worker/backend/device_buffer.h"

namespace psformer {

// Elements [begin, end) of a flat array.
struct ElementRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
// Spelled out: CUDA translation units (C++17) include this too, where `= default` is not allowed.
inline bool operator==(const ElementRange& a, const ElementRange& b) { return a.begin == b.begin && a.end == b.end; }

// `range` cut into consecutive ranges of at most `most` elements (most > 0), in order: a large
// layer copied in parts, so that its first part can be used while the rest crosses the bus.
inline std::vector<ElementRange> InChunks(ElementRange range, uint64_t most) {
  std::vector<ElementRange> chunks;
  for (uint64_t b = range.begin; b < range.end; b = chunks.back().end) {
    chunks.push_back({b, range.end - b > most ? b + most : range.end});
  }
  return chunks;
}

class RangeDownloader {
 public:
  virtual ~RangeDownloader() = default;
  // Starts copying device[begin, end) to host[begin, end), as the range stands once every backend
  // operation issued before this call is done (those that wrote it). Returns without waiting
  // for the copy (a device backend) and does no work proportional to the range's size on the
  // calling thread beyond what the backend's own copy needs.
  // REQUIRES: begin <= end <= n; nothing writes device[begin, end) or reads or writes
  // host[begin, end) until WaitOldest has returned the range.
  virtual void Start(uint64_t begin, uint64_t end) = 0;
  // Blocks, asleep, until the oldest started copy not returned before is complete, and returns
  // its range (copies complete in start order).
  // REQUIRES: a started copy that has not been returned.
  virtual ElementRange WaitOldest() = 0;
  // From the next Start on, records beside each copy the CRC-32C of every whole block of the host
  // array it fills (common/block_crcs.h: computed where the copy reads the bytes, so that no one
  // reads them again to checksum them), and returns the record, which lives as long as the
  // downloader; or null where it cannot. A record's CRCs are valid for a range once WaitOldest
  // has returned it. Called once, before any Start. REQUIRES: the thread that calls Start.
  virtual BlockCrcs* RecordBlockCrcs() { return nullptr; }
};

// Copies each range in Start through DeviceMemory::CopyToHost, which returns once the copy is
// done; WaitOldest then returns at once.
// REQUIRES: memory, device[0, n) and host[0, n) outlive it.
template <typename T>
class ImmediateRangeDownloader final : public RangeDownloader {
 public:
  ImmediateRangeDownloader(DeviceMemory* memory, const T* device, T* host, size_t n)
      : memory_(memory), device_(device), host_(host), n_(n) {}

  void Start(uint64_t begin, uint64_t end) override {
    PSF_CHECK(begin <= end && end <= n_);
    if (end > begin && crcs_ != nullptr) {
      CopyRecording(begin * sizeof(T), end * sizeof(T));
    } else if (end > begin) {
      memory_->CopyToHost(host_ + begin, device_ + begin, (end - begin) * sizeof(T));
    }
    MutexLock lock(&mutex_);
    complete_.push_back({begin, end});
  }
  ElementRange WaitOldest() override {
    MutexLock lock(&mutex_);
    PSF_CHECK(!complete_.empty());  // WaitOldest with no copy started
    const ElementRange oldest = complete_.front();
    complete_.pop_front();
    return oldest;
  }
  BlockCrcs* RecordBlockCrcs() override {
    if (crcs_ == nullptr) crcs_ = std::make_unique<BlockCrcs>(host_, n_ * sizeof(T));
    return crcs_.get();
  }

 private:
  // Bytes [begin, end) of the arrays copied in groups of blocks, each checksummed right after its
  // copy, while it is still in the core's cache.
  void CopyRecording(size_t begin, size_t end) {
    const auto* device = reinterpret_cast<const char*>(device_);
    auto* host = reinterpret_cast<char*>(host_);
    crcs_->WriteAndRecord(begin, end,
                          [&](size_t from, size_t to) { memory_->CopyToHost(host + from, device + from, to - from); });
  }

  DeviceMemory* memory_;
  const T* device_;  // (n)
  T* host_;          // (n)
  size_t n_;
  std::unique_ptr<BlockCrcs> crcs_;  // with RecordBlockCrcs
  Mutex mutex_;
  std::deque<ElementRange> complete_ PSF_GUARDED_BY(mutex_);  // started (and so complete), not yet returned
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_RANGE_DOWNLOADER_H_
