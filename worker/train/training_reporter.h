// What a training run reports as it goes, written once for the local trainer
// (worker/train/local_trainer.h) and a job's coordinator (worker/coordinator.h): the train and
// validation lines of metrics.jsonl (with their TensorBoard scalars, common/run_metrics.h), the
// matching progress lines in the log, validation BLEU's translations, the note of early stopping,
// and model.bin at the end.
//
// A train line holds, in this order: step; loss (label-smoothed, per target token over the logging
// interval); ppl (exp(loss)); lr (at the step); tokens (the interval's target tokens: `psformer
// status` reads them so, for a job and a local run alike); tokens_per_s (the interval's target
// tokens over its wall time); and when the interval has step times, where they went: compute_s
// (the launching thread in Compute), push_s (handing the gradient over and waiting for every
// shard to hold it), wait_s (for the servers' first reply), pull_s; then device_s (the device's
// span of forward and backward: CUDA events; the CPU backend's compute; the emulated GPU's
// step) and launch_cpu_s (CPU time of the thread that launches the device's work). "Busy" is
// device_s over the interval's wall time. A validation line is ValidationMetrics's
// (worker/validation.h).
//
// Not thread-safe: one thread reports.
#ifndef PSFORMER_WORKER_TRAIN_TRAINING_REPORTER_H_
#define PSFORMER_WORKER_TRAIN_TRAINING_REPORTER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/run_metrics.h"
#include "common/status.h"
#include "worker/validation.h"

namespace psformer {

// Sums over a logging interval, for one train line.
struct TrainInterval {
  double loss_sum = 0;  // summed label-smoothed loss of the interval's batches...
  int64_t tokens = 0;   // ...and their target tokens
  // Where the interval's steps spent their time (a job's worker; the local trainer has none).
  double compute_s = 0, push_s = 0, wait_s = 0, pull_s = 0;
  double device_s = 0;      // the device's span of the steps' forward and backward
  double launch_cpu_s = 0;  // CPU time of the launching thread in the steps
  bool has_step_times = false;
  // The wall clock the sums are of: from when the interval's first step began to when its last
  // one ended (AddStep), so that the rates and the device's share divide like by like.
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point end = start;
  int64_t steps = 0;  // added with AddStep

  // Adds one step's sums, the step having ended now.
  void AddStep(const TrainInterval& step);
  // The interval after this one: it begins where this one's last step ended.
  TrainInterval Next() const;
};

class TrainingReporter {
 public:
  struct Options {
    std::string run_dir;
    bool tensorboard = true;  // logging.tensorboard: TensorBoard scalars beside metrics.jsonl
  };

  // REQUIRES: a validated config. Opens RUN_DIR/metrics.jsonl for appending (and TensorBoard);
  // IoError if either cannot be opened.
  static StatusOr<std::unique_ptr<TrainingReporter>> Open(const proto::JobConfig& config, const Options& options);

  // The first step this process computes: the progress line's elapsed time and ETA count from
  // now and that step (a restarted or resumed process starts them afresh).
  void Start(int64_t first_step);

  // The train line of the interval that ends with `step` (its `steps`: those since the last train
  // line, or since Start), and its progress line:
  //   "step 100/100000  loss 1.659  lr 4.42e-03  5630 tokens/s  elapsed 20s  ETA 5h38m".
  Status Train(int64_t step, const TrainInterval& interval);

  // Validation of the weights after `step`: its log line; when BLEU was measured (`bleu_references`
  // not null), the translations it scored in RUN_DIR/valid_bleu/ (WriteValidBleuFiles); its metrics
  // line; and when EarlyStopReason says so, that reason in the log and as a TensorBoard note.
  Status Validation(int64_t step, const ValidationResult& v, const std::vector<std::string>* bleu_references,
                    const std::vector<std::string>& bleu_hypotheses);

  // A text event in TensorBoard: a restart, a rollback.
  Status Note(int64_t step, const std::string& text) { return metrics_->Note(step, text); }

  // Writes RUN_DIR/model.bin: the weights after `step`, (parameter count) floats for the config's
  // model and `vocab_size`.
  Status WriteModel(int64_t step, int vocab_size, const std::vector<float>& params);

 private:
  using Clock = std::chrono::steady_clock;
  TrainingReporter(const proto::JobConfig& config, const Options& options, std::unique_ptr<RunMetrics> metrics)
      : config_(config), options_(options), metrics_(std::move(metrics)) {}

  proto::JobConfig config_;
  Options options_;
  std::unique_ptr<RunMetrics> metrics_;
  int64_t first_step_ = 1;
  int64_t last_train_step_ = 0;  // the step of the last train line, or the one before first_step_
  Clock::time_point started_ = Clock::now();
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRAIN_TRAINING_REPORTER_H_
