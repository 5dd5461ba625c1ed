#include "pserver/client/segment_refusals.h"

#include <cstdio>

namespace psformer {

std::optional<std::string> SegmentRefusals::Refused(const std::string& segment, const std::string& why,
                                                    Clock::time_point now) {
  if (patience_ms_ <= 0) return std::nullopt;
  Run& run = runs_[segment];
  if (run.count == 0 || now - run.last > std::chrono::milliseconds(forget_after_ms_)) run = Run{now, now, 0};
  run.last = now;
  ++run.count;
  const auto lasted = now - run.first;
  if (run.count < kMinRefusals || lasted < std::chrono::milliseconds(patience_ms_)) return std::nullopt;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", std::chrono::duration<double>(lasted).count());
  return "shared-memory segment " + segment + " was refused " + std::to_string(run.count) + " times over " + seconds +
         " s, longer than the job's heartbeat timeout (" + std::to_string(patience_ms_) +
         " ms), so sending again will not help; last refusal: " + why;
}

}  // namespace psformer
