#include "pserver/wire/wire_message.h"

#include <algorithm>
#include <cstring>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/parallel_for.h"

namespace psformer {
namespace {

constexpr size_t kElementGrain = 1 << 14;  // elements; a thread per fewer costs more than it saves
constexpr size_t kByteGrain = 1 << 16;

uint64_t PayloadElements(const WireMessage& msg) { return msg.header.end() - msg.header.begin(); }

// Calls fn(bytes, first, count, bf16) for every part of a FLOAT32 or BFLOAT16 payload (as
// ForEachPart), the elements split over `threads`.
template <typename Fn>
void ForEachPayloadPart(const WireMessage& msg, int threads, Fn fn) {
  const bool bf16 = msg.header.dtype() == proto::BFLOAT16;
  const size_t elem = bf16 ? 2 : 4;
  PSF_CHECK(msg.PayloadBytes() == PayloadElements(msg) * elem);
  ParallelFor(threads, PayloadElements(msg), kElementGrain, [&](int, size_t begin, size_t end) {
    ForEachPayloadSpan(msg.payload, elem, begin, end,
                       [&](const uint8_t* p, uint64_t first, uint64_t n) { fn(p, first, n, bf16); });
  });
}

}  // namespace

uint64_t WireMessage::PayloadBytes() const { return BytesOf(payload); }

size_t DTypeBytes(proto::DType dtype) {
  switch (dtype) {
    case proto::FLOAT32:
      return 4;
    case proto::BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

uint32_t PayloadCrc32c(const std::vector<Frame>& payload, int threads) {
  const uint64_t bytes = BytesOf(payload);
  std::vector<uint32_t> crc(ParallelPieces(threads, bytes, kByteGrain), 0);
  std::vector<uint64_t> len(crc.size(), 0);
  ParallelFor(threads, bytes, kByteGrain, [&](int piece, size_t begin, size_t end) {
    ForEachPayloadSpan(payload, 1, begin, end,
                       [&](const uint8_t* p, uint64_t, uint64_t n) { crc[piece] = Crc32c(crc[piece], p, n); });
    len[piece] = end - begin;
  });
  uint32_t whole = 0;
  for (size_t p = 0; p < crc.size(); ++p) whole = Crc32cCombine(whole, crc[p], len[p]);
  return whole;
}

RawMessage EncodeMessage(const std::string& peer, proto::Header header, std::vector<Frame> payload) {
  const uint32_t crc = PayloadCrc32c(payload);
  return EncodeMessage(peer, std::move(header), std::move(payload), crc);
}

RawMessage EncodeMessage(const std::string& peer, proto::Header header, std::vector<Frame> payload,
                         uint32_t payload_crc32c) {
  header.set_payload_bytes(BytesOf(payload));
  header.set_payload_crc32c(payload_crc32c);
  RawMessage raw;
  raw.peer = peer;
  // Held back by a Van (cluster.send_window): the oldest step's first, in it what forward needs
  // first (the flat vector is in forward order); messages without payload before all.
  if (!payload.empty()) raw.rank = SendRank{header.step(), header.begin()};
  raw.frames.reserve(payload.size() + 1);
  raw.frames.push_back(Frame::Own(header.SerializeAsString()));
  for (Frame& f : payload) raw.frames.push_back(std::move(f));
  return raw;
}

RawMessage EncodeMessageChecksummedByVan(const std::string& peer, proto::Header header, std::vector<Frame> payload) {
  header.set_payload_bytes(BytesOf(payload));
  // The placeholder: the header with CRC 0 (the Van replaces it before anything is sent).
  RawMessage raw = EncodeMessage(peer, header, std::move(payload), 0);
  raw.seal_header = [header = std::move(header)](uint32_t crc) mutable {
    header.set_payload_crc32c(crc);
    return Frame::Own(header.SerializeAsString());
  };
  return raw;
}

Refusal ParseMessage(RawMessage raw, WireMessage* out) {
  if (!raw.transport_error.empty()) {
    return Rejection{raw.unsealed ? RejectReason::kUnsealed : RejectReason::kBadSharedMemory, raw.transport_error};
  }
  if (raw.frames.empty()) return Rejection{RejectReason::kMalformedHeader, "message has no frames"};
  const Frame& head = raw.frames.front();
  if (head.size() > kMaxHeaderBytes) {
    return Rejection{RejectReason::kMalformedHeader, "header frame of " + std::to_string(head.size()) +
                                                         " bytes exceeds " + std::to_string(kMaxHeaderBytes)};
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

WireMessage SliceMessage(const WireMessage& msg, uint64_t begin, uint64_t end) {
  const size_t elem = DTypeBytes(msg.header.dtype());
  WireMessage out;
  out.peer = msg.peer;
  out.header = msg.header;
  out.header.set_begin(begin);
  out.header.set_end(end);
  size_t skip = (begin - msg.header.begin()) * elem, want = (end - begin) * elem;
  for (const Frame& f : msg.payload) {
    if (want == 0) break;
    if (skip >= f.size()) {
      skip -= f.size();
      continue;
    }
    const size_t n = std::min(f.size() - skip, want);
    out.payload.push_back(Frame::View(f.data() + skip, n, f.owner()));
    want -= n;
    skip = 0;
  }
  return out;
}

void CopyPayloadAsFloats(const WireMessage& msg, float* out, int threads) {
  ForEachPayloadPart(msg, threads, [&](const uint8_t* p, uint64_t first, uint64_t n, bool bf16) {
    if (bf16) {
      Bf16ToFloats(p, n, out + first);
    } else {
      std::memcpy(out + first, p, n * 4);
    }
  });
}

bool CopyCheckedFloats(const WireMessage& msg, float* out, int threads) {
  PSF_CHECK(msg.header.dtype() == proto::FLOAT32 && msg.PayloadBytes() == PayloadElements(msg) * sizeof(float));
  return CopyCheckedBytes(msg, out, threads);
}

bool CopyCheckedBytes(const WireMessage& msg, void* out, int threads) {
  std::vector<CrcSpan> spans;
  auto* at = static_cast<uint8_t*>(out);
  for (const Frame& f : msg.payload) {
    spans.push_back({f.data(), at, f.size()});
    at += f.size();
  }
  return Crc32cSpans(spans, threads) == msg.header.payload_crc32c();
}

void AddPayloadRange(const WireMessage& msg, uint64_t begin, uint64_t end, float* acc, bool assign) {
  const bool bf16 = msg.header.dtype() == proto::BFLOAT16;
  ForEachPayloadSpan(msg.payload, bf16 ? 2 : 4, begin, end, [&](const uint8_t* p, uint64_t first, uint64_t n) {
    float* a = acc + (first - begin);
    // memcpy per element: frames may be unaligned; compilers turn these into vector loads.
    if (bf16) {
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        a[i] = assign ? Bf16ToFloat(h) : a[i] + Bf16ToFloat(h);
      }
    } else if (assign) {
      std::memcpy(a, p, n * 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        float g;
        std::memcpy(&g, p + 4 * i, 4);
        a[i] += g;
      }
    }
  });
}

}  // namespace psformer
