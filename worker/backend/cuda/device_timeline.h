// DeviceTimeline: for the trace (PSFORMER_TRACE_STEPS, docs/tracing.md), the device's own times
// of a step's work on the host's clock, so that copies and kernels appear in the trace where the
// GPU ran them rather than where a host thread learned of them. Mark records a timing event on
// the compute stream at the step's start and notes the host's time beside it; an event recorded
// later in the step is placed at that host time plus the device's elapsed time between the two
// (cudaEventElapsedTime). The anchor assumes the compute stream is idle when the step's start is
// recorded (the step before ended with its loss read and its copies waited for), so its error is
// the launch latency of one event. Two anchors alternate: a step's spans can still be placed
// while the next step has begun.
//
// Thread safety: Mark on the launching thread; Emit from any thread, for a slot Mark returned at
// most one step before.
// This header includes no CUDA header, so host code built by the C++ compiler can use it.
#ifndef PSFORMER_WORKER_BACKEND_CUDA_DEVICE_TIMELINE_H_
#define PSFORMER_WORKER_BACKEND_CUDA_DEVICE_TIMELINE_H_

#include <atomic>
#include <cstdint>

struct CUstream_st;
struct CUevent_st;

namespace psformer {

// The trace's lanes for a device's work: its compute stream, its copies to the host, to it.
enum class DeviceLane { kCompute = 0, kToHost = 1, kToDevice = 2 };

class DeviceTimeline {
 public:
  DeviceTimeline() = default;
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // Records a step's start on `stream` and returns its slot (for Emit).
  int Mark(CUstream_st* stream);
  // The slot of the last Mark (-1 before the first).
  int current() const { return current_.load(std::memory_order_acquire); }
  // Adds to the trace, on `lane`, the span `name` from event `from` (null: the slot's start) to
  // event `to`, both recorded after the slot's start, with timing, and complete; a and b as
  // Trace::Span's.
  void Emit(int slot, DeviceLane lane, const char* name, CUevent_st* from, CUevent_st* to, int64_t a, int64_t b) const;

  // A timing event (destroyed by the caller with DestroyEvent), for spans to Emit.
  static CUevent_st* NewEvent();
  static void DestroyEvent(CUevent_st* event);

 private:
  CUevent_st* start_[2] = {nullptr, nullptr};
  int64_t host_us_[2] = {0, 0};
  std::atomic<int> current_{-1};
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_DEVICE_TIMELINE_H_
