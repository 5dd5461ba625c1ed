#include "pserver/server/shutdown_tracker.h"

#include "pserver/timing.h"

namespace psformer {

ShutdownTracker::ShutdownTracker(int workers, int retry_ms, uint64_t shard_bytes)
    : retry_ms_(retry_ms), shard_bytes_(shard_bytes), done_(workers, false), seen_(workers, false) {}

void ShutdownTracker::JobEnded(Clock::time_point now, bool every_worker) {
  if (every_worker) seen_.assign(seen_.size(), true);
  if (!job_ended_) deadline_ = now + kServerFinishDeadline;
  job_ended_ = true;
  Update(now);
}

void ShutdownTracker::WorkerSaidGoodbye(int worker, Clock::time_point now) {
  done_[worker] = true;
  Update(now);
}

void ShutdownTracker::WorkerToldJobFinished(int worker, Clock::time_point now) {
  told_finished_ = true;
  done_[worker] = true;
  Update(now);
}

void ShutdownTracker::Update(Clock::time_point now) {
  if (!job_ended_ || stop_at_.has_value()) return;
  for (size_t w = 0; w < done_.size(); ++w) {
    if (seen_[w] && !done_[w]) return;
  }
  // Nobody can have missed a refusal that was never sent: stop at once.
  stop_at_ = told_finished_ ? now + ServerLingerAfterJobEnd(retry_ms_, shard_bytes_) : now;
}

}  // namespace psformer
