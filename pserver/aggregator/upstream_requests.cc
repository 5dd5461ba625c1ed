#include "pserver/aggregator/upstream_requests.h"

#include <chrono>
#include <optional>
#include <tuple>
#include <utility>

#include "common/logging.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

UpstreamRequests::UpstreamRequests(Van* van, uint64_t job_id, int group, uint32_t incarnation, int shards,
                                   UpstreamBounds bounds, size_t frame_bytes, UpstreamCounters* counters)
    : van_(van),
      job_id_(job_id),
      group_(group),
      incarnation_(incarnation),
      frame_bytes_(frame_bytes),
      counters_(counters),
      timeout_ms_(bounds.timeout_ms),
      resender_(bounds.retry_ms, shards),
      segment_refusals_(bounds.shm_refusal_patience_ms,
                        SegmentRefusals::ForgetAfterMs(bounds.shm_refusal_patience_ms, bounds.retry_ms)) {}

uint64_t UpstreamRequests::Send(Upstream up) {
  const uint64_t sequence = next_sequence_++;
  up.header.set_job_id(job_id_);
  up.header.set_sender_role(proto::AGGREGATOR);
  up.header.set_sender_id(static_cast<uint32_t>(group_));
  up.header.set_incarnation(incarnation_);
  up.header.set_sequence(sequence);
  up.first_sent = Resender::Clock::now();
  requests_.emplace(sequence, std::move(up));
  Transmit(sequence);
  return sequence;
}

Upstream* UpstreamRequests::Find(uint64_t sequence) {
  auto it = requests_.find(sequence);
  return it == requests_.end() ? nullptr : &it->second;
}

Upstream* UpstreamRequests::PullOf(int piece, proto::PushPart part, int64_t step, proto::DType dtype) {
  for (auto& [sequence, up] : requests_) {
    if (up.kind == Upstream::kPull && up.piece == piece && up.header.part() == part && up.header.step() == step &&
        up.header.dtype() == dtype) {
      return &up;
    }
  }
  return nullptr;
}

void UpstreamRequests::Transmit(uint64_t sequence) {
  Upstream& up = requests_.at(sequence);
  const std::string peer = ServerPeer(static_cast<int>(up.header.shard()));
  std::vector<Frame> payload;
  const auto now = Resender::Clock::now();
  if (up.payload) {
    const std::shared_ptr<const void> token = resender_.Sent(&up.send, now, up.payload);
    AppendTabledFrames(up.payload.get(), up.payload_bytes, up.table_bytes, frame_bytes_, up.elem, token, &payload);
    counters_->bytes_up.fetch_add(up.payload_bytes);
  } else {
    resender_.Sent(&up.send, now, nullptr);
  }
  // A sum's checksum is known from its pass; a request without payload has none to make.
  RawMessage raw = EncodeMessage(peer, up.header, std::move(payload), up.payload ? up.payload_crc : 0);
  if (Status s = van_->Send(std::move(raw)); !s.ok()) {
    PSF_LOG(Warning) << "aggregator of host group " << group_ << " cannot send "
                     << proto::MessageType_Name(up.header.type()) << " to shard " << up.header.shard() << ": "
                     << s.message() << " (sent again later)";
  }
}

UpstreamRequests::Unanswered UpstreamRequests::SumsUnanswered(const std::vector<bool>& to,
                                                              const std::vector<uint64_t>& shard_begins) const {
  Unanswered u;
  for (const auto& [sequence, up] : requests_) {
    const uint32_t shard = up.header.shard();
    if (up.kind != Upstream::kSum || shard >= to.size() || !to[shard]) continue;
    const std::pair<int64_t, uint64_t> rank{up.header.step(), up.header.begin() - shard_begins[shard]};
    if (u.count++ == 0 || rank < std::make_pair(u.step, u.offset)) std::tie(u.step, u.offset) = rank;
  }
  return u;
}

void UpstreamRequests::ResendDue() {
  const auto now = Resender::Clock::now();
  for (auto& [sequence, up] : requests_) {
    // A pull's answer is a piece's bytes: waited for as a worker waits for its own.
    if (!resender_.Due(up.send, static_cast<int>(up.header.shard()), up.awaited_bytes, now)) continue;
    PSF_LOG_AT(up.kind == Upstream::kPull ? LogLevel::kDebug : LogLevel::kInfo)
        << "aggregator of host group " << group_ << ": no answer from shard " << up.header.shard() << " to "
        << proto::MessageType_Name(up.header.type()) << " of step " << up.header.step() << "; sending it again";
    counters_->resends.fetch_add(1);
    Transmit(sequence);
  }
}

Status UpstreamRequests::Overdue(Resender::Clock::time_point now) const {
  if (timeout_ms_ <= 0) return Status::Ok();
  const auto limit = std::chrono::milliseconds(timeout_ms_);
  // The oldest request is the one to name: the others were sent after it.
  for (const auto& [sequence, up] : requests_) {
    if (now - up.first_sent <= limit) continue;
    return Status::Unavailable("aggregator of host group " + std::to_string(group_) + ": no answer to " + Describe(up) +
                               " within " + std::to_string(timeout_ms_) + " ms (sent " +
                               std::to_string(up.send.count()) + " times); " + std::to_string(requests_.size()) +
                               " request(s) to the servers unanswered");
  }
  return Status::Ok();
}

Status UpstreamRequests::SegmentRefused(const std::string& segment, const std::string& why,
                                        Resender::Clock::time_point now) {
  const std::optional<std::string> given_up = segment_refusals_.Refused(segment, why, now);
  if (!given_up) return Status::Ok();
  gave_up_on_segment_ = true;
  // The refused reply's header could not be trusted (its payload could not be read): every
  // request still unanswered is what the aggregator waits for.
  std::string awaited;
  for (const auto& [sequence, up] : requests_) awaited += (awaited.empty() ? "" : "; ") + Describe(up);
  return Status::Unavailable("aggregator of host group " + std::to_string(group_) + ": " + *given_up +
                             (awaited.empty() ? "" : "; waiting for " + awaited));
}

std::string UpstreamRequests::Describe(const Upstream& up) {
  const proto::Header& h = up.header;
  const std::string shard = std::to_string(h.shard());
  const std::string part = h.part() == proto::WHOLE ? "" : ", " + proto::PushPart_Name(h.part()) + " part";
  const std::string what = up.kind == Upstream::kSum    ? "PUSH (the host group's sum" + part + ")"
                           : up.kind == Upstream::kPull ? "PULL"
                                                        : proto::MessageType_Name(h.type()) + " (a probe of epoch " +
                                                              std::to_string(h.epoch()) + ")";
  return what + " of step " + std::to_string(h.step()) + " (piece " + std::to_string(up.piece) + ")" +
         (up.kind == Upstream::kSum ? " to" : " from") + " shard " + shard + " (pserver-" + shard + ")";
}

}  // namespace psformer
