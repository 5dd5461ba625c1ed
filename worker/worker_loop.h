// The worker role process (docs/architecture.md): pull -> forward/backward on this worker's batch -> push
// the gradient, its target tokens and loss -> repeat, timing each phase.
//
// Worker 0 is also the job's coordinator (worker/coordinator.h): it writes metrics.jsonl (with the
// step time split into compute / push / wait / pull), asks the servers for time-based checkpoints,
// and at the end pulls the final weights, writes RUN_DIR/model.bin and shuts the servers down.
//
// Recovery: when a server restarts, the job rolls back to a checkpoint (docs/failure-model.md); the
// worker hears it as Aborted from the client, rolls every shard into the new epoch and recomputes
// from the checkpoint's step (metrics lines and validations already done are not repeated).
//
// Restart: a restarted worker asks the servers (HELLO) for the last step it pushed and continues
// with the next one; its batch is a pure function of the step, so nothing is lost or repeated
// (a push the servers already hold is acknowledged as a duplicate and not applied again).
// Validation runs on every worker at the same steps (same weights, same code, same result), so
// all workers agree on early stopping (training.stop_at_valid_accuracy) without talking.
#ifndef PSFORMER_WORKER_WORKER_LOOP_H_
#define PSFORMER_WORKER_WORKER_LOOP_H_

#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

struct WorkerOptions {
  proto::JobConfig config;           // resolved and validated
  int index = 0;                     // this worker, 0 .. cluster.workers - 1
  std::vector<std::string> servers;  // endpoint of shard k at k
  std::string aggregator;            // host summing: the group's aggregator (PUSH, PULL); "" = none
  uint64_t job_id = 0;
  uint32_t incarnation = 0;
  std::string run_dir;
  int gpu = -1;  // CUDA device, or -1 for the CPU backend
};

Status RunWorker(const WorkerOptions& options);

// Asks a running worker to stop after the step it is in: once its push is acknowledged by every
// shard it logs "stopped at step T" and RunWorker returns OK. Async-signal-safe (SIGTERM).
void RequestWorkerStop();
bool WorkerStopRequested();

}  // namespace psformer

#endif  // PSFORMER_WORKER_WORKER_LOOP_H_
