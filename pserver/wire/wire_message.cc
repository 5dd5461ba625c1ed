#include "pserver/wire/wire_message.h"

#include <cstring>

#include "common/crc32c.h"
#include "common/logging.h"
#include "pserver/wire/bfloat16.h"

namespace psformer {

uint64_t WireMessage::PayloadBytes() const {
  uint64_t total = 0;
  for (const Frame& f : payload) total += f.size();
  return total;
}

size_t DTypeBytes(proto::DType dtype) {
  switch (dtype) {
    case proto::FLOAT32: return 4;
    case proto::BFLOAT16: return 2;
    default: return 0;
  }
}

uint32_t PayloadCrc32c(const std::vector<Frame>& payload) {
  uint32_t crc = 0;
  for (const Frame& f : payload) crc = Crc32c(crc, f.data(), f.size());
  return crc;
}

RawMessage EncodeMessage(const std::string& peer, proto::Header header, std::vector<Frame> payload) {
  uint64_t bytes = 0;
  for (const Frame& f : payload) bytes += f.size();
  header.set_payload_bytes(bytes);
  header.set_payload_crc32c(PayloadCrc32c(payload));
  RawMessage raw;
  raw.peer = peer;
  raw.frames.reserve(payload.size() + 1);
  raw.frames.push_back(Frame::Own(header.SerializeAsString()));
  for (Frame& f : payload) raw.frames.push_back(std::move(f));
  return raw;
}

Verdict ParseMessage(RawMessage raw, WireMessage* out) {
  if (raw.frames.empty()) return Rejection{RejectReason::kMalformedHeader, "message has no frames"};
  const Frame& head = raw.frames.front();
  if (head.size() > kMaxHeaderBytes) {
    return Rejection{RejectReason::kMalformedHeader,
                     "header frame of " + std::to_string(head.size()) + " bytes exceeds " +
                         std::to_string(kMaxHeaderBytes)};
  }
  proto::Header header;
  if (!header.ParseFromArray(head.data(), static_cast<int>(head.size()))) {
    return Rejection{RejectReason::kMalformedHeader,
                     "header frame of " + std::to_string(head.size()) + " bytes does not parse"};
  }
  out->peer = std::move(raw.peer);
  out->header = std::move(header);
  out->payload.assign(std::make_move_iterator(raw.frames.begin() + 1), std::make_move_iterator(raw.frames.end()));
  return std::nullopt;
}

void CopyPayloadAsFloats(const WireMessage& msg, float* out) {
  const bool bf16 = msg.header.dtype() == proto::BFLOAT16;
  size_t at = 0;
  for (const Frame& f : msg.payload) {
    if (bf16) {
      Bf16ToFloats(f.data(), f.size() / 2, out + at);
      at += f.size() / 2;
    } else {
      std::memcpy(out + at, f.data(), f.size());
      at += f.size() / 4;
    }
  }
  PSF_CHECK(at == msg.header.end() - msg.header.begin());
}

void AddPayloadAsFloats(const WireMessage& msg, float* acc) {
  const bool bf16 = msg.header.dtype() == proto::BFLOAT16;
  size_t at = 0;
  for (const Frame& f : msg.payload) {
    const uint8_t* p = f.data();
    float* a = acc + at;
    if (bf16) {
      const size_t n = f.size() / 2;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        a[i] += Bf16ToFloat(h);
      }
      at += n;
    } else {
      const size_t n = f.size() / 4;
      // memcpy per element: frames may be unaligned; compilers turn this into vector loads.
      for (size_t i = 0; i < n; ++i) {
        float g;
        std::memcpy(&g, p + 4 * i, 4);
        a[i] += g;
      }
      at += n;
    }
  }
  PSF_CHECK(at == msg.header.end() - msg.header.begin());
}

}  // namespace psformer
