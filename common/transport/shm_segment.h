// ShmSegment: one POSIX shared-memory segment through which a process hands payload bytes to
// receivers on its own host (shm_van.h). The creating process (the owner) writes payloads into
// slots; a receiver maps the segment, claims a slot named by a descriptor, reads the bytes in
// place and releases the slot, which the owner may then reuse.
//
// Names: "/psformer-<job id, 16 hex digits>-<creator pid>-<nonce, 16 hex digits>-<n>", so that a
// job's segments, and those of one process, can be found and removed after the fact
// (RemoveShmSegments), also when their creator was killed. The nonce is drawn at random once per
// process (ShmProcessNonce): the kernel reuses pids, sometimes within a second, and a restarted
// role that got its predecessor's pid must not make segments of its predecessor's names, which
// receivers still hold mapped. Mode 0600: only processes of the same user can open one; file
// permissions are the authentication of this path.
//
// Layout: a header (magic, version, job id, creator pid, slot count, data offset and capacity),
// a table of slots, then the data area. Each slot has a state word, atomically updated by both
// sides: generation << 2 | status, where status is free, writing (the owner is copying into
// it), sent (a descriptor for it may be in flight) or claimed (a receiver holds it, and its pid
// is recorded). The generation grows each time the owner reuses the slot, so a stale or repeated
// descriptor cannot claim the slot's next payload. A descriptor leaves the owner only after
// the copy is complete (writing -> sent), so no receiver ever sees a half-written payload.
//
// A slot may also lend bytes the owner keeps in the data area itself (Lend): a server's parameter
// snapshot, written once per update and read in place by every same-host worker that pulls it.
// Such a slot names its bytes without reserving them; the owner must leave them unchanged until
// the slot is free again (Released), and may take back a slot nobody claimed (Unpublish).
//
// Thread safety: the owner's side (Reserve, Lend, Publish, Unpublish, Claimed, Released,
// ReclaimFromDeadReaders) is used by one thread at a time; Claim and Release may be called from
// any thread of any process.
#ifndef PSFORMER_COMMON_TRANSPORT_SHM_SEGMENT_H_
#define PSFORMER_COMMON_TRANSPORT_SHM_SEGMENT_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace psformer {

inline constexpr std::string_view kShmNamePrefix = "/psformer-";

// "/psformer-00000000000000ff-1234-9e3779b97f4a7c15-0": at most 62 bytes, as a pid has at most 7
// digits (the kernel's PID_MAX_LIMIT), within the envelope's 63.
std::string ShmSegmentName(uint64_t job_id, pid_t pid, uint64_t nonce, uint32_t n);
// This process's nonce: random, drawn on first use and again in a child after fork (a forked
// child's pid, once it is gone, may come back as a sibling's).
uint64_t ShmProcessNonce();
// What every segment name of the job begins with: "/psformer-00000000000000ff-".
std::string ShmJobPrefix(uint64_t job_id);

struct ShmSegmentNameParts {
  uint64_t job_id = 0;
  pid_t pid = 0;
  uint64_t nonce = 0;
  uint32_t n = 0;
};
// The parts of a name ShmSegmentName made; nullopt for anything else.
std::optional<ShmSegmentNameParts> ParseShmSegmentName(std::string_view name);

// Whether segment `name` is still linked (its creator has not removed it).
bool ShmSegmentExists(const std::string& name);
// Unlinks this user's segments of `job_id` (nullopt = any job) made by `pid` (nullopt = any
// process). Returns how many were removed.
int RemoveShmSegments(std::optional<uint64_t> job_id, std::optional<pid_t> pid);
// Unlinks this user's segments whose creating process no longer exists (left by a job that was
// killed with its supervisor). Returns how many were removed. A pid names a process only in its
// PID namespace: a segment made in another one (a job in another container on the same
// /dev/shm) is never taken for an orphan, nor is one whose header cannot be read. `job_id`:
// only that job's (nullopt = any job's).
int RemoveOrphanShmSegments(std::optional<uint64_t> job_id = std::nullopt);

// This process's PID namespace (the inode of /proc/self/ns/pid; 0 where it cannot be read).
uint64_t CurrentPidNamespace();
// The PID namespace segment `name` was made in, as its header records it; nullopt when the
// header cannot be read or is not a segment's.
std::optional<uint64_t> ShmSegmentPidNamespace(const std::string& name);

class ShmSegment {
 public:
  // ShmSegmentPidNamespace (above) reads it through this, which knows the header.
  static std::optional<uint64_t> PidNamespaceOf(const std::string& name);
  struct Slot {
    uint32_t index = 0;
    uint64_t generation = 0;
    uint64_t offset = 0;  // into the data area
    uint64_t size = 0;
  };

  // Creates segment number `n` of this process (named with ShmProcessNonce) for `job_id`, with `capacity` data bytes
  // and `slots` slots, its memory reserved up front (so a full /dev/shm is an error here, never a SIGBUS later). The
  // owner unlinks it when destroyed.
  static StatusOr<std::unique_ptr<ShmSegment>> Create(uint64_t job_id, uint32_t n, uint64_t capacity, uint32_t slots);
  // Maps another process's segment `name` for reading. Refused (InvalidArgument, saying why):
  // a name that is not a psformer segment, one of another job than `job_id`, one not owned by
  // this user or open to others, a header that does not match its name or its size.
  static StatusOr<std::shared_ptr<ShmSegment>> Open(const std::string& name, uint64_t job_id);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  // Whether `name` still names the object this mapping is of: false once its owner unlinked it,
  // and when a segment made since under the same name replaced it (a mapping of the old one
  // would refuse every descriptor for the new one).
  bool StillLinked() const;
  pid_t creator() const { return creator_; }
  uint64_t capacity() const { return capacity_; }
  uint32_t slot_count() const { return slot_count_; }

  // Owner: a free slot of `size` bytes (64-byte aligned), now "writing"; nullopt when no slot or
  // no contiguous space is free.
  std::optional<Slot> Reserve(uint64_t size);
  uint8_t* SlotData(const Slot& slot) { return data_ + slot.offset; }
  // Owner: the data area, for bytes the owner manages itself and lends (never Reserve in a
  // segment used so).
  uint8_t* data() { return data_; }
  // Owner: a free slot naming bytes [offset, offset + size) of the data area without reserving
  // them, now "writing" (Publish it to lend them); nullopt when no slot is free.
  std::optional<Slot> Lend(uint64_t offset, uint64_t size);
  // Owner: the slot's bytes are complete; a descriptor for it may leave ("sent").
  void Publish(const Slot& slot);
  // Owner: the descriptor was never sent; the slot is free again.
  void Unpublish(const Slot& slot);
  // Owner: whether a receiver has claimed the published slot (it may have released it since).
  bool Claimed(const Slot& slot) const;
  // Owner: whether the published slot is done with: its receiver released it (or died and it
  // was reclaimed), or it was unpublished.
  bool Released(const Slot& slot) const;
  // Owner: frees slots claimed by receivers that died before releasing them. Returns how many.
  int ReclaimFromDeadReaders();

  // Receiver: claims the slot a descriptor names, checking it against the slot table; returns
  // the slot's bytes, valid until Release. Refused (InvalidArgument, saying why): a slot out of
  // range, an offset or size that differs from the slot's, a slot not in state "sent" with that
  // generation (stale, repeated or forged).
  StatusOr<const uint8_t*> Claim(uint32_t slot, uint64_t generation, uint64_t offset, uint64_t size);
  void Release(uint32_t slot, uint64_t generation);

  // Registers the whole mapping (page aligned) with `pin` (a device driver's registration, so
  // that a device reads the bytes by DMA) and keeps what it returns until the mapping goes; null
  // from `pin`: not registered. Once per segment.
  void Pin(const std::function<std::shared_ptr<void>(void* data, size_t bytes)>& pin);
  // Whether a Pin registered the mapping and it holds `n` bytes at `p`.
  bool PinnedAndHolds(const void* p, size_t n) const;

 private:
  struct Header;
  struct SlotEntry;
  ShmSegment() = default;
  SlotEntry* slots() const;

  std::string name_;
  bool owner_ = false;
  pid_t creator_ = 0;
  dev_t device_ = 0;  // of the file in /dev/shm that was mapped (StillLinked)
  ino_t inode_ = 0;
  uint8_t* base_ = nullptr;  // the whole mapping
  size_t mapped_bytes_ = 0;
  uint8_t* data_ = nullptr;  // the data area
  uint64_t capacity_ = 0;
  uint32_t slot_count_ = 0;
  std::shared_ptr<void> pin_;  // Pin's: let go of before the mapping is unmapped
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_SHM_SEGMENT_H_
