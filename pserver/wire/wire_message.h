// Wire messages (docs/wire-protocol.md): a protobuf Header frame, then the payload as raw
// frames. This file turns a Header plus payload frames into a RawMessage for the Van (filling in
// the payload size and CRC-32C) and back, and reads payloads as fp32 whatever their dtype.
// Parsing only parses; message_validator.h decides whether a message may be used.
#ifndef PSFORMER_PSERVER_WIRE_WIRE_MESSAGE_H_
#define PSFORMER_PSERVER_WIRE_WIRE_MESSAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/proto/wire.pb.h"
#include "common/transport/frame.h"
#include "pserver/wire/reject_reason.h"

namespace psformer {

// Larger header frames are refused unparsed: a real header is well under a kilobyte.
constexpr size_t kMaxHeaderBytes = 4096;

struct WireMessage {
  std::string peer;  // whom to answer (RawMessage::peer).
  proto::Header header;
  std::vector<Frame> payload;  // the frames after the header, in order.
  uint64_t PayloadBytes() const;
};

// Bytes per element of a dtype; 0 for DTYPE_UNSPECIFIED or an unknown value.
size_t DTypeBytes(proto::DType dtype);

// CRC-32C over all payload frames in order; with threads > 1 in pieces on threads of their own
// (Crc32cCombine joins them: the same value).
uint32_t PayloadCrc32c(const std::vector<Frame>& payload, int threads = 1);

// Sets header.payload_bytes and header.payload_crc32c from `payload` and builds the multipart
// message [header, payload...] for `peer`. The payload frames are not copied.
RawMessage EncodeMessage(const std::string& peer, proto::Header header, std::vector<Frame> payload);
// The same with the payload's CRC-32C already known (a server computes its parameters' CRC once
// per update, in the pass that writes them, not once per reply). REQUIRES: payload_crc32c ==
// PayloadCrc32c(payload).
RawMessage EncodeMessage(const std::string& peer, proto::Header header, std::vector<Frame> payload,
                         uint32_t payload_crc32c);

// The same, leaving the payload's CRC-32C to a Van that computes it in the pass that copies the
// payload (Van::ChecksumsPayloadTo): frames[0] is a placeholder until the Van seals the header.
RawMessage EncodeMessageChecksummedByVan(const std::string& peer, proto::Header header, std::vector<Frame> payload);

// Splits a RawMessage into header and payload. Refuses (kMalformedHeader) a message without
// frames, a header frame over kMaxHeaderBytes, or one that does not parse, and (kBadSharedMemory)
// one the transport marked as undeliverable (RawMessage::transport_error).
Refusal ParseMessage(RawMessage raw, WireMessage* out);

// Elements [begin, end) (absolute, inside the message's range) of a validated message with a
// payload: the header with that range, and views of the payload frames (no copy). The header's
// payload size and CRC still describe the whole message.
WireMessage SliceMessage(const WireMessage& msg, uint64_t begin, uint64_t end);

// Calls fn(bytes, first, count) for each part of the payload frames that holds elements
// [begin, end) of `elem` bytes each (relative to the payload's start; frames hold whole
// elements), in order: `bytes` points at element `first`, and the part holds `count` elements.
template <typename Fn>
void ForEachPayloadSpan(const std::vector<Frame>& payload, size_t elem, uint64_t begin, uint64_t end, Fn fn) {
  uint64_t at = 0;  // the first element of the frame
  for (const Frame& f : payload) {
    if (at >= end) break;
    const uint64_t count = f.size() / elem;
    const uint64_t b = begin > at ? begin : at, e = end < at + count ? end : at + count;
    if (b < e) fn(f.data() + (b - at) * elem, b, e - b);
    at += count;
  }
}

// Writes the payload as fp32 to out[0 .. end-begin), widening bf16. REQUIRES: the message passed
// validation (payload size matches dtype and range, frames split on element boundaries).
// threads > 1 splits the elements among threads (elementwise: the same result).
void CopyPayloadAsFloats(const WireMessage& msg, float* out, int threads = 1);
// The same for a FLOAT32 payload, with its CRC-32C computed in the copy (one pass, not two, split
// over `threads` threads): whether it matches the header's. On a mismatch out[] holds the damaged
// bytes, which the caller must not use (a pull's part stays unanswered and is asked for again).
bool CopyCheckedFloats(const WireMessage& msg, float* out, int threads = 1);
// Copies the payload's bytes, frame after frame, into out (PayloadBytes()), with the CRC-32C
// computed in the copy, as CopyCheckedFloats does (a bf16 pull that lands as it came, for its
// device to widen).
bool CopyCheckedBytes(const WireMessage& msg, void* out, int threads = 1);
// Elements [begin, end) of the payload (relative to its start) as fp32, widening bf16:
// acc[i - begin] += payload[i], one addition per element (so the order of the additions is the
// caller's, whatever the split into ranges); `assign` writes the values instead. Frames may lie
// at any address. Same REQUIRES.
void AddPayloadRange(const WireMessage& msg, uint64_t begin, uint64_t end, float* acc, bool assign = false);

}  // namespace psformer

#endif  // PSFORMER_PSERVER_WIRE_WIRE_MESSAGE_H_
