// Memory on a compute device and the move-only buffer that owns a piece of it. The CPU backend's
// "device" is host memory; a CUDA backend's is GPU memory. Model code never dereferences a
// buffer's pointer itself: it hands pointers to backend operations.
#ifndef PSFORMER_WORKER_BACKEND_DEVICE_BUFFER_H_
#define PSFORMER_WORKER_BACKEND_DEVICE_BUFFER_H_

#include <cstddef>
#include <utility>

namespace psformer {

// Allocation and host<->device copies. Implemented by every backend.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Returns zero-filled memory for `bytes` bytes, aligned for any element type; aborts when out
  // of memory (a model that does not fit is a configuration the caller cannot recover from).
  virtual void* AllocateBytes(size_t bytes) = 0;
  virtual void FreeBytes(void* ptr) = 0;
  virtual void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  // CopyToDevice for the small copies a step makes on the thread that launches its work (the
  // batch's token ids): in order with the device's other work, and without waiting for it;
  // `host_src` may change once it returns (a device backend stages the bytes). This default is
  // CopyToDevice.
  virtual void StageToDevice(void* device_dst, const void* host_src, size_t bytes) {
    CopyToDevice(device_dst, host_src, bytes);
  }
  // Waits until every operation issued so far is complete (a no-op on CPU).
  virtual void Synchronize() = 0;
};

// `n` elements of E on a device. Move-only; frees its memory when destroyed.
// REQUIRES: the DeviceMemory outlives the buffer.
template <typename E>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceMemory* memory, size_t n)
      : memory_(memory), data_(n ? static_cast<E*>(memory->AllocateBytes(n * sizeof(E))) : nullptr), size_(n) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      memory_ = std::exchange(other.memory_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Release(); }

  E* data() { return data_; }
  const E* data() const { return data_; }
  size_t size() const { return size_; }

  // Makes room for at least n elements, reallocating (contents lost) only when it must grow:
  // workspaces call this every step and allocate only when a step is larger than any before.
  E* Reserve(DeviceMemory* memory, size_t n) {
    if (n > size_ || memory_ == nullptr) *this = DeviceBuffer(memory, n);
    return data_;
  }
  void Upload(const E* host, size_t n) { memory_->CopyToDevice(data_, host, n * sizeof(E)); }
  void Stage(const E* host, size_t n) { memory_->StageToDevice(data_, host, n * sizeof(E)); }
  void Download(E* host, size_t n) const { memory_->CopyToHost(host, data_, n * sizeof(E)); }

 private:
  void Release() {
    if (data_ != nullptr) memory_->FreeBytes(data_);
    data_ = nullptr;
    size_ = 0;
  }
  DeviceMemory* memory_ = nullptr;
  E* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_DEVICE_BUFFER_H_
