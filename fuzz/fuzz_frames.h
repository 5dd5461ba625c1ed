// How a fuzzer input stands for a multipart message: frames one after another, each a 4-byte
// little-endian length and then that many bytes; a length running past the end takes what is
// left. Any byte string is some message, and every message has an input (JoinFrames).
#ifndef PSFORMER_FUZZ_FUZZ_FRAMES_H_
#define PSFORMER_FUZZ_FUZZ_FRAMES_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/frame.h"

namespace psformer::fuzz {

// Each frame in a heap block of exactly its size, so that AddressSanitizer catches a read past a
// frame's end (a std::string would hide small over-reads in its inline buffer).
inline RawMessage SplitFrames(const uint8_t* data, size_t size) {
  RawMessage raw;
  raw.peer = "fuzzer";
  size_t at = 0;
  while (at < size) {
    uint32_t length = 0;
    const size_t header = std::min<size_t>(4, size - at);
    std::memcpy(&length, data + at, header);
    at += header;
    const size_t n = std::min<size_t>(length, size - at);
    std::shared_ptr<uint8_t[]> bytes(new uint8_t[n == 0 ? 1 : n]);
    if (n > 0) std::memcpy(bytes.get(), data + at, n);
    raw.frames.push_back(Frame::View(bytes.get(), n, std::shared_ptr<const void>(bytes, bytes.get())));
    at += n;
  }
  return raw;
}

inline std::string JoinFrames(const RawMessage& raw) {
  std::string out;
  for (const Frame& f : raw.frames) {
    const uint32_t length = static_cast<uint32_t>(f.size());
    out.append(reinterpret_cast<const char*>(&length), 4);
    out.append(f.bytes());
  }
  return out;
}

}  // namespace psformer::fuzz

#endif  // PSFORMER_FUZZ_FUZZ_FRAMES_H_
