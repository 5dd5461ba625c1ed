#include "pserver/client/ps_client.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "common/bfloat16.h"
#include "common/logging.h"
#include "common/parallel_for.h"
#include "common/trace.h"
#include "common/transport/zmq_van.h"
#include "pserver/wire/wire_message.h"

namespace psformer {
namespace {

std::string PeerName(int shard) { return "server-" + std::to_string(shard); }
// Elements a thread rounds to bf16 at least (smaller pieces cost more to hand out than to do).
constexpr size_t kBf16Grain = 1 << 16;
constexpr char kAggregatorPeer[] = "aggregator";

}  // namespace

// Keeps a push's converted payload (bf16) and its rows' run tables alive; empty for an fp32
// push without rows, which is sent from the caller's buffer.
struct PsClient::PushPayload {
  std::vector<uint16_t> bf16;                  // (parameter_count) when gradient_dtype is BFLOAT16
  std::deque<std::vector<ElementRun>> tables;  // run tables (ROWS parts', named DENSE parts'): stay put
  std::vector<uint16_t> rows_bf16;             // the rows' values rounded, when gradients are bf16
};

PsClient::PsClient(CreateKey, PsClientOptions options, std::unique_ptr<Van> van)
    : options_(std::move(options)),
      resender_(options_.retry_ms, static_cast<int>(options_.servers.size())),
      van_(std::move(van)),
      segment_refusals_(options_.shm_refusal_patience_ms,
                        SegmentRefusals::ForgetAfterMs(options_.shm_refusal_patience_ms, options_.retry_ms)),
      release_mutex_(std::make_shared<std::mutex>()),
      release_cv_(std::make_shared<std::condition_variable>()) {
  scope_.job_id = options_.job_id;
  scope_.shards = static_cast<int>(options_.servers.size());
  scope_.total = options_.parameter_count;
  pieces_ =
      options_.pieces ? options_.pieces : std::make_shared<const PieceTable>(options_.parameter_count, scope_.shards);
  landing_ = std::make_unique<PullLanding>(options_.copy_threads);
}

PsClient::~PsClient() {
  if (pulled_parts_written_ + pulled_parts_lent_ > 0) {
    PSF_LOG(Info) << "ps client: " << pulled_parts_written_ << " pulled part(s) written into the parameters, "
                  << pulled_parts_lent_ << " left where they came";
  }
  if (push_crcs_ != nullptr) {
    PSF_LOG(Info) << "ps client: " << push_parts_known_crc_
                  << " push part(s) sent with the CRC-32C recorded where the gradient was written";
  }
}

StatusOr<std::unique_ptr<PsClient>> PsClient::Create(PsClientOptions options, std::unique_ptr<Van> van) {
  if (options.servers.empty()) return Status::InvalidArgument("ps client: no server endpoints given");
  if (options.parameter_count < options.servers.size()) {
    return Status::InvalidArgument("ps client: " + std::to_string(options.parameter_count) +
                                   " parameters cannot be split over " + std::to_string(options.servers.size()) +
                                   " servers");
  }
  if (options.pieces && (options.pieces->total() != options.parameter_count ||
                         options.pieces->shards() != static_cast<int>(options.servers.size()))) {
    return Status::InvalidArgument("ps client: the piece table is of another vector or server count");
  }
  if (options.pieces && options.pieces->pieces().size() >= kMaxParts) {
    return Status::InvalidArgument("ps client: " + std::to_string(options.pieces->pieces().size()) +
                                   " pieces; at most " + std::to_string(kMaxParts - 1));
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
  if (!client->options_.aggregator.empty()) {
    PSF_RETURN_IF_ERROR(client->van_->Connect(kAggregatorPeer, client->options_.aggregator));
  }
  return client;
}

proto::Header PsClient::RequestHeader(proto::MessageType type, int shard, int64_t step, uint64_t sequence) const {
  proto::Header h;
  h.set_type(type);
  h.set_job_id(options_.job_id);
  h.set_sender_role(options_.role);
  h.set_sender_id(options_.id);
  h.set_incarnation(options_.incarnation);
  h.set_shard(static_cast<uint32_t>(shard));
  h.set_step(step);
  h.set_sequence(sequence);
  h.set_epoch(epoch_);
  return h;
}

PsClient::Part PsClient::MakePart(int shard, uint64_t begin, uint64_t end, uint64_t model) {
  Part part;
  part.shard = shard;
  part.begin = begin;
  part.end = end;
  part.model = model;
  return part;
}

std::vector<PsClient::Part> PsClient::PieceParts() const {
  std::vector<Part> parts;
  for (const Piece& p : pieces_->pieces()) {
    parts.push_back(MakePart(p.shard, p.begin, p.end, p.model_begin));
    parts.back().via_aggregator = !options_.aggregator.empty();
  }
  return parts;
}

std::vector<PsClient::Part> PsClient::SplitParts() const {
  std::vector<Part> parts = PieceParts();
  for (size_t i = 0, n = parts.size(); i < n; ++i) {
    if (!pieces_->pieces()[i].split) continue;
    parts[i].piece_part = proto::DENSE;
    parts[i].sibling = static_cast<int>(parts.size());
    Part rows = parts[i];
    rows.piece_part = proto::ROWS;
    rows.piece = static_cast<int>(i);
    rows.sibling = static_cast<int>(i);
    parts.push_back(rows);
  }
  return parts;
}

Status PsClient::CheckRows(const Request& r, std::span<const int32_t> rows, uint64_t width) const {
  uint64_t embedding_end = 0;  // the split pieces' model ranges cover the embedding
  for (const Part& p : r.parts) {
    if (p.piece_part == proto::ROWS) embedding_end = std::max(embedding_end, p.model + (p.end - p.begin));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || (i > 0 && rows[i] <= rows[i - 1]) ||
        (static_cast<uint64_t>(rows[i]) + 1) * width > embedding_end) {
      return Status::InvalidArgument("ps client: rows must be ascending, distinct and inside the embedding; row " +
                                     std::to_string(i) + " is " + std::to_string(rows[i]));
    }
  }
  return Status::Ok();
}

Status PsClient::PushRows(Ticket ticket, std::span<const int32_t> rows, const float* values, uint64_t width) {
  return PushRowsOf(ticket, rows, values, nullptr, width);
}

Status PsClient::PushRowsBf16(Ticket ticket, std::span<const int32_t> rows, const uint16_t* values, uint64_t width) {
  if (options_.gradient_dtype != proto::BFLOAT16) {
    return Status::InvalidArgument("ps client: rows rounded to bf16, but this job's gradients travel as FLOAT32");
  }
  return PushRowsOf(ticket, rows, nullptr, values, width);
}

Status PsClient::PushRowsOf(Ticket ticket, std::span<const int32_t> rows, const float* values, const uint16_t* rounded,
                            uint64_t width) {
  auto it = requests_.find(ticket);
  if (it == requests_.end() || it->second.type != proto::PUSH) {
    return Status::InvalidArgument("ps client: PushRows for " + std::to_string(ticket) + ", not a push in flight");
  }
  if (!pieces_->has_split()) return Status::InvalidArgument("ps client: PushRows in a job that pushes no rows");
  Request& r = it->second;
  if (r.error.IsAborted()) return Status::Ok();  // rolling back: Wait reports it
  if (r.rows_reported) return Status::InvalidArgument("ps client: the rows of a push reported twice");
  PSF_RETURN_IF_ERROR(CheckRows(r, rows, width));
  if (r.rows_named && !std::includes(r.named_rows.begin(), r.named_rows.end(), rows.begin(), rows.end())) {
    return Status::InvalidArgument("ps client: PushRows brings rows that NameRows did not name");
  }
  r.rows_reported = true;
  if (rounded != nullptr) {  // rounded where they were computed: sent as they are
    r.rows_values = rounded;
  } else if (options_.gradient_dtype == proto::BFLOAT16) {
    r.payload->rows_bf16.resize(rows.size() * width);
    ParallelFor(options_.copy_threads, r.payload->rows_bf16.size(), kBf16Grain,
                [&](int, size_t b, size_t e) { FloatsToBf16(values + b, e - b, r.payload->rows_bf16.data() + b); });
    r.rows_values = r.payload->rows_bf16.data();
  } else {
    r.rows_values = values;
  }
  for (int part = 0; part < static_cast<int>(r.parts.size()); ++part) {
    Part& p = r.parts[part];
    if (p.piece_part != proto::ROWS) continue;
    r.payload->tables.push_back(RunsOfRows(rows, width, p.model, p.end - p.begin, &p.first_value));
    p.runs = r.payload->tables.back().data();
    p.run_count = static_cast<uint32_t>(r.payload->tables.back().size());
    PSF_RETURN_IF_ERROR(SendPart(ticket, r, part));
  }
  return Status::Ok();
}

Status PsClient::NameRows(Ticket ticket, std::span<const int32_t> rows, uint64_t width) {
  auto it = requests_.find(ticket);
  if (it == requests_.end() || it->second.type != proto::PUSH) {
    return Status::InvalidArgument("ps client: NameRows for " + std::to_string(ticket) + ", not a push in flight");
  }
  if (!pieces_->has_split()) return Status::InvalidArgument("ps client: NameRows in a job that pushes no rows");
  Request& r = it->second;
  if (r.rows_named || r.rows_reported) {
    return Status::InvalidArgument("ps client: NameRows after the rows of the push were named or pushed");
  }
  PSF_RETURN_IF_ERROR(CheckRows(r, rows, width));
  for (const Part& p : r.parts) {
    if (p.piece_part == proto::DENSE && p.sent()) {
      return Status::InvalidArgument("ps client: NameRows after the embedding's gradient was reported (PushReady)");
    }
  }
  r.rows_named = true;
  r.named_rows.assign(rows.begin(), rows.end());
  for (Part& p : r.parts) {
    if (p.piece_part != proto::DENSE) continue;
    uint64_t first = 0;
    r.payload->tables.push_back(MergedRuns(RunsOfRows(rows, width, p.model, p.end - p.begin, &first)));
    p.named = true;
    p.runs = r.payload->tables.back().data();
    p.run_count = static_cast<uint32_t>(r.payload->tables.back().size());
  }
  return Status::Ok();
}

std::vector<PsClient::Part> PsClient::ShardParts() const {
  std::vector<Part> parts;
  for (int k = 0; k < shards(); ++k) parts.push_back(MakePart(k, range(k).begin, range(k).end, range(k).begin));
  return parts;
}

PsClient::Request& PsClient::NewRequest(Ticket ticket, proto::MessageType type, int64_t step, std::vector<Part> parts) {
  Request& r = requests_[ticket];
  r.type = type;
  r.step = step;
  r.epoch = type == proto::ROLLBACK ? rollback_epoch_ : epoch_;
  r.parts = std::move(parts);
  r.remaining = static_cast<int>(r.parts.size());
  return r;
}

StatusOr<PsClient::Ticket> PsClient::Push(int64_t step, const float* grad, uint64_t target_tokens, double loss_sum) {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, BeginPush(step, grad, target_tokens, loss_sum));
  PSF_RETURN_IF_ERROR(PushReady(ticket, 0, options_.parameter_count));
  return ticket;
}

StatusOr<PsClient::Ticket> PsClient::PushBf16(int64_t step, const uint16_t* grad, uint64_t target_tokens,
                                              double loss_sum) {
  PSF_ASSIGN_OR_RETURN(Ticket ticket, BeginPushBf16(step, grad, target_tokens, loss_sum));
  PSF_RETURN_IF_ERROR(PushReady(ticket, 0, options_.parameter_count));
  return ticket;
}

StatusOr<PsClient::Ticket> PsClient::BeginPush(int64_t step, const float* grad, uint64_t target_tokens,
                                               double loss_sum) {
  return BeginPushOf(step, grad, nullptr, target_tokens, loss_sum);
}

StatusOr<PsClient::Ticket> PsClient::BeginPushBf16(int64_t step, const uint16_t* grad, uint64_t target_tokens,
                                                   double loss_sum) {
  if (options_.gradient_dtype != proto::BFLOAT16) {
    return Status::InvalidArgument("ps client: a bf16 gradient to push, but gradients travel as " +
                                   proto::DType_Name(options_.gradient_dtype));
  }
  return BeginPushOf(step, nullptr, grad, target_tokens, loss_sum);
}

StatusOr<PsClient::Ticket> PsClient::BeginPushOf(int64_t step, const float* grad, const uint16_t* rounded,
                                                 uint64_t target_tokens, double loss_sum) {
  const Ticket ticket = next_ticket_++;
  Request& r = NewRequest(ticket, proto::PUSH, step, SplitParts());
  r.grad = grad;
  r.rounded = rounded;
  r.target_tokens = target_tokens;
  r.loss_sum = loss_sum;
  auto holder = std::make_unique<PushPayload>();
  if (options_.gradient_dtype == proto::BFLOAT16 && rounded == nullptr) {
    holder->bf16.resize(options_.parameter_count);
    r.bf16 = holder->bf16.data();
  }
  r.payload = holder.get();
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
  return ticket;
}

Status PsClient::PushReady(Ticket ticket, uint64_t begin, uint64_t end) {
  auto it = requests_.find(ticket);
  if (it == requests_.end() || it->second.type != proto::PUSH) {
    return Status::InvalidArgument("ps client: PushReady for " + std::to_string(ticket) + ", not a push in flight");
  }
  Request& r = it->second;
  if (r.error.IsAborted()) return Status::Ok();  // rolling back: Wait reports it
  // A push's parts are the pieces; [begin, end) is a model range. The first piece (in model
  // order) ending after `begin`; pieces are disjoint.
  const std::vector<int>& order = pieces_->model_order();
  const auto model_end = [&](int part) { return r.parts[part].model + (r.parts[part].end - r.parts[part].begin); };
  auto q =
      std::upper_bound(order.begin(), order.end(), begin, [&](uint64_t b, int part) { return b < model_end(part); });
  // The pieces this report completes, with how many complete pieces of their shard come before
  // them: they leave taking each shard's first piece, then each one's second, and so on, so
  // that every server starts on a large layer (the embedding, reported last) at once.
  std::vector<std::pair<int, int>> complete;  // (rank within its shard, part)
  std::vector<int> per_shard(shards(), 0);
  for (; q != order.end() && r.parts[*q].model < end; ++q) {
    Part& p = r.parts[*q];
    p.reported += std::min(end, model_end(*q)) - std::max(begin, p.model);
    if (p.reported > p.end - p.begin) {
      return Status::InvalidArgument("ps client: gradient of [" + std::to_string(p.model) + ", " +
                                     std::to_string(model_end(*q)) + ") reported final more than once");
    }
    if (p.reported == p.end - p.begin) complete.emplace_back(per_shard[p.shard]++, *q);
  }
  std::stable_sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [rank, part] : complete) PSF_RETURN_IF_ERROR(SendPart(ticket, r, part));
  return Status::Ok();
}

void PsClient::WakeWith(Wakeup* wakeup) {
  if (wakeup != nullptr && wakeup->fd() < 0) wakeup = nullptr;  // none could be made: poll as without
  wakeup_ = wakeup;
  van_->WakeOn(wakeup != nullptr ? wakeup->fd() : -1);
  landing_->NotifyOnLanded(wakeup);
}

Status PsClient::Progress(int timeout_ms) {
  while (true) {
    TakeLandings();
    PSF_ASSIGN_OR_RETURN(auto raw, van_->Recv(timeout_ms));
    if (!raw.has_value()) {
      TakeLandings();
      return Status::Ok();
    }
    HandleReply(std::move(*raw));
    PSF_RETURN_IF_ERROR(unusable_segment_);
    timeout_ms = 0;  // the rest only as far as they have come
  }
}

Status PsClient::SendPart(Ticket ticket, Request& r, int part) {
  Part& p = r.parts[part];
  const TraceSpan traced(r.type == proto::PUSH ? "send_push" : "send_request", r.step, static_cast<int64_t>(p.model));
  proto::Header h = RequestHeader(r.type, p.shard, r.step, SequenceOf(ticket, part));
  std::vector<Frame> payload;
  std::optional<uint32_t> known_crc;  // the payload's, where its writer recorded it
  const auto now = std::chrono::steady_clock::now();
  if (r.type == proto::PUSH && p.piece_part == proto::ROWS) {
    h.set_dtype(options_.gradient_dtype);
    h.set_target_tokens(r.target_tokens);
    h.set_loss_sum(r.loss_sum);
    h.set_part(proto::ROWS);
    h.set_runs(p.run_count);
    const size_t elem = DTypeBytes(options_.gradient_dtype);
    std::shared_ptr<const void> token = resender_.Sent(&p.send, now, r.payload_owner);
    uint64_t values = 0;
    for (uint32_t i = 0; i < p.run_count; ++i) values += p.runs[i].length;
    if (p.run_count > 0) payload.push_back(Frame::View(p.runs, p.run_count * kRunBytes, token));
    AppendViewFrames(static_cast<const char*>(r.rows_values) + p.first_value * elem, values * elem,
                     options_.frame_bytes, elem, token, &payload);
  } else if (r.type == proto::PUSH) {
    h.set_dtype(options_.gradient_dtype);
    h.set_target_tokens(r.target_tokens);
    h.set_loss_sum(r.loss_sum);
    h.set_part(p.piece_part);
    const void* base = nullptr;
    size_t elem = sizeof(uint16_t);
    if (r.rounded != nullptr) {  // rounded already, on the device that computed it
      base = r.rounded + p.model;
    } else if (r.bf16 != nullptr) {
      if (!p.sent()) {  // rounded once, split over the copy threads (elementwise: the same bits)
        ParallelFor(options_.copy_threads, p.end - p.begin, kBf16Grain,
                    [&](int, size_t b, size_t e) { FloatsToBf16(r.grad + p.model + b, e - b, r.bf16 + p.model + b); });
      }
      base = r.bf16 + p.model;
    } else {
      base = r.grad + p.model;
      elem = sizeof(float);
    }
    // The frames hold the Resender's token: it tells when this part's bytes have left.
    std::shared_ptr<const void> token = resender_.Sent(&p.send, now, r.payload_owner);
    if (p.named) {  // the rows it named first, in a table frame
      h.set_named(true);
      h.set_runs(p.run_count);
      if (p.run_count > 0) payload.push_back(Frame::View(p.runs, p.run_count * kRunBytes, token));
    }
    AppendViewFrames(base, (p.end - p.begin) * elem, options_.frame_bytes, elem, token, &payload);
    // The values' CRC as their writer recorded it, where it did: the payload is then not read here.
    if (push_crcs_ != nullptr) {
      known_crc = push_crcs_->Crc32cOf(base, (p.end - p.begin) * elem);
      if (known_crc && p.named) {  // the table frame first
        known_crc = Crc32cCombine(Crc32c(0, p.runs, p.run_count * kRunBytes), *known_crc, (p.end - p.begin) * elem);
      }
    }
  } else {
    resender_.Sent(&p.send, now, nullptr);
  }
  if (r.type == proto::PULL) {
    h.set_dtype(r.dtype);  // no payload: the type wanted in the answer
    h.set_part(p.piece_part);
  }
  if (r.type == proto::PUSH || r.type == proto::PULL) {
    h.set_begin(p.begin);
    h.set_end(p.end);
  }
  h.set_epoch(r.epoch);
  const std::string peer = p.via_aggregator ? kAggregatorPeer : PeerName(p.shard);
  if (known_crc) {
    ++push_parts_known_crc_;
    return van_->Send(EncodeMessage(peer, std::move(h), std::move(payload), *known_crc));
  }
  // Where the Van copies the payload anyway (shared memory), it checksums it in that copy.
  if (van_->ChecksumsPayloadTo(peer)) {
    return van_->Send(EncodeMessageChecksummedByVan(peer, std::move(h), std::move(payload)));
  }
  return van_->Send(EncodeMessage(peer, std::move(h), std::move(payload)));
}

StatusOr<PsClient::Ticket> PsClient::Pull(int64_t step, float* params, proto::DType dtype, bool lend) {
  if (dtype != proto::FLOAT32 && dtype != proto::BFLOAT16) {
    return Status::InvalidArgument("ps client: parameters travel as FLOAT32 or BFLOAT16");
  }
  return PullInto(step, params, nullptr, dtype, lend);
}

StatusOr<PsClient::Ticket> PsClient::PullBf16(int64_t step, uint16_t* params, bool lend) {
  return PullInto(step, nullptr, params, proto::BFLOAT16, lend);
}

void PsClient::PinPeerMemory(Van::PinFn pin) {
  van_->PinPeerMemory(std::move(pin));
  lend_pinned_only_ = true;
}

Status PsClient::ObserveLandings(Ticket ticket, LandedFn landed) {
  auto it = requests_.find(ticket);
  if (it == requests_.end() || it->second.type != proto::PULL) {
    return Status::InvalidArgument("ps client: ticket " + std::to_string(ticket) + " is not a pull in flight");
  }
  Request& r = it->second;
  r.on_landed = std::move(landed);
  for (const Part& p : r.parts) {
    if (p.answered && (p.sibling < 0 || &p < &r.parts[p.sibling])) ReportLanded(r, p);  // a split piece once
  }
  return Status::Ok();
}

StatusOr<PsClient::Ticket> PsClient::PullInto(int64_t step, float* params, uint16_t* params_bf16, proto::DType dtype,
                                              bool lend) {
  const Ticket ticket = next_ticket_++;
  Request& r = NewRequest(ticket, proto::PULL, step, SplitParts());
  r.dtype = dtype;
  r.lend = lend;
  r.params = params;
  r.params_bf16 = params_bf16;
  r.part_crcs.assign(r.parts.size(), 0);
  // The pieces the next forward pass needs first go first: the flat vector is in forward order.
  for (int part = 0; part < static_cast<int>(r.parts.size()); ++part) PSF_RETURN_IF_ERROR(SendPart(ticket, r, part));
  return ticket;
}

}  // namespace psformer
