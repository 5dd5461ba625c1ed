// PsClient's requests to every shard at once (one part per shard): HELLO, CHECKPOINT, SHUTDOWN
// and the ROLLBACK that moves the shards into a new recovery epoch.
#include <algorithm>

#include "common/logging.h"
#include "pserver/client/ps_client.h"
#include "pserver/timing.h"

namespace psformer {

StatusOr<PsClient::Ticket> PsClient::Broadcast(proto::MessageType type, int64_t step, proto::DType dtype) {
  const Ticket ticket = next_ticket_++;
  Request& r = NewRequest(ticket, type, step, ShardParts());
  r.dtype = dtype;
  r.epochs.assign(shards(), 0);
  r.epoch_starts.assign(shards(), 0);
  for (int k = 0; k < shards(); ++k) PSF_RETURN_IF_ERROR(SendPart(ticket, r, k));
  return ticket;
}

StatusOr<int64_t> PsClient::Rollback() {
  if (!rollback_pending_) return Status::InvalidArgument("ps client: Rollback without a recovery under way");
  // Requests of the old epoch are over; their replies will be ignored. A push's frames may still
  // sit in the transport, so they are released only once every shard has answered the ROLLBACK
  // (sent after them on the same connections).
  // What is landing writes into params the next pull will write: let it land, and drop it.
  landing_->Quiesce();
  landing_->TakeLanded();
  std::vector<Request> abandoned = std::move(retired_);
  retired_.clear();
  for (auto& [ticket, r] : requests_) abandoned.push_back(std::move(r));
  requests_.clear();
  for (Request& r : on_loan_) abandoned.push_back(std::move(r));
  on_loan_.clear();
  PSF_RETURN_IF_ERROR(EnterEpoch(rollback_epoch_, rollback_start_));
  // Every shard has answered: a lent frame nobody claimed by now was lost with its receiver.
  van_->TakeBackUnclaimed();
  for (Request& r : abandoned) PSF_RETURN_IF_ERROR(ReleasePayload(&r).WithContext("rollback"));
  return epoch_start_;
}

Status PsClient::EnterEpoch(uint64_t epoch, int64_t start) {
  rollback_pending_ = true;
  rollback_epoch_ = epoch;
  rollback_start_ = start;
  while (rollback_pending_) {
    const uint64_t target = rollback_epoch_;
    const int64_t target_start = rollback_start_;
    PSF_LOG(Warning) << "ps client: rolling back to step " << target_start << " (recovery epoch " << target << ")";
    rollback_pending_ = false;
    PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::ROLLBACK, target_start));
    Request done;
    Status s = Finish(ticket, &done);
    if (!s.ok()) return s.WithContext("rollback to step " + std::to_string(target_start));
    // A shard naming a still newer epoch while we rolled back set rollback_pending_ again.
    if (rollback_pending_ && rollback_epoch_ <= target) rollback_pending_ = false;
    epoch_ = target;
    epoch_start_ = target_start;
  }
  return Status::Ok();
}

StatusOr<int64_t> PsClient::Hello() {
  while (true) {
    PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::HELLO, 0));
    Request done;
    PSF_RETURN_IF_ERROR(Finish(ticket, &done));
    const auto newest = std::max_element(done.epochs.begin(), done.epochs.end());
    const int64_t start = done.epoch_starts[newest - done.epochs.begin()];
    if (std::all_of(done.epochs.begin(), done.epochs.end(), [&](uint64_t e) { return e == *newest; })) {
      SetEpoch(*newest, start);
      return done.min_step;
    }
    // A recovery is under way: finish it, then ask again where this worker stands.
    PSF_RETURN_IF_ERROR(EnterEpoch(*newest, start));
  }
}

Status PsClient::Checkpoint(int64_t step) {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::CHECKPOINT, step));
  return Wait(ticket);
}

Status PsClient::Goodbye() {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::SHUTDOWN, 0));
  Request done;
  PSF_RETURN_IF_ERROR(Finish(ticket, &done, static_cast<int>(ShutdownGrace(options_.retry_ms).count())));
  if (options_.aggregator.empty()) return Status::Ok();
  // The aggregator ends once every worker of its group has said goodbye (it answers as shard 0).
  ticket = next_ticket_++;
  std::vector<Part> parts = {MakePart(0, range(0).begin, range(0).end, 0)};
  parts[0].via_aggregator = true;
  Request& r = NewRequest(ticket, proto::SHUTDOWN, 0, std::move(parts));
  PSF_RETURN_IF_ERROR(SendPart(ticket, r, 0));
  return Finish(ticket, &done, static_cast<int>(ShutdownGrace(options_.retry_ms).count()));
}

Status PsClient::Shutdown(int64_t last_step) {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::SHUTDOWN, last_step));
  // A server ACKs and exits; if that ACK is lost, resends find nobody, so wait only a while.
  Request done;
  return Finish(ticket, &done, static_cast<int>(ShutdownGrace(options_.retry_ms).count()));
}

}  // namespace psformer
