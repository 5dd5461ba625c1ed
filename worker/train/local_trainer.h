// The local trainer: one process, no parameter servers. Each step takes the batch
// BatchSource::TrainBatch(step, 0, 1), computes the gradient of the summed loss with the model,
// divides it by the step's target tokens (NormalizeGradient), optionally clips its global norm,
// and applies Adam (common/adam.h) with the paper's schedule (common/lr_schedule.h): the same
// arithmetic the parameter servers apply, so both give the same weights for one worker.
// Parameters start from InitParamRange(layout, training.seed); dropout masks are keyed by
// (training.seed, step, worker 0, site).
#ifndef PSFORMER_WORKER_TRAIN_LOCAL_TRAINER_H_
#define PSFORMER_WORKER_TRAIN_LOCAL_TRAINER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/backend/cpu_backend.h"
#include "worker/data/batch_source.h"
#include "worker/model/transformer.h"
#include "worker/train/trainer_state.h"
#include "worker/valid_bleu.h"
#include "worker/validation.h"

namespace psformer {

struct StepReport {
  int64_t step = 0;
  StepStats stats;
  double lr = 0;
};

// The same figures as the worker loop's validation (worker/validation.h).
using ValidReport = ValidationResult;

class LocalTrainer {
 public:
  // REQUIRES: a validated config; `source` outlives the trainer.
  LocalTrainer(const proto::JobConfig& config, BatchSource* source);

  // Trains step() + 1. Fails (changing nothing) when the batch is longer than
  // model.max_positions: a corpus prepared with a larger data.max_length than the model accepts.
  StatusOr<StepReport> Step();
  // Evaluates the validation batches (no dropout); fails like Step on a too-long batch. With
  // validation BLEU enabled, report.bleu is set too and `bleu_hypotheses` (if given) receives the
  // detokenized translations it scored.
  StatusOr<ValidReport> Validate(std::vector<std::string>* bleu_hypotheses = nullptr);
  // Validation BLEU at each Validate when training.valid_bleu_sentences > 0 (worker/valid_bleu.h,
  // as the coordinator of a job measures it); nothing otherwise. Fails as ValidBleu::Create
  // does when the corpus's spm.model cannot be read.
  Status EnableValidBleu();
  // The references of validation BLEU; REQUIRES: EnableValidBleu enabled it.
  const std::vector<std::string>& bleu_references() const { return valid_bleu_->references(); }
  bool has_valid_bleu() const { return valid_bleu_ != nullptr; }

  int64_t step() const { return step_; }
  const std::vector<float>& params() const { return params_; }
  int vocab_size() const { return vocab_; }
  TrainerState State() const;
  // Continues from a saved state; refuses one made for another model config or vocabulary.
  Status Restore(const TrainerState& state);

 private:
  proto::JobConfig config_;
  BatchSource* source_;
  int vocab_;
  CpuBackend<float> backend_;
  Transformer<float> model_;
  int64_t step_ = 0;
  std::vector<float> params_, adam_m_, adam_v_, grad_;  // host copies, (parameter count)
  DeviceBuffer<float> device_params_, device_grad_;     // (parameter count)
  std::unique_ptr<ValidBleu> valid_bleu_;               // null: no validation BLEU
};

struct TrainOptions {
  std::string run_dir;  // created if missing
  bool resume = false;  // continue from RUN_DIR/trainer_state.bin
  // Called just before the run directory is first written, once the corpus has been read and
  // checked (train --overwrite: clear the earlier run). Null: nothing.
  std::function<Status()> before_first_write;
};

// Trains as the config says and writes the run directory: config.pbtxt, metrics.jsonl with its
// train and validation lines and valid_bleu/ with training.valid_bleu_sentences, as a job's
// coordinator writes them (worker/train/training_reporter.h; here a train line's "tokens" counts
// the target tokens since the process started), logs/trainer.log, trainer_state.bin (every
// checkpoint.every_steps steps and at the end) and model.bin (at the end). Validates every
// training.valid_every steps and after the last; stops after training.max_steps, or once a
// validation meets training.stop_at_valid_accuracy or stop_at_valid_bleu (EarlyStopReason).
// SIGINT, SIGTERM or SIGHUP stop it after the step under way: its train line and
// trainer_state.bin are written (no model.bin) and `*stopped_by` is the signal; a second one ends
// the process at once. Otherwise `*stopped_by` is 0.
Status RunLocalTraining(const proto::JobConfig& config, const TrainOptions& options, int* stopped_by);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRAIN_LOCAL_TRAINER_H_
