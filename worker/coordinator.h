// What worker 0 does for the whole job besides training (worker/worker_loop.h): it reports the run
// through a TrainingReporter (metrics.jsonl, TensorBoard, progress lines, validation), with the
// loss over every worker's batches where the servers say it (BSP) and the step time split into
// compute / push / wait / pull; notes restarts and rollbacks; asks the servers for time-based
// checkpoints; and at the end writes RUN_DIR/model.bin, has the servers checkpoint the last step
// and shuts them down.
//
// Checkpoints and shutdown are the COORDINATOR role's to ask for, so it speaks them on a client of
// its own, made when first needed and kept in the worker client's epoch. Not thread-safe: the
// worker loop's thread calls it.
#ifndef PSFORMER_WORKER_COORDINATOR_H_
#define PSFORMER_WORKER_COORDINATOR_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "pserver/client/ps_client.h"
#include "worker/train/training_reporter.h"

namespace psformer {

class Coordinator {
 public:
  // REQUIRES: a validated config that outlives the coordinator. `control`: the options of its
  // COORDINATOR client. Opens the run's metrics (IoError as TrainingReporter::Open).
  static StatusOr<std::unique_ptr<Coordinator>> Open(const proto::JobConfig& config, const std::string& run_dir,
                                                     PsClientOptions control);

  // This process trains from `first_step` on; the servers held worker 0's pushes up to
  // `last_pushed`. A restarted worker 0 (incarnation > 0) notes its restart.
  Status Started(int64_t first_step, int64_t last_pushed, uint32_t incarnation);
  // The job rolled back to the checkpoint of step `restored` because of `why`.
  Status RolledBack(int64_t restored, const std::string& why);

  // After `client` pulled the weights after `step`: adds the step's loss over every worker; on
  // logging steps, and at `last` (the job's final pull), writes the train line of `interval` and
  // starts a new one (steps already logged before a rollback are not logged again, and an
  // interval without a step of this process is not logged).
  Status Pulled(int64_t step, const PsClient& client, TrainInterval* interval, bool last = false);
  // A stop (the worker asked to stop after its step): writes the train line of the steps through
  // `pulled`, the last one whose pull came back, if any is not logged yet. The step stopped at is
  // in the servers' checkpoint but not in metrics.jsonl: its loss over every worker's batches
  // comes with a pull that a stopping job does not make.
  Status Stopped(int64_t pulled, TrainInterval* interval);
  // Every checkpoint.every_minutes, has every shard checkpoint `step` (just pulled). A failure is
  // logged, not returned: training goes on (a rollback under way is found by the next pull).
  void MaybeCheckpoint(int64_t step, const PsClient& client);
  // After the model is written: every shard checkpoints `last_step` (a shard that holds it
  // already answers at once), so that a finished run continues from where it ended (--resume)
  // and `psformer average` counts its final weights; nothing when the config writes no
  // checkpoints (checkpoint.every_steps and every_minutes both 0). A failure is logged, not
  // returned: the server reports it to its supervisor, and the job ends with exit status 1.
  void CheckpointTheEnd(int64_t last_step, const PsClient& client);

  TrainingReporter* reporter() { return reporter_.get(); }

  // `written` (a write of the run's files through reporter()), noted when it failed: a full disk,
  // a read-only run directory, which a restarted worker would meet alike (write_failed).
  Status Written(const Status& written) {
    if (!written.ok()) write_failed_ = true;
    return written;
  }
  bool write_failed() const { return write_failed_; }

  // The end: the final weights `params` (after `last_step`) to RUN_DIR/model.bin...
  Status WriteModel(int64_t last_step, int vocab_size, const std::vector<float>& params) {
    return Written(reporter_->WriteModel(last_step, vocab_size, params));
  }
  // ...then, once worker 0 said goodbye, the servers are told to shut down.
  // `last_step`: the job's, so that servers wait for every worker to be done (a resumed job with
  // no step left to train ends before its other workers have reached the servers).
  Status ShutDownJob(const PsClient& client, int64_t last_step);

 private:
  using Clock = std::chrono::steady_clock;
  Coordinator(const proto::JobConfig& config, PsClientOptions control, std::unique_ptr<TrainingReporter> reporter)
      : config_(config), control_options_(std::move(control)), reporter_(std::move(reporter)) {}
  // The COORDINATOR client, in `client`'s epoch.
  Status MakeControlClient(const PsClient& client);
  // Has every shard checkpoint `step`; a failure is logged (`which` checkpoint), not returned.
  void AskForCheckpoint(int64_t step, const PsClient& client, const char* which);
  // Writes the train line of `interval`, the steps through `step`, and starts the next one;
  // nothing where `step` is logged already or the interval holds no step.
  Status Log(int64_t step, TrainInterval* interval);

  const proto::JobConfig& config_;
  PsClientOptions control_options_;
  std::unique_ptr<TrainingReporter> reporter_;
  std::unique_ptr<PsClient> control_;  // null until first needed
  // Every worker's loss over the interval, from the servers' pull replies (BSP; else none).
  double global_loss_sum_ = 0;
  int64_t global_tokens_ = 0;
  int64_t logged_through_ = 0;  // replays after a rollback skip these.
  Clock::time_point last_checkpoint_ = Clock::now();
  bool write_failed_ = false;  // Written saw a failure
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_COORDINATOR_H_
