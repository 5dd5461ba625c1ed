// ShutdownTracker: when a parameter server may stop once the coordinator has ended the job.
//
// The coordinator's SHUTDOWN ends the job; from then on the server refuses every worker's PUSH
// and PULL as "job finished", which is how workers of SSP and async (that stop at different
// steps) learn of it. The server stops once every worker it has heard from (or, when the
// coordinator says so, every worker of the job) is done: said
// SHUTDOWN itself, or was told "job finished". A refusal may be lost on the wire, so after
// having sent one the server lingers for a client's longest resend interval (pserver/timing.h)
// before it stops. Whatever happens, it stops kServerFinishDeadline after the job ended.
//
// Thread safety: one thread (the server loop).
#ifndef PSFORMER_PSERVER_SERVER_SHUTDOWN_TRACKER_H_
#define PSFORMER_PSERVER_SERVER_SHUTDOWN_TRACKER_H_

#include <chrono>
#include <optional>
#include <vector>

namespace psformer {

class ShutdownTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // `workers` in the job; `retry_ms` is the clients' first resend interval (cluster.retry_ms);
  // `shard_bytes`: the largest answer to a pull (the shard in fp32), which resends wait for.
  ShutdownTracker(int workers, int retry_ms, uint64_t shard_bytes = 0);

  // A message came from `worker`: the server must wait for it to be done.
  void Heard(int worker) { seen_[worker] = true; }
  // The coordinator ended the job (repeats change nothing). `every_worker`: a worker not heard
  // from yet holds the server up too (the coordinator named the job's last step: a resumed job
  // with no step left ends before its other workers' HELLO, which would find no server and wait
  // for one, restart after restart); without, it counts as done.
  void JobEnded(Clock::time_point now, bool every_worker = false);
  bool job_ended() const { return job_ended_; }
  // `worker` said SHUTDOWN: it is done.
  void WorkerSaidGoodbye(int worker, Clock::time_point now);
  // `worker` was refused as "job finished": it is done, but the refusal may be lost.
  void WorkerToldJobFinished(int worker, Clock::time_point now);

  // Whether the server should stop now: every worker is done (and any lingering is over).
  bool ShouldStop(Clock::time_point now) const { return stop_at_.has_value() && now >= *stop_at_; }
  // Whether the job ended more than kServerFinishDeadline ago with workers still not done.
  bool Overdue(Clock::time_point now) const { return job_ended_ && !ShouldStop(now) && now > deadline_; }

 private:
  void Update(Clock::time_point now);

  int retry_ms_;
  uint64_t shard_bytes_;
  std::vector<bool> done_;  // said SHUTDOWN or were told "job finished".
  std::vector<bool> seen_;  // heard from at all; a worker never heard from counts as done.
  bool job_ended_ = false;
  bool told_finished_ = false;  // some worker was refused as "job finished".
  Clock::time_point deadline_;  // job end + kServerFinishDeadline.
  std::optional<Clock::time_point> stop_at_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_SHUTDOWN_TRACKER_H_
