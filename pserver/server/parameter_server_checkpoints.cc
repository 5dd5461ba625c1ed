// ParameterServer's checkpoints and rollbacks: writing this shard's checkpoint when asked (or
// when the job is interrupted), and going back to one when the job enters a new recovery epoch.
#include <algorithm>
#include <string>

#include "common/logging.h"
#include "pserver/server/parameter_server.h"

namespace psformer {

void ParameterServer::HandleCheckpoint(const WireMessage& msg) {
  const proto::Header& h = msg.header;
  if (!checkpointer_.enabled()) {
    return replies_.Refuse(msg.peer, &h,
                           {RejectReason::kNoRunDirectory, "this server has no run directory to checkpoint to"});
  }
  // BSP: only the newest step can be written (the state before it lives on only for pulls).
  if (policy_->Overtaken(h.step(), progress_) || (policy_->AppliesWholeSteps() && h.step() < progress_.applied_step)) {
    return replies_.Refuse(
        msg.peer, &h,
        {RejectReason::kStaleStep, "checkpoint of step " + std::to_string(h.step()) + ", but step " +
                                       std::to_string(progress_.applied_step) + " is already applied"});
  }
  pending_checkpoints_.Add(msg.peer, h);
  ServePendingCheckpoints();
}

void ParameterServer::ServePendingCheckpoints() {
  pending_checkpoints_.ServeReady(
      [this](const proto::Header& checkpoint) { return policy_->CheckpointReady(checkpoint.step(), progress_); },
      [this](const PendingRequests::Entry& e) {
        const Status s = e.request.step() == written_step_ ? Status::Ok() : WriteCheckpoint(e.request.step());
        if (s.ok()) return replies_.Answer(e.peer, e.request);
        proto::Header h = replies_.Header(e.request, proto::ERROR);
        h.set_error("checkpoint failed: " + s.message());
        replies_.Send(e.peer, std::move(h));
      });
}

Status ParameterServer::WriteCheckpoint(int64_t step) {
  const Status saved = checkpointer_.Write(step, optimizer_, range_, policy_->CheckpointWorkerSteps(step, progress_),
                                           [this, step] { faults_.KillDuringCheckpoint(step); });
  if (options_.on_checkpoint) options_.on_checkpoint(step, saved);
  PSF_RETURN_IF_ERROR(saved);
  written_step_ = step;
  stats_.checkpoints_written.fetch_add(1);
  PSF_LOG(Info) << "shard " << options_.shard << " wrote its checkpoint of step " << step;
  return Status::Ok();
}

Status ParameterServer::CheckpointLastStep() {
  const int64_t step = progress_.applied_step;
  if (!checkpointer_.enabled() || !policy_->AppliesWholeSteps() || step == 0) return Status::Ok();
  if (checkpointer_.Complete(step)) return Status::Ok();
  if (optimizer_.pieces_in_progress() > 0) {
    // Some pieces of the next step are applied: neither step's state is whole here.
    return Status::Unavailable("shard " + std::to_string(options_.shard) + " stopped halfway through step " +
                               std::to_string(step + 1) + "; the checkpoint of step " + std::to_string(step) +
                               " cannot be written from it");
  }
  return WriteCheckpoint(step);
}

void ParameterServer::HandleRollback(const WireMessage& msg) {
  const proto::Header& h = msg.header;
  if (h.epoch() > epoch_.epoch()) {
    PSF_LOG(Warning) << "shard " << options_.shard << ": rolling back from step " << progress_.applied_step
                     << " to step " << h.step() << " (recovery epoch " << h.epoch() << ", asked by "
                     << proto::Role_Name(h.sender_role()) << " " << h.sender_id() << ")";
    const Status restored = RestoreTo(h.step());
    if (!restored.ok()) {
      fatal_ = restored.WithContext("rollback to step " + std::to_string(h.step()));
      return replies_.Refuse(msg.peer, &h, {RejectReason::kRestoreFailed, fatal_.message()});
    }
    epoch_.Enter(h.epoch(), h.step());
    stats_.rollback_step.store(h.step());
    stats_.rollbacks.fetch_add(1);
    // Requests of the old epoch still waiting learn of the new one.
    const auto refuse_other_epoch = [this](const PendingRequests::Entry& e) {
      replies_.Refuse(e.peer, &e.request, *epoch_.Check(e.request));
    };
    pending_pulls_.DropAll(refuse_other_epoch);
    pending_checkpoints_.DropAll(refuse_other_epoch);
  } else if (h.step() != epoch_.start_step()) {
    PSF_LOG(Warning) << "shard " << options_.shard << ": ROLLBACK to step " << h.step() << " in epoch " << h.epoch()
                     << ", which began at step " << epoch_.start_step() << "; keeping step " << epoch_.start_step();
  }
  replies_.Answer(msg.peer, h);
}

Status ParameterServer::RestoreTo(int64_t step) {
  if (step == 0) {
    Initialize();
    std::fill(progress_.worker_steps.begin(), progress_.worker_steps.end(), 0);
  } else {
    PSF_ASSIGN_OR_RETURN(ShardCheckpoint loaded, checkpointer_.Load(step));
    if (loaded.worker_steps.size() != progress_.worker_steps.size()) {
      return Status::Corruption("checkpoint of step " + std::to_string(step) + " has another worker count");
    }
    progress_.worker_steps = loaded.worker_steps;
    optimizer_.Restore(std::move(loaded));
  }
  progress_.applied_step = step;
  written_step_ = step > 0 ? step : -1;  // the state is that checkpoint's
  for (auto& heard : heard_) std::fill(heard.begin(), heard.end(), false);
  std::fill(heard_count_.begin(), heard_count_.end(), 0);
  applied_tokens_ = 0;  // unknown for a restored step: metrics fall back to the worker's own.
  next_tokens_ = 0;
  PublishProgress();
  policy_->Restart(step);
  return Status::Ok();
}

}  // namespace psformer
