// Why a received message was refused, and per-reason counters of refusals. Each refused message
// is answered with an ERROR carrying the reason (Header.reject_reason) and a sentence saying what
// was wrong, counted here, and logged; it never reaches the parameters.
#ifndef PSFORMER_PSERVER_WIRE_REJECT_REASON_H_
#define PSFORMER_PSERVER_WIRE_REJECT_REASON_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace psformer {

enum class RejectReason : uint32_t {
  kNone = 0,
  kMalformedHeader = 1,    // no header frame, header bytes that do not parse, or too large.
  kUnknownType = 2,        // a type this receiver does not handle.
  kWrongJob = 3,           // job_id of another job.
  kUnknownSender = 4,      // a role or index outside the job.
  kWrongShard = 5,         // addressed to another shard.
  kBadRange = 6,           // element range not this shard's.
  kBadPayload = 7,         // payload size not matching dtype and range, or frames split inside an element.
  kBadChecksum = 8,        // CRC-32C over the payload differs from the header's.
  kStaleStep = 9,          // a step the receiver is already past.
  kFutureStep = 10,        // a step the sender cannot have reached yet.
  kStaleIncarnation = 11,  // from an earlier life of a restarted sender.
  kOtherEpoch = 12,        // sent in another recovery epoch: the sender must roll back (or catch up).
  kJobFinished = 13,       // the coordinator has ended the job: the worker stops.
  kNoRunDirectory = 14,    // a CHECKPOINT to a server that has no run directory to write it to.
  kRestoreFailed = 15,     // a ROLLBACK whose checkpoint this server cannot load.
  // a payload in shared memory that cannot be read as described: a segment name not ours or of
  // another job, a slot out of range, a size not the slot's, a stale slot (shm_van.h).
  kBadSharedMemory = 16,
  // a frame that does not open under the job's payload key (cluster.encryption = AES_256_GCM):
  // not sealed by a process of the job, or damaged on the way (payload_sealer.h).
  kUnsealed = 17,
  kCount = 18,
};

// "malformed header", "wrong job", ...
const char* RejectReasonName(RejectReason reason);

struct Rejection {
  RejectReason reason = RejectReason::kNone;
  std::string detail;  // what was wrong, with the values involved.
  std::string ToString() const { return std::string(RejectReasonName(reason)) + ": " + detail; }
};
// What a check says of a message: the rejection when it is refused, nullopt when it is accepted
// (so `if (refusal)` reads as it means).
using Refusal = std::optional<Rejection>;

// Counts refusals by reason. Thread-safe: the receiving thread counts, anyone may read.
class RejectCounters {
 public:
  void Count(RejectReason reason) { counts_[Index(reason)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t Get(RejectReason reason) const { return counts_[Index(reason)].load(std::memory_order_relaxed); }
  uint64_t Total() const;
  // "wrong job=2 bad checksum=1" (reasons with a zero count left out), or "none".
  std::string ToString() const;

 private:
  static size_t Index(RejectReason r) { return static_cast<size_t>(r) % static_cast<size_t>(RejectReason::kCount); }
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RejectReason::kCount)> counts_{};
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_WIRE_REJECT_REASON_H_
