// PsClient's waiting: Wait blocks on a request, sending again the parts that have not been
// answered when the Resender finds them due, until every part is answered, the job rolls back,
// or timeout_ms passes. The requests themselves are sent in ps_client.cc.
#include <algorithm>
#include <chrono>

#include "common/crc32c.h"
#include "common/logging.h"
#include "pserver/client/ps_client.h"

namespace psformer {

Status PsClient::Wait(Ticket ticket) {
  Request done;
  return Finish(ticket, &done);
}

Status PsClient::Finish(Ticket ticket, Request* done, int grace_ms) {
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return Status::InvalidArgument("ps client: unknown ticket " + std::to_string(ticket));
  if (it->second.type == proto::PUSH && it->second.error.ok()) {
    for (const Part& p : it->second.parts) {
      if (p.sent()) continue;  // a part never sent would never be answered: say so now
      return Status::InvalidArgument(
          "ps client: waiting for the push of step " + std::to_string(it->second.step) + ", whose " +
          (p.piece_part == proto::ROWS ? std::string("rows (PushRows)")
                                       : "gradient of [" + std::to_string(p.model) + ", " +
                                             std::to_string(p.model + p.end - p.begin) + ") (PushReady)") +
          " were never reported");
    }
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const int limit_ms = grace_ms > 0 ? grace_ms : options_.timeout_ms;
  const auto deadline = start + std::chrono::milliseconds(limit_ms);
  bool first_reply = false;
  last_first_reply_s_ = 0;
  last_pull_loss_sum_ = 0;
  last_pull_tokens_ = 0;
  while (true) {
    if (wakeup_ != nullptr) wakeup_->Drain();  // before the look: what lands after it wakes the Recv below
    TakeLandings();
    if (it->second.remaining == 0) break;
    PSF_RETURN_IF_ERROR(unusable_segment_);  // its replies cannot be read: resending is no use
    Request& r = it->second;
    if (r.type == proto::HELLO && options_.stop_requested && options_.stop_requested()) {
      requests_.erase(it);  // a HELLO carries no payload: nothing is left in the transport's hands
      return Status::Aborted("ps client: asked to stop before every server answered HELLO");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      const Status silent = NoAnswer(r, limit_ms, grace_ms > 0);
      if (!silent.ok()) return silent;
      break;  // within a grace: taken as done
    }
    PSF_RETURN_IF_ERROR(ResendDue(ticket, r, now));
    // While pieces are landing, their outcomes are looked for as often as replies: each wakes the
    // Recv (WakeWith), or, without a wakeup, the two are polled in turn.
    const bool polling = landing_->busy() && wakeup_ == nullptr;
    const auto wait =
        polling ? 0
                : std::min<int64_t>(
                      {std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1, 50});
    PSF_ASSIGN_OR_RETURN(auto raw, van_->Recv(static_cast<int>(wait)));
    if (!raw.has_value() && polling) landing_->WaitForLanded(std::chrono::microseconds(200));
    if (raw.has_value()) {
      HandleReply(std::move(*raw));
      if (!first_reply) {
        first_reply = true;
        last_first_reply_s_ = std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
  }
  SettleLandings(it->second);  // a request ended early (refused, rolled back) may have some in flight
  last_wait_s_ = std::chrono::duration<double>(Clock::now() - start).count();
  Request& r = *done;
  r = std::move(it->second);
  requests_.erase(it);
  // Its pieces may have been taken in before this Wait (Progress): the request keeps what they said.
  last_pull_loss_sum_ = r.pulled_loss_sum;
  last_pull_tokens_ = r.pulled_tokens;
  if (r.type == proto::PULL && r.error.ok() && options_.pull_digest) {
    const uint64_t elem = r.dtype == proto::BFLOAT16 ? sizeof(uint16_t) : sizeof(float);
    uint32_t digest = 0;
    for (int part : pieces_->model_order()) {
      digest = Crc32cCombine(digest, r.part_crcs[part], (r.parts[part].end - r.parts[part].begin) * elem);
    }
    last_pull_digest_ = digest;
  }
  if (!r.error.IsAborted()) {
    if (r.payload_owner && FromPushMemory(r)) {
      on_loan_.push_back(std::move(r));  // the servers read it in place: given back later
      return Status::Ok();
    }
    PSF_RETURN_IF_ERROR(ReleasePayload(&r));
  } else if (r.payload_owner) {
    Status error = r.error;
    retired_.push_back(std::move(r));
    return error;
  }
  return r.error;
}

Status PsClient::ResendDue(Ticket ticket, Request& r, std::chrono::steady_clock::time_point now) {
  // Per shard, the bytes of parameters still to come from it for this request (a pull's).
  std::vector<uint64_t> awaited(shards(), 0);
  if (r.type == proto::PULL) {
    const uint64_t elem = r.dtype == proto::BFLOAT16 ? sizeof(uint16_t) : sizeof(float);
    for (const Part& p : r.parts) awaited[p.shard] += p.answered ? 0 : (p.end - p.begin) * elem;
  } else if (r.type == proto::PUSH && !options_.aggregator.empty()) {
    // The aggregator answers a push once its group's sum has crossed to the server: the bytes
    // still to cross are waited for as a pull's are.
    const uint64_t elem = options_.gradient_dtype == proto::BFLOAT16 ? sizeof(uint16_t) : sizeof(float);
    for (const Part& p : r.parts) awaited[p.shard] += p.answered ? 0 : (p.end - p.begin) * elem;
  }
  std::vector<int> due;  // a push's piece is sent once its gradient is ready
  for (int part = 0; part < static_cast<int>(r.parts.size()); ++part) {
    const Part& p = r.parts[part];
    if (!p.answered && !p.landing && p.sent() && resender_.Due(p.send, p.shard, awaited[p.shard], now))
      due.push_back(part);
  }
  if (due.empty()) return Status::Ok();
  // Said before sending: a send to a peer that never connected blocks.
  // Other requests are answered at once; a BSP pull legitimately waits for the slowest worker.
  const Part& first = r.parts[due[0]];
  const bool unusual = r.type != proto::PULL || first.send.count() >= 3;
  PSF_LOG_AT(unusual ? LogLevel::kInfo : LogLevel::kDebug)
      << "ps client: no answer from shard " << first.shard << " to " << proto::MessageType_Name(r.type) << " of step "
      << r.step << " " << resender_.Wait(first.send.count(), awaited[first.shard]).count()
      << " ms after it left (or the shard's last reply); sending it again"
      << (due.size() > 1 ? " (" + std::to_string(due.size()) + " parts in all)" : std::string());
  for (int part : due) PSF_RETURN_IF_ERROR(SendPart(ticket, r, part));
  return Status::Ok();
}

std::string PsClient::Awaited(const Request& r) const {
  std::vector<bool> silent(shards(), false);
  for (const Part& p : r.parts) silent[p.shard] = silent[p.shard] || !p.answered;
  std::string missing;
  for (int k = 0; k < shards(); ++k) {
    if (silent[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
  }
  return proto::MessageType_Name(r.type) + " of step " + std::to_string(r.step) + " from shard(s) " + missing;
}

Status PsClient::NoAnswer(const Request& r, int limit_ms, bool grace) const {
  const std::string what = "no answer to " + Awaited(r) + " within " + std::to_string(limit_ms) + " ms";
  if (!grace) return Status::Unavailable("ps client: " + what);
  PSF_LOG(Warning) << "ps client: " << what << "; taking it as done";
  return Status::Ok();
}

Status PsClient::ReleasePayload(Request* r) {
  if (!r->payload_owner) return Status::Ok();
  r->payload_owner.reset();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  while (true) {
    {
      // ZeroMQ lets go on its own thread; a lent frame only as the Van sees its receiver release
      // it, in Recv: the wait alternates the two.
      std::unique_lock<std::mutex> lock(*release_mutex_);
      if (release_cv_->wait_for(lock, std::chrono::milliseconds(1), [&] { return *r->payload_released; })) break;
    }
    if (Clock::now() >= deadline) {
      return Status::Unavailable("ps client: the servers did not give back the memory of the push of step " +
                                 std::to_string(r->step) + " within " + std::to_string(options_.timeout_ms) + " ms");
    }
    PSF_ASSIGN_OR_RETURN(auto raw, van_->Recv(0));
    if (raw.has_value()) HandleReply(std::move(*raw));
  }
  return Status::Ok();
}

bool PsClient::FromPushMemory(const Request& r) const {
  const auto lent = [&](const void* p) {
    const char* at = static_cast<const char*>(p);
    return at != nullptr && std::any_of(push_memory_.begin(), push_memory_.end(), [&](const PushMemory& m) {
             return !m.alive.expired() && at >= m.begin && at < m.begin + m.bytes;
           });
  };
  return lent(r.rounded != nullptr ? static_cast<const void*>(r.rounded) : r.grad) || lent(r.rows_values);
}

std::shared_ptr<void> PsClient::AllocatePushMemory(size_t bytes) {
  std::erase_if(push_memory_, [](const PushMemory& m) { return m.alive.expired(); });
  std::shared_ptr<void> memory = van_->AllocatePayload(bytes);
  push_memory_.push_back({static_cast<const char*>(memory.get()), bytes, memory});
  return memory;
}

Status PsClient::AwaitLentPushes() {
  while (!on_loan_.empty()) {
    PSF_RETURN_IF_ERROR(ReleasePayload(&on_loan_.front()));
    on_loan_.erase(on_loan_.begin());
  }
  return Status::Ok();
}

}  // namespace psformer
