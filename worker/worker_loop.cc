#include "worker/worker_loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "common/config_loader.h"
#include "common/fault_plan.h"
#include "common/logging.h"
#include "common/role_threads.h"
#include "common/supervisor_report.h"
#include "common/transport/van_factory.h"
#include "pserver/client/ps_client.h"
#include "pserver/wire/piece_table.h"
#include "worker/coordinator.h"
#include "worker/step_computer.h"
#include "worker/train/loss_check.h"
#include "worker/validation.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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

 private:
  // The push of one step as backward hands its gradient over range by range (cluster.overlap).
  struct StepPush {
    int64_t step = 0;
    std::optional<PsClient::Ticket> ticket;  // once the first range began it
    Status status;                           // the first failure; later ranges are then ignored
    uint64_t handed_over = 0;                // elements so far
  };

  Status Connect();
  PsClientOptions ClientOptions(proto::Role role) const;
  // Trains from step `first` to the end. Returns Aborted when the job rolls back (the client
  // knows where to), OK at the end or when asked to stop. Each step is its phases, in order.
  Status Train(int64_t first);
  // Phase 1: the parameters after `step` into the computer's params() (BSP: once every worker
  // pushed it; with overlap this pull went out with the step's first pushed piece, and its
  // pieces have been arriving as the servers updated them, most during backward). The
  // coordinator reports the step and checkpoints when due.
  Status PullParameters(int64_t step);
  // Phase 2: validation of the weights after `step`, on every worker alike (see the header),
  // when due and not done before; `*stop`: whether it ends training.
  Status MaybeValidate(int64_t step, bool* stop);
  // Phase 3: computes `step` and pushes its gradient (with overlap, range by range as backward
  // finishes them), then waits until every shard holds it.
  StatusOr<StepStats> ComputeAndPush(int64_t step);
  // A range of `push`'s gradient is final: pushes what it completes (the first range begins the
  // push and sends the early pull).
  void PushFinal(StepPush* push, uint64_t begin, uint64_t end, const StepStats& stats);
  // Phase 4: the step's loss and tokens into the interval the next metrics line reports.
  void Report(const StepStats& stats);
  // After the last step: the final weights validated, and the coordinator's end of the job.
  Status Conclude(int64_t next_step);

  // The element type of the pull of the parameters after `step` (see PullParameters).
  proto::DType PullDtype(int64_t step) const;
  // With overlap: asks for the parameters after `step` while it is still being pushed (its
  // forward pass has read params() already; every backend computes from its own copy), so that
  // each piece comes back as soon as its server has updated it, most of them during backward.
  Status PullEarly(int64_t step);
  // A pull of the parameters after `step`: the one already in flight if it asks for the same.
  StatusOr<PsClient::Ticket> PullAfter(int64_t step, proto::DType dtype);
  // Validates the weights after `step` (in params()); `*stop`: whether that ends training.
  Status ValidateAndMaybeStop(int64_t step, bool* stop);
  // Coordinator: the final weights to model.bin, then the job ends.
  Status Finish(int64_t last_step);
  bool is_coordinator() const { return options_.index == 0; }

  WorkerOptions options_;
  const proto::JobConfig& config_;
  std::unique_ptr<StepComputer> computer_;
  uint64_t n_;
  const FaultPlan& faults_;
  std::unique_ptr<PsClient> client_;
  // Overlap (cluster.overlap, BSP): pieces pushed during backward, the next pull sent at once.
  bool overlap_ = false;
  std::optional<PsClient::Ticket> pull_;  // sent, not yet waited for...
  int64_t pull_step_ = -1;                // ...of the parameters after this step,
  proto::DType pull_dtype_ = proto::FLOAT32;
  std::unique_ptr<Coordinator> coordinator_;  // worker 0 only
  int64_t started_at_ = 1;                    // first step of this process: the one before it was validated already.
  int64_t validated_through_ = 0;             // replays after a rollback skip these.
  TrainInterval interval_;                    // since the last metrics line
};

Status WorkerLoop::Connect() {
  // The job's transport: CURVE-authenticated, with the config's injected faults (van_factory.h).
  PSF_ASSIGN_OR_RETURN(
      auto van, MakeClientVan(config_, FaultStream(FaultRole::kWorker, options_.index), 2, faults_.shm_faults()));
  PSF_ASSIGN_OR_RETURN(client_, PsClient::Create(ClientOptions(proto::WORKER), std::move(van)));
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
  o.copy_threads = WorkerThreads(config_);
  if (role == proto::WORKER) o.stop_requested = WorkerStopRequested;
  o.gradient_dtype =
      config_.cluster().gradient_dtype() == proto::ClusterConfig::BF16 ? proto::BFLOAT16 : proto::FLOAT32;
  o.pieces = std::make_shared<const PieceTable>(
      JobPieceTable(config_, n_, ParamLayout(config_.model(), computer_->vocab_size()).LayerStarts()));
  return o;
}

Status WorkerLoop::Run() {
  PSF_RETURN_IF_ERROR(Connect());
  overlap_ = client_->pieces().pieces().size() > static_cast<size_t>(client_->shards());
  if (is_coordinator()) {
    PSF_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(config_, options_.run_dir, ClientOptions(proto::COORDINATOR)));
  }
  const StatusOr<int64_t> hello = client_->Hello();
  if (!hello.ok() && WorkerStopRequested()) {
    PSF_LOG(Info) << "stopped before training (asked to stop while waiting for the servers: "
                  << hello.status().message() << ")";
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
    if (trained.IsAborted() && client_->job_finished()) {
      // SSP/async: the coordinator stopped the job while this worker was still training.
      PSF_LOG(Info) << "the coordinator ended the job; stopping";
      return Status::Ok();
    }
    if (!trained.IsAborted()) {
      if (!trained.ok() || is_coordinator()) return trained;
      return client_->Goodbye();
    }
    PSF_LOG(Warning) << trained.message();
    pull_.reset();  // the rollback forgets every request in flight
    PSF_ASSIGN_OR_RETURN(const int64_t restored, client_->Rollback());
    PSF_LOG(Warning) << "rolled back: recomputing from step " << restored + 1;
    if (coordinator_) PSF_RETURN_IF_ERROR(coordinator_->RolledBack(restored, trained.message()));
    first = restored + 1;
  }
}

Status WorkerLoop::Train(int64_t first) {
  const int64_t max_steps = config_.training().max_steps();
  int64_t step = first;
  for (; step <= max_steps; ++step) {
    PSF_RETURN_IF_ERROR(PullParameters(step - 1));
    bool stop = false;
    PSF_RETURN_IF_ERROR(MaybeValidate(step - 1, &stop));
    if (stop) break;
    PSF_ASSIGN_OR_RETURN(const StepStats stats, ComputeAndPush(step));
    Report(stats);
    if (WorkerStopRequested()) {
      // Every shard holds this worker's push of `step`: a clean place to stop (see the header).
      PSF_LOG(Info) << "stopped at step " << step << " (asked to stop)";
      return Status::Ok();
    }
  }
  return Conclude(step);
}

Status WorkerLoop::PullParameters(int64_t step) {
  const auto pull_start = Clock::now();
  PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(step, PullDtype(step)));
  PSF_RETURN_IF_ERROR(client_->Wait(pull).WithContext("pull of step " + std::to_string(step)));
  interval_.wait_s += client_->last_wait_first_reply_s();
  interval_.pull_s += Seconds(Clock::now() - pull_start) - client_->last_wait_first_reply_s();
  if (!coordinator_) return Status::Ok();
  PSF_RETURN_IF_ERROR(coordinator_->Pulled(step, *client_, &interval_));
  coordinator_->MaybeCheckpoint(step, *client_);
  return Status::Ok();
}

Status WorkerLoop::MaybeValidate(int64_t step, bool* stop) {
  *stop = false;
  const bool due = computer_->validates() && ValidationDue(config_.training(), step) && step >= started_at_ &&
                   step > validated_through_;
  return due ? ValidateAndMaybeStop(step, stop) : Status::Ok();
}

StatusOr<StepStats> WorkerLoop::ComputeAndPush(int64_t step) {
  // With overlap each layer's gradient is pushed as backward finishes it; not in a step where an
  // injected kill or stall strikes before the push: it must find nothing sent.
  StepPush push;
  push.step = step;
  const bool overlapped = overlap_ && !faults_.WillKillOrStallAt(step);
  const auto compute_start = Clock::now();
  const StepStats stats = computer_->Compute(
      step, overlapped ? GradientFinal([&](uint64_t b, uint64_t e, const StepStats& s) { PushFinal(&push, b, e, s); })
                       : GradientFinal());
  interval_.compute_s += Seconds(Clock::now() - compute_start);
  PSF_RETURN_IF_ERROR(CheckLossIsFinite(step, stats.loss_sum));  // before a refused push says less
  PSF_RETURN_IF_ERROR(push.status.WithContext("push of step " + std::to_string(step)));

  faults_.KillOrStallAt(step);  // injected faults strike after computing a step, before its push is acknowledged
  const auto push_start = Clock::now();
  if (!push.ticket) {
    PSF_ASSIGN_OR_RETURN(push.ticket, client_->Push(step, computer_->grad().data(),
                                                    static_cast<uint64_t>(stats.target_tokens), stats.loss_sum));
  }
  if (overlap_ && !pull_ && step < config_.training().max_steps()) PSF_RETURN_IF_ERROR(PullEarly(step));
  PSF_RETURN_IF_ERROR(client_->Wait(*push.ticket).WithContext("push of step " + std::to_string(step)));
  interval_.push_s += Seconds(Clock::now() - push_start);
  return stats;
}

void WorkerLoop::PushFinal(StepPush* push, uint64_t begin, uint64_t end, const StepStats& stats) {
  // A diverged step pushes nothing: CheckLossIsFinite ends the worker after Compute, and no frame
  // of grad() may still be on its way then.
  if (!push->status.ok() || !std::isfinite(stats.loss_sum)) return;
  const uint64_t half = n_ / 2;
  if (push->handed_over < half && (push->handed_over += end - begin) >= half) faults_.KillDuringPush(push->step);
  if (!push->ticket) {
    auto begun = client_->BeginPush(push->step, computer_->grad().data(), static_cast<uint64_t>(stats.target_tokens),
                                    stats.loss_sum);
    if (!begun.ok()) {
      push->status = begun.status();
      return;
    }
    push->ticket = *begun;
  }
  push->status = client_->PushReady(*push->ticket, begin, end);
  if (push->status.ok() && !pull_ && push->step < config_.training().max_steps()) push->status = PullEarly(push->step);
}

void WorkerLoop::Report(const StepStats& stats) {
  interval_.loss_sum += stats.loss_sum;
  interval_.tokens += stats.target_tokens;
}

Status WorkerLoop::Conclude(int64_t next_step) {
  const int64_t max_steps = config_.training().max_steps();
  const int64_t last_step = std::min<int64_t>(next_step, max_steps);
  if (computer_->validates() && next_step > max_steps && last_step > validated_through_) {
    // The final weights, validated on every worker (early stopping validated already).
    PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(last_step, proto::FLOAT32));
    PSF_RETURN_IF_ERROR(client_->Wait(pull).WithContext("final pull"));
    bool stop = false;
    PSF_RETURN_IF_ERROR(ValidateAndMaybeStop(last_step, &stop));
  }
  return coordinator_ ? Finish(next_step > max_steps ? last_step : next_step - 1) : Status::Ok();
}

proto::DType WorkerLoop::PullDtype(int64_t step) const {
  // In bf16 when the config says so, except after the steps that are validated, so that the
  // metrics describe the fp32 masters. The choice depends on the step alone: every worker,
  // restarted or not, computes a step from the same values.
  const bool validation_step = ValidationDue(config_.training(), step);
  return config_.cluster().param_dtype() == proto::ClusterConfig::BF16 && !validation_step ? proto::BFLOAT16
                                                                                           : proto::FLOAT32;
}

Status WorkerLoop::PullEarly(int64_t step) {
  PSF_ASSIGN_OR_RETURN(pull_, client_->Pull(step, computer_->params().data(), PullDtype(step)));
  pull_step_ = step;
  pull_dtype_ = PullDtype(step);
  return Status::Ok();
}

StatusOr<PsClient::Ticket> WorkerLoop::PullAfter(int64_t step, proto::DType dtype) {
  std::optional<PsClient::Ticket> in_flight = std::exchange(pull_, std::nullopt);
  if (in_flight && pull_step_ == step && pull_dtype_ == dtype) return *in_flight;
  if (in_flight) {
    // Asked for something else (a final fp32 pull after a bf16 one): let it finish first, so
    // that its replies cannot land in params() later.
    PSF_RETURN_IF_ERROR(client_->Wait(*in_flight).WithContext("pull of step " + std::to_string(pull_step_)));
  }
  return client_->Pull(step, computer_->params().data(), dtype);
}

Status WorkerLoop::ValidateAndMaybeStop(int64_t step, bool* stop) {
  validated_through_ = std::max(validated_through_, step);
  std::vector<std::string> hypotheses;
  PSF_ASSIGN_OR_RETURN(const ValidationResult v, computer_->Validate(&hypotheses));
  *stop = !EarlyStopReason(config_.training(), v).empty();
  if (!coordinator_) return Status::Ok();
  return coordinator_->reporter()->Validation(step, v, computer_->bleu_references(), hypotheses);
}

Status WorkerLoop::Finish(int64_t last_step) {
  PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(last_step, proto::FLOAT32));
  PSF_RETURN_IF_ERROR(client_->Wait(pull).WithContext("final pull"));
  PSF_RETURN_IF_ERROR(coordinator_->Pulled(last_step, *client_, &interval_));
  PSF_RETURN_IF_ERROR(coordinator_->WriteModel(last_step, computer_->vocab_size(), computer_->params()));
  PSF_RETURN_IF_ERROR(client_->Goodbye());
  // Only the coordinator role may end the job; worker 0 speaks as it for this last message.
  return coordinator_->ShutDownJob(*client_);
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
  return loop.Run();
}

}  // namespace psformer
