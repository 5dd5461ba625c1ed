#include "pserver/wire/reject_reason.h"

namespace psformer {

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone:
      return "none";
    case RejectReason::kMalformedHeader:
      return "malformed header";
    case RejectReason::kUnknownType:
      return "unknown type";
    case RejectReason::kWrongJob:
      return "wrong job";
    case RejectReason::kUnknownSender:
      return "unknown sender";
    case RejectReason::kWrongShard:
      return "wrong shard";
    case RejectReason::kBadRange:
      return "bad range";
    case RejectReason::kBadPayload:
      return "bad payload";
    case RejectReason::kBadChecksum:
      return "bad checksum";
    case RejectReason::kStaleStep:
      return "stale step";
    case RejectReason::kFutureStep:
      return "future step";
    case RejectReason::kStaleIncarnation:
      return "stale incarnation";
    case RejectReason::kOtherEpoch:
      return "other epoch";
    case RejectReason::kJobFinished:
      return "job finished";
    case RejectReason::kNoRunDirectory:
      return "no run directory";
    case RejectReason::kRestoreFailed:
      return "restore failed";
    case RejectReason::kBadSharedMemory:
      return "bad shared memory";
    case RejectReason::kUnsealed:
      return "not sealed by the job";
    case RejectReason::kCount:
      break;
  }
  return "unknown reason";
}

uint64_t RejectCounters::Total() const {
  uint64_t total = 0;
  for (const auto& c : counts_) total += c.load(std::memory_order_relaxed);
  return total;
}

std::string RejectCounters::ToString() const {
  std::string out;
  for (size_t i = 1; i < counts_.size(); ++i) {
    const uint64_t n = counts_[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    if (!out.empty()) out += ' ';
    out += RejectReasonName(static_cast<RejectReason>(i));
    out += '=' + std::to_string(n);
  }
  return out.empty() ? "none" : out;
}

}  // namespace psformer
