// DeviceTimeline (device_timeline.h): anchors on the compute stream, spans placed by elapsed time.
#include <cuda_runtime.h>

#include "common/trace.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/device_timeline.h"

namespace psformer {

DeviceTimeline::~DeviceTimeline() {
  for (cudaEvent_t e : start_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

int DeviceTimeline::Mark(cudaStream_t stream) {
  const int slot = (current_.load(std::memory_order_relaxed) + 1) % 2;
  if (start_[slot] == nullptr) PSF_CUDA_CHECK(cudaEventCreate(&start_[slot]));
  host_us_[slot] = Trace::NowMicros();
  PSF_CUDA_CHECK(cudaEventRecord(start_[slot], stream));
  current_.store(slot, std::memory_order_release);
  return slot;
}

void DeviceTimeline::Emit(int slot, DeviceLane lane, const char* name, cudaEvent_t from, cudaEvent_t to, int64_t a,
                          int64_t b) const {
  static constexpr const char* kLaneNames[] = {"gpu-compute", "gpu-to-host", "gpu-to-device"};
  if (slot < 0 || start_[slot] == nullptr) return;
  // A trace must not abort a run: events not complete yet (or failing) give no span.
  if (cudaEventQuery(start_[slot]) != cudaSuccess || cudaEventQuery(to) != cudaSuccess ||
      (from != nullptr && cudaEventQuery(from) != cudaSuccess)) {
    cudaGetLastError();
    return;
  }
  float from_ms = 0, to_ms = 0;
  if (from != nullptr) PSF_CUDA_CHECK(cudaEventElapsedTime(&from_ms, start_[slot], from));
  PSF_CUDA_CHECK(cudaEventElapsedTime(&to_ms, start_[slot], to));
  const auto at = [&](float ms) { return host_us_[slot] + static_cast<int64_t>(ms * 1000.0f); };
  const int index = static_cast<int>(lane);
  Trace::LaneSpan(index, kLaneNames[index], name, at(from_ms), at(to_ms), a, b);
}

cudaEvent_t DeviceTimeline::NewEvent() {
  cudaEvent_t e = nullptr;
  PSF_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void DeviceTimeline::DestroyEvent(cudaEvent_t event) {
  if (event != nullptr) cudaEventDestroy(event);
}

}  // namespace psformer
