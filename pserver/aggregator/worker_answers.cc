#include "pserver/aggregator/worker_answers.h"

#include "common/logging.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

WorkerAnswers::WorkerAnswers(Van* van, uint64_t job_id, int group, size_t frame_bytes, const uint64_t* epoch,
                             RejectCounters* rejected)
    : van_(van), job_id_(job_id), group_(group), frame_bytes_(frame_bytes), epoch_(epoch), rejected_(rejected) {}

void WorkerAnswers::Answer(const Requester& to, proto::Header reply, std::vector<Frame> payload,
                           std::optional<uint32_t> crc) {
  const proto::Header& request = to.request;
  if (reply.type() == proto::MESSAGE_TYPE_UNSPECIFIED) reply.set_type(request.type());  // HEARTBEAT
  reply.set_job_id(job_id_);
  reply.set_sender_role(proto::SERVER);
  reply.set_sender_id(request.shard());
  reply.set_shard(request.shard());
  reply.set_step(request.step());
  reply.set_sequence(request.sequence());
  if (reply.type() != proto::ERROR) reply.set_epoch(request.epoch());
  RawMessage raw = crc ? EncodeMessage(to.peer, std::move(reply), std::move(payload), *crc)
                       : EncodeMessage(to.peer, std::move(reply), std::move(payload));
  if (Status s = van_->Send(std::move(raw)); !s.ok()) {
    PSF_LOG(Warning) << "aggregator of host group " << group_ << " cannot answer worker " << request.sender_id() << ": "
                     << s.message();
  }
}

void WorkerAnswers::Ack(const Requester& to, bool duplicate) {
  proto::Header ack;
  ack.set_type(proto::ACK);
  if (duplicate) ack.set_duplicate(true);
  Answer(to, std::move(ack));
}

void WorkerAnswers::AnswerFromCopy(const Requester& to, const ParameterCopy& copy) {
  std::vector<Frame> payload;
  const size_t elem = copy.dtype == proto::BFLOAT16 ? sizeof(uint16_t) : sizeof(float);
  // A part of a split piece: its run table is a frame of its own (gradient_rows.h).
  const size_t table = copy.reply.part() != proto::WHOLE ? copy.reply.runs() * kRunBytes : 0;
  AppendTabledFrames(copy.bytes.get(), copy.size, table, frame_bytes_, elem, copy.bytes, &payload);
  Answer(to, copy.reply, std::move(payload), copy.reply.payload_crc32c());
}

void WorkerAnswers::Refuse(const std::string& peer, const proto::Header* request, const Rejection& why) {
  rejected_->Count(why.reason);
  PSF_LOG(Warning) << "aggregator of host group " << group_ << " refused "
                   << (request ? proto::MessageType_Name(request->type()) : std::string("a message")) << ": "
                   << why.ToString();
  proto::Header h;
  h.set_type(proto::ERROR);
  h.set_error(why.ToString());
  h.set_reject_reason(static_cast<uint32_t>(why.reason));
  h.set_epoch(*epoch_);
  Answer({peer, request ? *request : proto::Header()}, std::move(h));
}

}  // namespace psformer
