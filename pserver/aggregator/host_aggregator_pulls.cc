#include <algorithm>

#include "common/logging.h"
#include "common/trace.h"
#include "pserver/aggregator/host_aggregator.h"

// HostAggregator: pulls, asked of the servers once per piece and step and answered from one copy.

namespace psformer {

void HostAggregator::TakePull(int piece, const WireMessage& msg) {
  const proto::Header& h = msg.header;
  const TraceSpan traced("take_pull", h.step(), static_cast<int64_t>(h.begin()));
  const proto::DType dtype = h.dtype() == proto::BFLOAT16 ? proto::BFLOAT16 : proto::FLOAT32;
  const Requester from{msg.peer, h};
  // One part of a split piece is pulled, kept and answered as a piece of its own.
  const int slot = SlotOf(piece, h.part());
  if (const ParameterCopy* copy = copies_.Find(slot, h.epoch(), h.step(), dtype)) {
    return answers_.AnswerFromCopy(from, *copy);
  }
  if (Upstream* asked = upstream_.PullOf(piece, h.part(), h.step(), dtype)) {
    // Already asked for: a resend from the same worker replaces its earlier request.
    auto same = std::find_if(asked->waiting.begin(), asked->waiting.end(),
                             [&](const Requester& r) { return r.request.sender_id() == h.sender_id(); });
    if (same != asked->waiting.end()) {
      *same = from;
    } else {
      asked->waiting.push_back(from);
    }
    return;
  }
  Upstream up;
  up.kind = Upstream::kPull;
  up.piece = piece;
  up.header.set_type(proto::PULL);
  up.header.set_shard(h.shard());
  up.header.set_step(h.step());
  up.header.set_epoch(h.epoch());
  up.header.set_dtype(dtype);
  up.header.set_begin(h.begin());
  up.header.set_end(h.end());
  up.header.set_part(h.part());
  // A pull's answer is a piece's bytes: waited for as a worker waits for its own.
  up.awaited_bytes = table_.pieces()[piece].size() * sizeof(float);
  up.waiting.push_back(from);
  stats_.pulls_sent.fetch_add(1);
  upstream_.Send(std::move(up));
}

// A request of an epoch the group has left: a PULL of the same piece in that epoch, sent to its
// shard as if by the worker, brings the server's "other epoch" (which names the epoch to roll
// back to) to pass on. (Every server is in the newer epoch: a worker enters it only once every
// shard has answered its ROLLBACK.)
void HostAggregator::ProbeOldEpoch(const WireMessage& msg) {
  Upstream up;
  up.kind = Upstream::kProbe;
  up.piece = PieceOf(msg.header.begin(), msg.header.end());
  up.header.set_type(proto::PULL);
  up.header.set_shard(msg.header.shard());
  up.header.set_step(msg.header.step());
  up.header.set_epoch(msg.header.epoch());
  up.header.set_dtype(proto::FLOAT32);
  up.header.set_begin(msg.header.begin());
  up.header.set_end(msg.header.end());
  up.waiting.push_back({msg.peer, msg.header});
  upstream_.Send(std::move(up));
}

bool HostAggregator::PullAnswered(const Upstream& up, const WireMessage& reply) {
  const proto::Header& h = reply.header;
  const TraceSpan traced("take_params", h.step(), static_cast<int64_t>(h.begin()));
  const int slot = SlotOf(up.piece, up.header.part());
  std::optional<ParameterCopy> copy = copies_.CopyOf(slot, up.header.epoch(), reply);
  stats_.bytes_down.fetch_add(reply.PayloadBytes());
  if (!copy) {
    stats_.rejected.Count(RejectReason::kBadChecksum);
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << ": parameters of [" << h.begin() << ", "
                     << h.end() << ") from shard " << h.shard() << " arrived damaged; asking again";
    return false;
  }
  if (up.kind == Upstream::kProbe) {  // the server still serves that epoch: pass the answer on
    for (const Requester& r : up.waiting) answers_.AnswerFromCopy(r, *copy);
    return true;
  }
  // The step's sum of this piece (of each of its parts) was applied: shares still waiting for it
  // (a successor's, whose predecessor died between answers) are answered. A DENSE part's answer
  // says only that every DENSE sum of the step was in.
  const bool dense_only = up.header.part() == proto::DENSE;
  for (const int summed : {up.piece, dense_only ? -1 : rows_slot_[up.piece]}) {
    if (summed < 0) continue;
    GroupSum& s = sums_[summed];
    if (s.shares.step() != h.step() || s.sequence != 0) continue;
    for (const auto& r : s.waiting) {
      if (r) answers_.Ack(*r, /*duplicate=*/true);
    }
    s.Begin(s.epoch, s.shares.step());
    answered_step_[summed] = std::max(answered_step_[summed], h.step());
  }
  for (const Requester& r : up.waiting) answers_.AnswerFromCopy(r, *copy);
  stats_.pulls_served.fetch_add(up.waiting.size());
  copies_.Keep(slot, std::move(*copy));
  return true;
}

}  // namespace psformer
