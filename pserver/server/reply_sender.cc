#include "pserver/server/reply_sender.h"

#include "common/logging.h"
#include "common/transport/frame.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

ReplySender::ReplySender(Van* van, uint64_t job_id, int shard, const RecoveryEpoch* epoch, RejectCounters* rejected)
    : van_(van), job_id_(job_id), shard_(shard), epoch_(epoch), rejected_(rejected) {}

proto::Header ReplySender::Header(const proto::Header& request, proto::MessageType type) const {
  proto::Header h;
  h.set_type(type);
  h.set_job_id(job_id_);
  h.set_sender_role(proto::SERVER);
  h.set_sender_id(static_cast<uint32_t>(shard_));
  h.set_shard(static_cast<uint32_t>(shard_));
  h.set_step(request.step());
  h.set_sequence(request.sequence());
  h.set_epoch(epoch_->epoch());
  h.set_restored_step(epoch_->start_step());
  return h;
}

void ReplySender::Send(const std::string& peer, proto::Header header, std::vector<Frame> payload) {
  const proto::MessageType type = header.type();
  SendEncoded(type, EncodeMessage(peer, std::move(header), std::move(payload)));
}

void ReplySender::Send(const std::string& peer, proto::Header header, std::vector<Frame> payload,
                       uint32_t payload_crc32c) {
  const proto::MessageType type = header.type();
  SendEncoded(type, EncodeMessage(peer, std::move(header), std::move(payload), payload_crc32c));
}

void ReplySender::SendEncoded(proto::MessageType type, RawMessage message) {
  const Status s = van_->Send(std::move(message));
  if (s.ok()) return;
  // ZmqVan::Route's words for a routing id no connection has any more.
  const bool asker_gone = s.IsUnavailable() && (s.message().find("van: peer unreachable") != std::string::npos ||
                                                s.message().find("van: unknown peer") != std::string::npos);
  if (asker_gone) {
    // The asker is gone: a worker stopped after its push (a job stopping in order) or one that
    // died, which asks again once it is back. Nothing is lost, so no warning.
    PSF_LOG(Info) << "shard " << shard_ << ": " << proto::MessageType_Name(type) << " not sent, its asker is gone ("
                  << s.message() << ")";
    return;
  }
  PSF_LOG(Warning) << "shard " << shard_ << " cannot send " << proto::MessageType_Name(type) << ": " << s.message();
}

void ReplySender::Answer(const std::string& peer, const proto::Header& request, proto::MessageType type,
                         bool duplicate) {
  proto::Header h = Header(request, type);
  h.set_duplicate(duplicate);
  Send(peer, std::move(h));
}

void ReplySender::Refuse(const std::string& peer, const proto::Header* request, const Rejection& why) {
  rejected_->Count(why.reason);
  const std::string refused = "shard " + std::to_string(shard_) + " refused " +
                              (request ? proto::MessageType_Name(request->type()) : std::string("a message")) + ": " +
                              why.ToString();
  // "Job finished" is how a worker still training (SSP, async) or validating learns that the
  // job ended: part of an orderly end, not a problem for `psformer status` to show.
  if (why.reason == RejectReason::kJobFinished) {
    PSF_LOG(Info) << refused;
  } else {
    PSF_LOG(Warning) << refused;
  }
  proto::Header h = Header(request ? *request : proto::Header(), proto::ERROR);
  h.set_error(why.ToString());
  h.set_reject_reason(static_cast<uint32_t>(why.reason));
  Send(peer, std::move(h));
}

}  // namespace psformer
