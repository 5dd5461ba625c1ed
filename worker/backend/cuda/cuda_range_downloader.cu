// CudaRangeDownloader (cuda_range_downloader.h): the copy stream, its events and the pinned host
// array.
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/trace.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"
#include "worker/backend/cuda/cuda_range_downloader.h"

namespace psformer {
namespace {

// For teardown, which cannot abort halfway and leave the rest behind: the failure is logged with
// its call, and the remaining steps still run.
void WarnIfFailed(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  PSF_LOG(Warning) << "CudaRangeDownloader teardown: " << call << " failed: " << cudaGetErrorString(err);
}
#define PSF_CUDA_WARN(call) WarnIfFailed((call), #call)

}  // namespace

StatusOr<std::unique_ptr<CudaRangeDownloader>> CudaRangeDownloader::Create(cudaStream_t compute_stream,
                                                                           const void* device, void* host, size_t n,
                                                                           size_t element_bytes,
                                                                           const DeviceTimeline* timeline) {
  auto downloader = std::make_unique<CudaRangeDownloader>(ConstructionKey(), compute_stream, device, host, n,
                                                          element_bytes, timeline);
  // On failure the destructor releases whatever was created before it.
  cudaError_t err = cudaGetDevice(&downloader->device_ordinal_);  // the caller's: WaitOldest's thread may have none
  // The greatest priority: each copy waits for the CRC kernel ahead of it on this stream
  // (RecordBlockCrcs), whose blocks would otherwise queue behind backward's as SMs free, holding
  // the layer's push back by as much.
  int least_priority = 0, greatest_priority = 0;
  if (err == cudaSuccess) err = cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority);
  if (err == cudaSuccess) {
    err = cudaStreamCreateWithPriority(&downloader->copy_stream_, cudaStreamNonBlocking, greatest_priority);
  }
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&downloader->computed_, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable(std::string("cannot create a CUDA copy stream for background copies to the host: ") +
                               cudaGetErrorString(err));
  }
  downloader->PinHost();
  // Spelled out: nvcc (C++17) will not move into the converting constructor.
  return StatusOr<std::unique_ptr<CudaRangeDownloader>>(std::move(downloader));
}

CudaRangeDownloader::CudaRangeDownloader(ConstructionKey, cudaStream_t compute_stream, const void* device, void* host,
                                         size_t n, size_t element_bytes, const DeviceTimeline* timeline)
    : compute_stream_(compute_stream),
      timeline_(timeline),
      device_(static_cast<const char*>(device)),
      host_(static_cast<char*>(host)),
      n_(n),
      element_bytes_(element_bytes) {}

CudaRangeDownloader::~CudaRangeDownloader() {
  // The copies in flight write into host_ and wait on the compute stream: let them finish before
  // anything they use goes.
  if (copy_stream_ != nullptr) PSF_CUDA_WARN(cudaStreamSynchronize(copy_stream_));
  for (const InFlight& f : in_flight_) {
    PSF_CUDA_WARN(cudaEventDestroy(f.done));
    DeviceTimeline::DestroyEvent(f.traced_final);
    DeviceTimeline::DestroyEvent(f.traced_copied);
  }
  for (cudaEvent_t e : free_events_) PSF_CUDA_WARN(cudaEventDestroy(e));
  if (computed_ != nullptr) PSF_CUDA_WARN(cudaEventDestroy(computed_));
  if (copy_stream_ != nullptr) PSF_CUDA_WARN(cudaStreamDestroy(copy_stream_));
  if (host_pinned_) PSF_CUDA_WARN(cudaHostUnregister(host_));
  crcs_.reset();
  if (device_entries_ != nullptr) PSF_CUDA_WARN(cudaFree(device_entries_));
  if (host_entries_ != nullptr) PSF_CUDA_WARN(cudaFreeHost(host_entries_));
}

std::string CudaRangeDownloader::CheckBlockCrcs() {
  constexpr size_t kBlocks = 5;
  std::vector<uint8_t> bytes(kBlocks * kCrcBlockBytes);
  uint32_t x = 0x9E3779B9u;
  for (uint8_t& b : bytes) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  void* data = nullptr;
  BlockCrcs::Entry* entries = nullptr;
  std::vector<BlockCrcs::Entry> got(kBlocks);
  cudaError_t err = cudaMalloc(&data, bytes.size());
  if (err == cudaSuccess) err = cudaMalloc(&entries, kBlocks * sizeof(BlockCrcs::Entry));
  if (err == cudaSuccess) err = cudaMemcpyAsync(data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, copy_stream_);
  if (err == cudaSuccess) err = cuda_kernels::TryLaunchBlockCrc32c(copy_stream_, data, kBlocks, 7, entries);
  if (err == cudaSuccess) {
    err =
        cudaMemcpyAsync(got.data(), entries, kBlocks * sizeof(BlockCrcs::Entry), cudaMemcpyDeviceToHost, copy_stream_);
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(copy_stream_);
  if (data != nullptr) PSF_CUDA_WARN(cudaFree(data));
  if (entries != nullptr) PSF_CUDA_WARN(cudaFree(entries));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cudaGetErrorString(err);
  }
  for (size_t b = 0; b < kBlocks; ++b) {
    const uint32_t want = Crc32c(0, bytes.data() + b * kCrcBlockBytes, kCrcBlockBytes);
    if (got[b].crc != want || got[b].stamp != 7) {
      return "block " + std::to_string(b) + ": CRC " + std::to_string(got[b].crc) + " stamp " +
             std::to_string(got[b].stamp) + ", the host computes " + std::to_string(want);
    }
  }
  return "";
}

BlockCrcs* CudaRangeDownloader::RecordBlockCrcs() {
  if (crcs_ != nullptr) return crcs_.get();
  const size_t bytes = n_ * element_bytes_, blocks = BlockCrcs::Blocks(bytes);
  if (blocks == 0 || !host_pinned_) return nullptr;
  const std::string wrong = CheckBlockCrcs();
  if (!wrong.empty()) {
    PSF_LOG(Warning) << "the GPU's CRC-32C of a test block is not the host's (" << wrong
                     << "); the gradient is checksummed on the host instead";
    return nullptr;
  }
  BlockCrcs::Entry* device_entries = nullptr;
  BlockCrcs::Entry* host_entries = nullptr;
  cudaError_t err = cudaMalloc(&device_entries, blocks * sizeof(BlockCrcs::Entry));
  if (err == cudaSuccess) {
    err = cudaHostAlloc(&host_entries, blocks * sizeof(BlockCrcs::Entry), cudaHostAllocDefault);
    if (err != cudaSuccess) PSF_CUDA_WARN(cudaFree(device_entries));  // nothing kept half made
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    PSF_LOG(Warning) << "cannot allocate the gradient's block CRCs (" << cudaGetErrorString(err)
                     << "); the gradient is checksummed on the host instead";
    return nullptr;
  }
  device_entries_ = device_entries;
  host_entries_ = host_entries;
  std::memset(host_entries_, 0, blocks * sizeof(BlockCrcs::Entry));
  crcs_ = std::make_unique<BlockCrcs>(host_, bytes, host_entries_);
  return crcs_.get();
}

void CudaRangeDownloader::PinHost() {
  const size_t bytes = n_ * element_bytes_;
  if (bytes == 0) return;
  const auto start = std::chrono::steady_clock::now();
  const cudaError_t err = cudaHostRegister(host_, bytes, cudaHostRegisterDefault);
  if (err == cudaSuccess) {
    host_pinned_ = true;
    // How long pinning takes is the launching thread's (once per array aimed at): said, so that
    // a GPU run's log shows it.
    PSF_LOG(Info) << "pinned " << (bytes >> 20) << " MiB of host memory for copies on a copy stream in "
                  << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()
                  << " ms";
    return;
  }
  cudaGetLastError();  // not sticky, but keep it out of later launch checks
  PSF_LOG(Warning) << "cannot pin the " << (bytes >> 20) << " MiB host buffer that copies from the GPU land in ("
                   << cudaGetErrorString(err) << "); copying into pageable memory instead, where each copy "
                   << "holds up the host until it is done";
}

cudaEvent_t CudaRangeDownloader::TakeEvent() {
  {
    MutexLock lock(&mutex_);
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  // Blocking sync: the data path's thread sleeps in WaitOldest instead of spinning on a core.
  cudaEvent_t e = nullptr;
  PSF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
  return e;
}

void CudaRangeDownloader::Start(uint64_t begin, uint64_t end) {
  PSF_CHECK(begin <= end && end <= n_);
  // The wait takes the event as recorded now, so one `computed_` serves every Start.
  PSF_CUDA_CHECK(cudaEventRecord(computed_, compute_stream_));
  PSF_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, computed_, 0));
  InFlight started{{begin, end}, nullptr};
  if (timeline_ != nullptr && Trace::on()) {
    started.traced_slot = timeline_->current();
    started.traced_final = DeviceTimeline::NewEvent();
    PSF_CUDA_CHECK(cudaEventRecord(started.traced_final, compute_stream_));
  }
  if (end > begin && crcs_ != nullptr) {
    // The whole blocks' CRCs from the device bytes, before and beside the bytes' own copy.
    const auto [first, last] = BlockCrcs::WholeBlocks(begin * element_bytes_, end * element_bytes_);
    if (last > first) {
      cuda_kernels::LaunchBlockCrc32c(copy_stream_, device_ + first * kCrcBlockBytes, last - first, crcs_->stamp(),
                                      device_entries_ + first);
      PSF_CUDA_CHECK(cudaMemcpyAsync(host_entries_ + first, device_entries_ + first,
                                     (last - first) * sizeof(BlockCrcs::Entry), cudaMemcpyDeviceToHost, copy_stream_));
    }
  }
  if (end > begin) {
    const size_t at = begin * element_bytes_;
    PSF_CUDA_CHECK(cudaMemcpyAsync(host_ + at, device_ + at, (end - begin) * element_bytes_, cudaMemcpyDeviceToHost,
                                   copy_stream_));
  }
  started.done = TakeEvent();
  PSF_CUDA_CHECK(cudaEventRecord(started.done, copy_stream_));
  if (started.traced_final != nullptr) {
    started.traced_copied = DeviceTimeline::NewEvent();
    PSF_CUDA_CHECK(cudaEventRecord(started.traced_copied, copy_stream_));
  }
  MutexLock lock(&mutex_);
  in_flight_.push_back(started);
}

ElementRange CudaRangeDownloader::WaitOldest() {
  InFlight oldest;
  {
    MutexLock lock(&mutex_);
    PSF_CHECK(!in_flight_.empty());
    oldest = in_flight_.front();
  }
  // Outside the lock: Start goes on while this thread sleeps. Only this thread pops.
  cuda_internal::UseDevice(device_ordinal_);  // a data path's thread, not the launching one
  PSF_CUDA_CHECK(cudaEventSynchronize(oldest.done));
  if (oldest.traced_final != nullptr) {
    PSF_CUDA_CHECK(cudaEventSynchronize(oldest.traced_copied));
    timeline_->Emit(oldest.traced_slot, DeviceLane::kToHost, "final_to_copied", oldest.traced_final,
                    oldest.traced_copied, static_cast<int64_t>(oldest.range.begin),
                    static_cast<int64_t>(oldest.range.end));
    DeviceTimeline::DestroyEvent(oldest.traced_final);
    DeviceTimeline::DestroyEvent(oldest.traced_copied);
  }
  MutexLock lock(&mutex_);
  in_flight_.pop_front();
  free_events_.push_back(oldest.done);
  return oldest.range;
}

}  // namespace psformer
