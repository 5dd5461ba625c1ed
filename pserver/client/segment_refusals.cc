#include "pserver/client/segment_refusals.h"

#include <cstdio>

#include "pserver/timing.h"

namespace psformer {

int SegmentRefusals::JobPatienceMs(const proto::ClusterConfig& cluster) {
  const int heartbeat_timeout_ms = cluster.heartbeat_timeout_ms();
  return heartbeat_timeout_ms > 0 ? heartbeat_timeout_ms
                                  : proto::ClusterConfig::default_instance().heartbeat_timeout_ms();
}

int SegmentRefusals::ForgetAfterMs(int patience_ms, int retry_ms) {
  return patience_ms + 2 * static_cast<int>(LongestRetryInterval(retry_ms).count());
}

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
