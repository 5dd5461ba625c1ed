// ShmVan: a Van that moves large payload frames through POSIX shared memory between processes
// of one host, wrapped around the Van that carries everything else (ZeroMQ over ipc:// there).
// Neither the parameter server nor its clients know about it: they send and receive frames as
// over any Van.
//
// Which peers: a peer this Van connected to over ipc:// (the launcher hands a worker ipc://
// endpoints for the servers of its own host, host_identity.h), and a routed peer whose messages
// came with an envelope (so a server answers its same-host clients the same way). Every message
// to such a peer starts with an envelope frame; other peers get their messages unchanged.
//
// Send: each frame of at least threshold_bytes is copied into a slot of this process's own
// segment (shm_segment.h) and replaced by an empty frame; the envelope lists, per replaced
// frame, the segment, slot, generation, offset and size. The descriptor leaves only after the
// copy is complete. A sender that leaves the payload's CRC-32C to the Van (RawMessage::seal_header)
// gets it computed in that copy (CopyWithCrc32c), not in a pass of its own, split by bytes over
// copy_threads threads whatever the frames' sizes (Crc32cSpans). When no slot is free and no
// segment can be made (a small /dev/shm in a container, max_bytes reached), the frame travels
// inline as over any Van, with one warning: correctness never depends on shared memory.
//
// Lending: memory from AllocatePayload lies in a segment of its own. A frame viewing it is not
// copied: its slot names the bytes in place (ShmSegment::Lend), and the Van keeps the frame, and
// so whatever owns the bytes, until the receiver releases the slot. This is how a server's
// parameter snapshot, written once per update, reaches every same-host worker without a copy
// per reply, and how a worker's gradient, copied off its GPU straight into such memory, reaches
// its same-host servers without a pass of the host's. Lent frames are let go in Send and Recv as
// their receivers release them. A lent slot nobody claims within lend_patience_ms (its receiver
// died, or the message was lost) is taken back, or at once by TakeBackUnclaimed; a descriptor for
// it that arrives later is refused as stale.
//
// Recv: the receiver maps the sender's segment (once; cached), claims each slot and hands up a
// Frame viewing it in place, whose owner releases the slot when the last copy of the Frame
// goes. A descriptor that cannot be honoured (a name that is not a psformer segment, a segment
// of another job, a slot out of range, a size that does not match the slot, a stale slot) makes
// the message arrive with RawMessage::transport_error set, which ParseMessage refuses with its
// reason. The envelope is recognised by its first byte, zero, which no wire header can begin
// with (a protobuf field tag is never zero).
//
// Fault injection: a KILL_IN_SHM armed by the process's FaultPlan (fault_plan.h) in the switch
// handed in as options.faults strikes in the next Send that places a frame: halfway through its copy (workers), or once
// its receiver has claimed it (servers; and workers whose frame is lent in place: no copy to
// strike in, so they die while a server reads their gradient out of their segment).
//
// Thread safety: as any Van, one thread at a time; received frames may be released on any thread.
#ifndef PSFORMER_COMMON_TRANSPORT_SHM_VAN_H_
#define PSFORMER_COMMON_TRANSPORT_SHM_VAN_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/fault_plan.h"
#include "common/transport/forwarding_van.h"
#include "common/transport/shm_segment.h"

namespace psformer {

struct ShmVanOptions {
  uint64_t job_id = 0;                  // names this process's segments; only this job's are read.
  std::string ipc_endpoint;             // a server's extra "ipc://PATH" for same-host clients; "" = none.
  uint64_t threshold_bytes = 64 << 10;  // smaller frames travel inline (a copy is cheaper than a slot).
  // Data bytes of each segment made: the first first_segment_bytes, each later one as large as
  // all made before it (so the total doubles), at most segment_bytes; always room for the frame
  // that asked. A segment is populated when made (every page written by the kernel), so a process
  // that copies a few MB a step must not pay for 256 MB in its first step.
  uint64_t first_segment_bytes = 16 << 20;
  uint64_t segment_bytes = 256 << 20;
  uint64_t max_bytes = 2ull << 30;      // all segments of this process together; beyond: inline.
  uint32_t slots_per_segment = 1024;
  bool checksum_in_copy = true;  // ChecksumsPayloadTo same-host peers (false: for benchmarks).
  uint32_t lend_slots = 4096;    // slots of each AllocatePayload segment (lent frames at once).
  int lend_patience_ms = 30000;  // a lent slot unclaimed this long is taken back.
  int copy_threads = 1;          // threads for a Send's copies into slots and its checksum.
  // Where the process's FaultPlan arms a KILL_IN_SHM (FaultPlan::shm_faults); null: none.
  std::shared_ptr<ShmFaultSwitch> faults;
};

// What a ShmVan did so far (this thread's view; for tests and benchmarks).
struct ShmVanStats {
  uint64_t frames_sent_shm = 0;     // payload frames copied into a slot
  uint64_t frames_sent_inline = 0;  // frames over the threshold that found no space
  uint64_t frames_received_shm = 0;
  uint64_t segments_created = 0;
  uint64_t segment_bytes_made = 0;  // data bytes of those segments together
  uint64_t frames_lent = 0;       // payload frames sent in place from AllocatePayload memory
  uint64_t payload_segments = 0;  // AllocatePayload segments made
  uint64_t lent_taken_back = 0;   // lent slots nobody claimed in time
};

class ShmVan : public ForwardingVan {
 public:
  ShmVan(std::unique_ptr<Van> inner, ShmVanOptions options);
  ~ShmVan() override;  // unlinks this process's segments (mappings held by received frames stay valid).

  // Binds `endpoint` on the inner Van and, the first time, options.ipc_endpoint beside it (its
  // directory made mode 0700). Returns what the inner Van returned for `endpoint`.
  StatusOr<std::string> Bind(const std::string& endpoint) override;
  Status Connect(const std::string& peer, const std::string& endpoint) override;
  Status Send(RawMessage message) override;
  // True for the peers that get envelopes (unless options.checksum_in_copy is off): their payload
  // frames are copied into a slot anyway, and CopyWithCrc32c checksums them in that pass.
  bool ChecksumsPayloadTo(const std::string& peer) const override {
    return options_.checksum_in_copy && shm_peers_.count(peer) > 0;
  }
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override;
  // Memory in a segment of its own, which Send lends in place (see above); the heap when it is
  // smaller than threshold_bytes or no segment can be made.
  std::shared_ptr<void> AllocatePayload(size_t bytes) override;
  // Unpublishes every lent slot no receiver has claimed, and takes back the claims of receivers
  // that died; the frames go back to their owners (Van::TakeBackUnclaimed).
  void TakeBackUnclaimed() override;
  // Registers each peer segment as it is mapped (those mapped already at once).
  void PinPeerMemory(PinFn pin) override;
  bool PeerMemoryPinned(const void* data, size_t n) const override;

  const ShmVanStats& stats() const { return stats_; }
  // Lent frames whose receivers have not released them yet (as of the last Send).
  size_t frames_on_loan() const { return lent_.size(); }

 private:
  struct Placed {
    ShmSegment* segment;
    ShmSegment::Slot slot;
  };
  std::optional<Placed> Place(const Frame& frame);
  struct Lent {
    std::shared_ptr<ShmSegment> segment;
    ShmSegment::Slot slot;
    Frame frame;  // keeps the lent bytes' owner alive
    std::chrono::steady_clock::time_point since;
  };
  // A published slot lending `frame`'s bytes in place, if they lie in AllocatePayload memory.
  std::optional<Lent> LendInPlace(const Frame& frame);
  // Lets go of lent frames their receivers are done with; takes back those unclaimed too long.
  void SweepLent();
  struct Outgoing;
  // Frame `i` of a message to a same-host peer: lent in place, or given a slot to be copied into
  // (checksummed on the way when sealed), or left inline; what it becomes goes to `out`.
  void Stage(Frame& frame, size_t i, Outgoing* out);
  // A KILL_IN_SHM armed in options.faults, disarming it.
  std::optional<ShmFault> TakeInjectedFault();
  // Replaces the envelope and placeholders of `message` by frames viewing the slots; the first
  // refusal, if any, goes to message.transport_error.
  void Unpack(RawMessage& message);
  StatusOr<std::shared_ptr<ShmSegment>> PeerSegment(const std::string& name);
  // An injected KILL_IN_SHM on a server (fault_plan.h): SIGKILLs this process once the receiver
  // has claimed `placed`, i.e. while it reads the reply, or after 10 s without a claim.
  void KillOnceClaimed(const Placed& placed, const ShmFault& fault);

  ShmVanOptions options_;
  bool ipc_bound_ = false;
  std::set<std::string> shm_peers_;  // peers that get envelopes
  std::vector<std::unique_ptr<ShmSegment>> own_;
  uint64_t own_bytes_ = 0;
  bool cannot_create_ = false;  // a segment could not be made: stop trying
  bool warned_inline_ = false;
  std::map<std::string, std::shared_ptr<ShmSegment>> mapped_;  // other processes' segments, by name
  PinFn pin_;                                                  // PinPeerMemory's: each of mapped_ registered with it
  std::vector<std::weak_ptr<ShmSegment>> payload_segments_;    // AllocatePayload's
  bool cannot_create_payload_ = false;
  std::vector<Lent> lent_;
  std::chrono::steady_clock::time_point last_reclaim_{};
  ShmVanStats stats_;
};

// One payload frame in shared memory, as the envelope lists it.
struct ShmDescriptor {
  uint32_t frame = 0;  // which frame of the message (after the envelope) it replaces
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string segment;  // the segment's name, at most 63 bytes
};

// The envelope frame listing `descriptors` (exposed for tests that forge bad ones).
Frame EncodeShmEnvelope(const std::vector<ShmDescriptor>& descriptors);
// Whether a frame is an envelope (begins with the envelope's magic).
bool IsShmEnvelope(const Frame& frame);
// The descriptors of an envelope, or why it is malformed (InvalidArgument).
StatusOr<std::vector<ShmDescriptor>> DecodeShmEnvelope(const Frame& frame);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_SHM_VAN_H_
