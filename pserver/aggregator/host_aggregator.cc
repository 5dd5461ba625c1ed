#include "pserver/aggregator/host_aggregator.h"

#include <algorithm>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/parallel_for.h"
#include "common/role_threads.h"
#include "pserver/timing.h"
#include "pserver/wire/bfloat16.h"
#include "pserver/wire/wire_message.h"

namespace psformer {
namespace {

constexpr size_t kBlock = 8192;  // elements summed per block (in cache)

std::string ServerPeer(int shard) { return "server-" + std::to_string(shard); }

// Upstream sequences are this aggregator's own; a reply's names the request.
bool IsAnswer(proto::MessageType type) { return type == proto::ACK || type == proto::PARAMS || type == proto::ERROR; }

}  // namespace

HostAggregator::HostAggregator(CreateKey, HostAggregatorOptions options, std::unique_ptr<Van> van)
    : options_(std::move(options)),
      van_(std::move(van)),
      groups_(HostGroups::Of(options_.config)),
      table_(JobPieceTable(options_.config, options_.parameter_count, options_.layer_starts)),
      threads_(options_.threads > 0 ? options_.threads : ServerThreads(options_.config)),
      faults_(options_.config.fault(), FaultEvent::AGGREGATOR, options_.group, options_.incarnation,
              options_.shm_faults),
      resender_(options_.config.cluster().retry_ms(), table_.shards()) {
  const int shards = table_.shards();
  for (int k = 0; k < shards; ++k) {
    ServerScope scope;
    scope.job_id = options_.job_id;
    scope.workers = options_.config.cluster().workers();
    scope.shard = k;
    scope.begin = table_.shard_range(k).begin;
    scope.end = table_.shard_range(k).end;
    scope.threads = threads_;
    for (int p = table_.FirstOf(k); p < table_.EndOf(k); ++p) scope.piece_bounds.push_back(table_.pieces()[p].begin);
    scope.piece_bounds.push_back(scope.end);
    scopes_.push_back(std::move(scope));
    server_peers_[ServerPeer(k)] = k;
  }
  client_scope_.job_id = options_.job_id;
  client_scope_.shards = shards;
  client_scope_.total = options_.parameter_count;
  const size_t pieces = table_.pieces().size();
  sums_.resize(pieces);
  answered_step_.assign(pieces, 0);
  copies_.resize(pieces);
  spare_.resize(pieces);
  goodbye_.assign(groups_.size(options_.group), false);
}

HostAggregator::~HostAggregator() = default;

StatusOr<std::unique_ptr<HostAggregator>> HostAggregator::Create(HostAggregatorOptions options,
                                                                  std::unique_ptr<Van> van) {
  const HostGroups groups = HostGroups::Of(options.config);
  if (!groups.summing()) {
    return Status::InvalidArgument("an aggregator needs host summing: cluster.host_summing, BSP and two host groups "
                                   "or more in cluster.host_groups (have " +
                                   groups.ToString() + ")");
  }
  if (options.group < 0 || options.group >= groups.count()) {
    return Status::InvalidArgument("host group " + std::to_string(options.group) + " is outside 0.." +
                                   std::to_string(groups.count() - 1) + " (cluster.host_groups = " +
                                   groups.ToString() + ")");
  }
  if (options.servers.size() != static_cast<size_t>(options.config.cluster().servers())) {
    return Status::InvalidArgument("an aggregator needs the endpoint of each of the " +
                                   std::to_string(options.config.cluster().servers()) + " servers; got " +
                                   std::to_string(options.servers.size()));
  }
  auto aggregator = std::make_unique<HostAggregator>(CreateKey{}, std::move(options), std::move(van));
  PSF_RETURN_IF_ERROR(aggregator->Start());
  return aggregator;
}

Status HostAggregator::Start() {
  for (size_t k = 0; k < options_.servers.size(); ++k) {
    PSF_RETURN_IF_ERROR(van_->Connect(ServerPeer(static_cast<int>(k)), options_.servers[k]));
  }
  PSF_ASSIGN_OR_RETURN(endpoint_, van_->Bind(options_.endpoint));
  const int g = options_.group;
  PSF_LOG(Info) << "aggregator of host group " << g << " (workers " << groups_.first(g) << ".."
                << groups_.first(g) + groups_.size(g) - 1 << ", incarnation " << options_.incarnation
                << ") serving at " << endpoint_;
  return Status::Ok();
}

Status HostAggregator::Run() {
  // After the last goodbye: a while to answer a resent one (a worker whose answer was lost gives
  // up waiting after ShutdownGrace anyway).
  const auto linger = std::chrono::milliseconds(options_.config.cluster().retry_ms());
  while (!stop_.load()) {
    PSF_ASSIGN_OR_RETURN(auto raw, van_->Recv(options_.poll_ms));
    if (raw.has_value()) Handle(std::move(*raw));
    // Take in everything that has arrived before resending anything.
    while (true) {
      PSF_ASSIGN_OR_RETURN(auto more, van_->Recv(0));
      if (!more.has_value()) break;
      Handle(std::move(*more));
    }
    ResendDue();
    if (all_gone_at_ && Clock::now() - *all_gone_at_ >= linger) break;
  }
  PSF_LOG(Info) << "aggregator of host group " << options_.group << " stops; sums sent: " << stats_.sums_sent.load()
                << ", pieces pulled: " << stats_.pulls_sent.load() << ", pulls served: " << stats_.pulls_served.load()
                << ", resends: " << stats_.resends.load() << "; refused messages: " << stats_.rejected.ToString();
  return Status::Ok();
}

void HostAggregator::Handle(RawMessage raw) {
  const auto server = server_peers_.find(raw.peer);
  WireMessage msg;
  if (Refusal v = ParseMessage(std::move(raw), &msg)) {
    if (server == server_peers_.end()) return Refuse(msg.peer, nullptr, *v);
    stats_.rejected.Count(v->reason);
    return;
  }
  if (server != server_peers_.end()) return HandleReply(std::move(msg));
  HandleRequest(std::move(msg));
}

void HostAggregator::HandleRequest(WireMessage msg) {
  const proto::Header& h = msg.header;
  const proto::MessageType type = h.type();
  if (type != proto::PUSH && type != proto::PULL && type != proto::SHUTDOWN && type != proto::HEARTBEAT) {
    return Refuse(msg.peer, &h,
                  {RejectReason::kUnknownType, proto::MessageType_Name(type) +
                                                   " goes to the servers; an aggregator takes PUSH, PULL, SHUTDOWN "
                                                   "and HEARTBEAT from the workers of its host group"});
  }
  const int g = options_.group;
  const int local = static_cast<int>(h.sender_id()) - groups_.first(g);
  if (h.sender_role() != proto::WORKER || local < 0 || local >= groups_.size(g)) {
    return Refuse(msg.peer, &h,
                  {RejectReason::kUnknownSender, proto::Role_Name(h.sender_role()) + " " +
                                                     std::to_string(h.sender_id()) + " is not a worker of host group " +
                                                     std::to_string(g) + " (workers " + std::to_string(groups_.first(g)) +
                                                     ".." + std::to_string(groups_.first(g) + groups_.size(g) - 1) + ")"});
  }
  if (h.shard() >= scopes_.size()) {
    return Refuse(msg.peer, &h, {RejectReason::kWrongShard, "shard " + std::to_string(h.shard()) + " of " +
                                                                std::to_string(scopes_.size())});
  }
  if (Refusal v = ValidateAtServer(msg, scopes_[h.shard()])) return Refuse(msg.peer, &h, *v);
  if (type == proto::HEARTBEAT) return Answer({msg.peer, h}, proto::Header());
  if (type == proto::SHUTDOWN) return TakeGoodbye(local, msg);
  const int piece = PieceOf(h.begin(), h.end());
  if (piece < 0) {
    return Refuse(msg.peer, &h, {RejectReason::kBadRange, "an aggregator takes one piece a message; [" +
                                                              std::to_string(h.begin()) + ", " +
                                                              std::to_string(h.end()) + ") is not one"});
  }
  if (h.epoch() > epoch_) EnterEpoch(h.epoch());
  if (h.epoch() < epoch_) return ProbeOldEpoch(msg);
  if (type == proto::PUSH) return TakeShare(local, piece, std::move(msg));
  TakePull(piece, msg);
}

int HostAggregator::PieceOf(uint64_t begin, uint64_t end) const {
  const int p = table_.IndexAt(begin);
  return p >= 0 && table_.pieces()[p].end == end ? p : -1;
}

void HostAggregator::TakeShare(int local, int piece, WireMessage msg) {
  const proto::Header& h = msg.header;
  PieceSum& s = sums_[piece];
  const Requester from{msg.peer, h};
  // The group's sum of this step is known to be applied, or held by its server: nothing to add.
  if (h.step() <= answered_step_[piece] || h.step() < s.step) {
    stats_.duplicate_shares.fetch_add(1);
    proto::Header ack;
    ack.set_type(proto::ACK);
    ack.set_duplicate(true);
    return Answer(from, ack);
  }
  if (h.step() > s.step) {
    // A share of a later step means the earlier one's parameters were pulled: its sum was
    // applied, even if the server's answer to it has not come (it may follow on another stream).
    proto::Header ack;
    ack.set_type(proto::ACK);
    for (auto& waiting : s.waiting) {
      if (waiting) Answer(*waiting, ack);
    }
    if (s.sequence != 0) upstream_.erase(s.sequence);
    s = PieceSum();
    s.epoch = h.epoch();
    s.step = h.step();
    s.shares.resize(goodbye_.size());
    s.waiting.resize(goodbye_.size());
  }
  stats_.shares.fetch_add(1);
  s.waiting[local] = from;  // a resend (or a restarted worker's) is answered instead of the first
  if (s.shares[local] || s.sequence != 0) {
    stats_.duplicate_shares.fetch_add(1);
    return;
  }
  s.shares[local] = std::move(msg);
  if (++s.held == static_cast<int>(s.shares.size())) SendSum(piece);
}

void HostAggregator::SendSum(int piece) {
  PieceSum& s = sums_[piece];
  const Piece& p = table_.pieces()[piece];
  const size_t n = p.size();
  const bool bf16 = options_.config.cluster().gradient_dtype() == proto::ClusterConfig::BF16;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  // fp32 sums are summed where they are sent from; bf16 ones are rounded into it. (Memory the
  // same-host path could lend was measured slower: a Van segment per sum still on loan.)
  std::shared_ptr<void> wire = Van::HeapPayload(n * elem);
  std::shared_ptr<void> sum = bf16 ? Van::HeapPayload(n * sizeof(float)) : wire;
  float* acc = static_cast<float*>(sum.get());
  auto* out = static_cast<uint8_t*>(wire.get());
  uint64_t tokens = 0;
  double loss = 0;
  for (const auto& share : s.shares) {  // worker order
    tokens += share->header.target_tokens();
    loss += share->header.loss_sum();
  }
  // The shares added in worker order, elementwise: share 0 itself, then + share 1, ...; the
  // bytes sent (rounded to bf16 where they are) checksummed block by block in the same pass.
  PartCrcs crcs(ParallelPieces(threads_, n, kBlock));
  ParallelFor(threads_, n, kBlock, [&](int part, size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t e = std::min(end, b + kBlock);
      for (size_t w = 0; w < s.shares.size(); ++w) {
        AddPayloadRange(*s.shares[w], b, e, acc + b, /*assign=*/w == 0);
      }
      if (bf16) FloatsToBf16(acc + b, e - b, reinterpret_cast<uint16_t*>(out) + b);
      crcs.crc[part] = Crc32c(crcs.crc[part], out + b * elem, (e - b) * elem);
    }
    crcs.bytes[part] = (end - begin) * elem;
  });
  for (auto& share : s.shares) share.reset();  // the workers' slots go back
  Upstream up;
  up.kind = Upstream::kSum;
  up.piece = piece;
  up.header.set_type(proto::PUSH);
  up.header.set_shard(static_cast<uint32_t>(p.shard));
  up.header.set_step(s.step);
  up.header.set_epoch(s.epoch);
  up.header.set_dtype(bf16 ? proto::BFLOAT16 : proto::FLOAT32);
  up.header.set_begin(p.begin);
  up.header.set_end(p.end);
  up.header.set_target_tokens(tokens);
  up.header.set_loss_sum(loss);
  up.elem = elem;
  up.payload_bytes = n * elem;
  up.payload_crc = crcs.Combined();
  up.payload = std::move(wire);
  s.sequence = NewUpstream(std::move(up));
  stats_.sums_sent.fetch_add(1);
  SendUpstream(s.sequence);
  // A fault aimed at this aggregator strikes halfway through a step's sums.
  const int sent = ++sums_sent_of_step_[s.step];
  sums_sent_of_step_.erase(sums_sent_of_step_.begin(), sums_sent_of_step_.lower_bound(s.step));
  if (sent == std::max<int>(1, static_cast<int>(table_.pieces().size()) / 2)) faults_.KillOrStallAt(s.step);
}

void HostAggregator::TakePull(int piece, const WireMessage& msg) {
  const proto::Header& h = msg.header;
  const proto::DType dtype = h.dtype() == proto::BFLOAT16 ? proto::BFLOAT16 : proto::FLOAT32;
  const Requester from{msg.peer, h};
  for (const Copy& copy : copies_[piece]) {
    if (copy.step == h.step() && copy.dtype == dtype && copy.epoch == h.epoch()) return AnswerFromCopy(from, copy);
  }
  for (auto& [sequence, up] : upstream_) {
    if (up.kind != Upstream::kPull || up.piece != piece || up.header.step() != h.step() ||
        up.header.dtype() != dtype) {
      continue;
    }
    // Already asked for: a resend from the same worker replaces its earlier request.
    auto same = std::find_if(up.waiting.begin(), up.waiting.end(), [&](const Requester& r) {
      return r.request.sender_id() == h.sender_id();
    });
    if (same != up.waiting.end()) {
      *same = from;
    } else {
      up.waiting.push_back(from);
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
  up.waiting.push_back(from);
  const uint64_t sequence = NewUpstream(std::move(up));
  stats_.pulls_sent.fetch_add(1);
  SendUpstream(sequence);
}

void HostAggregator::TakeGoodbye(int local, const WireMessage& msg) {
  proto::Header ack;
  ack.set_type(proto::ACK);
  Answer({msg.peer, msg.header}, ack);
  goodbye_[local] = true;
  if (!all_gone_at_ && std::all_of(goodbye_.begin(), goodbye_.end(), [](bool gone) { return gone; })) {
    PSF_LOG(Info) << "every worker of host group " << options_.group << " is done";
    all_gone_at_ = Clock::now();  // answers resent goodbyes a while, then stops
  }
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
  SendUpstream(NewUpstream(std::move(up)));
}

void HostAggregator::EnterEpoch(uint64_t epoch) {
  PSF_LOG(Warning) << "aggregator of host group " << options_.group << ": the job rolled back (recovery epoch "
                   << epoch << "); forgetting the sums and parameters of epoch " << epoch_;
  epoch_ = epoch;
  // Workers still waiting in the old epoch hear of the new one through probes.
  std::vector<WireMessage> waiting;
  const auto probe_for = [&](const Requester& r) {
    WireMessage m;
    m.peer = r.peer;
    m.header = r.request;
    waiting.push_back(std::move(m));
  };
  for (PieceSum& s : sums_) {
    for (const auto& r : s.waiting) {
      if (r) probe_for(*r);
    }
    s = PieceSum();
  }
  std::map<uint64_t, Upstream> old = std::move(upstream_);
  upstream_.clear();
  for (auto& [sequence, up] : old) {
    for (const Requester& r : up.waiting) probe_for(r);
  }
  for (size_t p = 0; p < copies_.size(); ++p) {
    for (Copy& copy : copies_[p]) spare_[p].push_back(std::move(copy));
    copies_[p].clear();
  }
  std::fill(answered_step_.begin(), answered_step_.end(), 0);
  for (const WireMessage& m : waiting) ProbeOldEpoch(m);
}

uint64_t HostAggregator::NewUpstream(Upstream up) {
  const uint64_t sequence = next_sequence_++;
  up.header.set_job_id(options_.job_id);
  up.header.set_sender_role(proto::AGGREGATOR);
  up.header.set_sender_id(static_cast<uint32_t>(options_.group));
  up.header.set_incarnation(options_.incarnation);
  up.header.set_sequence(sequence);
  upstream_.emplace(sequence, std::move(up));
  return sequence;
}

void HostAggregator::SendUpstream(uint64_t sequence) {
  Upstream& up = upstream_.at(sequence);
  const std::string peer = ServerPeer(static_cast<int>(up.header.shard()));
  std::vector<Frame> payload;
  const auto now = Clock::now();
  if (up.payload) {
    AppendViewFrames(up.payload.get(), up.payload_bytes, static_cast<size_t>(options_.config.cluster().frame_bytes()),
                     up.elem, resender_.Sent(&up.send, now, up.payload), &payload);
    stats_.bytes_up.fetch_add(up.payload_bytes);
  } else {
    resender_.Sent(&up.send, now, nullptr);
  }
  // A sum's checksum is known from its pass; a request without payload has none to make.
  RawMessage raw = EncodeMessage(peer, up.header, std::move(payload), up.payload ? up.payload_crc : 0);
  if (Status s = van_->Send(std::move(raw)); !s.ok()) {
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << " cannot send "
                     << proto::MessageType_Name(up.header.type()) << " to shard " << up.header.shard() << ": "
                     << s.message() << " (sent again later)";
  }
}

void HostAggregator::ResendDue() {
  const auto now = Clock::now();
  for (auto& [sequence, up] : upstream_) {
    // A pull's answer is a piece's bytes: waited for as a worker waits for its own.
    const uint64_t awaited = up.kind == Upstream::kPull ? table_.pieces()[up.piece].size() * sizeof(float) : 0;
    if (!resender_.Due(up.send, static_cast<int>(up.header.shard()), awaited, now)) continue;
    PSF_LOG_AT(up.kind == Upstream::kPull ? LogLevel::kDebug : LogLevel::kInfo)
        << "aggregator of host group " << options_.group << ": no answer from shard " << up.header.shard() << " to "
        << proto::MessageType_Name(up.header.type()) << " of step " << up.header.step() << "; sending it again";
    stats_.resends.fetch_add(1);
    SendUpstream(sequence);
  }
}

void HostAggregator::HandleReply(WireMessage msg) {
  const proto::Header& h = msg.header;
  const bool params = h.type() == proto::PARAMS;
  if (Refusal v = ValidateAtClient(msg, client_scope_, /*defer_checksum=*/params)) {
    stats_.rejected.Count(v->reason);
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << ": ignoring a reply: " << v->ToString();
    return;
  }
  resender_.Heard(static_cast<int>(h.shard()), Clock::now());
  if (!IsAnswer(h.type())) return;  // HEARTBEAT
  auto it = upstream_.find(h.sequence());
  if (it == upstream_.end()) return;  // answered already, or forgotten with its epoch
  Upstream& up = it->second;
  if (h.shard() != up.header.shard() || h.step() != up.header.step()) {
    stats_.rejected.Count(RejectReason::kUnknownSender);
    return;
  }
  if (h.type() == proto::ERROR) {
    // Refusals are the workers' to act on (other epoch, job finished, ...): passed on as they came.
    const bool other_epoch = h.reject_reason() == static_cast<uint32_t>(RejectReason::kOtherEpoch);
    if (up.kind == Upstream::kProbe && !other_epoch) {
      upstream_.erase(it);  // not what a probe is for; the worker asks again
      return;
    }
    std::vector<Requester> to = up.waiting;
    if (up.kind == Upstream::kSum) {
      PieceSum& s = sums_[up.piece];
      for (const auto& r : s.waiting) {
        if (r) to.push_back(*r);
      }
      s = PieceSum();
    }
    upstream_.erase(it);
    for (const Requester& r : to) Answer(r, h);
    return;
  }
  bool answered = false;
  if (up.kind == Upstream::kSum && h.type() == proto::ACK) {
    SumAnswered(up, msg);
    answered = true;
  } else if (up.kind != Upstream::kSum && params) {
    answered = PullAnswered(up, msg);  // a damaged copy keeps the request, to be asked for again
  }
  if (answered) upstream_.erase(it);
}

void HostAggregator::SumAnswered(Upstream& up, const WireMessage& reply) {
  PieceSum& s = sums_[up.piece];
  stats_.sums_answered.fetch_add(1);
  answered_step_[up.piece] = std::max(answered_step_[up.piece], up.header.step());
  for (const auto& r : s.waiting) {
    if (r) Answer(*r, reply.header);
  }
  s.waiting.assign(s.waiting.size(), std::nullopt);
  s.sequence = 0;
  s.held = 0;
}

bool HostAggregator::PullAnswered(Upstream& up, const WireMessage& reply) {
  const proto::Header& h = reply.header;
  Copy copy;
  copy.epoch = up.header.epoch();
  copy.step = h.step();
  copy.dtype = h.dtype();
  copy.reply = h;
  copy.size = reply.PayloadBytes();
  copy.bytes = CopyMemory(up.piece, copy.size);
  uint32_t crc = 0;
  size_t at = 0;
  for (const Frame& f : reply.payload) {
    crc = CopyWithCrc32c(static_cast<char*>(copy.bytes.get()) + at, f.data(), f.size(), crc);
    at += f.size();
  }
  stats_.bytes_down.fetch_add(copy.size);
  if (crc != h.payload_crc32c()) {
    stats_.rejected.Count(RejectReason::kBadChecksum);
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << ": parameters of [" << h.begin() << ", "
                     << h.end() << ") from shard " << h.shard() << " arrived damaged; asking again";
    return false;
  }
  if (up.kind == Upstream::kProbe) {  // the server still serves that epoch: pass the answer on
    for (const Requester& r : up.waiting) AnswerFromCopy(r, copy);
    return true;
  }
  // The step's sum of this piece was applied: shares still waiting for it (a successor's, whose
  // predecessor died between answers) are answered.
  PieceSum& s = sums_[up.piece];
  if (s.step == h.step() && s.sequence == 0) {
    proto::Header ack;
    ack.set_type(proto::ACK);
    ack.set_duplicate(true);
    for (const auto& r : s.waiting) {
      if (r) Answer(*r, ack);
    }
    for (auto& share : s.shares) share.reset();
    s.waiting.assign(s.waiting.size(), std::nullopt);
    s.held = 0;
    answered_step_[up.piece] = std::max(answered_step_[up.piece], h.step());
  }
  for (const Requester& r : up.waiting) AnswerFromCopy(r, copy);
  stats_.pulls_served.fetch_add(up.waiting.size());
  std::vector<Copy>& copies = copies_[up.piece];
  // The two newest steps stay (a restarted worker pulls the one before); older ones are spares.
  for (auto it = copies.begin(); it != copies.end();) {
    if (it->step + 1 >= copy.step) {
      ++it;
      continue;
    }
    spare_[up.piece].push_back(std::move(*it));
    it = copies.erase(it);
  }
  copies.push_back(std::move(copy));
  return true;
}

std::shared_ptr<void> HostAggregator::CopyMemory(int piece, size_t bytes) {
  std::vector<Copy>& spares = spare_[piece];
  for (auto it = spares.begin(); it != spares.end(); ++it) {
    if (it->size == bytes && it->bytes.use_count() == 1) {
      std::shared_ptr<void> memory = std::move(it->bytes);
      spares.erase(it);
      return memory;
    }
  }
  // A few spares still on loan are kept for later; beyond that the oldest goes.
  if (spares.size() > 4) spares.erase(spares.begin());
  return van_->AllocatePayload(bytes);
}

void HostAggregator::AnswerFromCopy(const Requester& to, const Copy& copy) {
  std::vector<Frame> payload;
  const size_t elem = copy.dtype == proto::BFLOAT16 ? sizeof(uint16_t) : sizeof(float);
  AppendViewFrames(copy.bytes.get(), copy.size, static_cast<size_t>(options_.config.cluster().frame_bytes()), elem,
                   copy.bytes, &payload);
  Answer(to, copy.reply, std::move(payload), copy.reply.payload_crc32c());
}

// The answer is the server's (or one made here, as the shard would): only the fields that name
// the request are the worker's own.
void HostAggregator::Answer(const Requester& to, proto::Header reply, std::vector<Frame> payload,
                            std::optional<uint32_t> crc) {
  const proto::Header& request = to.request;
  if (reply.type() == proto::MESSAGE_TYPE_UNSPECIFIED) reply.set_type(request.type());  // HEARTBEAT
  reply.set_job_id(options_.job_id);
  reply.set_sender_role(proto::SERVER);
  reply.set_sender_id(request.shard());
  reply.set_shard(request.shard());
  reply.set_step(request.step());
  reply.set_sequence(request.sequence());
  if (reply.type() != proto::ERROR) reply.set_epoch(request.epoch());
  RawMessage raw = crc ? EncodeMessage(to.peer, std::move(reply), std::move(payload), *crc)
                       : EncodeMessage(to.peer, std::move(reply), std::move(payload));
  if (Status s = van_->Send(std::move(raw)); !s.ok()) {
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << " cannot answer worker "
                     << request.sender_id() << ": " << s.message();
  }
}

void HostAggregator::Refuse(const std::string& peer, const proto::Header* request, const Rejection& why) {
  stats_.rejected.Count(why.reason);
  PSF_LOG(Warning) << "aggregator of host group " << options_.group << " refused "
                   << (request ? proto::MessageType_Name(request->type()) : std::string("a message")) << ": "
                   << why.ToString();
  proto::Header h;
  h.set_type(proto::ERROR);
  h.set_error(why.ToString());
  h.set_reject_reason(static_cast<uint32_t>(why.reason));
  h.set_epoch(epoch_);
  Answer({peer, request ? *request : proto::Header()}, std::move(h));
}

}  // namespace psformer
