#include "common/transport/shm_van.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/crc32c.h"
#include "common/fault_plan.h"
#include "common/logging.h"
#include "common/process_exists.h"

namespace psformer {
namespace {

// The envelope: a fixed header, then `count` fixed-size descriptors. Native byte order: only
// processes of one host read it.
constexpr char kEnvelopeMagic[8] = {'\0', 'P', 'S', 'F', 'S', 'H', 'M', '1'};
constexpr size_t kSegmentNameBytes = 64;

struct EnvelopeHeader {
  char magic[8];
  uint32_t count;
  uint32_t reserved;
};

struct PackedDescriptor {  // 96 bytes, as docs/wire-protocol.md says
  uint32_t frame;
  uint32_t slot;
  uint64_t generation;
  uint64_t offset;
  uint64_t size;
  char segment[kSegmentNameBytes];  // NUL-terminated
};

static_assert(sizeof(PackedDescriptor) == 96 && sizeof(EnvelopeHeader) == 16, "the envelope's layout is documented");

// Keeps a claimed slot, and the mapping it lies in, until the last Frame viewing it goes.
class SlotClaim {
 public:
  SlotClaim(std::shared_ptr<ShmSegment> segment, uint32_t slot, uint64_t generation)
      : segment_(std::move(segment)), slot_(slot), generation_(generation) {}
  ~SlotClaim() { segment_->Release(slot_, generation_); }
  SlotClaim(const SlotClaim&) = delete;
  SlotClaim& operator=(const SlotClaim&) = delete;

 private:
  std::shared_ptr<ShmSegment> segment_;
  uint32_t slot_;
  uint64_t generation_;
};

// Segment numbers are unique per process, not per Van: a process may hold several Vans (a
// coordinator's worker and control clients), and segment names must not collide.
std::atomic<uint32_t> g_next_segment{0};  // NOLINT: process-wide by nature.

bool IsIpc(const std::string& endpoint) { return endpoint.rfind("ipc://", 0) == 0; }

}  // namespace

Frame EncodeShmEnvelope(const std::vector<ShmDescriptor>& descriptors) {
  std::string bytes(sizeof(EnvelopeHeader) + descriptors.size() * sizeof(PackedDescriptor), '\0');
  EnvelopeHeader h{};
  std::memcpy(h.magic, kEnvelopeMagic, sizeof(h.magic));
  h.count = static_cast<uint32_t>(descriptors.size());
  std::memcpy(bytes.data(), &h, sizeof(h));
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const ShmDescriptor& d = descriptors[i];
    PackedDescriptor p{};
    p.frame = d.frame;
    p.slot = d.slot;
    p.generation = d.generation;
    p.offset = d.offset;
    p.size = d.size;
    std::memcpy(p.segment, d.segment.data(), std::min(d.segment.size(), kSegmentNameBytes - 1));
    std::memcpy(bytes.data() + sizeof(h) + i * sizeof(p), &p, sizeof(p));
  }
  return Frame::Own(std::move(bytes));
}

bool IsShmEnvelope(const Frame& frame) {
  return frame.size() >= sizeof(kEnvelopeMagic) &&
         std::memcmp(frame.data(), kEnvelopeMagic, sizeof(kEnvelopeMagic)) == 0;
}

StatusOr<std::vector<ShmDescriptor>> DecodeShmEnvelope(const Frame& frame) {
  if (!IsShmEnvelope(frame) || frame.size() < sizeof(EnvelopeHeader)) {
    return Status::InvalidArgument("shared-memory envelope of " + std::to_string(frame.size()) + " bytes is truncated");
  }
  EnvelopeHeader h;
  std::memcpy(&h, frame.data(), sizeof(h));
  if (frame.size() != sizeof(h) + static_cast<uint64_t>(h.count) * sizeof(PackedDescriptor)) {
    return Status::InvalidArgument("shared-memory envelope of " + std::to_string(frame.size()) +
                                   " bytes does not hold " + std::to_string(h.count) + " descriptor(s)");
  }
  std::vector<ShmDescriptor> out(h.count);
  for (uint32_t i = 0; i < h.count; ++i) {
    PackedDescriptor p;
    std::memcpy(&p, frame.data() + sizeof(h) + i * sizeof(p), sizeof(p));
    if (std::memchr(p.segment, '\0', sizeof(p.segment)) == nullptr) {
      return Status::InvalidArgument("shared-memory descriptor " + std::to_string(i) +
                                     " has an unterminated segment name");
    }
    out[i] = ShmDescriptor{p.frame, p.slot, p.generation, p.offset, p.size, std::string(p.segment)};
  }
  return out;
}

ShmVan::ShmVan(std::unique_ptr<Van> inner, ShmVanOptions options)
    : ForwardingVan(std::move(inner)), options_(std::move(options)) {}

ShmVan::~ShmVan() {
  if (stats_.frames_sent_shm + stats_.frames_sent_inline + stats_.frames_received_shm + stats_.frames_lent > 0) {
    PSF_LOG(Info) << "transport: " << stats_.frames_sent_shm << " payload frame(s) sent through shared memory, "
                  << stats_.frames_lent << " lent in place, " << stats_.frames_sent_inline
                  << " inline for want of space, " << stats_.frames_received_shm << " received through shared memory"
                  << (stats_.lent_taken_back > 0
                          ? "; " + std::to_string(stats_.lent_taken_back) + " loan(s) taken back unclaimed"
                          : "");
  }
  // An injected fault that never found a payload to strike in must not pass for one that struck.
  if (const std::optional<ShmFault> unstruck = TakeInjectedFault()) {
    PSF_LOG(Warning) << "fault injection: the KILL_IN_SHM of step " << unstruck->step
                     << " never struck: no payload of that step or after went through shared memory (frames under "
                     << options_.threshold_bytes << " bytes travel inline)";
  }
  // Received frames may outlive this Van (their claims keep their mappings); our own segments are
  // unlinked here, which leaves mappings elsewhere valid.
  own_.clear();
}

StatusOr<std::string> ShmVan::Bind(const std::string& endpoint) {
  PSF_ASSIGN_OR_RETURN(std::string bound, inner_->Bind(endpoint));
  if (!ipc_bound_ && !options_.ipc_endpoint.empty()) {
    namespace fs = std::filesystem;
    const fs::path path = options_.ipc_endpoint.substr(std::strlen("ipc://"));
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    // 0700: the directory is what keeps other users off the socket.
    if (ec || chmod(path.parent_path().c_str(), 0700) != 0) {
      return Status::IoError("cannot make the ipc directory " + path.parent_path().string() + " (mode 0700)" +
                             (ec ? ": " + ec.message() : ""));
    }
    fs::remove(path, ec);  // a socket left by an earlier incarnation of this server
    PSF_RETURN_IF_ERROR(inner_->Bind(options_.ipc_endpoint).status());
    ipc_bound_ = true;
    PSF_LOG(Info) << "transport: same-host clients reach this server at " << options_.ipc_endpoint
                  << "; their payloads travel through shared memory";
  }
  return bound;
}

Status ShmVan::Connect(const std::string& peer, const std::string& endpoint) {
  PSF_RETURN_IF_ERROR(inner_->Connect(peer, endpoint));
  if (IsIpc(endpoint)) shm_peers_.insert(peer);
  return Status::Ok();
}

std::optional<ShmVan::Placed> ShmVan::Place(const Frame& frame) {
  for (auto& seg : own_) {
    if (auto slot = seg->Reserve(frame.size())) return Placed{seg.get(), *slot};
  }
  // Slots held by receivers that died are never released by them.
  bool reclaimed = false;
  for (auto& seg : own_) reclaimed = seg->ReclaimFromDeadReaders() > 0 || reclaimed;
  if (reclaimed) {
    for (auto& seg : own_) {
      if (auto slot = seg->Reserve(frame.size())) return Placed{seg.get(), *slot};
    }
  }
  const uint64_t grown = std::min(options_.segment_bytes, std::max(options_.first_segment_bytes, own_bytes_));
  const uint64_t capacity = std::max<uint64_t>(grown, frame.size());
  if (cannot_create_ || own_bytes_ + capacity > options_.max_bytes) return std::nullopt;
  auto seg = ShmSegment::Create(options_.job_id, g_next_segment.fetch_add(1), capacity, options_.slots_per_segment);
  if (!seg.ok()) {
    cannot_create_ = true;
    PSF_LOG(Warning) << "transport: " << seg.status().message()
                     << "; payloads that find no free shared memory travel inline over the socket from now on";
    return std::nullopt;
  }
  own_bytes_ += capacity;
  ++stats_.segments_created;
  stats_.segment_bytes_made += capacity;
  PSF_LOG(Info) << "transport: made shared-memory segment " << (*seg)->name() << " (" << (capacity >> 20) << " MiB)";
  own_.push_back(std::move(*seg));
  auto slot = own_.back()->Reserve(frame.size());
  if (!slot) return std::nullopt;
  return Placed{own_.back().get(), *slot};
}

std::shared_ptr<void> ShmVan::AllocatePayload(size_t bytes) {
  std::erase_if(payload_segments_, [](const std::weak_ptr<ShmSegment>& w) { return w.expired(); });
  if (bytes < options_.threshold_bytes || cannot_create_payload_) return HeapPayload(bytes);
  auto seg = ShmSegment::Create(options_.job_id, g_next_segment.fetch_add(1), bytes, options_.lend_slots);
  if (!seg.ok()) {
    cannot_create_payload_ = true;
    PSF_LOG(Warning) << "transport: " << seg.status().message()
                     << "; payloads sent many times are kept on the heap and copied into shared memory per send";
    return HeapPayload(bytes);
  }
  std::shared_ptr<ShmSegment> shared(std::move(*seg));
  payload_segments_.push_back(shared);
  ++stats_.payload_segments;
  PSF_LOG(Info) << "transport: made shared-memory segment " << shared->name() << " (" << (bytes >> 20)
                << " MiB) for a payload lent in place";
  // The memory keeps its segment (and mapping) alive; the last holder unmaps and unlinks it.
  return std::shared_ptr<void>(shared, shared->data());
}

std::optional<ShmVan::Lent> ShmVan::LendInPlace(const Frame& frame) {
  const auto at = reinterpret_cast<uintptr_t>(frame.data());
  for (const std::weak_ptr<ShmSegment>& w : payload_segments_) {
    std::shared_ptr<ShmSegment> seg = w.lock();
    if (!seg) continue;
    const auto base = reinterpret_cast<uintptr_t>(seg->data());
    if (at < base || at - base > seg->capacity() || frame.size() > seg->capacity() - (at - base)) continue;
    auto slot = seg->Lend(at - base, frame.size());
    if (!slot) return std::nullopt;  // every slot on loan: copy instead
    return Lent{std::move(seg), *slot, Frame(), std::chrono::steady_clock::now()};
  }
  return std::nullopt;
}

void ShmVan::SweepLent() {
  if (lent_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_reclaim_ > std::chrono::seconds(1)) {  // claims of receivers that died
    last_reclaim_ = now;
    for (const std::weak_ptr<ShmSegment>& w : payload_segments_) {
      if (auto seg = w.lock()) seg->ReclaimFromDeadReaders();
    }
  }
  const auto patience = std::chrono::milliseconds(options_.lend_patience_ms);
  std::erase_if(lent_, [&](Lent& l) {
    if (l.segment->Released(l.slot)) return true;
    if (now - l.since < patience || l.segment->Claimed(l.slot)) return false;
    l.segment->Unpublish(l.slot);  // fails if a receiver claims it just now: then it stays lent
    if (!l.segment->Released(l.slot)) return false;
    ++stats_.lent_taken_back;
    return true;
  });
}

// One message on its way through shared memory: what becomes of its frames before it is sent.
struct ShmVan::Outgoing {
  bool seal = false;                 // the sender left the payload's CRC-32C to this Van
  std::vector<CrcSpan> checksummed;  // with seal: the payload, in order; a dst where it is copied
  std::vector<CrcSpan> copied;       // without seal: the copies into slots
  std::vector<size_t> emptied;       // frames whose bytes travel in a slot once copied
  std::vector<ShmDescriptor> descriptors;
  std::vector<Placed> placed;
  size_t lent_before = 0;         // lent_ entries before this message's
  std::optional<Placed> watched;  // an injected fault strikes once its receiver claims it...
  ShmFault watched_fault;         // ...the fault armed, for its step and its role's words
};

Status ShmVan::Send(RawMessage message) {
  SweepLent();
  if (!shm_peers_.count(message.peer)) return inner_->Send(std::move(message));
  // The payload's CRC-32C, when the sender left it to us: frames in order, those copied into a
  // slot checksummed in the copy (the header, frame 0, is not payload). Slots are reserved first;
  // then the payload is checksummed, and copied where it goes into a slot, in one pass split over
  // copy_threads threads. Without a seal the copies are plain memcpys.
  Outgoing out;
  out.seal = static_cast<bool>(message.seal_header);
  out.lent_before = lent_.size();
  for (size_t i = 0; i < message.frames.size(); ++i) Stage(message.frames[i], i, &out);
  const uint32_t crc = out.seal ? Crc32cSpans(out.checksummed, options_.copy_threads) : 0;
  for (const CrcSpan& c : out.copied) std::memcpy(c.dst, c.src, c.n);
  // A slot is published only once its bytes are in place.
  for (const Placed& p : out.placed) p.segment->Publish(p.slot);
  for (size_t i : out.emptied) message.frames[i] = Frame();  // the sender's buffers are free now
  if (out.seal) message.frames[0] = std::exchange(message.seal_header, nullptr)(crc);
  message.frames.insert(message.frames.begin(), EncodeShmEnvelope(out.descriptors));
  const Status sent = inner_->Send(std::move(message));
  if (!sent.ok()) {
    for (const Placed& p : out.placed) p.segment->Unpublish(p.slot);
    for (size_t l = out.lent_before; l < lent_.size(); ++l) lent_[l].segment->Unpublish(lent_[l].slot);
  } else if (out.watched) {
    KillOnceClaimed(*out.watched, out.watched_fault);
  }
  return sent;
}

void ShmVan::Stage(Frame& f, size_t i, Outgoing* out) {
  const bool payload = i > 0;
  const auto pass = [&](void* dst) {
    if (out->seal && payload) {
      out->checksummed.push_back({f.data(), dst, f.size()});
    } else if (dst != nullptr) {
      out->copied.push_back({f.data(), dst, f.size()});
    }
  };
  if (f.size() < options_.threshold_bytes) return pass(nullptr);
  if (std::optional<Lent> lent = LendInPlace(f)) {
    pass(nullptr);  // the bytes stay where they are, owned by the frame the loan keeps
    const std::optional<ShmFault> fault = TakeInjectedFault();
    if (fault && !out->watched) {
      out->watched = Placed{lent->segment.get(), lent->slot};
      out->watched_fault = *fault;
    }
    lent->segment->Publish(lent->slot);
    out->descriptors.push_back({static_cast<uint32_t>(i), lent->slot.index, lent->slot.generation, lent->slot.offset,
                                lent->slot.size, lent->segment->name()});
    lent->frame = std::move(f);
    lent_.push_back(std::move(*lent));
    f = Frame();
    ++stats_.frames_lent;
    return;
  }
  const std::optional<Placed> p = Place(f);
  if (!p) {
    pass(nullptr);
    ++stats_.frames_sent_inline;
    if (!warned_inline_) {
      warned_inline_ = true;
      PSF_LOG(Warning) << "transport: no free shared memory for a frame of " << f.size()
                       << " bytes; it travels inline (said once; shared memory in use: " << own_bytes_ << " bytes)";
    }
    return;
  }
  const std::optional<ShmFault> fault = TakeInjectedFault();
  if (fault && fault->point == ShmFault::kHalfwayThroughCopy) {
    std::memcpy(p->segment->SlotData(p->slot), f.data(), f.size() / 2);
    PSF_LOG(Warning) << "fault injection: killing myself (SIGKILL) halfway through copying a payload of " << f.size()
                     << " bytes into shared memory (push of step " << fault->step << ")";
    kill(getpid(), SIGKILL);
  }
  if (fault && !out->watched) {
    out->watched = *p;
    out->watched_fault = *fault;
  }
  pass(p->segment->SlotData(p->slot));
  out->descriptors.push_back(
      {static_cast<uint32_t>(i), p->slot.index, p->slot.generation, p->slot.offset, p->slot.size, p->segment->name()});
  out->placed.push_back(*p);
  out->emptied.push_back(i);
  ++stats_.frames_sent_shm;
}

std::optional<ShmFault> ShmVan::TakeInjectedFault() { return options_.faults ? options_.faults->Take() : std::nullopt; }

void ShmVan::KillOnceClaimed(const Placed& placed, const ShmFault& fault) {
  // Bounded: a receiver that never comes to read (it died too) must not hold the fault off forever.
  constexpr auto kPatience = std::chrono::seconds(10);
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!placed.segment->Claimed(placed.slot) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  PSF_LOG(Warning) << "fault injection: killing myself (SIGKILL) "
                   << (placed.segment->Claimed(placed.slot) ? "while" : "before (none came within 10 s)")
                   << " a receiver reads "
                   << (fault.point == ShmFault::kHalfwayThroughCopy
                           ? "my push of step " + std::to_string(fault.step) + " in place"
                           : "my reply from shared memory (sent after step " + std::to_string(fault.step) + ")");
  kill(getpid(), SIGKILL);
}

StatusOr<std::shared_ptr<ShmSegment>> ShmVan::PeerSegment(const std::string& name) {
  auto it = mapped_.find(name);
  if (it != mapped_.end()) return it->second;
  // A new segment: forget those whose creators are gone, or that their creators removed (a
  // server's snapshot it no longer needs); frames still viewing them keep them mapped.
  for (auto m = mapped_.begin(); m != mapped_.end();) {
    if (!ProcessExists(m->second->creator()) || !m->second->StillLinked()) {
      m = mapped_.erase(m);
    } else {
      ++m;
    }
  }
  PSF_ASSIGN_OR_RETURN(std::shared_ptr<ShmSegment> seg, ShmSegment::Open(name, options_.job_id));
  if (pin_) seg->Pin(pin_);
  mapped_.emplace(name, seg);
  return seg;
}

void ShmVan::PinPeerMemory(PinFn pin) {
  pin_ = std::move(pin);
  for (auto& [name, seg] : mapped_) seg->Pin(pin_);
}

bool ShmVan::PeerMemoryPinned(const void* data, size_t n) const {
  // A frame whose segment is no longer in mapped_ (its creator gone) counts as not pinned.
  return std::any_of(mapped_.begin(), mapped_.end(), [&](const auto& m) { return m.second->PinnedAndHolds(data, n); });
}

void ShmVan::Unpack(RawMessage& message) {
  auto decoded = DecodeShmEnvelope(message.frames.front());
  message.frames.erase(message.frames.begin());
  if (!decoded.ok()) {
    message.transport_error = decoded.status().message();
    return;
  }
  shm_peers_.insert(message.peer);
  auto refuse = [&](const std::string& why, const std::string& segment = "") {
    if (!message.transport_error.empty()) return;
    message.transport_error = why;
    message.refused_segment = segment;
  };
  int64_t previous = -1;
  for (const ShmDescriptor& d : *decoded) {
    // Each descriptor is checked, and a valid one claimed even when another is bad, so that
    // its slot goes back to the sender when the refused message is dropped.
    if (d.frame >= message.frames.size() || static_cast<int64_t>(d.frame) <= previous) {
      refuse("shared-memory descriptor names frame " + std::to_string(d.frame) + " of a message of " +
             std::to_string(message.frames.size()) + " frame(s), or names frames out of order");
      continue;
    }
    previous = d.frame;
    if (message.frames[d.frame].size() != 0) {
      refuse("frame " + std::to_string(d.frame) + " is both inline and in shared memory");
      continue;
    }
    auto seg = PeerSegment(d.segment);
    if (!seg.ok()) {
      refuse(seg.status().message(), d.segment);
      continue;
    }
    auto bytes = (*seg)->Claim(d.slot, d.generation, d.offset, d.size);
    if (!bytes.ok() && !(*seg)->StillLinked()) {
      // Our mapping is of a segment that is gone, and another was made under its name since
      // (names carry a random nonce, so a restart does not do that; this is the defence should a
      // name ever come back): map the new one and try once more; a second refusal names the
      // segment and stands.
      PSF_LOG(Warning) << "transport: shared-memory segment " << d.segment
                       << " was replaced since this process mapped it; mapping it again";
      mapped_.erase(d.segment);
      seg = PeerSegment(d.segment);
      if (!seg.ok()) {
        refuse(seg.status().message(), d.segment);
        continue;
      }
      bytes = (*seg)->Claim(d.slot, d.generation, d.offset, d.size);
    }
    if (!bytes.ok()) {
      refuse(bytes.status().message(), d.segment);
      continue;
    }
    auto claim = std::make_shared<SlotClaim>(*seg, d.slot, d.generation);
    message.frames[d.frame] = Frame::View(*bytes, d.size, std::move(claim));
    ++stats_.frames_received_shm;
  }
}

void ShmVan::TakeBackUnclaimed() {
  for (const std::weak_ptr<ShmSegment>& w : payload_segments_) {
    if (auto seg = w.lock()) seg->ReclaimFromDeadReaders();
  }
  std::erase_if(lent_, [&](Lent& l) {
    if (l.segment->Claimed(l.slot)) return l.segment->Released(l.slot);
    l.segment->Unpublish(l.slot);  // fails if a receiver claims it just now: then it stays lent
    if (!l.segment->Released(l.slot)) return false;
    ++stats_.lent_taken_back;
    return true;
  });
}

StatusOr<std::optional<RawMessage>> ShmVan::Recv(int timeout_ms) {
  SweepLent();  // a sender waiting for its lent memory back may only be receiving
  PSF_ASSIGN_OR_RETURN(std::optional<RawMessage> message, inner_->Recv(timeout_ms));
  if (message && !message->frames.empty() && IsShmEnvelope(message->frames.front())) Unpack(*message);
  return message;
}

}  // namespace psformer
