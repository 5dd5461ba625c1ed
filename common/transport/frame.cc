#include "common/transport/frame.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/crc32c.h"

namespace psformer {

Frame Frame::Copy(const void* data, size_t n) { return Own(std::string(static_cast<const char*>(data), n)); }

Frame Frame::Own(std::string bytes) {
  auto owned = std::make_shared<std::string>(std::move(bytes));
  Frame f;
  f.data_ = reinterpret_cast<const uint8_t*>(owned->data());
  f.size_ = owned->size();
  f.owner_ = std::move(owned);
  return f;
}

Frame Frame::View(const void* data, size_t n, std::shared_ptr<const void> owner) {
  Frame f;
  f.data_ = static_cast<const uint8_t*>(data);
  f.size_ = n;
  f.owner_ = std::move(owner);
  return f;
}

uint64_t BytesOf(const std::vector<Frame>& frames) {
  uint64_t bytes = 0;
  for (const Frame& frame : frames) bytes += frame.size();
  return bytes;
}

void AppendViewFrames(const void* data, size_t n, size_t frame_bytes, size_t align,
                      const std::shared_ptr<const void>& owner, std::vector<Frame>* out) {
  const size_t a = std::max<size_t>(align, 1);
  size_t chunk = frame_bytes == 0 ? n : std::max(a, frame_bytes / a * a);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t off = 0; off < n; off += chunk) {
    out->push_back(Frame::View(p + off, std::min(chunk, n - off), owner));
  }
}

void SealHeader(RawMessage& message) {
  if (!message.seal_header || message.frames.empty()) return;
  uint32_t crc = 0;
  for (size_t i = 1; i < message.frames.size(); ++i) {
    crc = Crc32c(crc, message.frames[i].data(), message.frames[i].size());
  }
  message.frames[0] = std::exchange(message.seal_header, nullptr)(crc);
}

}  // namespace psformer
