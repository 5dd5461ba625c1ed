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
#include "worker/data/batch_source.h"
#include "worker/emulated_gpu.h"
#include "worker/model/transformer.h"
#include "worker/train/loss_check.h"
#include "worker/valid_bleu.h"
#include "worker/validation.h"
#include "worker/worker_backend.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class WorkerLoop {
 public:
  // A real worker: trains on `source` with the Transformer on `backend`.
  WorkerLoop(const WorkerOptions& options, std::unique_ptr<BatchSource> source, std::unique_ptr<Backend<float>> backend)
      : options_(options),
        config_(options.config),
        source_(std::move(source)),
        backend_(std::move(backend)),
        model_(std::make_unique<Transformer<float>>(config_.model(), source_->vocab_size(), backend_.get())),
        vocab_(source_->vocab_size()),
        n_(model_->parameter_count()),
        faults_(options.config.fault(), FaultEvent::WORKER, options.index, options.incarnation) {}
  // An emulated worker (cluster.backend EMULATED): no data, no model, no validation.
  explicit WorkerLoop(const WorkerOptions& options)
      : options_(options),
        config_(options.config),
        emulated_(std::make_unique<EmulatedGpu>(config_, options.index)),
        vocab_(ResolvedVocabSize(config_)),
        n_(emulated_->parameter_count()),
        faults_(options.config.fault(), FaultEvent::WORKER, options.index, options.incarnation) {}

  Status Run();

 private:
  Status Connect();
  // Trains from step `first` to the end. Returns Aborted when the job rolls back (the client
  // knows where to), OK at the end or when asked to stop.
  Status Train(int64_t first);
  // Forward and backward of this worker's batch of `step` from params_ into grad_. With `ready`,
  // each layer's gradient is handed over as backward finishes it (on a backend still on the device:
  // `ready` copies it to grad_).
  StepStats ComputeStep(int64_t step, const GradientReady& ready = nullptr);
  // The element type of the pull of the parameters after `step` (see Train).
  proto::DType PullDtype(int64_t step) const;
  // A pull of the parameters after `step`: the one already in flight if it asks for the same.
  // With overlap: asks for the parameters after `step` while it is still being pushed (its
  // forward pass has read params_ already; every backend computes from its own copy), so that
  // each piece comes back as soon as its server has updated it, most of them during backward.
  Status PullEarly(int64_t step);
  StatusOr<PsClient::Ticket> PullAfter(int64_t step, proto::DType dtype);
  PsClientOptions ClientOptions(proto::Role role) const;
  // Validates the weights after `step` (in params_); `*stop`: whether that ends training.
  Status ValidateAndMaybeStop(int64_t step, bool* stop);
  // Coordinator: the final weights to model.bin, then the job ends.
  Status Finish(int64_t last_step);
  bool is_coordinator() const { return options_.index == 0; }

  WorkerOptions options_;
  const proto::JobConfig& config_;
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<Backend<float>> backend_;
  std::unique_ptr<Transformer<float>> model_;  // null when emulated
  std::unique_ptr<EmulatedGpu> emulated_;      // null when real
  int vocab_;
  uint64_t n_;
  FaultPlan faults_;
  std::unique_ptr<PsClient> client_;
  // Overlap (cluster.overlap, BSP): pieces pushed during backward, the next pull sent at once.
  bool overlap_ = false;
  std::optional<PsClient::Ticket> pull_;  // sent, not yet waited for...
  int64_t pull_step_ = -1;                // ...of the parameters after this step,
  proto::DType pull_dtype_ = proto::FLOAT32;
  std::unique_ptr<Coordinator> coordinator_;  // worker 0 only
  // Validation BLEU: on the coordinator, and on every worker when it decides early stopping.
  std::unique_ptr<ValidBleu> valid_bleu_;
  std::vector<float> params_, grad_;                 // host, (n)
  DeviceBuffer<float> device_params_, device_grad_;  // backend, (n)
  std::unique_ptr<RangeDownloader> grad_download_;   // device_grad_ to grad_ as backward reports layers
  int64_t started_at_ = 1;         // first step of this process: the one before it was validated already.
  int64_t validated_through_ = 0;  // replays after a rollback skip these.
  TrainInterval interval_;         // since the last metrics line
};

Status WorkerLoop::Connect() {
  // The job's transport: CURVE-authenticated, with the config's injected faults (van_factory.h).
  PSF_ASSIGN_OR_RETURN(auto van, MakeClientVan(config_, FaultStream(FaultRole::kWorker, options_.index), 2));
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
  o.parameter_count = n_;
  o.frame_bytes = static_cast<size_t>(config_.cluster().frame_bytes());
  o.retry_ms = config_.cluster().retry_ms();
  o.copy_threads = WorkerThreads(config_);
  if (role == proto::WORKER) o.stop_requested = WorkerStopRequested;
  o.gradient_dtype =
      config_.cluster().gradient_dtype() == proto::ClusterConfig::BF16 ? proto::BFLOAT16 : proto::FLOAT32;
  o.pieces = std::make_shared<const PieceTable>(
      JobPieceTable(config_, n_, ParamLayout(config_.model(), vocab_).LayerStarts()));
  return o;
}

Status WorkerLoop::Run() {
  PSF_RETURN_IF_ERROR(Connect());
  overlap_ = client_->pieces().pieces().size() > static_cast<size_t>(client_->shards());
  params_.assign(n_, 0.0f);
  grad_.assign(n_, 0.0f);
  if (backend_) {
    device_params_ = backend_->Allocate<float>(n_);
    device_grad_ = backend_->Allocate<float>(n_);
    PSF_ASSIGN_OR_RETURN(grad_download_, backend_->MakeRangeDownloader(device_grad_.data(), grad_.data(), n_));
  }
  if (is_coordinator()) {
    PSF_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(config_, options_.run_dir, ClientOptions(proto::COORDINATOR)));
  }
  const auto& t = config_.training();
  if (!emulated_ && t.valid_bleu_sentences() > 0 && (is_coordinator() || t.stop_at_valid_bleu() > 0)) {
    PSF_ASSIGN_OR_RETURN(valid_bleu_,
                         ValidBleu::Create(config_, source_->vocab_size(), source_->ValidBatches(), backend_.get()));
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

proto::DType WorkerLoop::PullDtype(int64_t step) const {
  // In bf16 when the config says so, except after the steps that are validated, so that the
  // metrics describe the fp32 masters. The choice depends on the step alone: every worker,
  // restarted or not, computes a step from the same values.
  const bool validation_step = ValidationDue(config_.training(), step);
  return config_.cluster().param_dtype() == proto::ClusterConfig::BF16 && !validation_step ? proto::BFLOAT16
                                                                                           : proto::FLOAT32;
}

Status WorkerLoop::PullEarly(int64_t step) {
  PSF_ASSIGN_OR_RETURN(pull_, client_->Pull(step, params_.data(), PullDtype(step)));
  pull_step_ = step;
  pull_dtype_ = PullDtype(step);
  return Status::Ok();
}

StatusOr<PsClient::Ticket> WorkerLoop::PullAfter(int64_t step, proto::DType dtype) {
  std::optional<PsClient::Ticket> in_flight = std::exchange(pull_, std::nullopt);
  if (in_flight && pull_step_ == step && pull_dtype_ == dtype) return *in_flight;
  if (in_flight) {
    // Asked for something else (a final fp32 pull after a bf16 one): let it finish first, so
    // that its replies cannot land in params_ later.
    PSF_RETURN_IF_ERROR(client_->Wait(*in_flight).WithContext("pull of step " + std::to_string(pull_step_)));
  }
  return client_->Pull(step, params_.data(), dtype);
}

Status WorkerLoop::Train(int64_t first) {
  const auto& t = config_.training();
  TrainInterval& interval = interval_;
  int64_t step = first;
  for (; step <= t.max_steps(); ++step) {
    // Parameters after the previous step (BSP: once every worker pushed it; with overlap this
    // pull went out with the previous step's first pushed piece, and its pieces have been
    // arriving as the servers updated them, most during backward).
    const bool validate =
        !emulated_ && ValidationDue(t, step - 1) && step - 1 >= started_at_ && step - 1 > validated_through_;
    auto pull_start = Clock::now();
    PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(step - 1, PullDtype(step - 1)));
    PSF_RETURN_IF_ERROR(client_->Wait(pull).WithContext("pull of step " + std::to_string(step - 1)));
    interval.wait_s += client_->last_wait_first_reply_s();
    interval.pull_s += Seconds(Clock::now() - pull_start) - client_->last_wait_first_reply_s();
    if (coordinator_) {
      PSF_RETURN_IF_ERROR(coordinator_->Pulled(step - 1, *client_, &interval));
      coordinator_->MaybeCheckpoint(step - 1, *client_);
    }

    // Validation of the weights after step - 1, on every worker alike (see the header).
    if (validate) {
      bool stop = false;
      PSF_RETURN_IF_ERROR(ValidateAndMaybeStop(step - 1, &stop));
      if (stop) break;
    }

    // With overlap each layer's gradient is pushed as backward finishes it (not in a step where
    // an injected kill or stall strikes before the push: it must find nothing sent).
    std::optional<PsClient::Ticket> push;
    Status pushing;
    uint64_t handed_over = 0;
    // Ranges reach the push only once their copy to grad_ is complete, in the order reported.
    const auto push_copied = [&](bool wait_all) {
      for (const ElementRange& r : grad_download_->TakeComplete(wait_all)) {
        if (pushing.ok()) pushing = client_->PushReady(*push, r.begin, r.end);
      }
    };
    const GradientReady push_ready = [&](uint64_t begin, uint64_t end, const StepStats& s) {
      // A diverged step pushes nothing: CheckLossIsFinite below ends the worker, and no frame of
      // grad_ may still be on its way then.
      if (!pushing.ok() || !std::isfinite(s.loss_sum)) return;
      if (handed_over < n_ / 2 && (handed_over += end - begin) >= n_ / 2) faults_.DuringPush(step);
      if (!push) {
        auto begun = client_->BeginPush(step, grad_.data(), static_cast<uint64_t>(s.target_tokens), s.loss_sum);
        if (!begun.ok()) {
          pushing = begun.status();
          return;
        }
        push = *begun;
      }
      if (!grad_download_) {  // emulated: the gradient is in grad_ already
        pushing = client_->PushReady(*push, begin, end);
      } else {
        grad_download_->Start(begin, end);  // on CUDA, copied while backward goes on
        push_copied(/*wait_all=*/false);
      }
      if (pushing.ok() && !pull_ && step < t.max_steps()) pushing = PullEarly(step);
    };
    auto compute_start = Clock::now();
    const StepStats stats = ComputeStep(step, overlap_ && !faults_.StrikesAt(step) ? push_ready : nullptr);
    // The last layers' copies; after a failed push also the ones still in flight, which must not
    // land in grad_ during what comes next.
    if (grad_download_) push_copied(/*wait_all=*/true);
    interval.compute_s += Seconds(Clock::now() - compute_start);
    PSF_RETURN_IF_ERROR(CheckLossIsFinite(step, stats.loss_sum));  // before a refused push says less
    PSF_RETURN_IF_ERROR(pushing.WithContext("push of step " + std::to_string(step)));

    faults_.At(step);  // injected faults strike after computing a step, before its push is acknowledged
    auto push_start = Clock::now();
    if (!push) {
      PSF_ASSIGN_OR_RETURN(
          push, client_->Push(step, grad_.data(), static_cast<uint64_t>(stats.target_tokens), stats.loss_sum));
    }
    if (overlap_ && !pull_ && step < t.max_steps()) PSF_RETURN_IF_ERROR(PullEarly(step));
    PSF_RETURN_IF_ERROR(client_->Wait(*push).WithContext("push of step " + std::to_string(step)));
    interval.push_s += Seconds(Clock::now() - push_start);

    interval.loss_sum += stats.loss_sum;
    interval.tokens += stats.target_tokens;
    if (WorkerStopRequested()) {
      // Every shard holds this worker's push of `step`: a clean place to stop (see the header).
      PSF_LOG(Info) << "stopped at step " << step << " (asked to stop)";
      return Status::Ok();
    }
  }
  const int64_t last_step = std::min<int64_t>(step, t.max_steps());
  if (!emulated_ && step > t.max_steps() && last_step > validated_through_) {
    // The final weights, validated on every worker (early stopping validated already).
    PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(last_step, proto::FLOAT32));
    PSF_RETURN_IF_ERROR(client_->Wait(pull).WithContext("final pull"));
    bool stop = false;
    PSF_RETURN_IF_ERROR(ValidateAndMaybeStop(last_step, &stop));
  }
  return coordinator_ ? Finish(step > t.max_steps() ? last_step : step - 1) : Status::Ok();
}

StepStats WorkerLoop::ComputeStep(int64_t step, const GradientReady& ready) {
  if (emulated_) return emulated_->Step(step, params_.data(), grad_.data(), ready);
  const Batch batch = source_->TrainBatch(step, options_.index, config_.cluster().workers());
  device_params_.Upload(params_.data(), n_);
  const DropoutKey key{config_.training().seed(), static_cast<uint32_t>(step), static_cast<uint32_t>(options_.index)};
  const StepStats stats = model_->ForwardBackward(device_params_.data(), batch, key, device_grad_.data(), ready);
  if (!ready) device_grad_.Download(grad_.data(), n_);  // else each range is copied as it is reported
  return stats;
}

Status WorkerLoop::ValidateAndMaybeStop(int64_t step, bool* stop) {
  validated_through_ = std::max(validated_through_, step);
  device_params_.Upload(params_.data(), n_);
  std::vector<std::string> hypotheses;
  PSF_ASSIGN_OR_RETURN(
      const ValidationResult v,
      ValidateWithBleu(model_.get(), device_params_.data(), source_->ValidBatches(), valid_bleu_.get(), &hypotheses));
  *stop = !EarlyStopReason(config_.training(), v).empty();
  if (!coordinator_) return Status::Ok();
  return coordinator_->reporter()->Validation(step, v, valid_bleu_ ? &valid_bleu_->references() : nullptr, hypotheses);
}

Status WorkerLoop::Finish(int64_t last_step) {
  PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(last_step, proto::FLOAT32));
  PSF_RETURN_IF_ERROR(client_->Wait(pull).WithContext("final pull"));
  PSF_RETURN_IF_ERROR(coordinator_->Pulled(last_step, *client_, &interval_));
  PSF_RETURN_IF_ERROR(coordinator_->WriteModel(last_step, vocab_, params_));
  PSF_RETURN_IF_ERROR(client_->Goodbye());
  // Only the coordinator role may end the job; worker 0 speaks as it for this last message.
  return coordinator_->ShutDownJob(*client_);
}

std::atomic<bool> g_worker_stop{false};  // NOLINT: set from a signal handler.

}  // namespace

void RequestWorkerStop() { g_worker_stop.store(true); }
bool WorkerStopRequested() { return g_worker_stop.load(); }

Status RunWorker(const WorkerOptions& options) {
  if (options.config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    PSF_LOG(Info) << "emulated GPU: " << options.config.cluster().emulated_step_ms()
                  << " ms a step, no arithmetic; gradients are pseudo-random, loss and tokens synthetic";
    WorkerLoop loop(options);
    return loop.Run();
  }
  PSF_ASSIGN_OR_RETURN(auto backend, MakeWorkerBackend(options.config, options.gpu));
  PSF_ASSIGN_OR_RETURN(auto source, MakeBatchSource(options.config));
  WorkerLoop loop(options, std::move(source), std::move(backend));
  return loop.Run();
}

}  // namespace psformer
