#include "worker/train/training_reporter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/duration_text.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/metrics_log.h"
#include "common/model_file.h"
#include "common/run_directory_identity.h"
#include "common/supervisor_report.h"

namespace psformer {
namespace {

// A progress line: into this role's log, and to its supervisor, which shows it on the job's
// console (a role's own output goes to its log file only).
void Say(const std::string& line) {
  PSF_LOG(Info) << line;
  ReportToSupervisor(kReportProgress, line);
}

}  // namespace

void TrainInterval::AddStep(const TrainInterval& step) {
  loss_sum += step.loss_sum;
  tokens += step.tokens;
  compute_s += step.compute_s;
  push_s += step.push_s;
  wait_s += step.wait_s;
  pull_s += step.pull_s;
  device_s += step.device_s;
  launch_cpu_s += step.launch_cpu_s;
  end = std::chrono::steady_clock::now();
  ++steps;
}

TrainInterval TrainInterval::Next() const {
  TrainInterval next;
  next.start = next.end = end;
  return next;
}

StatusOr<std::unique_ptr<TrainingReporter>> TrainingReporter::Open(const proto::JobConfig& config,
                                                                   const Options& options) {
  PSF_ASSIGN_OR_RETURN(auto metrics, RunMetrics::Open(options.run_dir, options.tensorboard));
  return std::unique_ptr<TrainingReporter>(new TrainingReporter(config, options, std::move(metrics)));
}

void TrainingReporter::Start(int64_t first_step) {
  if (first_step > config_.training().max_steps()) {
    Say("nothing left to train: the run is at step " + std::to_string(first_step - 1) +
        ", training.max_steps; it writes its model (--set training.max_steps=N to train on)");
  }
  first_step_ = first_step;
  last_train_step_ = first_step - 1;
  started_ = Clock::now();
}

Status TrainingReporter::Train(int64_t step, const TrainInterval& interval) {
  const double elapsed = std::chrono::duration<double>(interval.end - interval.start).count();
  const double loss = interval.tokens > 0 ? interval.loss_sum / interval.tokens : 0.0;
  const double lr = LearningRate(config_, step);
  const double rate = elapsed > 0 ? interval.tokens / elapsed : 0.0;
  MetricsLine line;
  // How many steps the interval holds: every_steps, but the last line of a run may hold fewer.
  const int64_t steps = std::max<int64_t>(1, step - last_train_step_);
  last_train_step_ = step;
  line.Add("step", step)
      .Add("loss", loss)
      .Add("ppl", std::exp(loss))
      .Add("lr", lr)
      .Add("tokens", interval.tokens)
      .Add("tokens_per_s", rate);
  if (interval.has_step_times) {
    line.Add("compute_s", interval.compute_s)
        .Add("push_s", interval.push_s)
        .Add("wait_s", interval.wait_s)
        .Add("pull_s", interval.pull_s)
        .Add("device_s", interval.device_s)
        .Add("launch_cpu_s", interval.launch_cpu_s);
  }
  line.Add("steps", steps);  // last: readers of the raw line have always seen "step" then "loss"
  const int64_t max_steps = config_.training().max_steps();
  const double so_far = std::chrono::duration<double>(Clock::now() - started_).count();
  const int64_t steps_done = step - first_step_ + 1;
  char progress[160];
  std::snprintf(progress, sizeof(progress), "step %lld/%lld  loss %.3f  lr %.2e  %.0f tokens/s  elapsed %s",
                static_cast<long long>(step), static_cast<long long>(max_steps), loss, lr, rate,
                DurationText(so_far).c_str());
  std::string text = progress;
  if (steps_done > 0 && step < max_steps) {
    text += "  ETA " + DurationText(so_far / steps_done * static_cast<double>(max_steps - step));
  }
  Say(text);
  return metrics_->Write(line);
}

Status TrainingReporter::Validation(int64_t step, const ValidationResult& v,
                                    const std::vector<std::string>* bleu_references,
                                    const std::vector<std::string>& bleu_hypotheses) {
  Say("step " + std::to_string(step) + "/" + std::to_string(config_.training().max_steps()) + "  " +
      ValidationSummary(v));
  if (bleu_references != nullptr) {
    PSF_RETURN_IF_ERROR(WriteValidBleuFiles(options_.run_dir, step, *bleu_references, bleu_hypotheses));
  }
  PSF_RETURN_IF_ERROR(metrics_->Write(ValidationMetrics(step, v)));
  const std::string why = EarlyStopReason(config_.training(), v);
  if (why.empty()) return Status::Ok();
  Say(why + ": stopping");
  return metrics_->Note(step, why + ": stopping");
}

Status TrainingReporter::WriteModel(int64_t step, int vocab_size, const std::vector<float>& params) {
  ModelFile file;
  file.model = config_.model();
  file.vocab_size = vocab_size;
  PSF_ASSIGN_OR_RETURN(file.spm_digest, TrainingSentencePieceDigest(config_));
  file.params = params;
  const std::string path = (std::filesystem::path(options_.run_dir) / "model.bin").string();
  PSF_RETURN_IF_ERROR(CheckRunDirectoryUnchanged(options_.run_dir));
  PSF_RETURN_IF_ERROR(WriteModelFile(path, file));
  PSF_LOG(Info) << "wrote " << path << " (step " << step << ")";
  return Status::Ok();
}

}  // namespace psformer
