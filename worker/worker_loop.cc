#include "worker/worker_loop.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "common/checkpoint/checkpoint_store.h"
#include "common/config_loader.h"
#include "common/fault_plan.h"
#include "common/logging.h"
#include "common/role_threads.h"
#include "common/supervisor_report.h"
#include "common/trace.h"
#include "common/transport/van_factory.h"
#include "pserver/client/ps_client.h"
#include "pserver/client/segment_refusals.h"
#include "pserver/wire/piece_table.h"
#include "worker/coordinator.h"
#include "worker/datapath/worker_data_path.h"
#include "worker/step_computer.h"
#include "worker/train/loss_check.h"
#include "worker/validation.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU time of the calling thread: the launching thread's cost of a step, whatever it waited for.
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

class WorkerLoop {
 public:
  // `computer` computes the steps; `faults` are this process's injected faults (the same plan
  // whose shared-memory switch the client's Van takes).
  WorkerLoop(const WorkerOptions& options, std::unique_ptr<StepComputer> computer, const FaultPlan& faults)
      : options_(options),
        config_(options.config),
        computer_(std::move(computer)),
        n_(computer_->parameter_count()),
        faults_(faults) {}

  Status Run();
  // Whether the coordinator could not write the run's files (metrics.jsonl, model.bin, ...): a
  // full disk or a read-only run directory, which a restart would meet the same way.
  bool CouldNotWriteTheRun() const { return coordinator_ != nullptr && coordinator_->write_failed(); }
  // Whether the client gave up on a server's shared-memory segment it could not read
  // (PsClient::gave_up_on_segment).
  bool GaveUpOnSegment() {
    return data_path_ != nullptr && data_path_->Call([](PsClient& c) { return c.gave_up_on_segment(); });
  }

 private:
  Status Connect();
  PsClientOptions ClientOptions(proto::Role role) const;
  // Trains from step `first` to the end. Returns Aborted when the job rolls back (the client
  // knows where to), OK at the end or when asked to stop. Each step is its phases, in order.
  Status Train(int64_t first);
  // Phase 1: the parameters after `step` into the computer's params() (BSP: once every worker
  // pushed it; with overlap this pull went out with the step's first pushed piece, and its
  // pieces have been arriving as the servers updated them, most during backward: the data
  // path's client thread took them in). The coordinator reports the step and checkpoints when due.
  Status PullParameters(int64_t step);
  // Phase 2: validation of the weights after `step`, on every worker alike (see the header),
  // when due and not done before; `*stop`: whether it ends training.
  Status MaybeValidate(int64_t step, bool* stop);
  bool ValidationWanted(int64_t step) const;
  // Whether phase 1 of `step` + 1 overlaps its compute: its forward begins as the pull of the
  // parameters after `step` lands, layer by layer (cluster.forward_as_pulled), unless they are
  // validated first.
  bool ForwardAsPulled(int64_t step) const;
  // Phase 3: computes `step` and pushes its gradient (with overlap, range by range as backward
  // finishes them, through the data path's stages), left in flight: the next pull waits until
  // every shard holds it (WorkerDataPath::SettlePush), while the next forward may begin.
  // `as_pulled`: phase 1 runs inside it, the pull landing while forward runs (ForwardAsPulled).
  StatusOr<StepStats> ComputeAndPush(int64_t step, bool as_pulled);
  // After a Compute that read the pull as it landed: how that pull ended, and phase 1's report.
  Status ConfirmPull(int64_t step);
  // Phase 4: the step's loss and tokens into the interval the next metrics line reports.
  void Report(const StepStats& stats);
  // After the last step: the final weights validated, and the coordinator's end of the job.
  Status Conclude(int64_t next_step);

  // Validates the weights after `step` (in params()); `*stop`: whether that ends training.
  Status ValidateAndMaybeStop(int64_t step, bool* stop);
  // Coordinator: the final weights to model.bin, the last step's checkpoint, then the job ends.
  Status Finish(int64_t last_step);
  bool is_coordinator() const { return options_.index == 0; }

  WorkerOptions options_;
  const proto::JobConfig& config_;
  std::unique_ptr<StepComputer> computer_;
  uint64_t n_;
  const FaultPlan& faults_;
  // The client and the stages that push and pull (with overlap, cluster.overlap: pieces pushed
  // during backward, the next pull sent at once).
  std::unique_ptr<WorkerDataPath> data_path_;
  std::unique_ptr<Coordinator> coordinator_;  // worker 0 only
  int64_t started_at_ = 1;                    // first step of this process: the one before it was validated already.
  int64_t validated_through_ = 0;             // replays after a rollback skip these.
  // The steps since the last metrics line, and the sums of the step under way: a line logged in
  // the middle of a step (a pull confirmed after its forward) holds only the steps before it.
  TrainInterval interval_;
  TrainInterval step_times_;
};

Status WorkerLoop::Connect() {
  // The job's transport: CURVE-authenticated, with the config's injected faults (van_factory.h).
  PSF_ASSIGN_OR_RETURN(auto van, MakeClientVan(config_, FaultStream(FaultRole::kWorker, options_.index), 2,
                                               faults_.shm_faults(), WorkerStopRequested));
  PSF_ASSIGN_OR_RETURN(auto client, PsClient::Create(ClientOptions(proto::WORKER), std::move(van)));
  PSF_ASSIGN_OR_RETURN(data_path_, WorkerDataPath::Create(config_, faults_, computer_.get(), std::move(client)));
  return Status::Ok();
}

PsClientOptions WorkerLoop::ClientOptions(proto::Role role) const {
  PsClientOptions o;
  o.job_id = options_.job_id;
  o.role = role;
  o.id = static_cast<uint32_t>(options_.index);
  o.incarnation = options_.incarnation;
  o.servers = options_.servers;
  if (role == proto::WORKER) o.aggregator = options_.aggregator;  // the coordinator talks to the servers
  o.parameter_count = n_;
  o.frame_bytes = static_cast<size_t>(config_.cluster().frame_bytes());
  o.retry_ms = config_.cluster().retry_ms();
  o.shm_refusal_patience_ms = SegmentRefusals::JobPatienceMs(config_.cluster());
  o.copy_threads = ClientPayloadThreads(config_);
  o.pull_digest = config_.cluster().backend() == proto::ClusterConfig::EMULATED;  // its gradients' key
  if (role == proto::WORKER) o.stop_requested = WorkerStopRequested;
  o.gradient_dtype =
      config_.cluster().gradient_dtype() == proto::ClusterConfig::BF16 ? proto::BFLOAT16 : proto::FLOAT32;
  o.pieces = std::make_shared<const PieceTable>(
      JobPieceTable(config_, n_, ParamLayout(config_.model(), computer_->vocab_size()).LayerStarts()));
  return o;
}

Status WorkerLoop::Run() {
  PSF_RETURN_IF_ERROR(Connect());
  if (is_coordinator()) {
    PSF_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(config_, options_.run_dir, ClientOptions(proto::COORDINATOR)));
  }
  const StatusOr<int64_t> hello = data_path_->Call([](PsClient& c) { return c.Hello(); });
  if (!hello.ok() && WorkerStopRequested()) {
    PSF_LOG(Info) << "stopped before training (asked to stop while waiting for the servers: "
                  << hello.status().message() << ")";
    ReportToSupervisor(kReportStopped, "before training");
    return Status::Ok();
  }
  PSF_ASSIGN_OR_RETURN(const int64_t last_pushed, hello);
  started_at_ = last_pushed + 1;
  ReportToSupervisor(kReportReady);  // memory allocated, servers reached: started up
  if (started_at_ > 1) {
    PSF_LOG(Info) << "rejoining at step " << started_at_ << " (incarnation " << options_.incarnation << ")";
  }
  if (coordinator_) PSF_RETURN_IF_ERROR(coordinator_->Started(started_at_, last_pushed, options_.incarnation));
  int64_t first = started_at_;
  while (true) {
    const Status trained = Train(first);
    if (trained.IsAborted() && data_path_->Call([](PsClient& c) { return c.job_finished(); })) {
      // SSP/async: the coordinator stopped the job while this worker was still training.
      PSF_LOG(Info) << "the coordinator ended the job; stopping";
      return Status::Ok();
    }
    if (!trained.IsAborted()) {
      if (!trained.ok() || is_coordinator()) return trained;
      return data_path_->Call([](PsClient& c) { return c.Goodbye(); });
    }
    PSF_LOG(Warning) << trained.message();
    PSF_ASSIGN_OR_RETURN(const int64_t restored, data_path_->Rollback());
    PSF_LOG(Warning) << "rolled back: recomputing from step " << restored + 1;
    if (coordinator_) PSF_RETURN_IF_ERROR(coordinator_->RolledBack(restored, trained.message()));
    first = restored + 1;
  }
}

Status WorkerLoop::Train(int64_t first) {
  const int64_t max_steps = config_.training().max_steps();
  int64_t step = first;
  step_times_ = TrainInterval();  // what a step cut off by a rollback had summed
  // An interval without a step yet begins with the first one (not when the worker connected).
  if (interval_.steps == 0) interval_.start = interval_.end = Clock::now();
  for (; step <= max_steps; ++step) {
    Trace::AtStep(step);
    const TraceSpan traced("step", step);
    const double cpu_start = ThreadCpuSeconds();
    const bool as_pulled = ForwardAsPulled(step - 1);
    if (!as_pulled) PSF_RETURN_IF_ERROR(PullParameters(step - 1));
    bool stop = false;
    const double cpu_before_validation = ThreadCpuSeconds();
    PSF_RETURN_IF_ERROR(MaybeValidate(step - 1, &stop));
    if (stop) break;
    const double cpu_after_validation = ThreadCpuSeconds();
    PSF_ASSIGN_OR_RETURN(const StepStats stats, ComputeAndPush(step, as_pulled));
    // The launching thread's CPU of the step, validation aside (it is not the step's).
    step_times_.launch_cpu_s += ThreadCpuSeconds() - cpu_after_validation + (cpu_before_validation - cpu_start);
    if (WorkerStopRequested()) {
      // Once every shard holds this worker's push of `step`: a clean place to stop (see the header).
      PSF_RETURN_IF_ERROR(data_path_->SettlePush());
      // The interval holds the steps through step - 1, whose pull came back: their line.
      if (coordinator_) PSF_RETURN_IF_ERROR(coordinator_->Stopped(step - 1, &interval_));
      PSF_LOG(Info) << "stopped at step " << step << " (asked to stop)";
      ReportToSupervisor(kReportStopped, "at step " + std::to_string(step));
      return Status::Ok();
    }
    Report(stats);
  }
  return Conclude(step);
}

Status WorkerLoop::PullParameters(int64_t step) {
  const TraceSpan traced("pull", step);
  const auto pull_start = Clock::now();
  double first_reply_s = 0;
  PSF_RETURN_IF_ERROR(data_path_->PullParameters(step, &first_reply_s));
  step_times_.wait_s += first_reply_s;
  step_times_.pull_s += Seconds(Clock::now() - pull_start) - first_reply_s;
  if (!coordinator_) return Status::Ok();
  // The coordinator reads what the pull said (every worker's loss and tokens) off the client.
  return data_path_->Call([&](PsClient& c) -> Status {
    PSF_RETURN_IF_ERROR(coordinator_->Pulled(step, c, &interval_));
    coordinator_->MaybeCheckpoint(step, c);
    return Status::Ok();
  });
}

Status WorkerLoop::ConfirmPull(int64_t step) {
  double first_reply_s = 0;  // overlapped with forward: the step's compute time holds it
  PSF_RETURN_IF_ERROR(data_path_->ConfirmPull(step, &first_reply_s));
  if (!coordinator_) return Status::Ok();
  // As PullParameters: the coordinator reads what the pull said before this step's time is
  // added to the interval it reports.
  return data_path_->Call([&](PsClient& c) { return coordinator_->Pulled(step, c, &interval_); });
}

Status WorkerLoop::MaybeValidate(int64_t step, bool* stop) {
  *stop = false;
  return ValidationWanted(step) ? ValidateAndMaybeStop(step, stop) : Status::Ok();
}

bool WorkerLoop::ValidationWanted(int64_t step) const {
  return computer_->validates() && ValidationDue(config_.training(), step) && step >= started_at_ &&
         step > validated_through_;
}

bool WorkerLoop::ForwardAsPulled(int64_t step) const {
  return config_.cluster().forward_as_pulled() && computer_->computes_as_pulled() && !ValidationWanted(step);
}

StatusOr<StepStats> WorkerLoop::ComputeAndPush(int64_t step, bool as_pulled) {
  // With overlap each layer's gradient is pushed as backward finishes it; not in a step where an
  // injected kill or stall strikes before the push: it must find nothing sent.
  PSF_ASSIGN_OR_RETURN(const GradientCopying on_copying, data_path_->BeginPush(step, faults_.WillKillOrStallAt(step)));
  if (as_pulled) {
    // After BeginPush (its wait for the lent memory would queue behind the pull's); the
    // coordinator's checkpoint of step - 1 is asked before any piece of this step's push leaves.
    const TraceSpan traced("pull", step - 1);
    const auto pull_start = Clock::now();
    std::function<void(PsClient&)> pulled;
    if (coordinator_) pulled = [this, step](PsClient& c) { coordinator_->MaybeCheckpoint(step - 1, c); };
    PSF_RETURN_IF_ERROR(data_path_->PullWhileComputing(step - 1, std::move(pulled)));
    step_times_.pull_s += Seconds(Clock::now() - pull_start);
  }
  const auto compute_start = Clock::now();
  const StepStats stats = [&] {
    const TraceSpan traced("compute", step);
    return computer_->Compute(step, on_copying);
  }();
  if (as_pulled) {
    const Status pulled = ConfirmPull(step - 1);
    if (!pulled.ok()) {
      data_path_->HandOver();  // the step's ranges reach the client, which drops them
      return pulled;
    }
  }
  step_times_.compute_s += Seconds(Clock::now() - compute_start);
  const auto push_start = Clock::now();
  {
    const TraceSpan traced("hand_over", step);
    data_path_->HandOver();  // the last layers' copies land and go to the client
  }
  step_times_.device_s += computer_->last_device_s();
  PSF_RETURN_IF_ERROR(CheckLossIsFinite(step, stats.loss_sum));  // before a refused push says less
  faults_.KillOrStallAt(step);  // injected faults strike after computing a step, before its push is acknowledged
  {
    const TraceSpan traced("finish_push", step);
    PSF_RETURN_IF_ERROR(data_path_->FinishPush(stats));
  }
  step_times_.push_s += Seconds(Clock::now() - push_start);
  return stats;
}

void WorkerLoop::Report(const StepStats& stats) {
  step_times_.loss_sum = stats.loss_sum;
  step_times_.tokens = stats.target_tokens;
  interval_.AddStep(step_times_);
  step_times_ = TrainInterval();
}

Status WorkerLoop::Conclude(int64_t next_step) {
  PSF_RETURN_IF_ERROR(data_path_->SettlePush());  // the last step's push, held by every shard
  const int64_t max_steps = config_.training().max_steps();
  const int64_t last_step = std::min<int64_t>(next_step, max_steps);
  if (computer_->validates() && next_step > max_steps && last_step > validated_through_) {
    // The final weights, validated on every worker (early stopping validated already).
    PSF_RETURN_IF_ERROR(data_path_->PullFinal(last_step));
    bool stop = false;
    PSF_RETURN_IF_ERROR(ValidateAndMaybeStop(last_step, &stop));
  }
  return coordinator_ ? Finish(next_step > max_steps ? last_step : next_step - 1) : Status::Ok();
}

Status WorkerLoop::ValidateAndMaybeStop(int64_t step, bool* stop) {
  validated_through_ = std::max(validated_through_, step);
  std::vector<std::string> hypotheses;
  PSF_ASSIGN_OR_RETURN(const ValidationResult v, computer_->Validate(&hypotheses));
  *stop = !EarlyStopReason(config_.training(), v).empty();
  if (!coordinator_) return Status::Ok();
  return coordinator_->Written(coordinator_->reporter()->Validation(step, v, computer_->bleu_references(), hypotheses));
}

Status WorkerLoop::Finish(int64_t last_step) {
  PSF_RETURN_IF_ERROR(data_path_->PullFinal(last_step));
  // The last steps are logged too where max_steps (or a stop) is not on a logging step.
  PSF_RETURN_IF_ERROR(
      data_path_->Call([&](PsClient& c) { return coordinator_->Pulled(last_step, c, &interval_, /*last=*/true); }));
  // A failure ends the job once (RunWorker: CouldNotWriteTheRun).
  PSF_RETURN_IF_ERROR(coordinator_->WriteModel(last_step, computer_->vocab_size(), computer_->params()));
  return data_path_->Call([&](PsClient& c) -> Status {
    coordinator_->CheckpointTheEnd(last_step, c);
    PSF_RETURN_IF_ERROR(c.Goodbye());
    // Only the coordinator role may end the job; worker 0 speaks as it for this last message.
    return coordinator_->ShutDownJob(c, last_step);
  });
}

std::atomic<bool> g_worker_stop{false};  // NOLINT: set from a signal handler.

}  // namespace

void RequestWorkerStop() { g_worker_stop.store(true); }
bool WorkerStopRequested() { return g_worker_stop.load(); }

Status RunWorker(const WorkerOptions& options) {
  const proto::TrainingConfig& t = options.config.training();
  // Validation BLEU on the coordinator, and on every worker when it decides early stopping.
  const bool with_bleu = t.valid_bleu_sentences() > 0 && (options.index == 0 || t.stop_at_valid_bleu() > 0);
  PSF_ASSIGN_OR_RETURN(auto computer, MakeStepComputer(options.config, options.index, options.gpu, with_bleu));
  const FaultPlan faults(options.config.fault(), FaultEvent::WORKER, options.index, options.incarnation);
  WorkerLoop loop(options, std::move(computer), faults);
  const Status run = loop.Run();
  // The segment was mapped afresh once already (ShmVan), so a restarted worker would map what
  // this one refused: the job ends once, with the message naming the segment.
  if (!run.ok() && loop.GaveUpOnSegment()) ReportToSupervisor(kReportFatal, run.message());
  if (!run.ok() && loop.CouldNotWriteTheRun()) {
    // A restart would train nothing new and fail to write the same way (a full disk, a read-only
    // directory), five times over: the job ends once, saying why, and what a resume would
    // continue from, if anything (without a checkpoint the weights go with the job).
    const std::optional<int64_t> newest = NewestCompleteCheckpointStep(options.run_dir);
    const std::string then =
        newest ? "continue with --resume (from the checkpoint of step " + std::to_string(*newest) +
                     "; the steps since are trained again)"
               : "start over: no checkpoint was written (checkpoint.every_steps, every_minutes), so the "
                 "trained weights end with this job";
    const std::string why = run.message() +
                            ": a restart would fail the same way; free space (or make the run directory writable) "
                            "and " +
                            then;
    ReportToSupervisor(kReportFatal, why);
    return Status::IoError(why);
  }
  return run;
}

}  // namespace psformer
