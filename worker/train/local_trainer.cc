#include "worker/train/local_trainer.h"

#include <array>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "common/adam.h"
#include "common/config_loader.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/param_init.h"
#include "common/write_file.h"
#include "worker/train/loss_check.h"
#include "worker/train/training_reporter.h"

namespace psformer {

LocalTrainer::LocalTrainer(const proto::JobConfig& config, BatchSource* source)
    : config_(config),
      source_(source),
      vocab_(source->vocab_size()),
      backend_(config.cluster().threads_per_process()),
      model_(config.model(), vocab_, &backend_) {
  const uint64_t n = model_.parameter_count();
  params_.resize(n);
  InitParamRange(model_.layout(), config.training().seed(), 0, n, params_.data());
  adam_m_.assign(n, 0.0f);
  adam_v_.assign(n, 0.0f);
  grad_.assign(n, 0.0f);
  device_params_ = backend_.Allocate<float>(n);
  device_grad_ = backend_.Allocate<float>(n);
}

namespace {

Status CheckBatchFits(const Batch& batch, const proto::ModelConfig& model, const std::string& what) {
  const int longest = std::max(batch.src_len, batch.tgt_len);
  if (longest > model.max_positions()) {
    return Status::InvalidArgument(what + " holds a sentence of " + std::to_string(longest) +
                                   " tokens, more than model.max_positions (" + std::to_string(model.max_positions()) +
                                   ")");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<StepReport> LocalTrainer::Step() {
  StepReport report;
  report.step = step_ + 1;
  const Batch batch = source_->TrainBatch(report.step, 0, 1);
  PSF_RETURN_IF_ERROR(CheckBatchFits(batch, config_.model(), "the batch of step " + std::to_string(report.step)));
  const size_t n = params_.size();
  device_params_.Upload(params_.data(), n);
  const DropoutKey key{config_.training().seed(), static_cast<uint32_t>(report.step), 0};
  report.stats = model_.ForwardBackward(device_params_.data(), batch, key, device_grad_.data());
  device_grad_.Download(grad_.data(), n);
  report.lr = LearningRate(config_, report.step);
  if (report.stats.target_tokens > 0) {
    NormalizeGradient(n, static_cast<uint64_t>(report.stats.target_tokens), grad_.data());
    const float clip = config_.optimizer().clip_norm();
    if (clip > 0) {
      double sum_sq = 0;
      for (float g : grad_) sum_sq += static_cast<double>(g) * g;
      const double norm = std::sqrt(sum_sq);
      if (norm > clip) {
        const float scale = static_cast<float>(clip / norm);
        for (float& g : grad_) g *= scale;
      }
    }
    const AdamHyper hyper{config_.optimizer().beta1(), config_.optimizer().beta2(), config_.optimizer().epsilon()};
    AdamUpdateParallel(hyper, report.step, report.lr, n, grad_.data(), params_.data(), adam_m_.data(), adam_v_.data(),
                       backend_.threads());
  }
  step_ = report.step;
  return report;
}

StatusOr<ValidReport> LocalTrainer::Validate(std::vector<std::string>* bleu_hypotheses) {
  for (const Batch& batch : source_->ValidBatches()) {
    PSF_RETURN_IF_ERROR(CheckBatchFits(batch, config_.model(), "a validation batch"));
  }
  device_params_.Upload(params_.data(), params_.size());
  return ValidateWithBleu(&model_, device_params_.data(), source_->ValidBatches(), valid_bleu_.get(), bleu_hypotheses);
}

Status LocalTrainer::EnableValidBleu() {
  if (config_.training().valid_bleu_sentences() <= 0) return Status::Ok();
  PSF_ASSIGN_OR_RETURN(valid_bleu_, ValidBleu::Create(config_, vocab_, source_->ValidBatches(), &backend_));
  return Status::Ok();
}

TrainerState LocalTrainer::State() const {
  TrainerState state;
  state.model = config_.model();
  state.vocab_size = vocab_;
  state.step = step_;
  state.params = params_;
  state.adam_m = adam_m_;
  state.adam_v = adam_v_;
  return state;
}

Status LocalTrainer::Restore(const TrainerState& state) {
  if (state.model.SerializeAsString() != config_.model().SerializeAsString() || state.vocab_size != vocab_) {
    return Status::InvalidArgument("the saved state was made for another model config or vocabulary size");
  }
  if (state.params.size() != params_.size()) {
    return Status::InvalidArgument("the saved state holds " + std::to_string(state.params.size()) +
                                   " parameters, the model has " + std::to_string(params_.size()));
  }
  step_ = state.step;
  params_ = state.params;
  adam_m_ = state.adam_m;
  adam_v_ = state.adam_v;
  return Status::Ok();
}

namespace {

Status WriteTextFile(const std::string& path, const std::string& text) { return WriteFileAtomically(path, text); }

// Validates the trainer's weights and reports the validation; `*stop` says whether it ends training.
Status ValidateAndReport(LocalTrainer* trainer, TrainingReporter* reporter, const proto::TrainingConfig& training,
                         bool* stop) {
  std::vector<std::string> hypotheses;
  PSF_ASSIGN_OR_RETURN(const ValidReport v, trainer->Validate(&hypotheses));
  *stop = !EarlyStopReason(training, v).empty();
  return reporter->Validation(trainer->step(), v, trainer->has_valid_bleu() ? &trainer->bleu_references() : nullptr,
                              hypotheses);
}

// The first of SIGINT, SIGTERM and SIGHUP asks the loop to stop after its step; a second one
// ends the process as the signal would have.
std::atomic<int> g_stop_signal{0};  // NOLINT: a signal handler can reach nothing else.
void OnStopSignal(int signal) {
  int none = 0;
  if (!g_stop_signal.compare_exchange_strong(none, signal)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// Installs OnStopSignal while it lives, and puts back the handlers there were before.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    for (size_t i = 0; i < kSignals.size(); ++i) previous_[i] = std::signal(kSignals[i], OnStopSignal);
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) std::signal(kSignals[i], previous_[i]);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int received() const { return g_stop_signal.load(); }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<void (*)(int), 3> previous_{};
};

}  // namespace

Status RunLocalTraining(const proto::JobConfig& config, const TrainOptions& options, int* stopped_by) {
  *stopped_by = 0;
  namespace fs = std::filesystem;
  if (config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    // Emulated workers exist to exercise the parameter servers, which --local has none of.
    return Status::InvalidArgument(
        "--local trains with the CPU backend; cluster.backend = EMULATED needs servers "
        "(drop --local)");
  }
  if (config.cluster().backend() == proto::ClusterConfig::CUDA) {
    // Asked for a GPU by name: training on the CPU instead would pass for what was asked.
    return Status::InvalidArgument(
        "--local trains with the CPU backend; cluster.backend = CUDA trains on GPUs through the servers "
        "(drop --local, or set cluster.backend=CPU)");
  }
  // The data is read and checked first: a corpus refused leaves the run directory as it was
  // (a log of the refusal there would make it a run, and the retry need --overwrite).
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> source, MakeBatchSource(config));
  LocalTrainer trainer(config, source.get());
  PSF_RETURN_IF_ERROR(trainer.EnableValidBleu());
  const std::string dir = options.run_dir;
  if (options.before_first_write) PSF_RETURN_IF_ERROR(options.before_first_write());
  PSF_RETURN_IF_ERROR(MakeDirectories((fs::path(dir) / "logs").string(), "run directory"));
  PSF_RETURN_IF_ERROR(SetLogFile((fs::path(dir) / "logs" / "trainer.log").string()));
  const std::string state_path = (fs::path(dir) / "trainer_state.bin").string();
  if (options.resume) {
    PSF_ASSIGN_OR_RETURN(TrainerState state, ReadTrainerState(state_path));
    PSF_RETURN_IF_ERROR(trainer.Restore(state).WithContext(state_path));
    // As a job's resume refuses (CheckRunDirectory): the run would say it had nothing left to
    // train and keep a config whose step count its state has passed.
    if (trainer.step() > config.training().max_steps()) {
      return Status::InvalidArgument("--resume: " + state_path + " is of step " + std::to_string(trainer.step()) +
                                     ", past training.max_steps (" + std::to_string(config.training().max_steps()) +
                                     "): continue with --set training.max_steps=N for an N of at least " +
                                     std::to_string(trainer.step()));
    }
    PSF_LOG(Info) << "resuming from " << state_path << " at step " << trainer.step();
  }
  // Only once the state is known to belong to this model does the run's config change.
  PSF_RETURN_IF_ERROR(WriteTextFile((fs::path(dir) / "config.pbtxt").string(), ConfigToText(config)));
  TrainingReporter::Options report;
  report.run_dir = dir;
  report.tensorboard = config.logging().tensorboard();
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<TrainingReporter> reporter, TrainingReporter::Open(config, report));
  PSF_LOG(Info) << "training " << config.name() << ": " << trainer.params().size() << " parameters, vocabulary "
                << trainer.vocab_size() << ", " << config.training().max_steps() << " steps, run directory " << dir;

  const auto& t = config.training();
  const int every = std::max(1, config.logging().every_steps());
  reporter->Start(trainer.step() + 1);
  const StopSignals signals;
  TrainInterval interval;
  // Not on a corpus without valid.bin (CheckPreparedCorpus allows one only when no validation is
  // asked): validating no batch would report zeros as if measured.
  const bool validates = !source->ValidBatches().empty();
  int64_t last_validated = -1;
  int64_t last_logged = trainer.step();
  while (trainer.step() < t.max_steps()) {
    PSF_ASSIGN_OR_RETURN(const StepReport r, trainer.Step());
    PSF_RETURN_IF_ERROR(CheckLossIsFinite(r.step, r.stats.loss_sum));
    TrainInterval step;
    step.loss_sum = r.stats.loss_sum;
    step.tokens = r.stats.target_tokens;
    interval.AddStep(step);
    if (r.step % every == 0) {
      PSF_RETURN_IF_ERROR(reporter->Train(r.step, interval));
      interval = interval.Next();
      last_logged = r.step;
    }
    const int64_t ckpt = config.checkpoint().every_steps();
    if (ckpt > 0 && r.step % ckpt == 0) PSF_RETURN_IF_ERROR(WriteTrainerState(state_path, trainer.State()));
    if (validates && ValidationDue(t, r.step)) {
      bool stop = false;
      PSF_RETURN_IF_ERROR(ValidateAndReport(&trainer, reporter.get(), t, &stop));
      last_validated = r.step;
      if (stop) break;
    }
    if (signals.received() != 0) break;
  }
  // The last steps, where max_steps (or an early stop) is not on a logging step.
  if (last_logged != trainer.step()) PSF_RETURN_IF_ERROR(reporter->Train(trainer.step(), interval));
  if ((*stopped_by = signals.received()) != 0) {
    // Asked to stop: the state to continue from, and no model.bin (the run is not finished).
    PSF_RETURN_IF_ERROR(WriteTrainerState(state_path, trainer.State()));
    PSF_LOG(Info) << "stopped at step " << trainer.step() << " (signal " << *stopped_by << "); state in " << state_path;
    return Status::Ok();
  }
  if (validates && last_validated != trainer.step()) {
    bool stop = false;
    PSF_RETURN_IF_ERROR(ValidateAndReport(&trainer, reporter.get(), t, &stop));
  }
  PSF_RETURN_IF_ERROR(WriteTrainerState(state_path, trainer.State()));
  return reporter->WriteModel(trainer.step(), trainer.vocab_size(), trainer.params());
}

}  // namespace psformer
