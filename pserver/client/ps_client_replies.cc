// PsClient's replies: each is validated, matched to its request and part by its sequence, and
// handed to the handler of its type, as the server dispatches requests (ParameterServer::Handle).
#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "common/trace.h"
#include "pserver/client/ps_client.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

void PsClient::HandleReply(RawMessage raw) {
  const TraceSpan traced("reply");
  WireMessage msg;
  const std::string refused_segment = std::move(raw.refused_segment);
  Refusal v = ParseMessage(std::move(raw), &msg);
  // Parameters are checksummed in the pass that copies them into place (HandleParams).
  const bool check_in_copy = !v && msg.header.type() == proto::PARAMS;
  if (!v) v = ValidateAtClient(msg, scope_, check_in_copy);
  if (v) {
    rejected_.Count(v->reason);
    PSF_LOG(Warning) << "ps client: ignoring a reply: " << v->ToString();
    if (v->reason == RejectReason::kBadSharedMemory && !refused_segment.empty())
      SegmentRefused(refused_segment, v->detail);
    return;
  }
  const proto::Header& h = msg.header;
  if (h.type() == proto::HEARTBEAT) return;
  const int shard = static_cast<int>(h.shard());
  resender_.Heard(shard, std::chrono::steady_clock::now());  // validated: the shard is in range
  auto it = requests_.find(h.sequence() / kMaxParts);
  const uint64_t part = h.sequence() % kMaxParts;
  if (it == requests_.end() || part >= it->second.parts.size()) return;  // late or unknown answer.
  Request& r = it->second;
  Part& p = r.parts[part];
  if (p.answered || p.landing) return;  // a repeated answer
  if (p.shard != shard) {
    rejected_.Count(RejectReason::kUnknownSender);
    PSF_LOG(Warning) << "ps client: ignoring a reply from shard " << shard << " to a request sent to shard " << p.shard;
    return;
  }
  bool answered = false;
  switch (h.type()) {
    case proto::ERROR:
      answered = HandleRefusal(h, r);
      break;
    case proto::PARAMS:
      answered = r.type == proto::PULL && HandleParams(std::move(msg), r, p);
      break;
    case proto::ACK:
      answered = HandleAck(h, r);
      break;
    default:
      break;  // an answer of the wrong kind does not complete the request.
  }
  if (!answered) return;
  p.answered = true;
  --r.remaining;
}

// An ERROR. The job recovering or finished ends the request at once (remaining = 0, false);
// any other refusal answers the part and is what Wait returns.
bool PsClient::HandleRefusal(const proto::Header& h, Request& r) {
  const std::string shard = "shard " + std::to_string(h.shard());
  if (h.reject_reason() == static_cast<uint32_t>(RejectReason::kOtherEpoch)) {
    // A newer epoch is followed; a shard behind ours (it missed our ROLLBACK, or was restarted
    // from an older state) is moved into ours again.
    const bool newer = h.epoch() > epoch_;
    if (!rollback_pending_ || h.epoch() > rollback_epoch_) {
      rollback_pending_ = true;
      rollback_epoch_ = newer ? h.epoch() : epoch_;
      rollback_start_ = newer ? h.restored_step() : epoch_start_;
    }
    if (r.type == proto::ROLLBACK) return true;
    r.error = Status::Aborted(shard + " is in recovery epoch " + std::to_string(h.epoch()) + " (from step " +
                              std::to_string(h.restored_step()) + "), this worker in epoch " + std::to_string(epoch_));
    r.remaining = 0;  // nothing else about this request matters now.
    return false;
  }
  if (h.reject_reason() == static_cast<uint32_t>(RejectReason::kJobFinished)) {
    job_finished_ = true;
    r.error = Status::Aborted(shard + ": the coordinator has ended the job");
    r.remaining = 0;
    return false;
  }
  if (r.error.ok())
    r.error = Status::Unavailable(shard + " refused " + proto::MessageType_Name(r.type) + ": " + h.error());
  return true;
}

// PARAMS answering a pull: handed to the landing thread, which copies it into the caller's params
// with its CRC-32C checked in the copy (fp32, or bf16 landing as it came), or checks, then widens
// it (bf16 into fp32); TakeLandings answers the part. A wrong range, or a damaged payload once
// landed, leaves the part unanswered, to be asked for again.
bool PsClient::HandleParams(WireMessage msg, Request& r, Part& p) {
  const proto::Header& h = msg.header;
  if (h.begin() != p.begin || h.end() != p.end || h.part() != p.piece_part) {
    rejected_.Count(RejectReason::kBadRange);
    PSF_LOG(Warning) << "ps client: ignoring parameters of [" << h.begin() << ", " << h.end() << ") from shard "
                     << h.shard() << ", asked for [" << p.begin << ", " << p.end << ")";
    return false;
  }
  if (h.dtype() != r.dtype) {
    if (r.error.ok()) {
      r.error = Status::Unavailable("shard " + std::to_string(h.shard()) + " answered a pull for " +
                                    proto::DType_Name(r.dtype) + " with " + proto::DType_Name(h.dtype()));
    }
    return true;
  }
  // The dtype is the pull's (checked above): FLOAT32 or BFLOAT16. Where the piece lies in the
  // caller's parameters (the other destination stays null):
  float* params = r.params != nullptr ? r.params + p.model : nullptr;
  uint16_t* params_bf16 = r.params_bf16 != nullptr ? r.params_bf16 + p.model : nullptr;
  const uint64_t sequence = h.sequence();
  // The second part of a split piece to land makes the piece's CRC (the other lands first).
  const bool piece_crc =
      options_.pull_digest && p.sibling >= 0 && (r.parts[p.sibling].answered || r.parts[p.sibling].landing);
  // Left where it came (Pull's lend) where the caller reads registered memory only if it lies in
  // it (PinPeerMemory); which pieces can be is the landing's rule (PullLanding::Job::lend).
  const bool lend =
      r.lend && (!lend_pinned_only_ || std::all_of(msg.payload.begin(), msg.payload.end(), [&](const Frame& f) {
        return van_->PeerMemoryPinned(f.data(), f.size());
      }));
  landing_->Land({sequence, r.step, p.model, std::move(msg), params, params_bf16, piece_crc, lend});
  p.landing = true;
  return false;  // answered once it has landed (TakeLandings)
}

bool PsClient::TookLanded(Request& r, const Part& p, const PullLanding::Landed& landed) {
  if (!landed.intact) {
    rejected_.Count(RejectReason::kBadChecksum);
    PSF_LOG(Warning) << "ps client: ignoring parameters of [" << p.begin << ", " << p.end << ") from shard " << p.shard
                     << ": payload CRC-32C differs from the header's (asked for again)";
    return false;  // the resend brings them again and overwrites what was copied
  }
  // Checked in the copy; the pull's digest is made of these (PsClient::last_pull_digest): a
  // split piece's, made by the part that landed second, at its first part's index.
  if (p.sibling < 0) {
    r.part_crcs[&p - r.parts.data()] = landed.crc32c;
  } else if (landed.piece_crc && r.parts[p.sibling].answered) {
    r.part_crcs[std::min<size_t>(&p - r.parts.data(), p.sibling)] = landed.crc32c;
  }
  if (landed.target_tokens > 0) {  // every piece of a whole step says the same
    r.pulled_loss_sum = landed.loss_sum;
    r.pulled_tokens = landed.target_tokens;
  }
  return true;
}

void PsClient::TakeLandings() {
  for (const PullLanding::Landed& l : landing_->TakeLanded()) {
    auto it = requests_.find(l.sequence / kMaxParts);
    const uint64_t part = l.sequence % kMaxParts;
    // A request is dropped only once its landings are settled (SettleLandings): found.
    if (it == requests_.end() || part >= it->second.parts.size()) continue;
    Request& r = it->second;
    Part& p = r.parts[part];
    if (!p.landing) continue;
    p.landing = false;
    if (!TookLanded(r, p, l) || p.answered) continue;
    p.answered = true;
    p.lent = l.lent;
    ++(l.lent ? pulled_parts_lent_ : pulled_parts_written_);
    if (r.remaining > 0) --r.remaining;  // 0 already when the request was ended early (a rollback)
    if (r.on_landed) ReportLanded(r, p);
  }
}

void PsClient::ReportLanded(const Request& r, const Part& p) {
  // A piece pulled in two parts has landed once both have (each writes some of its rows).
  if (p.sibling >= 0 && !r.parts[p.sibling].answered) return;
  r.on_landed(p.model, p.model + (p.end - p.begin), p.lent);
}

void PsClient::SettleLandings(const Request& r) {
  if (std::none_of(r.parts.begin(), r.parts.end(), [](const Part& p) { return p.landing; })) return;
  landing_->Quiesce();
  TakeLandings();
}

bool PsClient::HandleAck(const proto::Header& h, Request& r) {
  if (h.duplicate()) ++duplicate_acks_;
  if (r.type == proto::HELLO) {
    const int shard = static_cast<int>(h.shard());
    r.min_step = std::min(r.min_step, h.step());
    r.epochs[shard] = h.epoch();
    r.epoch_starts[shard] = h.restored_step();
  }
  return true;
}

void PsClient::SegmentRefused(const std::string& segment, const std::string& why) {
  if (!unusable_segment_.ok()) return;
  const std::optional<std::string> given_up = segment_refusals_.Refused(segment, why, std::chrono::steady_clock::now());
  if (!given_up) return;
  // The refused reply's header is not read (its payload could not be); every request still
  // unanswered is what the process waits for.
  std::string awaited;
  for (const auto& [ticket, r] : requests_) {
    if (r.remaining > 0) awaited += (awaited.empty() ? "" : "; ") + Awaited(r);
  }
  unusable_segment_ =
      Status::Unavailable("ps client: " + *given_up + (awaited.empty() ? "" : "; waiting for " + awaited));
  PSF_LOG(Error) << unusable_segment_.message();
}

}  // namespace psformer
