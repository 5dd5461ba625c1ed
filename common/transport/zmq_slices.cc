#include "common/transport/zmq_slices.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "common/transport/van.h"

namespace psformer {
namespace {

constexpr char kMagic[4] = {'P', 'S', 'S', 'L'};
constexpr size_t kControlBytes = sizeof(kMagic) + 8 + 4 + 1;  // then a byte per piece

template <typename T>
void Put(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

template <typename T>
T Get(const uint8_t* at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

SlicePlan::SlicePlan(const std::vector<Frame>& frames, size_t slice_bytes, uint64_t id) : id_(id) {
  const size_t limit = std::max<size_t>(slice_bytes, 1);
  size_t filled = limit;  // bytes in the last slice; full, so the first piece opens one
  for (const Frame& frame : frames) {
    size_t off = 0;
    do {
      if (filled == limit) {
        slices_.emplace_back();
        filled = 0;
      }
      const size_t n = std::min(frame.size() - off, limit - filled);
      slices_.back().push_back(Piece{Frame::View(frame.data() + off, n, frame.owner()), off + n == frame.size()});
      off += n;
      filled += n;
      // An empty frame still takes a piece; a slice with room left takes the next frame too.
    } while (off < frame.size());
  }
}

std::vector<Frame> SlicePlan::Slice(size_t k) const {
  std::string control(kMagic, sizeof(kMagic));
  Put<uint64_t>(control, id_);
  Put<uint32_t>(control, static_cast<uint32_t>(k));
  Put<uint8_t>(control, k + 1 == slices_.size() ? 1 : 0);
  std::vector<Frame> out;
  out.reserve(slices_[k].size() + 2);
  out.emplace_back();  // the empty frame that marks a slice
  for (const Piece& piece : slices_[k]) control.push_back(piece.ends ? 1 : 0);
  out.push_back(Frame::Own(std::move(control)));
  for (const Piece& piece : slices_[k]) out.push_back(piece.frame);
  return out;
}

bool IsSlice(const std::vector<Frame>& frames) { return frames.size() >= 2 && frames[0].size() == 0; }

Status SliceAssembler::Rejoin(Partial& partial) {
  const uint64_t bytes = BytesOf(partial.pending);
  if (max_frame_bytes_ >= 0 && bytes > static_cast<uint64_t>(max_frame_bytes_)) {
    return Status::InvalidArgument("a frame of " + std::to_string(bytes) + " bytes, over the limit of " +
                                   std::to_string(max_frame_bytes_));
  }
  if (partial.pending.size() == 1) {
    partial.frames.push_back(std::move(partial.pending.front()));
  } else {
    std::shared_ptr<void> buffer = Van::HeapPayload(bytes);
    auto* const start = static_cast<uint8_t*>(buffer.get());
    uint8_t* at = start;
    for (const Frame& piece : partial.pending) {
      if (piece.size() > 0) std::memcpy(at, piece.data(), piece.size());
      at += piece.size();
    }
    partial.frames.push_back(Frame::View(start, bytes, std::move(buffer)));
  }
  partial.pending.clear();
  return Status::Ok();
}

StatusOr<std::optional<std::vector<Frame>>> SliceAssembler::Take(const std::string& peer, std::vector<Frame> frames) {
  const auto now = std::chrono::steady_clock::now();
  const Frame& control = frames[1];
  const size_t pieces = frames.size() - 2;
  if (control.size() != kControlBytes + pieces || std::memcmp(control.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::InvalidArgument("van: a slice with a malformed control frame (" + std::to_string(control.size()) +
                                   " bytes for " + std::to_string(pieces) + " pieces)");
  }
  const uint8_t* at = control.data() + sizeof(kMagic);
  const auto id = Get<uint64_t>(at);
  const auto index = Get<uint32_t>(at + 8);
  const bool last = at[12] != 0;
  const uint8_t* ends = at + 13;
  const auto key = std::make_pair(peer, id);
  for (size_t i = 0; i < pieces; ++i) {
    if (ends[i] > 1) {
      partials_.erase(key);
      return Status::InvalidArgument("van: a slice's piece marked " + std::to_string(ends[i]));
    }
  }
  if (index == 0) {
    // A new message: first forget those whose senders stopped sending their slices.
    for (auto it = partials_.begin(); it != partials_.end();) {
      if (now - it->second.touched > kPatience) {
        PSF_LOG(Warning) << "van: dropped a message whose slices stopped after " << it->second.next << " slice(s)";
        it = partials_.erase(it);
      } else {
        ++it;
      }
    }
    // The same id beginning again is a sender that started over (a restarted role counts its
    // messages from 0 again): what it had begun is lost, as on the wire.
    if (partials_.erase(key) > 0) {
      PSF_LOG(Warning) << "van: message " << id << " began again; dropped what had come of it";
    }
    partials_[key];
  }
  auto it = partials_.find(key);
  if (it == partials_.end() || it->second.next != index) {
    const std::string expected = it == partials_.end() ? "none" : std::to_string(it->second.next);
    if (it != partials_.end()) partials_.erase(it);
    return Status::InvalidArgument("van: slice " + std::to_string(index) + " of message " + std::to_string(id) +
                                   " out of order (expected " + expected + ")");
  }
  Partial& partial = it->second;
  partial.touched = now;
  ++partial.next;
  for (size_t i = 0; i < pieces; ++i) {
    partial.pending.push_back(std::move(frames[i + 2]));
    if (ends[i] == 0) continue;
    if (Status joined = Rejoin(partial); !joined.ok()) {
      partials_.erase(it);
      return Status::InvalidArgument("van: slice " + std::to_string(index) + " of message " + std::to_string(id) +
                                     ": " + joined.message());
    }
  }
  if (!last) return std::optional<std::vector<Frame>>();
  if (!partial.pending.empty() || partial.frames.empty()) {
    partials_.erase(it);
    return Status::InvalidArgument("van: message " + std::to_string(id) + " ended inside a frame");
  }
  std::vector<Frame> whole = std::move(partial.frames);
  partials_.erase(it);
  return std::optional<std::vector<Frame>>(std::move(whole));
}

}  // namespace psformer
