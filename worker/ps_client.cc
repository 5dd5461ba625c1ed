#include "worker/ps_client.h"

#include <chrono>

#include "common/logging.h"
#include "common/transport/zmq_van.h"
#include "common/wire/bfloat16.h"
#include "common/wire/wire_message.h"

namespace psformer {
namespace {

std::string PeerName(int shard) { return "server-" + std::to_string(shard); }

// Keeps a push's converted payload (bf16) alive; empty for fp32, which is sent from the caller's buffer.
struct PushPayload {
  std::vector<uint16_t> bf16;  // (parameter_count) when gradient_dtype is BFLOAT16
};

}  // namespace

PsClient::PsClient(CreateKey, PsClientOptions options, std::unique_ptr<Van> van)
    : options_(std::move(options)),
      van_(std::move(van)),
      release_mutex_(std::make_shared<std::mutex>()),
      release_cv_(std::make_shared<std::condition_variable>()) {
  scope_.job_id = options_.job_id;
  scope_.shards = static_cast<int>(options_.servers.size());
  scope_.total = options_.parameter_count;
  for (int k = 0; k < scope_.shards; ++k) ranges_.push_back(ShardOf(options_.parameter_count, scope_.shards, k));
}

PsClient::~PsClient() = default;

StatusOr<std::unique_ptr<PsClient>> PsClient::Create(PsClientOptions options, std::unique_ptr<Van> van) {
  if (options.servers.empty()) return Status::InvalidArgument("ps client: no server endpoints given");
  if (options.parameter_count < options.servers.size()) {
    return Status::InvalidArgument("ps client: " + std::to_string(options.parameter_count) +
                                   " parameters cannot be split over " + std::to_string(options.servers.size()) +
                                   " servers");
  }
  if (options.gradient_dtype != proto::FLOAT32 && options.gradient_dtype != proto::BFLOAT16) {
    return Status::InvalidArgument("ps client: gradients travel as FLOAT32 or BFLOAT16");
  }
  if (!van) {
    ZmqVanOptions zo;
    zo.io_threads = options.io_threads;
    van = std::make_unique<ZmqVan>(zo);
  }
  auto client = std::make_unique<PsClient>(CreateKey{}, std::move(options), std::move(van));
  for (size_t k = 0; k < client->options_.servers.size(); ++k) {
    PSF_RETURN_IF_ERROR(client->van_->Connect(PeerName(static_cast<int>(k)), client->options_.servers[k]));
  }
  return client;
}

proto::Header PsClient::RequestHeader(proto::MessageType type, int shard, int64_t step, Ticket ticket) const {
  proto::Header h;
  h.set_type(type);
  h.set_job_id(options_.job_id);
  h.set_sender_role(options_.role);
  h.set_sender_id(options_.id);
  h.set_incarnation(options_.incarnation);
  h.set_shard(static_cast<uint32_t>(shard));
  h.set_step(step);
  h.set_sequence(ticket);
  return h;
}

StatusOr<PsClient::Ticket> PsClient::Push(int64_t step, const float* grad, uint64_t target_tokens, double loss_sum) {
  const Ticket ticket = next_ticket_++;
  Request& r = requests_[ticket];
  r.type = proto::PUSH;
  r.answered.assign(shards(), false);
  r.remaining = shards();
  auto holder = std::make_unique<PushPayload>();
  const bool bf16 = options_.gradient_dtype == proto::BFLOAT16;
  if (bf16) {
    holder->bf16.resize(options_.parameter_count);
    FloatsToBf16(grad, options_.parameter_count, holder->bf16.data());
  }
  const uint16_t* converted = holder->bf16.data();
  // The deleter runs when the last frame referring to the payload is released (on a ZeroMQ
  // thread); it tells Wait that `grad` may be reused.
  r.payload_released = std::make_shared<bool>(false);
  r.payload_owner = std::shared_ptr<const void>(
      holder.release(), [released = r.payload_released, m = release_mutex_, cv = release_cv_](PushPayload* p) {
        std::unique_ptr<PushPayload> owned(p);
        {
          std::lock_guard<std::mutex> lock(*m);
          *released = true;
        }
        cv->notify_all();
      });
  const size_t elem = bf16 ? 2 : 4;
  for (int k = 0; k < shards(); ++k) {
    proto::Header h = RequestHeader(proto::PUSH, k, step, ticket);
    h.set_dtype(options_.gradient_dtype);
    h.set_begin(ranges_[k].begin);
    h.set_end(ranges_[k].end);
    h.set_target_tokens(target_tokens);
    h.set_loss_sum(loss_sum);
    const void* data = bf16 ? static_cast<const void*>(converted + ranges_[k].begin)
                            : static_cast<const void*>(grad + ranges_[k].begin);
    std::vector<Frame> payload;
    AppendViewFrames(data, ranges_[k].size() * elem, options_.frame_bytes, elem, r.payload_owner, &payload);
    PSF_RETURN_IF_ERROR(van_->Send(EncodeMessage(PeerName(k), std::move(h), std::move(payload))));
  }
  return ticket;
}

StatusOr<PsClient::Ticket> PsClient::Pull(int64_t step, float* params) {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::PULL, step));
  requests_[ticket].params = params;
  return ticket;
}

StatusOr<PsClient::Ticket> PsClient::Broadcast(proto::MessageType type, int64_t step) {
  const Ticket ticket = next_ticket_++;
  Request& r = requests_[ticket];
  r.type = type;
  r.answered.assign(shards(), false);
  r.remaining = shards();
  for (int k = 0; k < shards(); ++k) {
    proto::Header h = RequestHeader(type, k, step, ticket);
    if (type == proto::PULL) {
      h.set_begin(ranges_[k].begin);
      h.set_end(ranges_[k].end);
    }
    PSF_RETURN_IF_ERROR(van_->Send(EncodeMessage(PeerName(k), std::move(h), {})));
  }
  return ticket;
}

void PsClient::HandleReply(RawMessage raw) {
  WireMessage msg;
  Verdict v = ParseMessage(std::move(raw), &msg);
  if (!v) v = ValidateAtClient(msg, scope_);
  if (v) {
    rejected_.Count(v->reason);
    PSF_LOG(Warning) << "ps client: ignoring a reply: " << v->ToString();
    return;
  }
  const proto::Header& h = msg.header;
  if (h.type() == proto::HEARTBEAT) return;
  auto it = requests_.find(h.sequence());
  const int shard = static_cast<int>(h.shard());
  if (it == requests_.end() || it->second.answered[shard]) return;  // late or repeated answer.
  Request& r = it->second;
  if (h.type() == proto::ERROR) {
    if (r.error.ok()) {
      r.error = Status::Unavailable("shard " + std::to_string(shard) + " refused " +
                                    proto::MessageType_Name(r.type) + ": " + h.error());
    }
  } else if (r.type == proto::PULL && h.type() == proto::PARAMS) {
    CopyPayloadAsFloats(msg, r.params + h.begin());
  } else if (h.type() == proto::ACK) {
    if (h.duplicate()) ++duplicate_acks_;
    if (r.type == proto::HELLO) r.min_step = std::min(r.min_step, h.step());
  } else {
    return;  // an answer of the wrong kind does not complete the request.
  }
  r.answered[shard] = true;
  --r.remaining;
}

Status PsClient::Wait(Ticket ticket) {
  Request done;
  return Finish(ticket, &done);
}

Status PsClient::Finish(Ticket ticket, Request* done) {
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return Status::InvalidArgument("ps client: unknown ticket " + std::to_string(ticket));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  while (it->second.remaining > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::string missing;
      for (int k = 0; k < shards(); ++k) {
        if (!it->second.answered[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      }
      return Status::Unavailable("ps client: no answer to " + proto::MessageType_Name(it->second.type) +
                                 " from shard(s) " + missing + " within " + std::to_string(options_.timeout_ms) +
                                 " ms");
    }
    PSF_ASSIGN_OR_RETURN(auto raw, van_->Recv(static_cast<int>(std::min<int64_t>(left.count(), 100))));
    if (raw.has_value()) HandleReply(std::move(*raw));
  }
  Request& r = *done;
  r = std::move(it->second);
  requests_.erase(it);
  if (r.payload_owner) {
    // Every shard has the bytes; wait for ZeroMQ to let go of the caller's buffer too.
    r.payload_owner.reset();
    std::unique_lock<std::mutex> lock(*release_mutex_);
    release_cv_->wait(lock, [&] { return *r.payload_released; });
  }
  return r.error;
}

StatusOr<int64_t> PsClient::Hello() {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::HELLO, 0));
  Request done;
  PSF_RETURN_IF_ERROR(Finish(ticket, &done));
  return done.min_step;
}

Status PsClient::Checkpoint(int64_t step) {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::CHECKPOINT, step));
  return Wait(ticket);
}

Status PsClient::Shutdown() {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, Broadcast(proto::SHUTDOWN, 0));
  return Wait(ticket);
}

}  // namespace psformer
