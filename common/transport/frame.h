// A frame: one contiguous run of bytes of a multipart message, plus whatever keeps those bytes
// alive. Frames are how payloads cross the transport without copying: the sender hands the
// transport a view of its buffer together with an owner, and the transport holds the owner
// until the network layer is done with the bytes (ZeroMQ calls a deleter then). A received frame
// owns the ZeroMQ message it came in, so reading it copies nothing either.
//
// Thread safety: a Frame is a value; copies share the owner (a shared_ptr), whose release may
// happen on a transport thread, so an owner's destructor must be thread-safe.
#ifndef PSFORMER_COMMON_TRANSPORT_FRAME_H_
#define PSFORMER_COMMON_TRANSPORT_FRAME_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace psformer {

class Frame {
 public:
  Frame() = default;

  // A frame that owns a copy of `n` bytes at `data`.
  static Frame Copy(const void* data, size_t n);
  static Frame Copy(std::string_view bytes) { return Copy(bytes.data(), bytes.size()); }
  // A frame that owns `bytes` (moved in, no copy).
  static Frame Own(std::string bytes);
  // A view of `n` bytes at `data`, kept valid by `owner`: the caller promises the bytes neither
  // change nor go away while any copy of `owner` lives. The transport releases its reference
  // once the bytes are on the wire, so the owner's destructor signals "the buffer is free".
  static Frame View(const void* data, size_t n, std::shared_ptr<const void> owner);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

// A multipart message as the transport sees it: who it is from or for, and its frames.
// `peer` names the other side: on receipt, the peer to answer (Send it back unchanged); on send,
// a name given to Van::Connect or a peer id taken from a received message.
// `transport_error`, when set on receipt, says why a Van below could not deliver the message as
// sent (a shared-memory descriptor it could not honour, shm_van.h); ParseMessage refuses it.
//
// `seal_header`, when set on send, says the sender left the payload's CRC-32C (over frames[1..],
// in order) to the Van (Van::ChecksumsPayloadTo): the Van computes it, in the pass that copies the
// payload where it copies one, and sends seal_header(crc) as frames[0] in place of the
// placeholder there.
//
// `rank`, on send: where the message goes among those a Van holds back for its peer
// (ZmqVanOptions::send_window): the lowest first, equal ones in the order sent.
struct SendRank {
  // Unranked messages (requests, answers without payload) go before every ranked one.
  int64_t step = INT64_MIN;
  uint64_t begin = 0;
  auto operator<=>(const SendRank&) const = default;
};

struct RawMessage {
  std::string peer;
  std::vector<Frame> frames;
  std::string transport_error;
  // What failed, with transport_error: a shared-memory descriptor (shm_van.h), or a sealed frame
  // that did not open (payload_sealer.h).
  bool unsealed = false;
  // With transport_error from a shared-memory descriptor: the segment it named ("" when the
  // descriptor was refused before naming one), so that a receiver can tell one segment refused
  // again and again from a sender's one-off loss (pserver/client/segment_refusals.h).
  std::string refused_segment;
  std::function<Frame(uint32_t payload_crc32c)> seal_header;
  SendRank rank;
};

// For a Van that does not copy the payload: if message.seal_header is set, computes the CRC-32C
// of frames[1..] in a pass of its own and puts the sealed header in frames[0].
void SealHeader(RawMessage& message);

// The bytes of `frames` together.
uint64_t BytesOf(const std::vector<Frame>& frames);

// Splits `n` bytes at `data` (kept alive by `owner`) into views of at most `frame_bytes` bytes
// each, appended to `out`; frame_bytes rounds down to a multiple of `align` (>= 1), and
// frame_bytes == 0 means one frame. Zero bytes make no frame.
void AppendViewFrames(const void* data, size_t n, size_t frame_bytes, size_t align,
                      const std::shared_ptr<const void>& owner, std::vector<Frame>* out);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_FRAME_H_
