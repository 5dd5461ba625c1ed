// Slices: how ZmqVan sends a large message it holds back (send_window) as several ZeroMQ
// messages, so that a message ranked before it can overtake it between two of them instead of
// waiting behind all of it (ZmqVanOptions::slice_bytes, cluster.slice_kib). ZeroMQ sends a
// multipart message whole, so on a slow link a message ranked first waits behind every byte of
// the ones already handed over: 2 MB is 40 ms at 400 Mbit/s. A slice is at most slice_bytes.
//
// A slice on the wire is one multipart ZeroMQ message: an empty frame (no whole message starts
// with one: its first frame is a header), a control frame, and the slice's pieces. The control
// frame is "PSSL", the message's id (u64, unique among its sender's messages), the slice's index
// (u32), 1 if it is the last slice else 0 (u8), then one byte per piece: 1 where the piece ends
// one of the message's frames, 0 where the frame goes on in the next piece. Integers are little
// endian. The slices of one message leave on one connection, in order; slices of other messages
// may come between them.
//
// The sender's pieces are views of the message's frames (no copy). The receiver keeps a frame
// that came in one piece as it came and copies one that came in several into one buffer.
//
// Thread safety: a SlicePlan is a value; a SliceAssembler is used by one thread (the Van's).
#ifndef PSFORMER_COMMON_TRANSPORT_ZMQ_SLICES_H_
#define PSFORMER_COMMON_TRANSPORT_ZMQ_SLICES_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/transport/frame.h"

namespace psformer {

class SlicePlan {
 public:
  // Cuts `frames` into slices of at most `slice_bytes` (> 0) bytes of payload each: a frame
  // larger is cut into pieces, smaller ones share a slice while they fit.
  SlicePlan(const std::vector<Frame>& frames, size_t slice_bytes, uint64_t id);

  size_t size() const { return slices_.size(); }
  // The frames of slice k (< size()), ready to send.
  std::vector<Frame> Slice(size_t k) const;

 private:
  struct Piece {
    Frame frame;
    bool ends = false;  // the last piece of one of the message's frames
  };
  std::vector<std::vector<Piece>> slices_;
  uint64_t id_ = 0;
};

// Whether `frames` (one ZeroMQ message as received) are a slice: an empty first frame.
bool IsSlice(const std::vector<Frame>& frames);

class SliceAssembler {
 public:
  // Frames reassembled larger than max_frame_bytes (>= 0) are refused, as ZeroMQ refuses
  // larger frames (ZMQ_MAXMSGSIZE); -1 = no limit.
  explicit SliceAssembler(int64_t max_frame_bytes = -1) : max_frame_bytes_(max_frame_bytes) {}

  // Takes one slice (IsSlice) from `peer`. Returns the whole message's frames after its last
  // slice, nullopt before; an error (and drops the message) for a slice that does not fit:
  // malformed, out of order, or one of a message this assembler does not know. A first slice
  // of a message already begun starts it over (its sender restarted). Messages whose
  // slices stopped coming (their sender died) are dropped after `patience` without a slice.
  StatusOr<std::optional<std::vector<Frame>>> Take(const std::string& peer, std::vector<Frame> frames);

  // Messages begun and not yet whole.
  size_t partial() const { return partials_.size(); }

  static constexpr std::chrono::seconds kPatience{120};

 private:
  struct Partial {
    std::vector<Frame> frames;   // whole so far
    std::vector<Frame> pending;  // pieces of the frame being rejoined
    uint32_t next = 0;           // the slice expected next
    std::chrono::steady_clock::time_point touched;
  };
  // Appends the frame `pending` makes (one piece as it is, several copied into one).
  Status Rejoin(Partial& partial);

  int64_t max_frame_bytes_;
  std::map<std::pair<std::string, uint64_t>, Partial> partials_;  // by peer and message id
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_ZMQ_SLICES_H_
