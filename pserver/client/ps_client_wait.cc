// PsClient's waiting: Wait blocks on a request, resending to the shards that have not answered
// (with backoff) until every part is answered, the job rolls back, or timeout_ms passes. The
// requests themselves are sent in ps_client.cc.
#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "pserver/client/ps_client.h"
#include "pserver/timing.h"

namespace psformer {

Status PsClient::Wait(Ticket ticket) {
  Request done;
  return Finish(ticket, &done);
}

Status PsClient::Finish(Ticket ticket, Request* done, int grace_ms) {
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return Status::InvalidArgument("ps client: unknown ticket " + std::to_string(ticket));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const int limit_ms = grace_ms > 0 ? grace_ms : options_.timeout_ms;
  const auto deadline = start + std::chrono::milliseconds(limit_ms);
  bool first_reply = false;
  last_first_reply_s_ = 0;
  last_pull_loss_sum_ = 0;
  last_pull_tokens_ = 0;
  while (it->second.remaining > 0) {
    Request& r = it->second;
    if (r.type == proto::HELLO && options_.stop_requested && options_.stop_requested()) {
      requests_.erase(it);  // a HELLO carries no payload: nothing is left in the transport's hands
      return Status::Aborted("ps client: asked to stop before every server answered HELLO");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      std::vector<bool> silent(shards(), false);
      for (const Part& p : r.parts) silent[p.shard] = silent[p.shard] || !p.answered;
      std::string missing;
      for (int k = 0; k < shards(); ++k) {
        if (silent[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      }
      if (grace_ms > 0) {
        PSF_LOG(Warning) << "ps client: no answer to " << proto::MessageType_Name(r.type) << " from shard(s) "
                         << missing << " within " << grace_ms << " ms; taking it as done";
        break;
      }
      return Status::Unavailable("ps client: no answer to " + proto::MessageType_Name(r.type) + " from shard(s) " +
                                 missing + " within " + std::to_string(limit_ms) + " ms");
    }
    // Resend to the shards that have not answered, backing off (pserver/timing.h).
    const auto interval = RetryInterval(options_.retry_ms, r.sends);
    if (options_.retry_ms > 0 && now - r.sent >= interval) {
      std::vector<int> resend;  // a push's piece is sent once its gradient is ready
      for (int part = 0; part < static_cast<int>(r.parts.size()); ++part) {
        if (!r.parts[part].answered && r.parts[part].sent) resend.push_back(part);
      }
      if (!resend.empty()) {
        // Said before sending: a send to a peer that never connected blocks.
        // Other requests are answered at once; a BSP pull legitimately waits for the slowest worker.
        const bool unusual = r.type != proto::PULL || r.sends >= 3;
        PSF_LOG_AT(unusual ? LogLevel::kInfo : LogLevel::kDebug)
            << "ps client: no answer from shard " << r.parts[resend[0]].shard << " to "
            << proto::MessageType_Name(r.type) << " of step " << r.step << " after " << interval.count()
            << " ms; sending it again"
            << (resend.size() > 1 ? " (" + std::to_string(resend.size()) + " parts in all)" : std::string());
      }
      for (int part : resend) PSF_RETURN_IF_ERROR(SendPart(ticket, r, part));
      r.sent = now;
      ++r.sends;
    }
    const auto wait =
        std::min<int64_t>({std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1, 50});
    PSF_ASSIGN_OR_RETURN(auto raw, van_->Recv(static_cast<int>(wait)));
    if (raw.has_value()) {
      HandleReply(std::move(*raw));
      if (!first_reply) {
        first_reply = true;
        last_first_reply_s_ = std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
  }
  last_wait_s_ = std::chrono::duration<double>(Clock::now() - start).count();
  Request& r = *done;
  r = std::move(it->second);
  requests_.erase(it);
  if (!r.error.IsAborted()) {
    ReleasePayload(&r);
  } else if (r.payload_owner) {
    Status error = r.error;
    retired_.push_back(std::move(r));
    return error;
  }
  return r.error;
}

// Every shard has the bytes; wait for ZeroMQ to let go of the caller's buffer too.
void PsClient::ReleasePayload(Request* r) {
  if (!r->payload_owner) return;
  r->payload_owner.reset();
  std::unique_lock<std::mutex> lock(*release_mutex_);
  release_cv_->wait(lock, [&] { return *r->payload_released; });
}

}  // namespace psformer
