// CudaRangeUploader (cuda_range_uploader.h): the upload stream and an event per range.
#include <utility>

#include "common/logging.h"
#include "common/trace.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_range_uploader.h"

namespace psformer {

StatusOr<std::unique_ptr<CudaRangeUploader>> CudaRangeUploader::Create(cudaStream_t compute_stream, const void* host,
                                                                       void* device, size_t n, size_t element_bytes,
                                                                       const DeviceTimeline* timeline) {
  auto uploader =
      std::make_unique<CudaRangeUploader>(ConstructionKey(), compute_stream, host, device, n, element_bytes, timeline);
  cudaError_t err = cudaStreamCreateWithFlags(&uploader->upload_stream_, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&uploader->computed_, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable(std::string("cannot create a CUDA stream for parameter uploads: ") +
                               cudaGetErrorString(err));
  }
  return StatusOr<std::unique_ptr<CudaRangeUploader>>(std::move(uploader));
}

CudaRangeUploader::CudaRangeUploader(ConstructionKey, cudaStream_t compute_stream, const void* host, void* device,
                                     size_t n, size_t element_bytes, const DeviceTimeline* timeline)
    : compute_stream_(compute_stream),
      timeline_(timeline),
      host_(static_cast<const char*>(host)),
      device_(static_cast<char*>(device)),
      n_(n),
      element_bytes_(element_bytes) {}

CudaRangeUploader::~CudaRangeUploader() {
  // Teardown cannot stop halfway: failures are logged and the rest still runs.
  const auto warn = [](cudaError_t err, const char* call) {
    if (err == cudaSuccess) return;
    cudaGetLastError();
    PSF_LOG(Warning) << "CudaRangeUploader teardown: " << call << " failed: " << cudaGetErrorString(err);
  };
  if (upload_stream_ != nullptr) warn(cudaStreamSynchronize(upload_stream_), "cudaStreamSynchronize");
  EmitTraced();
  for (cudaEvent_t e : events_) warn(cudaEventDestroy(e), "cudaEventDestroy");
  if (computed_ != nullptr) warn(cudaEventDestroy(computed_), "cudaEventDestroy");
  if (quiesced_ != nullptr) warn(cudaEventDestroy(quiesced_), "cudaEventDestroy");
  if (upload_stream_ != nullptr) warn(cudaStreamDestroy(upload_stream_), "cudaStreamDestroy");
}

void CudaRangeUploader::EmitTraced() {
  for (Started& s : started_) {
    if (s.traced_end == nullptr) continue;
    timeline_->Emit(s.traced_slot, DeviceLane::kToDevice, "upload", s.traced_begin, s.traced_end,
                    static_cast<int64_t>(s.range.begin), static_cast<int64_t>(s.range.end));
    DeviceTimeline::DestroyEvent(s.traced_begin);
    DeviceTimeline::DestroyEvent(s.traced_end);
    s.traced_begin = s.traced_end = nullptr;
  }
}

void CudaRangeUploader::Start(const std::vector<ElementRange>& ranges) {
  EmitTraced();
  // The old values may still be read by kernels issued before: the copies wait for them.
  PSF_CUDA_CHECK(cudaEventRecord(computed_, compute_stream_));
  PSF_CUDA_CHECK(cudaStreamWaitEvent(upload_stream_, computed_, 0));
  started_.clear();
  for (const ElementRange& r : ranges) Add(r);
}

void CudaRangeUploader::Add(ElementRange r) { Enqueue(r, host_ + r.begin * element_bytes_); }

void CudaRangeUploader::AddFrom(ElementRange r, const void* src) { Enqueue(r, static_cast<const char*>(src)); }

void CudaRangeUploader::Quiesce() {
  if (quiesced_ == nullptr) {
    PSF_CUDA_CHECK(cudaEventCreateWithFlags(&quiesced_, cudaEventBlockingSync | cudaEventDisableTiming));
  }
  PSF_CUDA_CHECK(cudaEventRecord(quiesced_, upload_stream_));
  PSF_CUDA_CHECK(cudaEventSynchronize(quiesced_));
}

void CudaRangeUploader::Enqueue(ElementRange r, const char* src) {
  // Behind the wait Start put on the upload stream: not behind kernels issued since.
  PSF_CHECK(r.begin <= r.end && r.end <= n_);
  const size_t i = started_.size();
  if (i == events_.size()) {
    cudaEvent_t e = nullptr;
    PSF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  const bool traced = timeline_ != nullptr && Trace::on();
  Started started{r, events_[i]};
  if (traced) {
    started.traced_slot = timeline_->current();
    started.traced_begin = DeviceTimeline::NewEvent();
    PSF_CUDA_CHECK(cudaEventRecord(started.traced_begin, upload_stream_));
  }
  if (r.end > r.begin) {
    PSF_CUDA_CHECK(cudaMemcpyAsync(device_ + r.begin * element_bytes_, src, (r.end - r.begin) * element_bytes_,
                                   cudaMemcpyHostToDevice, upload_stream_));
  }
  PSF_CUDA_CHECK(cudaEventRecord(events_[i], upload_stream_));
  if (traced) {
    started.traced_end = DeviceTimeline::NewEvent();
    PSF_CUDA_CHECK(cudaEventRecord(started.traced_end, upload_stream_));
  }
  started_.push_back(started);
}

void CudaRangeUploader::Await(uint64_t begin, uint64_t end) {
  for (const Started& s : started_) {
    if (s.range.begin < end && begin < s.range.end) PSF_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, s.done, 0));
  }
}

}  // namespace psformer
