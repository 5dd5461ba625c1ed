// ParameterServer's answers to pulls: refused when the step asked for is gone or not yet pushed,
// held until the policy can serve it, then sent straight from the optimizer's snapshot.
#include <string>
#include <vector>

#include "common/trace.h"
#include "common/transport/frame.h"
#include "pserver/server/parameter_server.h"
#include "pserver/wire/gradient_rows.h"

namespace psformer {

void ParameterServer::HandlePull(const WireMessage& msg) {
  const proto::Header& h = msg.header;
  // A pull may follow the pieces of its step's push on the wire before all of them are in.
  // (With host summing a worker's push reaches the servers as its group's sum.)
  const int id = static_cast<int>(h.sender_id());
  const bool aggregator = h.sender_role() == proto::AGGREGATOR;
  if (aggregator || h.sender_role() == proto::WORKER) {
    const int64_t last = aggregator ? LastPushed(id) : progress_.worker_steps[id];
    if (h.step() > last + 1) {
      return replies_.Refuse(msg.peer, &h,
                             {RejectReason::kFutureStep, "pull after step " + std::to_string(h.step()) + " from " +
                                                             (aggregator ? "host group " : "worker ") +
                                                             std::to_string(id) + " whose last push was step " +
                                                             std::to_string(last)});
    }
  }
  if (policy_->Overtaken(h.step(), progress_)) {
    return replies_.Refuse(
        msg.peer, &h,
        {RejectReason::kStaleStep, "pull after step " + std::to_string(h.step()) + ", but step " +
                                       std::to_string(progress_.applied_step) + " is already applied"});
  }
  // BSP serves the last step and, while it still has it, the one before (a restarted worker's);
  // SSP and ASYNC serve the current state to a pull of any step.
  if (policy_->AppliesWholeSteps() && h.step() < progress_.applied_step &&
      (!optimizer_.has_previous() || h.step() != progress_.applied_step - 1)) {
    return replies_.Refuse(
        msg.peer, &h,
        {RejectReason::kStaleStep, "pull after step " + std::to_string(h.step()) + ", but step " +
                                       std::to_string(progress_.applied_step) + " is already applied"});
  }
  if (policy_->PullReady(h, progress_)) return SendParams(msg.peer, h);
  if (!pending_pulls_.Add(msg.peer, h)) stats_.resent_pulls_absorbed.fetch_add(1);
}

void ParameterServer::ServePendingPulls() {
  pending_pulls_.ServeReady([this](const proto::Header& pull) { return policy_->PullReady(pull, progress_); },
                            [this](const PendingRequests::Entry& e) { SendParams(e.peer, e.request); });
}

void ParameterServer::SendParams(const std::string& peer, const proto::Header& request) {
  const TraceSpan traced("send_params", request.step(), static_cast<int64_t>(request.begin()));
  proto::Header h = replies_.Header(request, proto::PARAMS);
  const bool bf16 = request.dtype() == proto::BFLOAT16;
  h.set_dtype(bf16 ? proto::BFLOAT16 : proto::FLOAT32);
  const bool in_progress = policy_->InProgress(request.step(), progress_);
  // BSP keeps the state before the last step too (see HandlePull).
  const bool previous = policy_->AppliesWholeSteps() && request.step() < progress_.applied_step;
  // Only a whole step (BSP) has a job-wide loss: the sum over every worker's batch.
  const uint64_t tokens = in_progress ? next_tokens_ : applied_tokens_;
  if ((in_progress || request.step() == progress_.applied_step) && tokens > 0) {
    h.set_loss_sum(in_progress ? next_loss_sum_ : applied_loss_sum_);
    h.set_target_tokens(tokens);
  }
  h.set_begin(request.begin());
  h.set_end(request.end());
  const size_t frame_bytes = static_cast<size_t>(options_.config.cluster().frame_bytes());
  const ShardOptimizer::Version version = in_progress ? ShardOptimizer::Version::kInProgress
                                          : previous  ? ShardOptimizer::Version::kPrevious
                                                      : ShardOptimizer::Version::kCurrent;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  std::vector<Frame> payload;
  SnapshotSlice slice;
  if (request.part() != proto::WHOLE) {
    // One part of a split piece (the validator checked it is one): its table, then its values.
    uint32_t runs = 0;
    slice = optimizer_.PartSlice(version, bf16, optimizer_.PieceStartingAt(request.begin() - range_.begin),
                                 request.part(), &runs);
    h.set_part(request.part());
    h.set_runs(runs);
    AppendTabledFrames(slice.data, slice.bytes, runs * kRunBytes, frame_bytes, elem, slice.owner, &payload);
  } else {
    // Straight from the snapshot, with the CRC its update computed (not a pass per reply).
    slice = optimizer_.Slice(version, bf16, request.begin() - range_.begin, request.end() - range_.begin);
    AppendViewFrames(slice.data, slice.bytes, frame_bytes, elem, slice.owner, &payload);
  }
  replies_.Send(peer, std::move(h), std::move(payload), slice.crc32c);
  stats_.pulls_answered.fetch_add(1);
  if (bf16) stats_.bf16_pulls_answered.fetch_add(1);
}

}  // namespace psformer
