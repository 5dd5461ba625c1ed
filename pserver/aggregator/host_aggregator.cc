#include "pserver/aggregator/host_aggregator.h"

#include <algorithm>

#include "common/logging.h"
#include "common/role_threads.h"
#include "common/trace.h"
#include "pserver/wire/wire_message.h"

namespace psformer {
namespace {

// Upstream sequences are this aggregator's own; a reply's names the request.
bool IsAnswer(proto::MessageType type) { return type == proto::ACK || type == proto::PARAMS || type == proto::ERROR; }

}  // namespace

HostAggregator::HostAggregator(CreateKey, HostAggregatorOptions options, std::unique_ptr<Van> van)
    : options_(std::move(options)),
      van_(std::move(van)),
      groups_(HostGroups::Of(options_.config)),
      table_(JobPieceTable(options_.config, options_.parameter_count, options_.layer_starts)),
      threads_(options_.threads > 0 ? options_.threads : ServerPayloadThreads(options_.config)),
      faults_(options_.config.fault(), FaultEvent::AGGREGATOR, options_.group, options_.incarnation,
              options_.shm_faults),
      answers_(van_.get(), options_.job_id, options_.group,
               static_cast<size_t>(options_.config.cluster().frame_bytes()), &epoch_, &stats_.rejected),
      upstream_(van_.get(), options_.job_id, options_.group, options_.incarnation, table_.shards(),
                {.retry_ms = options_.config.cluster().retry_ms(),
                 .timeout_ms = options_.timeout_ms,
                 .shm_refusal_patience_ms = SegmentRefusals::JobPatienceMs(options_.config.cluster())},
                static_cast<size_t>(options_.config.cluster().frame_bytes()), &stats_),
      // By slot (SlotOf): a split piece's parts are pulled and kept apart.
      copies_(table_.pieces().size() + static_cast<size_t>(std::count_if(table_.pieces().begin(), table_.pieces().end(),
                                                                         [](const Piece& p) { return p.split; })),
              van_.get()) {
  const int shards = table_.shards();
  for (int k = 0; k < shards; ++k) {
    ServerScope scope;
    scope.job_id = options_.job_id;
    scope.workers = options_.config.cluster().workers();
    scope.shard = k;
    scope.begin = table_.shard_range(k).begin;
    scope.end = table_.shard_range(k).end;
    scope.threads = threads_;
    for (int p = table_.FirstOf(k); p < table_.EndOf(k); ++p) {
      scope.piece_bounds.push_back(table_.pieces()[p].begin);
      scope.split_pieces.push_back(table_.pieces()[p].split ? 1 : 0);
    }
    scope.piece_bounds.push_back(scope.end);
    scopes_.push_back(std::move(scope));
    server_peers_[UpstreamRequests::ServerPeer(k)] = k;
  }
  client_scope_.job_id = options_.job_id;
  client_scope_.shards = shards;
  client_scope_.total = options_.parameter_count;
  goodbye_.assign(groups_.size(options_.group), false);
  const int workers = static_cast<int>(goodbye_.size());
  const std::vector<Piece>& pieces = table_.pieces();
  for (size_t p = 0; p < pieces.size(); ++p) {
    sums_.emplace_back(workers, static_cast<int>(p), pieces[p].size(), pieces[p].split ? proto::DENSE : proto::WHOLE);
  }
  for (size_t p = 0; p < pieces.size(); ++p) {
    rows_slot_.push_back(pieces[p].split ? static_cast<int>(sums_.size()) : -1);
    if (pieces[p].split) sums_.emplace_back(workers, static_cast<int>(p), pieces[p].size(), proto::ROWS);
  }
  answered_step_.assign(sums_.size(), 0);
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
    PSF_RETURN_IF_ERROR(van_->Connect(UpstreamRequests::ServerPeer(static_cast<int>(k)), options_.servers[k]));
  }
  PSF_ASSIGN_OR_RETURN(endpoint_, van_->Bind(options_.endpoint));
  if (options_.config.cluster().sums_first()) {
    // The servers this aggregator reaches over ipc:// are on its host; every other one is across
    // the host's link.
    remote_shards_.assign(options_.servers.size(), false);
    for (const ServerScope& scope : scopes_) shard_begins_.push_back(scope.begin);
    for (size_t k = 0; k < options_.servers.size(); ++k) {
      if (options_.servers[k].rfind("ipc://", 0) != 0) {
        remote_shards_[k] = true;
        continue;
      }
      PSF_ASSIGN_OR_RETURN(const std::string path, HostLinkBoard::PathFor(options_.servers[k]));
      PSF_ASSIGN_OR_RETURN(auto board, HostLinkBoard::Open(path, groups_.count()));
      link_boards_.push_back(std::move(board));
    }
    PSF_LOG(Info) << "sums first (cluster.sums_first): " << link_boards_.size()
                  << " server(s) of this host send their answers to other hosts after its sums";
  }
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
    PSF_RETURN_IF_ERROR(given_up_);
    upstream_.ResendDue();
    PublishSumsOnTheirWay();
    if (all_gone_at_ && Clock::now() - *all_gone_at_ >= linger) break;
    if (Status overdue = upstream_.Overdue(Clock::now()); !overdue.ok()) {
      PSF_LOG(Error) << overdue.message();
      return overdue;
    }
  }
  for (const auto& board : link_boards_) board->Publish(options_.group, 0, 0, 0);  // none on its way any more
  PSF_LOG(Info) << "aggregator of host group " << options_.group << " stops; sums sent: " << stats_.sums_sent.load()
                << ", pieces pulled: " << stats_.pulls_sent.load() << ", pulls served: " << stats_.pulls_served.load()
                << ", resends: " << stats_.resends.load() << "; refused messages: " << stats_.rejected.ToString();
  return Status::Ok();
}

void HostAggregator::PublishSumsOnTheirWay() {
  if (link_boards_.empty()) return;
  const UpstreamRequests::Unanswered u = upstream_.SumsUnanswered(remote_shards_, shard_begins_);
  for (const auto& board : link_boards_) board->Publish(options_.group, u.step, u.offset, u.count);
}

void HostAggregator::Handle(RawMessage raw) {
  const TraceSpan traced("handle");
  const auto server = server_peers_.find(raw.peer);
  const std::string refused_segment = std::move(raw.refused_segment);
  WireMessage msg;
  if (Refusal v = ParseMessage(std::move(raw), &msg)) {
    if (server == server_peers_.end()) return answers_.Refuse(msg.peer, nullptr, *v);
    stats_.rejected.Count(v->reason);
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << ": ignoring a reply of shard "
                     << server->second << ": " << v->ToString();
    if (v->reason == RejectReason::kBadSharedMemory && !refused_segment.empty() && given_up_.ok()) {
      given_up_ = upstream_.SegmentRefused(refused_segment, v->detail, Clock::now());
      if (!given_up_.ok()) PSF_LOG(Error) << given_up_.message();
    }
    return;
  }
  if (server != server_peers_.end()) return HandleReply(std::move(msg));
  HandleRequest(std::move(msg));
}

void HostAggregator::HandleRequest(WireMessage msg) {
  const proto::Header& h = msg.header;
  const proto::MessageType type = h.type();
  if (type != proto::PUSH && type != proto::PULL && type != proto::SHUTDOWN && type != proto::HEARTBEAT) {
    return answers_.Refuse(msg.peer, &h,
                  {RejectReason::kUnknownType, proto::MessageType_Name(type) +
                                                   " goes to the servers; an aggregator takes PUSH, PULL, SHUTDOWN "
                                                   "and HEARTBEAT from the workers of its host group"});
  }
  const int g = options_.group;
  const int local = static_cast<int>(h.sender_id()) - groups_.first(g);
  if (h.sender_role() != proto::WORKER || local < 0 || local >= groups_.size(g)) {
    return answers_.Refuse(msg.peer, &h,
                  {RejectReason::kUnknownSender, proto::Role_Name(h.sender_role()) + " " +
                                                     std::to_string(h.sender_id()) + " is not a worker of host group " +
                                                     std::to_string(g) + " (workers " + std::to_string(groups_.first(g)) +
                                                     ".." + std::to_string(groups_.first(g) + groups_.size(g) - 1) + ")"});
  }
  if (h.shard() >= scopes_.size()) {
    return answers_.Refuse(msg.peer, &h, {RejectReason::kWrongShard, "shard " + std::to_string(h.shard()) + " of " +
                                                                std::to_string(scopes_.size())});
  }
  // A share's CRC-32C is checked in the summing pass that reads it anyway (SendSum).
  if (Refusal v = ValidateAtServer(msg, scopes_[h.shard()], /*defer_element_checksum=*/true)) {
    return answers_.Refuse(msg.peer, &h, *v);
  }
  if (type == proto::HEARTBEAT) return answers_.Answer({msg.peer, h}, proto::Header());
  if (type == proto::SHUTDOWN) return TakeGoodbye(local, msg);
  const int piece = PieceOf(h.begin(), h.end());
  if (piece < 0) {
    return answers_.Refuse(msg.peer, &h, {RejectReason::kBadRange, "an aggregator takes one piece a message; [" +
                                                              std::to_string(h.begin()) + ", " +
                                                              std::to_string(h.end()) + ") is not one"});
  }
  if (h.epoch() > epoch_) EnterEpoch(h.epoch());
  if (h.epoch() < epoch_) return ProbeOldEpoch(msg);
  if (type == proto::PUSH) {
    const int slot = SlotOf(piece, h.part());  // before msg (h's owner) moves
    return TakeShare(local, slot, std::move(msg));
  }
  TakePull(piece, msg);
}

int HostAggregator::PieceOf(uint64_t begin, uint64_t end) const {
  const int p = table_.IndexAt(begin);
  return p >= 0 && table_.pieces()[p].end == end ? p : -1;
}

void HostAggregator::TakeGoodbye(int local, const WireMessage& msg) {
  answers_.Ack({msg.peer, msg.header});
  goodbye_[local] = true;
  if (!all_gone_at_ && std::all_of(goodbye_.begin(), goodbye_.end(), [](bool gone) { return gone; })) {
    PSF_LOG(Info) << "every worker of host group " << options_.group << " is done";
    all_gone_at_ = Clock::now();  // answers resent goodbyes a while, then stops
  }
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
  for (GroupSum& s : sums_) {
    for (const auto& r : s.waiting) {
      if (r) probe_for(*r);
    }
    s.Begin(0, 0);
  }
  for (auto& [sequence, up] : upstream_.TakeAll()) {
    for (const Requester& r : up.waiting) probe_for(r);
  }
  copies_.ForgetAll();
  std::fill(answered_step_.begin(), answered_step_.end(), 0);
  for (const WireMessage& m : waiting) ProbeOldEpoch(m);
}

void HostAggregator::HandleReply(WireMessage msg) {
  const proto::Header& h = msg.header;
  const bool params = h.type() == proto::PARAMS;
  if (Refusal v = ValidateAtClient(msg, client_scope_, /*defer_checksum=*/params)) {
    stats_.rejected.Count(v->reason);
    PSF_LOG(Warning) << "aggregator of host group " << options_.group << ": ignoring a reply: " << v->ToString();
    return;
  }
  upstream_.Heard(static_cast<int>(h.shard()));
  if (!IsAnswer(h.type())) return;  // HEARTBEAT
  const Upstream* up = upstream_.Find(h.sequence());
  if (up == nullptr) return;  // answered already, or forgotten with its epoch
  if (h.shard() != up->header.shard() || h.step() != up->header.step()) {
    stats_.rejected.Count(RejectReason::kUnknownSender);
    return;
  }
  if (h.type() == proto::ERROR) return PassOnRefusal(h.sequence(), h);
  bool answered = false;
  if (up->kind == Upstream::kSum && h.type() == proto::ACK) {
    SumAnswered(*up, msg);
    answered = true;
  } else if (up->kind != Upstream::kSum && params) {
    answered = PullAnswered(*up, msg);  // a damaged copy keeps the request, to be asked for again
  }
  if (answered) upstream_.Erase(h.sequence());
}

void HostAggregator::PassOnRefusal(uint64_t sequence, const proto::Header& refusal) {
  Upstream up = std::move(*upstream_.Find(sequence));
  upstream_.Erase(sequence);
  // Refusals are the workers' to act on (other epoch, job finished, ...): passed on as they came.
  const bool other_epoch = refusal.reject_reason() == static_cast<uint32_t>(RejectReason::kOtherEpoch);
  if (up.kind == Upstream::kProbe && !other_epoch) return;  // not what a probe is for; the worker asks again
  std::vector<Requester> to = std::move(up.waiting);
  if (up.kind == Upstream::kSum) {
    GroupSum& s = sums_[SlotOf(up.piece, up.header.part())];
    for (const auto& r : s.waiting) {
      if (r) to.push_back(*r);
    }
    s.Begin(0, 0);
  }
  for (const Requester& r : to) answers_.Answer(r, refusal);
}

}  // namespace psformer
