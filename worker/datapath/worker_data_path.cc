#include "worker/datapath/worker_data_path.h"

#include <cmath>
#include <string>
#include <utility>

#include "common/trace.h"
#include "worker/validation.h"

namespace psformer {

WorkerDataPath::WorkerDataPath(const proto::JobConfig& config, const FaultPlan& faults, StepComputer* computer,
                               std::unique_ptr<PsClient> client)
    : config_(config),
      faults_(faults),
      computer_(computer),
      n_(computer->parameter_count()),
      overlap_(client->pieces().pieces().size() > static_cast<size_t>(client->shards())),
      client_(std::move(client)),
      outbound_(&computer->gradient_copies(), &client_,
                [this](PsClient& c, ElementRange r, const StepStats& s) { PushRange(c, r, s); }) {
  // Before the gradient's memory is written: the last push held by every shard (the pull before
  // Compute has waited for that already; a failure there pushes nothing of the step, and were it
  // not waited for, its failure is this step's push's), and its memory given back.
  computer_->GuardGradientWrites([this] {
    const TraceSpan traced("await_gradient_memory", push_.step);
    (void)client_.Call([this](PsClient& c) {
      Status ready = SettlePush(c);
      if (ready.ok()) ready = c.AwaitLentPushes();
      if (!ready.ok() && push_.status.ok()) push_.status = ready;
      return Status::Ok();
    });
  });
}

StatusOr<std::unique_ptr<WorkerDataPath>> WorkerDataPath::Create(const proto::JobConfig& config,
                                                                 const FaultPlan& faults, StepComputer* computer,
                                                                 std::unique_ptr<PsClient> client) {
  // What leaves the device is what travels, unless a CPU worker's client rounds fp32 to bf16:
  // then the gradient is computed where the transport can lend it.
  const bool sent_as_computed =
      config.cluster().gradient_dtype() != proto::ClusterConfig::BF16 || computer->grad_bf16() != nullptr;
  std::shared_ptr<void> memory;
  if (sent_as_computed) memory = client->AllocatePushMemory(computer->leaving_gradient_bytes());
  if (memory) PSF_RETURN_IF_ERROR(computer->MoveGradientTo(std::move(memory)).WithContext("gradient memory"));
  // The lookups' part of the embedding's gradient (split embedding) likewise.
  std::shared_ptr<void> lookups;
  if (sent_as_computed && computer->leaving_lookup_bytes() > 0) {
    lookups = client->AllocatePushMemory(computer->leaving_lookup_bytes());
  }
  if (lookups) PSF_RETURN_IF_ERROR(computer->MoveLookupsTo(std::move(lookups)).WithContext("lookups' memory"));
  // Pulled pieces read where they came (LendsPull) by a device that reads registered memory only:
  // the servers' shared memory registered with it as the client maps it.
  if (config.cluster().forward_as_pulled() && computer->computes_as_pulled() && computer->reads_lent_params()) {
    if (auto pin = computer->peer_memory_pinner()) client->PinPeerMemory(std::move(pin));
  }
  // The push sent with the CRCs recorded where the gradient was copied, not checksummed again.
  if (const BlockCrcs* crcs = computer->gradient_crcs()) client->KnowPushCrcs(crcs);
  // Made after the move: the outbound stage waits on the copies aimed at the new memory.
  return std::make_unique<WorkerDataPath>(config, faults, computer, std::move(client));
}

WorkerDataPath::~WorkerDataPath() { computer_->GuardGradientWrites(nullptr); }

StatusOr<int64_t> WorkerDataPath::Rollback() {
  return client_.Call([&](PsClient& c) {
    pull_.reset();
    pull_failure_ = Status::Ok();
    unsettled_.reset();  // abandoned with every request; its memory given back once shards answer
    return c.Rollback();
  });
}

Status WorkerDataPath::PullParameters(int64_t step, double* first_reply_s) {
  uint32_t digest = 0;
  const proto::DType dtype = PullDtype(step);
  PSF_RETURN_IF_ERROR(client_.Call([&](PsClient& c) -> Status {
    PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(c, step, dtype, false));
    PSF_RETURN_IF_ERROR(SettlePush(c));
    PSF_RETURN_IF_ERROR(c.Wait(pull).WithContext("pull of step " + std::to_string(step)));
    *first_reply_s = c.last_wait_first_reply_s();
    digest = c.last_pull_digest();
    return Status::Ok();
  }));
  computer_->ParamsPulled(digest, dtype);
  return Status::Ok();
}

Status WorkerDataPath::PullWhileComputing(int64_t step, std::function<void(PsClient&)> pulled) {
  const proto::DType dtype = PullDtype(step);
  PsClient::Ticket ticket = 0;
  PSF_RETURN_IF_ERROR(client_.Call([&](PsClient& c) -> Status {
    PSF_ASSIGN_OR_RETURN(ticket, PullAfter(c, step, dtype, LendsPull(step)));
    arrival_.Reset();
    pull_failure_ = Status::Ok();
    return c.ObserveLandings(ticket,
                             [this](uint64_t begin, uint64_t end, const std::shared_ptr<const LentParams>& lent) {
                               arrival_.Landed(begin, end, lent);
                             });
  }));
  computer_->ParamsArriving(&arrival_, dtype);
  client_.Post([this, ticket, step, pulled = std::move(pulled)](PsClient& c) {
    PullArrival::Outcome outcome;
    outcome.status = SettlePush(c);  // the last step's push: failed, nothing of this step goes
    if (outcome.status.ok()) outcome.status = c.Wait(ticket).WithContext("pull of step " + std::to_string(step));
    outcome.first_reply_s = c.last_wait_first_reply_s();
    outcome.digest = c.last_pull_digest();
    if (outcome.status.ok() && pulled) pulled(c);
    pull_failure_ = outcome.status;  // before any PushRange of the step: commands run in order
    arrival_.Finish(std::move(outcome));
  });
  return Status::Ok();
}

Status WorkerDataPath::ConfirmPull(int64_t step, double* first_reply_s) {
  const PullArrival::Outcome outcome = arrival_.AwaitAll();
  *first_reply_s = outcome.first_reply_s;
  computer_->ParamsPulled(outcome.digest, PullDtype(step));  // the step's alone, as PullWhileComputing's
  return outcome.status;
}

Status WorkerDataPath::PullFinal(int64_t step) {
  return client_.Call([&](PsClient& c) -> Status {
    PSF_ASSIGN_OR_RETURN(auto pull, PullAfter(c, step, proto::FLOAT32, false));
    PSF_RETURN_IF_ERROR(SettlePush(c));
    return c.Wait(pull).WithContext("final pull");
  });
}

StatusOr<GradientCopying> WorkerDataPath::BeginPush(int64_t step, bool whole) {
  // The last push's memory, lent to the servers, is written by this step's copies once
  // SettlePush has returned (Compute asks, after forward).
  push_ = StepPush();
  push_.step = step;
  if (!overlap_ || whole) return GradientCopying();
  return GradientCopying([this](uint64_t begin, uint64_t end, const StepStats& stats) {
    outbound_.Copying({begin, end}, stats);
  });
}

void WorkerDataPath::HandOver() { outbound_.Drain(); }

Status WorkerDataPath::FinishPush(const StepStats& stats) {
  return client_.Call([&](PsClient& c) -> Status {
    const std::string what = "push of step " + std::to_string(push_.step);
    // The lookups' copy off the device (the split embedding's part, final last) is awaited here,
    // on this thread, not the launching one; also when the push failed, since the next backward
    // writes the device arrays it reads.
    if (c.pieces().has_split()) computer_->AwaitLookups();
    PSF_RETURN_IF_ERROR(push_.status.WithContext(what));
    PSF_RETURN_IF_ERROR(client_.TakeProgressError().WithContext(what));
    if (!push_.ticket) {  // the whole gradient at once
      PSF_ASSIGN_OR_RETURN(push_.ticket, StartPush(c, stats));
      PSF_RETURN_IF_ERROR(c.PushReady(*push_.ticket, 0, n_));
    }
    if (c.pieces().has_split()) {
      const StepComputer::Lookups& lookups = computer_->lookups();
      PSF_RETURN_IF_ERROR((lookups.values_bf16 != nullptr
                               ? c.PushRowsBf16(*push_.ticket, lookups.rows, lookups.values_bf16, lookups.width)
                               : c.PushRows(*push_.ticket, lookups.rows, lookups.values, lookups.width))
                              .WithContext(what));
    }
    if (overlap_ && !pull_ && push_.step < config_.training().max_steps())
      PSF_RETURN_IF_ERROR(PullEarly(c, push_.step));
    unsettled_ = push_.ticket;
    unsettled_step_ = push_.step;
    return Status::Ok();
  });
}

Status WorkerDataPath::SettlePush() {
  return client_.Call([this](PsClient& c) { return SettlePush(c); });
}

Status WorkerDataPath::SettlePush(PsClient& client) {
  if (!unsettled_) return Status::Ok();
  const PsClient::Ticket ticket = *std::exchange(unsettled_, std::nullopt);
  return client.Wait(ticket).WithContext("push of step " + std::to_string(unsettled_step_));
}

void WorkerDataPath::PushRange(PsClient& client, ElementRange range, const StepStats& stats) {
  // A diverged step pushes nothing: the worker ends after Compute, and no frame of grad() may
  // still be on its way then.
  if (!push_.status.ok() || !std::isfinite(stats.loss_sum)) return;
  // Nor a step computed from a pull that failed (PullWhileComputing): forward read what was there.
  if (!pull_failure_.ok()) {
    push_.status = pull_failure_;
    return;
  }
  const uint64_t half = n_ / 2;
  if (push_.handed_over < half && (push_.handed_over += range.end - range.begin) >= half) {
    faults_.KillDuringPush(push_.step);
  }
  if (!push_.ticket) {
    auto begun = StartPush(client, stats);
    if (!begun.ok()) {
      push_.status = begun.status();
      return;
    }
    push_.ticket = *begun;
  }
  push_.status = client.PushReady(*push_.ticket, range.begin, range.end);
  if (push_.status.ok() && !pull_ && push_.step < config_.training().max_steps()) {
    push_.status = PullEarly(client, push_.step);
  }
}

StatusOr<PsClient::Ticket> WorkerDataPath::StartPush(PsClient& client, const StepStats& stats) {
  const auto tokens = static_cast<uint64_t>(stats.target_tokens);
  // Rounded to bf16 on the device already, or the fp32 gradient (rounded by the client if bf16).
  const uint16_t* rounded = computer_->grad_bf16();
  PSF_ASSIGN_OR_RETURN(const PsClient::Ticket ticket,
                       rounded != nullptr
                           ? client.BeginPushBf16(push_.step, rounded, tokens, stats.loss_sum)
                           : client.BeginPush(push_.step, computer_->grad().data(), tokens, stats.loss_sum));
  if (client.pieces().has_split() && config_.cluster().name_rows()) {  // the lookups' rows, named up front
    const StepComputer::Lookups& named = computer_->named_rows();
    PSF_RETURN_IF_ERROR(client.NameRows(ticket, named.rows, named.width));
  }
  return ticket;
}

Status WorkerDataPath::PullEarly(PsClient& client, int64_t step) {
  // Its forward pass has read params() (or params_bf16()) already (every backend computes from
  // its own copy), so the pieces may land there while backward goes on.
  PSF_ASSIGN_OR_RETURN(pull_, StartPull(client, step, PullDtype(step), LendsPull(step)));
  pull_step_ = step;
  pull_dtype_ = PullDtype(step);
  pull_lends_ = LendsPull(step);
  return Status::Ok();
}

StatusOr<PsClient::Ticket> WorkerDataPath::PullAfter(PsClient& client, int64_t step, proto::DType dtype, bool lend) {
  std::optional<PsClient::Ticket> in_flight = std::exchange(pull_, std::nullopt);
  if (in_flight && pull_step_ == step && pull_dtype_ == dtype && (lend || !pull_lends_)) return *in_flight;
  if (in_flight) {
    // Asked for something else (a final fp32 pull after a bf16 one, every piece in params()
    // after one that lends): let it finish first, so that its replies cannot land in params()
    // later.
    PSF_RETURN_IF_ERROR(client.Wait(*in_flight).WithContext("pull of step " + std::to_string(pull_step_)));
  }
  return StartPull(client, step, dtype, lend);
}

StatusOr<PsClient::Ticket> WorkerDataPath::StartPull(PsClient& client, int64_t step, proto::DType dtype, bool lend) {
  // bf16 parameters land as they came where the computer widens them itself (on its device).
  uint16_t* as_bf16 = computer_->params_bf16();
  if (dtype == proto::BFLOAT16 && as_bf16 != nullptr) return client.PullBf16(step, as_bf16, lend);
  return client.Pull(step, computer_->params().data(), dtype, lend);
}

bool WorkerDataPath::LendsPull(int64_t step) const {
  return computer_->reads_lent_params() && computer_->computes_as_pulled() && config_.cluster().forward_as_pulled() &&
         !ValidationDue(config_.training(), step);
}

proto::DType WorkerDataPath::PullDtype(int64_t step) const {
  const bool validation_step = ValidationDue(config_.training(), step);
  return config_.cluster().param_dtype() == proto::ClusterConfig::BF16 && !validation_step ? proto::BFLOAT16
                                                                                           : proto::FLOAT32;
}

}  // namespace psformer
