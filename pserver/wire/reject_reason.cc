#include "pserver/wire/reject_reason.h"

#include <iterator>

#include "common/enum_name.h"

namespace psformer {

const char* RejectReasonName(RejectReason reason) {
  // In the order of the values reject_reason.h gives the reasons.
  static constexpr const char* kNames[] = {
      "none",           "malformed header",  "unknown type",         "wrong job",    "unknown sender",
      "wrong shard",    "bad range",         "bad payload",          "bad checksum", "stale step",
      "future step",    "stale incarnation", "other epoch",          "job finished", "no run directory",
      "restore failed", "bad shared memory", "not sealed by the job"};
  static_assert(std::size(kNames) == static_cast<size_t>(RejectReason::kCount), "a name for every reason");
  return EnumName(reason, kNames, "unknown reason");
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
